"""Publishing through the API server, as the driver's kubelet plugin and Helm chart do: the DeviceClasses once per
cluster, a node's slices when the node is created (and its previous ones, if it is created again, replaced by a
new pool generation), nothing periodically."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from devcluster.dra.catalogue import HARDWARE
from devcluster.dra.classes import DEVICE_CLASSES
from devcluster.dra.slices import DRIVER, NodeGpus, resource_slices
from devcluster.emulator.profiles import NodeRegistration, build_profile
from devcluster.kubeapi import KubeAPI
from devcluster.nodes import NodeSpec

__all__ = ["DEVICE_CLASSES_PATH", "RESOURCE_SLICES_PATH", "install_device_classes", "node_gpus", "publish",
           "unpublish"]

RESOURCE_SLICES_PATH = "/apis/resource.k8s.io/v1/resourceslices"
DEVICE_CLASSES_PATH = "/apis/resource.k8s.io/v1/deviceclasses"


def install_device_classes(api: KubeAPI) -> None:
    for device_class in DEVICE_CLASSES:
        api.post(DEVICE_CLASSES_PATH, device_class, ok=(409,))


def node_gpus(spec: NodeSpec, seed: int, uid: str | None = None) -> NodeGpus | None:
    """What the plugin on `spec`'s node would discover: the GPUs of the profile the emulator (same seed) built for
    the node's registration, so UUIDs and bus ids are those of its DCGM series. None for a node without GPUs."""
    if not spec.gpus:
        return None
    profile = build_profile(seed, NodeRegistration.from_json(spec.registration(), spec.internal_ip))
    model = profile.gpu_model
    assert model is not None  # a node with GPUs always has a model
    hardware = HARDWARE[model.name]
    if spec.mig and not hardware.mig_capable:
        raise ValueError(f"node {spec.name}: MIG asked for, but its GPUs are {model.name} (name an A100 or H100 in "
                         f"the instance type, e.g. gpu-h100-8, to pick a MIG-capable model)")
    return NodeGpus(node=spec.name, hardware=hardware, memory_mib=model.memory_mib,
                    uuids=tuple(g.uuid for g in profile.gpus), pci_bus_ids=tuple(g.pci_bus_id for g in profile.gpus),
                    partitionable=spec.mig, uid=uid)


def _published(api: KubeAPI) -> dict[str, list[dict[str, Any]]]:
    """The driver's slices by node."""
    items = api.get(RESOURCE_SLICES_PATH, fieldSelector=f"spec.driver={DRIVER}")["items"]
    by_node: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for item in items:
        by_node[item["spec"].get("nodeName", "")].append(item)
    return by_node


def publish(api: KubeAPI, nodes: Sequence[NodeGpus], *, concurrency: int = 32) -> None:
    """Creates each node's pool; a node that already has slices gets a new generation and loses the old ones."""
    if not nodes:
        return
    published = _published(api)

    def one(node: NodeGpus) -> None:
        old = published.get(node.node, [])
        generation = max((s["spec"]["pool"]["generation"] for s in old), default=0) + 1
        for stale in old:
            api.delete(f"{RESOURCE_SLICES_PATH}/{stale['metadata']['name']}")
        for body in resource_slices(node, generation):
            api.post(RESOURCE_SLICES_PATH, body)

    with ThreadPoolExecutor(max_workers=min(concurrency, len(nodes)), thread_name_prefix="dra-publish") as pool:
        list(pool.map(one, nodes))


def unpublish(api: KubeAPI, names: Iterable[str], *, concurrency: int = 32) -> None:
    """Deletes the nodes' slices now (their Node owner reference would have the garbage collector do it later, and
    only with the controller manager running)."""
    def one(name: str) -> None:
        selector = f"spec.nodeName={name},spec.driver={DRIVER}"
        api.request("DELETE", RESOURCE_SLICES_PATH, params={"fieldSelector": selector}, ok=(404,))

    with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="dra-unpublish") as pool:
        list(pool.map(one, names))
