"""What a pod requests, counted the way Kubernetes counts it (k8s.io/component-helpers resource.PodRequests).

- regular containers add up;
- init containers run one at a time, so the pod needs the largest of them; a sidecar (an init
  container with restartPolicy: Always) keeps running, so it adds to the containers and to every
  init container started after it;
- pod-level `spec.resources.requests` (cpu, memory) replaces the container sum for those resources;
- `spec.overhead` (RuntimeClass) is added last.
cpu is in millicores, everything else in integer base units (bytes, count). A pod's amounts are added
exactly (in milli units: the API server rounds every quantity to 1m) and only the pod's total is rounded
up to a base unit, as kube-scheduler does (PodRequests, then Quantity.Value()).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from metrics_sched.model.quantity import QuantityError, to_int, to_milli

CPU = "cpu"
MEMORY = "memory"
EPHEMERAL_STORAGE = "ephemeral-storage"
PODS = "pods"
GPU = "nvidia.com/gpu"
POD_LEVEL_RESOURCES = (CPU, MEMORY)

# kube-scheduler scores a container without requests as if it asked for these (pkg/scheduler/util).
DEFAULT_MILLI_CPU_REQUEST = 100
DEFAULT_MEMORY_REQUEST = 200 * 1024 * 1024

Resources = dict[str, int]


def parse_resource_list(values: Mapping[str, Any] | None, where: str = "", *, milli: bool = False) -> Resources:
    """A ResourceList as integers (cpu in millicores, the rest in base units, or everything in milli units);
    raises QuantityError naming the field of a malformed value."""
    out: Resources = {}
    for name, raw in (values or {}).items():
        try:
            out[name] = to_milli(raw) if milli or name == CPU else to_int(raw)
        except QuantityError as exc:
            raise QuantityError(f"{where}[{name}]: {exc}") from None
    return out


def _add(into: Resources, other: Mapping[str, int]) -> None:
    for name, amount in other.items():
        into[name] = into.get(name, 0) + amount


def _max(into: Resources, other: Mapping[str, int]) -> None:
    for name, amount in other.items():
        if amount > into.get(name, 0):
            into[name] = amount


def _container_requests(containers: Iterable[Mapping[str, Any]], field: str, non_zero: bool) -> list[Resources]:
    result = []
    for i, container in enumerate(containers):
        requests = parse_resource_list(
            (container.get("resources") or {}).get("requests"), f"spec.{field}[{i}].resources.requests", milli=True
        )
        if non_zero:
            requests.setdefault(CPU, DEFAULT_MILLI_CPU_REQUEST)
            requests.setdefault(MEMORY, DEFAULT_MEMORY_REQUEST * 1000)
        result.append(requests)
    return result


def pod_requests(pod: Mapping[str, Any], *, non_zero: bool = False) -> Resources:
    """The pod's effective requests; non_zero=True gives kube-scheduler's scoring view.

    Raises QuantityError (a ValueError) naming the field when a quantity is malformed.
    """
    spec = pod.get("spec") or {}
    containers = spec.get("containers") or []
    init_containers = spec.get("initContainers") or []
    total: Resources = {}
    for requests in _container_requests(containers, "containers", non_zero):
        _add(total, requests)

    sidecars: Resources = {}
    init_peak: Resources = {}
    for container, requests in zip(
        init_containers, _container_requests(init_containers, "initContainers", non_zero), strict=True
    ):
        if container.get("restartPolicy") == "Always":
            _add(total, requests)
            _add(sidecars, requests)
            effective = dict(sidecars)
        else:
            effective = dict(requests)
            _add(effective, sidecars)
        _max(init_peak, effective)
    _max(total, init_peak)

    pod_level = parse_resource_list(((spec.get("resources") or {}).get("requests")), "spec.resources.requests",
                                    milli=True)
    for name in POD_LEVEL_RESOURCES:
        if name in pod_level:
            total[name] = pod_level[name]

    _add(total, parse_resource_list(spec.get("overhead"), "spec.overhead", milli=True))
    rounded = {name: amount if name == CPU else -(-amount // 1000) for name, amount in total.items()}
    rounded[PODS] = 1
    return rounded


def node_allocatable(node: Mapping[str, Any]) -> Resources:
    status = node.get("status") or {}
    return parse_resource_list(status.get("allocatable") or status.get("capacity"), "status.allocatable")
