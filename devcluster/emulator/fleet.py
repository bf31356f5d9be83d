"""Every node's values at one moment, computed for the whole fleet at once with numpy.

value(t) = baseline + amplitude * sin(2*pi*t/PERIOD_S + phase), evaluated at whole seconds so every
endpoint (and the control API) reading in the same second sees the same numbers. Overrides replace
values exactly. Values derived from an overridden one follow it: GPU power and framebuffer from
utilisation, memory temperature from GPU temperature, load5/load15 from load1 (the same value: a
steady load), free memory from used memory, the total hourly cost from the per-unit prices.

One vectorised pass instead of per-node Python keeps 5000 nodes x 8 GPUs in the millisecond range.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from devcluster.emulator.overrides import RAMP_CEILING_C, OverrideValue
from devcluster.emulator.profiles import GIB, NodeProfile, NodeRegistration
from devcluster.emulator.values import GPU_FIELDS, NODE_FIELDS, NodeValues

Array = npt.NDArray[np.float64]
Overrides = Mapping[str, Mapping[str, OverrideValue]]

PERIOD_S = 300.0
TEMP_AMPLITUDE_C = 2.0
UTIL_AMPLITUDE_PCT = 5.0
LOAD_AMPLITUDE = 0.1  # relative
CPU_UTIL_AMPLITUDE = 0.03
MEMORY_AMPLITUDE = 0.02  # fraction of total


def _floats(values: Sequence[float]) -> Array:
    return np.asarray(values, dtype=np.float64)


class Fleet:
    """Static per-node and per-GPU arrays in one fixed node order; rebuilt when membership changes."""

    def __init__(self, nodes: Sequence[tuple[NodeRegistration, NodeProfile]]) -> None:
        self.registrations = [reg for reg, _ in nodes]
        self.profiles = [profile for _, profile in nodes]
        self.names = [reg.name for reg in self.registrations]
        self.index = {name: i for i, name in enumerate(self.names)}
        counts = [len(p.gpus) for p in self.profiles]
        self.gpu_start = [0, *np.cumsum(counts, dtype=np.int64).tolist()]
        gpus = [(p.gpu_model, g) for p in self.profiles for g in p.gpus]
        self.temp_base = _floats([g.temp_base for _, g in gpus])
        self.gpu_phase = _floats([g.phase for _, g in gpus])
        self.util_base = _floats([g.util_base for _, g in gpus])
        self.memory_temp_offset = _floats([g.memory_temp_offset for _, g in gpus])
        self.fb_fraction = _floats([g.fb_fraction for _, g in gpus])
        self.idle_w = _floats([m.idle_w if m else 0.0 for m, _ in gpus])
        self.max_w = _floats([m.max_w if m else 0.0 for m, _ in gpus])
        self.memory_mib = _floats([m.memory_mib if m else 0.0 for m, _ in gpus])
        self.node_phase = _floats([p.phase for p in self.profiles])
        self.load_base = _floats([p.load_base for p in self.profiles])
        self.load5_ratio = _floats([p.load5_ratio for p in self.profiles])
        self.load15_ratio = _floats([p.load15_ratio for p in self.profiles])
        self.cpu_util_base = _floats([p.cpu_util_base for p in self.profiles])
        self.memory_fraction = _floats([p.memory_used_fraction for p in self.profiles])
        self.memory_total = _floats([reg.memory_bytes for reg in self.registrations])
        self.gpu_count = _floats(counts)
        self.cores = _floats([reg.cpu for reg in self.registrations])
        self.gpu_cost = _floats([p.gpu_hourly_cost for p in self.profiles])
        self.cpu_cost = _floats([p.cpu_hourly_cost for p in self.profiles])
        self.ram_cost = _floats([p.ram_hourly_cost for p in self.profiles])

    def __len__(self) -> int:
        return len(self.names)

    def gpu_indices(self, nodes: Sequence[int]) -> npt.NDArray[np.int64]:
        """Flat GPU positions of the given nodes, in node order."""
        start = self.gpu_start
        ranges = [np.arange(start[i], start[i + 1]) for i in nodes]
        return np.concatenate(ranges).astype(np.int64) if ranges else np.zeros(0, dtype=np.int64)


@dataclass(frozen=True)
class FleetValues:
    """The fleet's values at second `t`; arrays are shared, so treat them as read-only."""

    fleet: Fleet
    t: float
    gpu: dict[str, Array]  # GPU_FIELDS -> flat per-GPU arrays (see Fleet.gpu_start)
    node: dict[str, Array]  # NODE_FIELDS -> per-node arrays
    maintenance: list[bool]
    spot: list[bool]
    rack: list[str]

    def node_values(self, i: int) -> NodeValues:
        start, end = self.fleet.gpu_start[i], self.fleet.gpu_start[i + 1]
        fields: dict[str, Any] = {field: tuple(self.gpu[field][start:end].tolist()) for field in GPU_FIELDS}
        fields.update((field, float(self.node[field][i])) for field in NODE_FIELDS)
        return NodeValues(**fields, maintenance=self.maintenance[i], spot=self.spot[i], rack=self.rack[i])


def _round(values: Array, decimals: int = 0) -> Array:
    return np.asarray(np.round(values, decimals), dtype=np.float64)


def _wave(t: float, phase: Array) -> Array:
    result: Array = np.sin(2 * math.pi * t / PERIOD_S + phase)
    return result


