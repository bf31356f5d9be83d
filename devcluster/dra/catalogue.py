"""What NVML would report for each GPU model of the emulator's fleet, as NVIDIA's DRA driver publishes it.

Keyed by the emulator's model name (devcluster.emulator.profiles.GPU_MODELS), which is NVML's product name. The
strings are go-nvlib's (`GetBrandAsString`, `GetArchitectureAsString`); the MIG profiles are the GPU instance
profiles `nvidia-smi mig -lgip` lists (id, memory slices, placements, engines, memory in MiB), after NVIDIA's MIG
user guide: close to the real tables, not authoritative. Only profiles with as many compute as GPU slices
(G == C) are listed, as the driver does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["CUDA_DRIVER_VERSION", "DRIVER_VERSION", "HARDWARE", "GpuHardware", "MigProfile", "semver"]

# NVML's SystemGetDriverVersion / SystemGetCudaDriverVersion: one driver for the whole fleet.
DRIVER_VERSION = "580.95.05"
CUDA_DRIVER_VERSION = "13.0"
MIB = 2**20


@dataclass(frozen=True)
class MigProfile:
    name: str  # as nvidia-smi prints it: "1g.10gb"
    profile_id: int  # the GPU instance profile id
    size: int  # memory slices one placement spans
    starts: tuple[int, ...]  # the memory slice each possible placement starts at
    multiprocessors: int
    copy_engines: int
    decoders: int
    encoders: int
    jpeg_engines: int
    ofa_engines: int
    memory_mib: int

    def capacities(self) -> dict[str, int]:
        """The driver's CommonCapacitiesMig: capacity name -> value (memory in bytes)."""
        return {"multiprocessors": self.multiprocessors, "copyEngines": self.copy_engines,
                "decoders": self.decoders, "encoders": self.encoders, "jpegEngines": self.jpeg_engines,
                "ofaEngines": self.ofa_engines, "memory": self.memory_mib * MIB}


@dataclass(frozen=True)
class GpuHardware:
    product_name: str
    brand: str
    architecture: str
    cuda_compute_capability: str  # "major.minor", as go-nvlib formats it
    nvlink: bool  # SXM boards: GPUs joined by NVLink (PCIe cards such as the L4: none)
    memory_slices: int  # 0: no MIG
    mig_profiles: tuple[MigProfile, ...] = ()

    @property
    def mig_capable(self) -> bool:
        return bool(self.mig_profiles)

    def max_capacities(self) -> dict[str, int]:
        """Per capacity, the largest value of any MIG profile: what the driver gives the full GPU when it publishes
        it as a partitionable device (its `maxCapacities`)."""
        out: dict[str, int] = {}
        for profile in self.mig_profiles:
            for name, value in profile.capacities().items():
                out[name] = max(out.get(name, 0), value)
        return out


def _profiles(rows: tuple[tuple[str, int, int, tuple[int, ...], int, int, int, int, int, int], ...]
              ) -> tuple[MigProfile, ...]:
    return tuple(MigProfile(name, pid, size, starts, sm, ce, dec, 0, jpg, ofa, mem)
                 for name, pid, size, starts, sm, ce, dec, jpg, ofa, mem in rows)


SEVEN = (0, 1, 2, 3, 4, 5, 6)
# name, profile id, slices, placement starts, SMs, copy engines, decoders, JPEG, OFA, memory MiB (no encoders).
_A100_80GB = _profiles((
    ("1g.10gb", 19, 1, SEVEN, 14, 1, 0, 0, 0, 9728),
    ("1g.20gb", 15, 2, (0, 2, 4, 6), 14, 1, 1, 0, 0, 19968),
    ("2g.20gb", 14, 2, (0, 2, 4), 28, 2, 1, 0, 0, 19968),
    ("3g.40gb", 9, 4, (0, 4), 42, 3, 2, 0, 0, 40192),
    ("4g.40gb", 5, 4, (0,), 56, 4, 2, 0, 0, 40192),
    ("7g.80gb", 0, 8, (0,), 98, 7, 5, 1, 1, 81152),
))
_H100_80GB = _profiles((
    ("1g.10gb", 19, 1, SEVEN, 16, 1, 1, 1, 0, 9984),
    ("1g.20gb", 15, 2, (0, 2, 4, 6), 16, 1, 1, 1, 0, 20096),
    ("2g.20gb", 14, 2, (0, 2, 4), 32, 2, 2, 2, 0, 20096),
    ("3g.40gb", 9, 4, (0, 4), 60, 3, 3, 3, 0, 40320),
    ("4g.40gb", 5, 4, (0,), 64, 4, 4, 4, 0, 40320),
    ("7g.80gb", 0, 8, (0,), 132, 8, 7, 7, 1, 80896),
))

HARDWARE: dict[str, GpuHardware] = {
    "NVIDIA A100-SXM4-80GB": GpuHardware("NVIDIA A100-SXM4-80GB", "Nvidia", "Ampere", "8.0", True, 8, _A100_80GB),
    "NVIDIA H100 80GB HBM3": GpuHardware("NVIDIA H100 80GB HBM3", "Nvidia", "Hopper", "9.0", True, 8, _H100_80GB),
    "NVIDIA L4": GpuHardware("NVIDIA L4", "Nvidia", "Ada Lovelace", "8.9", False, 0),
}


def semver(version: str) -> str:
    """What the driver publishes for a version attribute: Masterminds/semver's String() of NVML's text, i.e. three
    numeric parts without leading zeros ("8.0" -> "8.0.0", "580.95.05" -> "580.95.5"), which is what the API's
    strict semver check accepts."""
    if not re.fullmatch(r"\d+(\.\d+){0,2}", version):
        raise ValueError(f"not a version NVML reports: {version!r}")
    parts = [int(p) for p in version.split(".")]
    return ".".join(str(p) for p in [*parts, 0, 0][:3])
