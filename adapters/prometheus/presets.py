"""Ready-made metrics for the exporters the scheduler usually meets, with their real names and labels.

Each preset has a value query and a timestamp query. Prometheus stamps a computed result (a rate, a
division, an aggregation) with the evaluation time, so `timestamp()` is only meaningful on a plain
series selector: the timestamp query is `timestamp(<selector>)` on the raw input, reduced over the same
labels as the value query, so both queries yield series with the same label sets.

Which label holds the node name depends on the install, and the adapter resolves it from a fixed list
(adapters.prometheus.node_names: the configured `nodeLabels`, then `node`, `kubernetes_node`, `nodename`,
`hostname`, `Hostname`, `instance`, `exported_node`, `exported_instance`). The DCGM and OpenCost presets
aggregate in Prometheus `by` exactly those labels (`NODE_LABELS` in a template, filled in by `render`): one
series per node, carrying only what the resolver reads, so a refresh ships and parses a fraction of the
data (8 GPUs a node become one series; OpenCost's `instance_type`, `provider_id`, `region` stay home), and
Prometheus' grouping hashes a few labels instead of all but eleven. A series whose node is in some other
label therefore shows only these labels among the unmatched examples of `/sources`: name that label in
`nodeLabels` (it joins the `by` list). The node-exporter presets divide two metrics and keep `without`
(`by` would lose the `job` both sides must match on).

At thousands of GPU nodes the GPU and CPU presets are cheaper read through recording rules
(`recordingRules: true` on the source, with adapters.prometheus.recording_rules' rules installed): the
same queries, evaluated once per rule evaluation inside Prometheus instead of at every refresh.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

from adapters.prometheus.node_names import BUILT_IN_LABELS
from adapters.prometheus.windows import Window

Aggregation = Literal["max", "min", "avg", "sum", "last"]
AGGREGATIONS: tuple[Aggregation, ...] = ("max", "min", "avg", "sum", "last")

DEFAULT_SENTINEL = 1e15
# DCGM marks a blank field with huge sentinels: int64 ones near 9.2e18 and DCGM_FP64_BLANK = 2**47 ≈ 1.4e14
# for float fields such as power. No GPU reading comes near 1e14.
DCGM_SENTINEL = 1e14

_CPU = "node_cpu_seconds_total"
# CPU-seconds per second over all CPUs and modes is the number of CPUs online. It also holds for exporters
# that fold several CPUs into one series (as the dev-cluster emulator does), where counting
# {mode="idle"} series would not. A 5m window keeps the rate noise well under 1%.
CORES_EXPRESSION = f"sum without (cpu, mode) (rate({_CPU}[5m]))"


# Where a template takes the node-identifying labels (`Preset.render`).
NODE_LABELS = "<node labels>"


@dataclass(frozen=True)
class Preset:
    query: str  # templates: NODE_LABELS stands for the node-identifying labels
    timestamp_query: str
    aggregation: Aggregation
    unit: str
    sentinel_above: float = DEFAULT_SENTINEL
    per_device: bool = False  # its raw series are per device (a GPU): `deviceLabels` may keep them so
    window: Window | None = None  # a history-aware preset: the window its query is evaluated over

    def render(self, node_labels: Sequence[str] = (), device_labels: Sequence[str] = ()) -> tuple[str, str]:
        """(value query, timestamp query) aggregating by the configured node labels and the built-in ones, and
        for a metric kept per device by its device labels too.

        Per device, one query by (node labels, device labels) rather than today's per-node query plus a second,
        per-device one: the per-device answer has to come anyway (one series per GPU, with only the labels read),
        and the node value is the fold of those same series on our side (adapters.prometheus.devices, a few numpy
        operations), so a second query would only add Prometheus evaluating and shipping the per-node series again
        (and could be evaluated at another instant than the devices it summarises)."""
        labels = ", ".join(dict.fromkeys((*node_labels, *BUILT_IN_LABELS, *device_labels)))
        return self.query.replace(NODE_LABELS, labels), self.timestamp_query.replace(NODE_LABELS, labels)


def _selector(name: str, aggregation: Aggregation, unit: str, sentinel: float = DEFAULT_SENTINEL) -> Preset:
    """One series per node, with only its node-identifying labels (an exporter such as OpenCost adds many)."""
    op = {"last": "max"}.get(aggregation, aggregation)
    return Preset(f"{op} by ({NODE_LABELS}) ({name})", f"min by ({NODE_LABELS}) (timestamp({name}))",
                  aggregation, unit, sentinel)


def _per_gpu(name: str, aggregation: Aggregation, unit: str) -> Preset:
    """One series per node instead of one per GPU (or MIG instance): Prometheus aggregates (8x less to ship
    and parse at 8 GPUs a node). Blank sentinels are dropped first so they cannot win a max; the node's
    timestamp is its oldest GPU sample."""
    op = {"last": "max"}.get(aggregation, aggregation)
    return Preset(f"{op} by ({NODE_LABELS}) ({name} < {DCGM_SENTINEL:g})",
                  f"min by ({NODE_LABELS}) (timestamp({name}))", aggregation, unit, DCGM_SENTINEL, per_device=True)


PRESETS: dict[str, Preset] = {
    # The hottest GPU decides whether a node can take more heat.
    "dcgm_gpu_temp": _per_gpu("DCGM_FI_DEV_GPU_TEMP", "max", "°C"),
    # Percent, 0-100 (DCGM field 203, NVML's nvmlUtilization_t.gpu: "percent of time ... one or more kernels
    # was executing"; dcgm-exporter's default-counters.csv: "GPU utilization (in %)"). Not reported for MIG
    # instances, and 100 as soon as any kernel runs.
    "dcgm_gpu_util": _per_gpu("DCGM_FI_DEV_GPU_UTIL", "avg", "%"),
    # A ratio, 0-1 (DCGM profiling field 1001, "Ratio of time the graphics engine is active"): reported per
    # MIG instance as well as per GPU, and a truer load than GPU_UTIL. Needs DCGM's profiling (DCP) metrics,
    # Volta or newer; `scale: 100` gives percent.
    "dcgm_gpu_engine_active": _per_gpu("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "avg", "ratio 0-1"),
    # The node's total GPU draw (sum), the figure a rack power budget is about.
    "dcgm_gpu_power": _per_gpu("DCGM_FI_DEV_POWER_USAGE", "sum", "W"),
    "node_load_per_cpu": Preset(f"node_load1 / {CORES_EXPRESSION}", "timestamp(node_load1)", "max", "load/cpu"),
    "node_cpu_utilisation": Preset(
        f'1 - sum without (cpu, mode) (rate({_CPU}{{mode="idle"}}[1m])) / sum without (cpu, mode) (rate({_CPU}[1m]))',
        f'min without (cpu, mode) (timestamp({_CPU}{{mode="idle"}}))',
        "max", "ratio 0-1",
    ),
    "opencost_node_hourly_cost": _selector("node_total_hourly_cost", "max", "$/h"),
}

# History-aware presets (docs/forecasting.md): a window over a node's recent values, evaluated by Prometheus. Each is
# a base preset's query under adapters.prometheus.windows' Window, and keeps the base's timestamp query (a window is
# as old as its newest input). Their recording rules window the base's recorded series instead (no subquery).
WINDOWED: dict[str, tuple[str, Window]] = {
    # What GPUThermalForecast reads: each GPU's trend over 10 minutes, 30 minutes ahead, the hottest per node. Per GPU
    # and then the max (not the trend of the node's max, which jumps when the hottest GPU changes); blank sentinels
    # are dropped inside the window, so one cannot bend a slope.
    "dcgm_gpu_temp_forecast": ("dcgm_gpu_temp", Window("predict_linear", "10m", horizon="30m", step="30s")),
    # What LoadRiskBalancing reads (Trimaran's mean and standard deviation of the utilisation, over 15 minutes).
    "node_cpu_utilisation_mean": ("node_cpu_utilisation", Window("avg_over_time", "15m", step="1m")),
    "node_cpu_utilisation_stddev": ("node_cpu_utilisation", Window("stddev_over_time", "15m", step="1m")),
    # Crane's peak utilisation over the last hour.
    "node_cpu_utilisation_peak": ("node_cpu_utilisation", Window("max_over_time", "1h", step="1m")),
}


def _forecast(name: str, window: Window) -> Preset:
    """A DCGM field's per-GPU window (predict_linear on each GPU's own series), the highest per node."""
    inner = window.apply(f"{name} < {DCGM_SENTINEL:g}")
    return Preset(f"max by ({NODE_LABELS}) ({inner})", f"min by ({NODE_LABELS}) (timestamp({name}))", "max", "°C",
                  DCGM_SENTINEL, per_device=True, window=window)


def _windowed(base: str, window: Window) -> Preset:
    preset = PRESETS[base]
    return replace(preset, query=window.apply(preset.query), window=window)


PRESETS.update({
    "dcgm_gpu_temp_forecast": _forecast("DCGM_FI_DEV_GPU_TEMP", WINDOWED["dcgm_gpu_temp_forecast"][1]),
    **{name: _windowed(base, window) for name, (base, window) in WINDOWED.items() if base == "node_cpu_utilisation"},
})