def compute(fleet: Fleet, overrides: Overrides, t: float) -> FleetValues:
    t = float(math.floor(t))
    f = fleet
    gpu: dict[str, Array] = {
        "gpu_temp": _round(f.temp_base + TEMP_AMPLITUDE_C * _wave(t, f.gpu_phase)),
        "gpu_util": _round(np.clip(f.util_base + UTIL_AMPLITUDE_PCT * _wave(t, f.gpu_phase + 1.0), 0, 100)),
    }
    load_wave = _wave(t, f.node_phase)
    cpu_wave = CPU_UTIL_AMPLITUDE * _wave(t, f.node_phase + 2.0)
    memory_fraction = np.clip(f.memory_fraction + MEMORY_AMPLITUDE * _wave(t, f.node_phase + 4.0), 0, 1)
    node: dict[str, Array] = {
        "load1": _round(f.load_base * (1 + LOAD_AMPLITUDE * load_wave), 2),
        "load5": _round(f.load_base * f.load5_ratio * (1 + 0.05 * load_wave), 2),
        "load15": _round(f.load_base * f.load15_ratio, 2),
        "cpu_util": _round(np.clip(f.cpu_util_base + cpu_wave, 0, 1), 4),
        "memory_used_bytes": _round(f.memory_total * memory_fraction),
        "memory_total_bytes": f.memory_total,
        "gpu_hourly_cost": f.gpu_cost.copy(),
        "cpu_hourly_cost": f.cpu_cost.copy(),
        "ram_hourly_cost": f.ram_cost.copy(),
    }
    maintenance = [p.maintenance for p in f.profiles]
    spot = [p.spot for p in f.profiles]
    rack = [p.rack for p in f.profiles]
    # Inputs first, so derived values follow overridden inputs...
    for i, fields in _overridden(f, overrides):
        _put_gpu(gpu, f, i, fields, ("gpu_temp", "gpu_util"))
        ramp = fields.get("gpu_temp_ramp")
        if isinstance(ramp, tuple):  # (°C per minute, since): on top of the drift or the exact override
            rate, since = ramp
            section = gpu["gpu_temp"][f.gpu_start[i]:f.gpu_start[i + 1]]
            section[:] = np.round(np.minimum(RAMP_CEILING_C, section + rate * max(0.0, t - since) / 60.0), 1)
        if "load1" in fields:
            node["load5"][i] = node["load15"][i] = _scalar(fields["load1"])
        _put_node(node, i, fields, ("load1", "load5", "load15", "cpu_util", "memory_used_bytes",
                                    "gpu_hourly_cost", "cpu_hourly_cost", "ram_hourly_cost"))
        maintenance[i] = bool(fields.get("maintenance", maintenance[i]))
        spot[i] = bool(fields.get("spot", spot[i]))
        rack[i] = str(fields.get("rack", rack[i]))
    busy = np.clip(gpu["gpu_util"], 0, 100) / 100
    gpu["memory_temp"] = _round(gpu["gpu_temp"] + f.memory_temp_offset)
    gpu["gpu_power"] = _round(f.idle_w + (f.max_w - f.idle_w) * busy, 3)
    gpu["fb_used_mib"] = _round(f.memory_mib * (0.02 + f.fb_fraction * busy))
    gpu["xid_errors"] = np.zeros_like(busy)
    node["hourly_cost"] = _round(f.gpu_count * node["gpu_hourly_cost"] + f.cores * node["cpu_hourly_cost"]
                                   + f.memory_total / GIB * node["ram_hourly_cost"], 4)
    # ...then the derived values' own overrides.
    for i, fields in _overridden(f, overrides):
        _put_gpu(gpu, f, i, fields, ("memory_temp", "gpu_power", "fb_used_mib", "xid_errors"))
        _put_node(node, i, fields, ("hourly_cost",))
    gpu["fb_free_mib"] = np.maximum(0.0, f.memory_mib - gpu["fb_used_mib"])
    node["memory_available_bytes"] = np.maximum(0.0, f.memory_total - node["memory_used_bytes"])
    return FleetValues(f, t, gpu, node, maintenance, spot, rack)


def _overridden(fleet: Fleet, overrides: Overrides) -> list[tuple[int, Mapping[str, OverrideValue]]]:
    index = fleet.index
    return [(index[name], fields) for name, fields in overrides.items() if fields and name in index]


def _scalar(value: OverrideValue) -> float:
    assert isinstance(value, float)
    return value


def _put_gpu(gpu: dict[str, Array], fleet: Fleet, i: int, fields: Mapping[str, OverrideValue],
             names: Sequence[str]) -> None:
    for name in names:
        value = fields.get(name)
        if isinstance(value, tuple):
            section = gpu[name][fleet.gpu_start[i]:fleet.gpu_start[i + 1]]
            if not any(math.isnan(v) for v in value):
                section[:] = value
                continue
            exact = np.asarray(value, dtype=np.float64)
            overridden = ~np.isnan(exact)  # NaN: that GPU is not overridden (a partial, per-GPU override)
            section[overridden] = exact[overridden]


def _put_node(node: dict[str, Array], i: int, fields: Mapping[str, OverrideValue],
              names: Sequence[str]) -> None:
    for name in names:
        value = fields.get(name)
        if isinstance(value, float):
            node[name][i] = value
