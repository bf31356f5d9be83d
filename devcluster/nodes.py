"""Fake KWOK nodes: their specs, a seeded fleet generator and fast concurrent creation."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from devcluster.kubeapi import KubeAPI

KWOK_ANNOTATION = "kwok.x-k8s.io/node"
GPU_RESOURCE = "nvidia.com/gpu"
ZONES = ("zone-a", "zone-b", "zone-c")
REGION = "local-1"


@dataclass(frozen=True)
class NodeSpec:
    name: str
    internal_ip: str
    cpu: str = "32"
    memory: str = "256Gi"
    ephemeral_storage: str = "1Ti"
    pods: int = 110
    gpus: int = 0
    labels: dict[str, str] = field(default_factory=dict)
    taints: tuple[dict[str, str], ...] = ()
    unschedulable: bool = False
    extended: dict[str, str] = field(default_factory=dict)
    ready: bool = True
    # How the node's GPUs reach the scheduler. The dev cluster's fake DRA driver publishes every GPU node's
    # ResourceSlices; `gpu_device_plugin` also advertises them as the extended resource nvidia.com/gpu (what the
    # device plugin does). Without it, a pod asking for nvidia.com/gpu gets GPUs through DRA (DRAExtendedResource).
    gpu_device_plugin: bool = True
    # The GPUs are MIG-partitionable (an A100 or H100 model): published with their MIG partitions.
    mig: bool = False

    def resources(self) -> dict[str, str]:
        res = {"cpu": self.cpu, "memory": self.memory, "ephemeral-storage": self.ephemeral_storage,
               "pods": str(self.pods)}
        if self.gpus and self.gpu_device_plugin:
            res[GPU_RESOURCE] = str(self.gpus)
        res.update(self.extended)
        return res

    def manifest(self) -> dict[str, Any]:
        # The beta os/arch labels as a kubelet sets them: node lifecycle would otherwise patch every new node.
        labels = {"kubernetes.io/hostname": self.name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
                  "beta.kubernetes.io/os": "linux", "beta.kubernetes.io/arch": "amd64", "type": "kwok", **self.labels}
        resources = self.resources()
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": self.name, "labels": labels,
                         "annotations": {KWOK_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"}},
            "spec": {"taints": list(self.taints), "unschedulable": self.unschedulable},
            "status": {
                "capacity": resources,
                "allocatable": resources,
                "phase": "Running",
                "conditions": [{"type": "Ready", "status": "True" if self.ready else "False",
                                "reason": "KubeletReady", "message": "kwok fake node"}],
                "addresses": [{"type": "InternalIP", "address": self.internal_ip},
                              {"type": "Hostname", "address": self.name}],
                "nodeInfo": {"architecture": "amd64", "operatingSystem": "linux",
                             "kubeletVersion": "fake", "kubeProxyVersion": "fake"},
            },
        }

    def registration(self) -> dict[str, Any]:
        """What the telemetry emulator needs to know about the node."""
        return {
            "name": self.name, "ip": self.internal_ip, "gpus": self.gpus, "cpu": _cpu_cores(self.cpu),
            "memory_bytes": _memory_bytes(self.memory), "zone": self.labels.get("topology.kubernetes.io/zone"),
            "instance_type": self.labels.get("node.kubernetes.io/instance-type"), "region": REGION,
        }


def _cpu_cores(cpu: str) -> float:
    return float(cpu[:-1]) / 1000 if cpu.endswith("m") else float(cpu)


_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


def _memory_bytes(memory: str) -> int:
    for suffix, factor in _BINARY.items():
        if memory.endswith(suffix):
            return int(float(memory[: -len(suffix)]) * factor)
    return int(memory)


def node_ip(index: int) -> str:
    """Addresses in 10.240.0.0/12 that nothing ever connects to (KWOK nodes have no kubelet)."""
    return f"10.{240 + (index >> 16) % 16}.{(index >> 8) & 255}.{index & 255}"


# A fleet's MIG nodes: about a quarter of its A100/H100 nodes, at most this many (a MIG node's pool is ~150 devices:
# a few show the feature, thousands would only weigh on benchmarks' API servers and schedulers).
MIG_SHARE = 0.25
MIG_NODES_MAX = 4


def fleet(count: int, *, gpus_per_node: int = 8, seed: int = 1, prefix: str = "node") -> list[NodeSpec]:
    """A seeded heterogeneous fleet: zones round-robin, mixed disk types, roles and instance types; a few A100/H100
    nodes MIG-partitionable."""
    rng = random.Random(seed)
    mig_rng = random.Random(f"{seed}:mig")  # its own stream: the draws above stay what they always were
    migs = 0
    width = max(3, len(str(count)))
    specs = []
    for i in range(count):
        gpus = gpus_per_node
        instance = f"gpu-{rng.choice(['a100', 'h100', 'l4'])}-{gpus}" if gpus else "cpu-standard-32"
        labels = {
            "topology.kubernetes.io/zone": ZONES[i % len(ZONES)],
            "topology.kubernetes.io/region": REGION,
            "node.kubernetes.io/instance-type": instance,
            "disk-type": rng.choice(["ssd", "ssd", "hdd"]),
            "role": "special" if rng.random() < 0.2 else "general",
        }
        mig = bool(gpus) and "l4" not in instance and migs < MIG_NODES_MAX and mig_rng.random() < MIG_SHARE
        migs += mig
        specs.append(NodeSpec(name=f"{prefix}-{i:0{width}d}", internal_ip=node_ip(i + 1), gpus=gpus, labels=labels,
                              mig=mig))
    return specs


def create_nodes(
    api: KubeAPI,
    specs: Sequence[NodeSpec],
    *,
    concurrency: int = 32,
    progress: Callable[[str], None] | None = None,
) -> dict[str, str]:
    """POSTs nodes (status included) concurrently; an existing node is replaced by the new spec. Returns each
    node's uid (what objects owned by the node, such as its ResourceSlices, refer to)."""

    def create(spec: NodeSpec) -> tuple[str, str]:
        body = spec.manifest()
        created = api.post("/api/v1/nodes", body, ok=(409,))
        if created is None or created.get("kind") == "Status":
            api.delete(f"/api/v1/nodes/{spec.name}")
            created = api.post("/api/v1/nodes", body)
        # Some apiserver versions drop status on create; make sure it is what we asked for.
        if not created.get("status", {}).get("allocatable"):
            api.merge_patch(f"/api/v1/nodes/{spec.name}/status", {"status": body["status"]})
        return spec.name, str(created["metadata"]["uid"])

    done = 0
    uids = {}
    with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="create-node") as pool:
        for name, uid in pool.map(create, specs):
            uids[name] = uid
            done += 1
            if progress and (done % 1000 == 0 or done == len(specs)) and len(specs) >= 1000:
                progress(f"created {done}/{len(specs)} nodes")
    return uids


def delete_nodes(api: KubeAPI, names: Iterable[str], *, concurrency: int = 32) -> None:
    with ThreadPoolExecutor(max_workers=concurrency) as pool:
        list(pool.map(lambda n: api.delete(f"/api/v1/nodes/{n}"), names))
