"""Prometheus text format 0.0.4 for the three fake exporters, with the real exporters' names and labels.

Speed matters (5000 nodes x 8 GPUs is 280k DCGM lines). Each family's lines are a cached bytes template
with one `%r` per sample, rebuilt only when the set of nodes served changes; a render is then one
C-level `template % values` per family. `%r` prints ints as "61" and floats in shortest repr.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from devcluster.emulator.cpu_counters import CpuSample, series_count
from devcluster.emulator.fleet import Array, Fleet, FleetValues

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
NODE_EXPORTER_PORT = 9100


@dataclass(frozen=True)
class RenderOptions:
    dcgm_hostname_label: str = "hostname"  # the real exporter's is "Hostname"; both are seen in the wild
    # "ip" -> "<node ip>:9100" (as kube-prometheus-stack labels it), "name" -> "<node name>:9100"
    node_exporter_instance: str = "ip"


@dataclass(frozen=True)
class EndpointView:
    """What one endpoint serves now: a snapshot, the node positions in it, and (node-exporter) counters."""

    values: FleetValues
    nodes: list[int]
    cpu: list[CpuSample] | None = None


@dataclass(frozen=True)
class Sample:
    """How to print values: `fixed` replaces every value (nan/inf faults), `timestamp_ms` is appended."""

    fixed: float | None = None
    timestamp_ms: int | None = None


class _Token:
    """Prints as given under %r: the canonical NaN / +Inf spellings instead of Python's nan / inf."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text


def _token(value: float) -> _Token:
    if math.isnan(value):
        return _Token("NaN")
    if math.isinf(value):
        return _Token("+Inf" if value > 0 else "-Inf")
    return _Token(repr(value))


