"""What a fake node *is*: its registration and a profile (GPU model, baselines, prices) from (seed, name).

Profiles come from `random.Random(f"{seed}:{name}")`, never from `hash()`, which Python salts per
process: the same seed must give the same fleet in every process and every run.
"""

from __future__ import annotations

import ipaddress
import math
import random
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from devcluster.emulator.errors import RequestError

GIB = 2**30
DEFAULT_CPU = 32.0
DEFAULT_MEMORY_BYTES = 256 * GIB
DEFAULT_ZONE = "zone-a"
DEFAULT_REGION = "local-1"
MAX_GPUS = 64


@dataclass(frozen=True)
class GpuModel:
    name: str
    memory_mib: int
    idle_w: float
    max_w: float
    hourly_cost: float  # list price per GPU-hour, before per-node variation and spot discount


GPU_MODELS = (
    GpuModel("NVIDIA A100-SXM4-80GB", 81920, 60.0, 400.0, 3.0),
    GpuModel("NVIDIA H100 80GB HBM3", 81559, 75.0, 700.0, 4.5),
    GpuModel("NVIDIA L4", 23034, 16.0, 72.0, 0.8),
)
# An instance type such as "gpu-h100-8" names its GPU; honour it so the fleet reads consistently.
_MODEL_HINTS = {"a100": GPU_MODELS[0], "h100": GPU_MODELS[1], "l4": GPU_MODELS[2]}
# The bus ids of a DGX A100's eight GPUs, so labels look like the real exporter's.
_PCI_BUSES = ("07", "0F", "47", "4E", "87", "90", "B7", "BD")


@dataclass(frozen=True)
class NodeRegistration:
    name: str
    ip: str
    gpus: int = 0
    cpu: float = DEFAULT_CPU
    memory_bytes: int = DEFAULT_MEMORY_BYTES
    zone: str = DEFAULT_ZONE
    instance_type: str = ""
    region: str = DEFAULT_REGION

    @classmethod
    def from_json(cls, raw: Mapping[str, Any], default_ip: str) -> NodeRegistration:
        """Validates one registration; unknown keys are ignored and null means "use the default"."""
        name = raw.get("name")
        if not isinstance(name, str) or not name or "/" in name or len(name) > 253:
            raise RequestError(f"node name must be a non-empty string without '/', got {name!r}")
        ip = _optional(raw, "ip", str, default_ip)
        try:
            ipaddress.ip_address(ip)
        except ValueError:
            raise RequestError(f"node {name}: ip {ip!r} is not an IP address") from None
        gpus = _optional(raw, "gpus", int, 0)
        if not 0 <= gpus <= MAX_GPUS:
            raise RequestError(f"node {name}: gpus must be 0..{MAX_GPUS}, got {gpus}")
        cpu = float(_optional(raw, "cpu", (int, float), DEFAULT_CPU))
        if not (math.isfinite(cpu) and cpu > 0):
            raise RequestError(f"node {name}: cpu must be a positive number, got {cpu}")
        memory = _optional(raw, "memory_bytes", (int, float), DEFAULT_MEMORY_BYTES)
        if not (math.isfinite(memory) and memory > 0):
            raise RequestError(f"node {name}: memory_bytes must be positive, got {memory}")
        default_type = f"gpu-node-{gpus}" if gpus else f"cpu-standard-{math.ceil(cpu)}"
        return cls(
            name=name, ip=ip, gpus=gpus, cpu=cpu, memory_bytes=int(memory),
            zone=_optional(raw, "zone", str, DEFAULT_ZONE),
            instance_type=_optional(raw, "instance_type", str, default_type) or default_type,
            region=_optional(raw, "region", str, DEFAULT_REGION),
        )

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "ip": self.ip, "gpus": self.gpus, "cpu": self.cpu,
                "memory_bytes": self.memory_bytes, "zone": self.zone,
                "instance_type": self.instance_type, "region": self.region}


def _optional(raw: Mapping[str, Any], key: str, kind: type | tuple[type, ...], default: Any) -> Any:
    value = raw.get(key)
    if value is None:
        return default
    # bool is an int subclass; `"gpus": true` is a caller bug, not one GPU.
    if isinstance(value, bool) or not isinstance(value, kind):
        raise RequestError(f"node {raw.get('name')}: {key} has the wrong type ({type(value).__name__})")
    return value


