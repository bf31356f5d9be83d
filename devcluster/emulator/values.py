"""NodeValues: what one node serves at one moment, as the control API shows it (faults not applied)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from devcluster.emulator.profiles import NodeProfile, NodeRegistration

GPU_FIELDS = ("gpu_temp", "memory_temp", "gpu_util", "gpu_power", "fb_used_mib", "fb_free_mib", "xid_errors")
NODE_FIELDS = (
    "load1", "load5", "load15", "cpu_util",
    "memory_used_bytes", "memory_total_bytes", "memory_available_bytes",
    "hourly_cost", "gpu_hourly_cost", "cpu_hourly_cost", "ram_hourly_cost",
)


@dataclass(frozen=True, slots=True)
class NodeValues:
    gpu_temp: tuple[float, ...]  # degrees C, per GPU
    memory_temp: tuple[float, ...]
    gpu_util: tuple[float, ...]  # percent
    gpu_power: tuple[float, ...]  # W
    fb_used_mib: tuple[float, ...]
    fb_free_mib: tuple[float, ...]
    xid_errors: tuple[float, ...]
    load1: float
    load5: float
    load15: float
    cpu_util: float  # 0..1
    memory_used_bytes: float
    memory_total_bytes: float
    memory_available_bytes: float
    hourly_cost: float  # whole node, $/h
    gpu_hourly_cost: float  # per GPU
    cpu_hourly_cost: float  # per core
    ram_hourly_cost: float  # per GiB
    maintenance: bool
    spot: bool
    rack: str

    def to_json(self) -> dict[str, Any]:
        return {key: list(value) if isinstance(value, tuple) else value
                for key, value in asdict(self).items()}


@dataclass(frozen=True, slots=True)
class NodeView:
    """One node as a JSON endpoint (CMDB, OpenCost assets) serves it: live or frozen values."""

    id: int
    registration: NodeRegistration
    profile: NodeProfile
    values: NodeValues