def escape(value: str) -> str:
    """Label value escaping, plus %% because the result goes into a %-template."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("%", "%%")


def column(values: Array, fixed: float | None) -> tuple[object, ...]:
    if fixed is not None:
        return (_token(fixed),) * len(values)
    if values.size and np.array_equal(values, np.round(values)) and float(np.max(np.abs(values))) < 2**53:
        return tuple(values.astype(np.int64).tolist())
    return tuple(values.tolist())


def lines(name: str, bodies: Sequence[str]) -> str:
    """name+body for every body, as one C-level join (each body ends with a newline)."""
    return name + name.join(bodies) if bodies else ""


Family = tuple[str, str, str]  # name, type, help


class Renderer:
    """Caches the templates for one set of served nodes; subclasses say which lines and values."""

    families: tuple[Family, ...] = ()

    def __init__(self, options: RenderOptions) -> None:
        self.options = options
        self._key: tuple[Fleet, tuple[int, ...], int | None] | None = None
        self._templates: list[bytes] = []

    def render(self, view: EndpointView, sample: Sample) -> bytes:
        key = (view.values.fleet, tuple(view.nodes), sample.timestamp_ms)
        if key != self._key:
            suffix = f" {sample.timestamp_ms}\n" if sample.timestamp_ms is not None else "\n"
            self._templates = [t.encode() for t in self.templates(view.values.fleet, view.nodes, suffix)]
            self._key = key
        parts = []
        for (name, kind, help_text), template, values in zip(
            self.families, self._templates, self.columns(view, sample.fixed), strict=True
        ):
            parts.append(f"# HELP {name} {help_text}\n# TYPE {name} {kind}\n".encode())
            parts.append(template % values)
        return b"".join(parts)

    def templates(self, fleet: Fleet, nodes: Sequence[int], suffix: str) -> list[str]:
        raise NotImplementedError

    def columns(self, view: EndpointView, fixed: float | None) -> list[tuple[object, ...]]:
        raise NotImplementedError


class DcgmRenderer(Renderer):
    families = (
        ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C)."),
        ("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C)."),
        ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."),
        ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W)."),
        ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB)."),
        ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB)."),
        ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered."),
    )
    fields = ("gpu_temp", "memory_temp", "gpu_util", "gpu_power", "fb_used_mib", "fb_free_mib", "xid_errors")
    _gpus: npt.NDArray[np.int64] | None = None

    def templates(self, fleet: Fleet, nodes: Sequence[int], suffix: str) -> list[str]:
        everyone = list(nodes) == list(range(len(fleet)))
        self._gpus = None if everyone else fleet.gpu_indices(nodes)  # None: all GPUs, no copy
        host_label = self.options.dcgm_hostname_label
        labels = []
        for i in nodes:
            profile = fleet.profiles[i]
            if profile.gpu_model is None:
                continue
            model, host = escape(profile.gpu_model.name), escape(fleet.names[i])
            labels += [f'gpu="{g}",UUID="{gpu.uuid}",device="nvidia{g}",modelName="{model}",'
                       f'pci_bus_id="{gpu.pci_bus_id}",{host_label}="{host}"'
                       for g, gpu in enumerate(profile.gpus)]
        bodies = [f"{{{label}}} %r{suffix}" for label in labels]
        return [lines(name, bodies) for name, _, _ in self.families]

    def columns(self, view: EndpointView, fixed: float | None) -> list[tuple[object, ...]]:
        gpus = self._gpus
        return [column(arr if gpus is None else arr[gpus], fixed)
                for arr in (view.values.gpu[field] for field in self.fields)]


class NodeExporterRenderer(Renderer):
    families = (
        ("node_cpu_seconds_total", "counter", "Seconds the CPUs spent in each mode."),
        ("node_load1", "gauge", "1m load average."),
        ("node_load5", "gauge", "5m load average."),
        ("node_load15", "gauge", "15m load average."),
        ("node_memory_MemAvailable_bytes", "gauge", "Memory information field MemAvailable_bytes."),
        ("node_memory_MemTotal_bytes", "gauge", "Memory information field MemTotal_bytes."),
        ("node_uname_info", "gauge", "Labeled system information as provided by the uname system call."),
    )
    fields = ("load1", "load5", "load15", "memory_available_bytes", "memory_total_bytes")
    MODES = ("idle", "system", "user")  # the order columns() emits them in

    def templates(self, fleet: Fleet, nodes: Sequence[int], suffix: str) -> list[str]:
        by_name = self.options.node_exporter_instance == "name"
        instances = []
        for i in nodes:
            reg = fleet.registrations[i]
            instances.append(f'instance="{escape(reg.name if by_name else reg.ip)}:{NODE_EXPORTER_PORT}"')
        cpu_lines = []
        for i, inst in zip(nodes, instances, strict=True):
            for cpu in range(series_count(fleet.registrations[i].cpu)):
                cpu_lines += [f'node_cpu_seconds_total{{cpu="{cpu}",mode="{mode}",{inst}}} %r{suffix}'
                              for mode in self.MODES]
        bodies = [f"{{{inst}}} %r{suffix}" for inst in instances]
        gauges = [lines(name, bodies) for name, _, _ in self.families[1:-1]]
        uname = "".join(
            f'node_uname_info{{domainname="(none)",machine="x86_64",nodename="{escape(fleet.names[i])}",'
            f'release="6.1.0-emulated",sysname="Linux",version="#1 SMP emulated",{inst}}} %r{suffix}'
            for i, inst in zip(nodes, instances, strict=True)
        )
        return ["".join(cpu_lines), *gauges, uname]

    def columns(self, view: EndpointView, fixed: float | None) -> list[tuple[object, ...]]:
        counters: list[float] = []
        for cpu in view.cpu or []:
            counters += (cpu.idle, cpu.system, cpu.user) * cpu.cpus
        nodes = view.nodes
        gauges = [column(view.values.node[field][nodes], fixed) for field in self.fields]
        ones = column(np.ones(len(nodes)), fixed)
        return [column(np.asarray(counters, dtype=np.float64), fixed), *gauges, ones]


class OpenCostRenderer(Renderer):
    families = (
        ("node_total_hourly_cost", "gauge", "node_total_hourly_cost Total node cost per hour"),
        ("node_cpu_hourly_cost", "gauge", "node_cpu_hourly_cost hourly cost for each cpu on this node"),
        ("node_ram_hourly_cost", "gauge", "node_ram_hourly_cost hourly cost for each gb of ram on this node"),
        ("node_gpu_hourly_cost", "gauge", "node_gpu_hourly_cost hourly cost for each gpu on this node"),
        ("node_gpu_count", "gauge", "node_gpu_count count of gpu on this node"),
        ("kubecost_node_is_spot", "gauge",
         "kubecost_node_is_spot Cloud provider info about node preemptibility"),
    )

    def templates(self, fleet: Fleet, nodes: Sequence[int], suffix: str) -> list[str]:
        labels = []
        for i in nodes:
            reg, name = fleet.registrations[i], escape(fleet.names[i])
            labels.append(f'instance="{name}",instance_type="{escape(reg.instance_type)}",node="{name}",'
                          f'provider_id="{escape(fleet.profiles[i].provider_id)}",region="{escape(reg.region)}"')
        bodies = [f"{{{label}}} %r{suffix}" for label in labels]
        return [lines(name, bodies) for name, _, _ in self.families]

    def columns(self, view: EndpointView, fixed: float | None) -> list[tuple[object, ...]]:
        values, nodes = view.values, view.nodes
        spot = np.asarray([1.0 if values.spot[i] else 0.0 for i in nodes], dtype=np.float64)
        arrays = [values.node[field][nodes] for field in ("hourly_cost", "cpu_hourly_cost", "ram_hourly_cost",
                                                          "gpu_hourly_cost")]
        return [column(arr, fixed) for arr in (*arrays, values.fleet.gpu_count[nodes], spot)]