@dataclass(frozen=True)
class GpuProfile:
    uuid: str
    pci_bus_id: str
    temp_base: float
    memory_temp_offset: float
    util_base: float
    fb_fraction: float  # framebuffer used per unit of utilisation, so memory follows load
    phase: float


@dataclass(frozen=True)
class NodeProfile:
    gpu_model: GpuModel | None
    gpus: tuple[GpuProfile, ...]
    phase: float  # the node-level drift phase (load, cpu, memory)
    load_base: float
    load5_ratio: float
    load15_ratio: float
    cpu_util_base: float
    memory_used_fraction: float
    gpu_hourly_cost: float  # per GPU
    cpu_hourly_cost: float  # per core
    ram_hourly_cost: float  # per GiB
    spot: bool
    maintenance: bool
    rack: str
    provider_id: str
    uptime_s: float  # where the node's cpu counters start


def pick_model(rng: random.Random, instance_type: str) -> GpuModel:
    words = re.split(r"[-_.]", instance_type.lower())
    for hint, model in _MODEL_HINTS.items():
        if hint in words:
            return model
    return rng.choice(GPU_MODELS)


def build_profile(seed: int, reg: NodeRegistration) -> NodeProfile:
    # Draw order is part of the contract: changing it changes every seeded fleet.
    rng = random.Random(f"{seed}:{reg.name}")
    model = pick_model(rng, reg.instance_type)
    node_temp = rng.uniform(38.0, 82.0)
    node_util = rng.uniform(0.0, 100.0)
    spot = rng.random() < 0.2
    price = rng.uniform(0.85, 1.15) * (0.4 if spot else 1.0)
    # GPUs draw from their own stream, so a node's GPU count does not shift the node-level draws,
    # and GPU i only depends on the draws before it.
    gpu_rng = random.Random(f"{seed}:{reg.name}:gpus")
    profile_gpus = tuple(_gpu_profile(gpu_rng, i, node_temp, node_util) for i in range(reg.gpus))
    return NodeProfile(
        gpu_model=model if reg.gpus else None,
        gpus=profile_gpus,
        phase=rng.uniform(0.0, 2 * math.pi),
        load_base=rng.uniform(0.05, 1.2) * reg.cpu,
        load5_ratio=rng.uniform(0.85, 1.05),
        load15_ratio=rng.uniform(0.75, 1.0),
        cpu_util_base=rng.uniform(0.02, 0.95),
        memory_used_fraction=rng.uniform(0.1, 0.85),
        gpu_hourly_cost=round(model.hourly_cost * price, 4) if reg.gpus else 0.0,
        cpu_hourly_cost=round(0.031 * price, 5),
        ram_hourly_cost=round(0.004 * price, 5),
        spot=spot,
        maintenance=rng.random() < 0.02,
        rack=f"{reg.zone}-r{rng.randint(1, 40):02d}",
        provider_id=f"local:///{reg.zone}/{reg.name}",
        uptime_s=rng.uniform(2, 30) * 86400.0,
    )


def _uuid4(bits: int) -> str:
    """str(uuid.UUID(int=bits, version=4)) at a fraction of the cost (40k GPUs per 5000 nodes)."""
    bits = (bits & ~(0xF000 << 64) & ~(0xC000 << 48)) | (0x4000 << 64) | (0x8000 << 48)
    h = f"{bits:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def _gpu_profile(rng: random.Random, index: int, node_temp: float, node_util: float) -> GpuProfile:
    bus = _PCI_BUSES[index] if index < len(_PCI_BUSES) else f"{0xC0 + index:02X}"
    return GpuProfile(
        uuid=f"GPU-{_uuid4(rng.getrandbits(128))}",
        pci_bus_id=f"00000000:{bus}:00.0",
        temp_base=node_temp + rng.uniform(-3.0, 3.0),
        memory_temp_offset=rng.uniform(2.0, 8.0),
        util_base=min(100.0, max(0.0, node_util + rng.uniform(-10.0, 10.0))),
        fb_fraction=rng.uniform(0.5, 0.95),
        phase=rng.uniform(0.0, 2 * math.pi),
    )
