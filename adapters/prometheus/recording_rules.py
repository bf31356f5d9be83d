"""Recording rules that pre-aggregate the presets' inputs per node, and the queries that read them.

Why: a raw GPU preset makes Prometheus aggregate every GPU's series at every refresh (8 GPUs x 5,000
nodes = 40,000 series, twice: values and timestamps). On a busy Prometheus that is seconds per query,
past a query timeout. The rules below do that aggregation once per evaluation, inside
Prometheus, for every reader (each scheduler replica, the dashboards); a refresh then reads 5,000
precomputed series per metric. The CPU count behind `node_load_per_cpu` (a 5m rate over every CPU and
mode: the costliest preset) changes only when a node does, so its rule is evaluated once a minute (a new
node's load per CPU appears within that minute); the load per CPU itself (node_load1 divided by that
count) is recorded with the others.

A refresh reads each metric's two recorded series (value and timestamp) with ONE plain selector on their
names, `{__name__=~"node:<preset>:value|node:<preset>:timestamp_oldest"}`: Prometheus looks the series
up and returns them as they are (no aggregation, no `or` matching, no label_replace: measured at 5,000
nodes, 40 % less evaluation than wrapping them in `max by`/`label_replace`/`or`), and the reducer tells
value from timestamp by `__name__` (adapters.prometheus.series).

The rules are not free: each evaluation does the aggregation a raw query did, whether or not anyone
reads it, so keep only those of the presets in use (`rule_groups(presets=...)`; the dev cluster does).
What they buy is that the work leaves the refresh: it is done once per evaluation for every reader,
and a refresh that reads it costs Prometheus one series per node.

Each rule's expression is the raw preset's own query, rendered with the built-in node labels
(`node_names.BUILT_IN_LABELS`), so the recorded series carry the labels the resolver reads and a
recorded value pairs with its recorded timestamp (same labels). The timestamp rule records the oldest
input sample's own time (`timestamp()` of the raw series), not the rule's evaluation time: a value
read through a rule is as old as the scrape it came from, and ages out like a raw one.

Use: install the rules (`deploy/recording-rules/prometheusrule.yaml`, a PrometheusRule; for a plain
Prometheus, the `groups` under its `spec` are a rule file), then set `recordingRules: true` on the
source. Without that key the source queries the raw series (the fallback, and the right choice while
the rules are not installed: a recorded series that does not exist covers no node). Sources with their
own `nodeLabels` need those labels added to the rules' `by (...)` lists. `opencost_node_hourly_cost` is
one series per node already, but its raw query still makes Prometheus group them by the node labels (to
leave OpenCost's other labels home) and pair them with their timestamps at every refresh: at 5,000 nodes
the slowest query of a recorded refresh, so it is recorded too.
The deploy manifest is generated from these (adapters.prometheus.rules_manifest).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from adapters.prometheus.presets import CORES_EXPRESSION, PRESETS, WINDOWED

# The fast group follows the evaluation interval of the Prometheus that loads it unless given: match it to
# the exporters' scrape interval (a rule evaluated less often than its inputs are scraped adds up to one
# evaluation interval to every value's age; the timestamp rule keeps that age honest).
FAST_GROUP = "metrics-sched-node-telemetry"
SLOW_GROUP = "metrics-sched-node-cpus"
SLOW_INTERVAL = "1m"
CPUS_RECORD = "instance:node_cpus_online:rate5m"

# Presets whose value and timestamp queries are recorded as they are (see the module docstring).
_RECORDED_AS_IS = ("dcgm_gpu_temp", "dcgm_gpu_util", "dcgm_gpu_engine_active", "dcgm_gpu_power",
                   "node_cpu_utilisation", "opencost_node_hourly_cost", "dcgm_gpu_temp_forecast")
# History-aware presets over a recorded base (docs/forecasting.md): their window runs over the base's recorded
# series (a range vector, no subquery: the base's rule has already done the rate and the division); the base's
# rules come with them. The GPU forecast is recorded as it is (above): its window is over each GPU's own series.
_RECORDED_OVER_BASE = {name: base for name, (base, _) in WINDOWED.items() if name not in _RECORDED_AS_IS}
# node_load1 is one series per node already; only its divisor (the CPU count) is costly and recorded slowly.
LOAD_PER_CPU = "node_load_per_cpu"
LOAD_PER_CPU_VALUE = f"node_load1 / {CPUS_RECORD}"


@dataclass(frozen=True)
class RecordingRule:
    record: str
    expr: str

    def as_dict(self) -> dict[str, str]:
        return {"record": self.record, "expr": self.expr}


def value_record(preset: str) -> str:
    return f"node:{preset}:value"


def timestamp_record(preset: str) -> str:
    return f"node:{preset}:timestamp_oldest"


def recorded_series(preset: str) -> tuple[str, str] | None:
    """(value record, timestamp record) the preset is read from with recording rules, or None when the
    preset has no rule (it is queried raw). The recorded series carry the node labels of the rules' `by`."""
    if preset in _RECORDED_AS_IS or preset == LOAD_PER_CPU or preset in _RECORDED_OVER_BASE:
        return value_record(preset), timestamp_record(preset)
    return None


def recorded_presets() -> tuple[str, ...]:
    return (*_RECORDED_AS_IS, LOAD_PER_CPU, *_RECORDED_OVER_BASE)


def fast_rules(presets: Collection[str] | None = None) -> list[RecordingRule]:
    rules: list[RecordingRule] = []
    if presets is not None:  # a windowed preset reads its base's recorded series
        presets = {*presets, *(_RECORDED_OVER_BASE[p] for p in presets if p in _RECORDED_OVER_BASE)}
    for preset in _RECORDED_AS_IS:
        if presets is None or preset in presets:
            query, timestamp_query = PRESETS[preset].render()
            rules += [RecordingRule(value_record(preset), query),
                      RecordingRule(timestamp_record(preset), timestamp_query)]
    if presets is None or LOAD_PER_CPU in presets:
        rules += [RecordingRule(value_record(LOAD_PER_CPU), LOAD_PER_CPU_VALUE),
                  RecordingRule(timestamp_record(LOAD_PER_CPU), PRESETS[LOAD_PER_CPU].render()[1])]
    # After their bases: a group evaluates its rules in order, so a window sees its base's value of this evaluation.
    for preset, base in _RECORDED_OVER_BASE.items():
        if presets is None or preset in presets:
            window = PRESETS[preset].window
            assert window is not None
            rules += [RecordingRule(value_record(preset), window.apply(value_record(base))),
                      RecordingRule(timestamp_record(preset), PRESETS[preset].render()[1])]
    return rules


def slow_rules(presets: Collection[str] | None = None) -> list[RecordingRule]:
    return [RecordingRule(CPUS_RECORD, CORES_EXPRESSION)] if presets is None or LOAD_PER_CPU in presets else []


def rule_groups(interval: str | None = None, presets: Collection[str] | None = None) -> list[dict[str, Any]]:
    """The rule groups, as a Prometheus rule file (`{"groups": ...}`) or a PrometheusRule's spec holds them;
    `interval` sets the fast group's evaluation interval (None: the server's `evaluation_interval`);
    `presets` keeps only the rules those presets read (None: every rule). Empty groups are left out."""
    fast: dict[str, Any] = {"name": FAST_GROUP}
    if interval is not None:
        fast["interval"] = interval
    fast["rules"] = [r.as_dict() for r in fast_rules(presets)]
    slow = {"name": SLOW_GROUP, "interval": SLOW_INTERVAL, "rules": [r.as_dict() for r in slow_rules(presets)]}
    return [group for group in (fast, slow) if group["rules"]]
