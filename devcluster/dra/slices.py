"""The ResourceSlices NVIDIA's GPU kubelet plugin would publish for one node, as resource.k8s.io/v1 JSON.

One pool per node (named after it, `nodeName` set), devices named `gpu-<minor>`. A GPU is a plain device with its
`memory`; on a MIG node every GPU is instead a partitionable device (DRAPartitionableDevices, beta and on in 1.36)
as the driver's dynamic-MIG mode publishes it: a counter set per GPU (`gpu-<minor>-counter-set`: the largest
value of each MIG capacity, plus one counter per memory slice), the full GPU consuming all of it, and every
placement of every MIG profile as a device (`gpu-<minor>-mig-<profile>-<profile id>-<start>`) consuming its
share and its memory slices. The API allows counter sets and devices in one slice no more, so such a pool is
several slices: the counter sets (8 to a slice), then the devices (64 to a slice when they consume counters),
a GPU's devices never split across slices.

Attributes: NVIDIA's (type, uuid, productName, brand, architecture, cudaComputeCapability, driverVersion,
cudaDriverVersion; MIG: parentUUID, profile), the standard `resource.kubernetes.io/pciBusID` and `pcieRoot`, the
`index` (`parentIndex`) earlier driver releases published, and `nvlinkDomain`, which is this dev cluster's own:
on NVLink boards, the GPUs of a node in groups of four (so a constraint on it can fail on an 8-GPU node).
Quantities are written in the API's canonical form, so what the API serves back equals what was built.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from devcluster.dra.catalogue import CUDA_DRIVER_VERSION, DRIVER_VERSION, GpuHardware, MigProfile, semver

__all__ = [
    "API_VERSION", "DRIVER", "MAX_COUNTER_SETS", "MAX_PARTITIONABLE_DEVICES", "NVLINK_DOMAIN_GPUS", "NodeGpus",
    "canonical_quantity", "counter_name", "counter_set", "counter_set_name", "gpu_device", "mig_devices",
    "pci_bus_id", "resource_slices",
]

API_VERSION = "resource.k8s.io/v1"
DRIVER = "gpu.nvidia.com"
STANDARD = "resource.kubernetes.io/"
# resource.k8s.io validation limits (pkg/apis/resource/types.go, 1.36).
MAX_COUNTER_SETS = 8  # ResourceSliceMaxCounterSets
MAX_PARTITIONABLE_DEVICES = 64  # ResourceSliceMaxDevicesWithAdvancedFeatures (devices consuming counters)
MAX_ATTRIBUTE_VALUE = 64  # DeviceAttributeMaxValueLength
NVLINK_DOMAIN_GPUS = 4


@dataclass(frozen=True)
class NodeGpus:
    """One node's GPUs as its kubelet plugin would discover them; `uid` is the Node's (the slices' owner)."""

    node: str
    hardware: GpuHardware
    memory_mib: int  # the whole GPU's framebuffer (the emulator's model)
    uuids: tuple[str, ...]
    pci_bus_ids: tuple[str, ...]  # as NVML and DCGM print them: "00000000:07:00.0"
    partitionable: bool = False  # MIG: publish each GPU with its MIG partitions, through shared counters
    uid: str | None = None

    def __post_init__(self) -> None:
        if len(self.uuids) != len(self.pci_bus_ids):
            raise ValueError(f"node {self.node}: {len(self.uuids)} UUIDs but {len(self.pci_bus_ids)} bus ids")
        if self.partitionable and not self.hardware.mig_capable:
            raise ValueError(f"node {self.node}: {self.hardware.product_name} has no MIG")


_SUFFIXES = ((2**60, "Ei"), (2**50, "Pi"), (2**40, "Ti"), (2**30, "Gi"), (2**20, "Mi"), (2**10, "Ki"))


def canonical_quantity(value: int) -> str:
    """A binary-SI integer quantity as the API serves it: the largest suffix that divides it exactly."""
    for factor, suffix in _SUFFIXES:
        if value and value % factor == 0:
            return f"{value // factor}{suffix}"
    return str(value)


def counter_name(capacity: str) -> str:
    """The driver's camelToDNSName: counters are DNS labels ("copyEngines" -> "copy-engines")."""
    return re.sub(r"([a-z0-9])([A-Z])", r"\1-\2", capacity).lower()


def pci_bus_id(nvml_bus_id: str) -> str:
    """NVML's "00000000:07:00.0" in the extended BDF form the standard attribute takes: "0000:07:00.0"."""
    domain, rest = nvml_bus_id.lower().split(":", 1)
    return f"{domain[-4:]}:{rest}"


def _pcie_root(index: int) -> str:
    # Two GPUs behind each PCIe switch, as on an HGX board.
    return f"pci0000:{8 * (index // 2):02x}"


def _nvlink_domain(node: str, index: int) -> str:
    base = node if len(node) + 8 <= MAX_ATTRIBUTE_VALUE else hashlib.sha256(node.encode()).hexdigest()[:16]
    return f"{base}-nvl{index // NVLINK_DOMAIN_GPUS}"


def _string(value: str) -> dict[str, str]:
    return {"string": value}


def _common_attributes(node: NodeGpus, index: int) -> dict[str, Any]:
    hw = node.hardware
    attrs: dict[str, Any] = {
        "productName": _string(hw.product_name),
        "brand": _string(hw.brand),
        "architecture": _string(hw.architecture),
        "cudaComputeCapability": {"version": semver(hw.cuda_compute_capability)},
        "driverVersion": {"version": semver(DRIVER_VERSION)},
        "cudaDriverVersion": {"version": semver(CUDA_DRIVER_VERSION)},
        f"{STANDARD}pciBusID": _string(pci_bus_id(node.pci_bus_ids[index])),
        f"{STANDARD}pcieRoot": _string(_pcie_root(index)),
    }
    if hw.nvlink:
        attrs["nvlinkDomain"] = _string(_nvlink_domain(node.node, index))
    return attrs


def _capacity(values: dict[str, int]) -> dict[str, Any]:
    return {name: {"value": canonical_quantity(value)} for name, value in values.items()}


def _counters(values: dict[str, int], slices: range) -> dict[str, Any]:
    out = {counter_name(name): {"value": canonical_quantity(value)} for name, value in values.items()}
    out.update((f"memory-slice-{i}", {"value": "1"}) for i in slices)
    return out


def counter_set_name(index: int) -> str:
    return f"gpu-{index}-counter-set"


def gpu_device(node: NodeGpus, index: int) -> dict[str, Any]:
    """GPU `index` as a whole device: plain, or on a MIG node consuming its whole counter set."""
    hw = node.hardware
    device: dict[str, Any] = {
        "name": f"gpu-{index}",
        "attributes": {"type": _string("gpu"), "uuid": _string(node.uuids[index]), "index": {"int": index},
                       **_common_attributes(node, index)},
    }
    if node.partitionable:
        maximum = hw.max_capacities()
        device["capacity"] = _capacity(maximum)
        device["consumesCounters"] = [{"counterSet": counter_set_name(index),
                                       "counters": _counters(maximum, range(hw.memory_slices))}]
    else:
        device["capacity"] = _capacity({"memory": node.memory_mib * 2**20})
    return device


def _mig_device(node: NodeGpus, index: int, profile: MigProfile, start: int) -> dict[str, Any]:
    label = re.sub(r"[^a-z0-9-]", "-", profile.name.replace(".", "").lower()).strip("-")
    return {
        "name": f"gpu-{index}-mig-{label}-{profile.profile_id}-{start}",
        "attributes": {"type": _string("mig"), "parentUUID": _string(node.uuids[index]),
                       "parentIndex": {"int": index}, "profile": _string(profile.name),
                       **_common_attributes(node, index)},
        "capacity": _capacity(profile.capacities()),
        "consumesCounters": [{"counterSet": counter_set_name(index),
                              "counters": _counters(profile.capacities(), range(start, start + profile.size))}],
    }


def mig_devices(node: NodeGpus, index: int) -> list[dict[str, Any]]:
    """Every placement of every MIG profile of GPU `index`, in name order: the driver relies on that order (smallest
    profiles first) for first-fit allocation."""
    devices = [_mig_device(node, index, p, start) for p in node.hardware.mig_profiles for start in p.starts]
    return sorted(devices, key=lambda d: str(d["name"]))


def counter_set(node: NodeGpus, index: int) -> dict[str, Any]:
    hw = node.hardware
    return {"name": counter_set_name(index), "counters": _counters(hw.max_capacities(), range(hw.memory_slices))}


def _slice(node: NodeGpus, generation: int, count: int, body: dict[str, Any]) -> dict[str, Any]:
    metadata: dict[str, Any] = {"generateName": f"{node.node}-{DRIVER}-"}
    if node.uid is not None:
        metadata["ownerReferences"] = [{"apiVersion": "v1", "kind": "Node", "name": node.node, "uid": node.uid,
                                        "controller": True}]
    return {"apiVersion": API_VERSION, "kind": "ResourceSlice", "metadata": metadata,
            "spec": {"driver": DRIVER, "nodeName": node.node,
                     "pool": {"name": node.node, "generation": generation, "resourceSliceCount": count},
                     **body}}


def _chunks(items: Sequence[Any], size: int) -> list[list[Any]]:
    return [list(items[i:i + size]) for i in range(0, len(items), size)]


def resource_slices(node: NodeGpus, generation: int = 1) -> list[dict[str, Any]]:
    """The node's pool at `generation`: every slice, each with the pool's slice count."""
    gpus = range(len(node.uuids))
    if not gpus:
        return []
    if not node.partitionable:
        return [_slice(node, generation, 1, {"devices": [gpu_device(node, i) for i in gpus]})]
    per_gpu = [[gpu_device(node, i), *mig_devices(node, i)] for i in gpus]
    per_slice = MAX_PARTITIONABLE_DEVICES // len(per_gpu[0])
    bodies = [{"sharedCounters": [counter_set(node, i) for i in chunk]}
              for chunk in _chunks(list(gpus), MAX_COUNTER_SETS)]
    bodies += [{"devices": [d for devices in chunk for d in devices]} for chunk in _chunks(per_gpu, per_slice)]
    return [_slice(node, generation, len(bodies), body) for body in bodies]
