"""What a pod on a node occupies while its resources are resized in place (InPlacePodVerticalScaling).

A resize changes `spec.containers[].resources` at once; the kubelet then records what it admitted
(`status.containerStatuses[].allocatedResources`) and what the runtime applied
(`status.containerStatuses[].resources`). Until all three agree the pod may use any of them, so
kube-scheduler (component-helpers resource.PodRequests with UseStatusResources) counts, per container
and resource, the largest of desired, allocated and actuated; when the kubelet marked the resize
Infeasible (condition PodResizePending, reason Infeasible) the desired value will never apply and only
allocated and actuated count. Sidecars (restartable init containers) resize like containers; other init
containers cannot be resized.

`resource_fields` is the part of a pod these numbers come from, so an update that leaves it alone (the
status churn of a running pod) is recognised without parsing a quantity.
"""

from __future__ import annotations

from collections.abc import Mapping
from hashlib import blake2b
from typing import Any

import orjson

from metrics_sched.model.podinfo import PodInfo
from metrics_sched.model.quantity import to_milli
from metrics_sched.model.resources import Resources, pod_requests

# The fields of a pod its requests are computed from, as a digest (compared for equality, never read back).
ResourceFields = bytes


def resize_infeasible(pod: Mapping[str, Any]) -> bool:
    """kube's IsPodResizeInfeasible: the PodResizePending condition says Infeasible."""
    for condition in (pod.get("status") or {}).get("conditions") or ():
        if condition.get("type") == "PodResizePending":
            return bool(condition.get("reason") == "Infeasible")
    return False


def resource_fields(pod: Mapping[str, Any]) -> ResourceFields:
    """Kept with every placed pod: as tuples of the decoded object's own dicts they held those dicts (and their
    strings) alive, ~0.7 KB a pod. A 128-bit digest of them serialised with sorted keys (the same fields give the
    same digest; different ones the same only by a collision of 1 in 2^128) is 49 bytes. (orjson's own bytes
    would not do: each keeps orjson's ~4 KB output buffer.)"""
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    return blake2b(orjson.dumps((
        [(c.get("name"), (c.get("resources") or {}).get("requests")) for c in spec.get("containers") or ()],
        [(c.get("name"), (c.get("resources") or {}).get("requests"), c.get("restartPolicy"))
         for c in spec.get("initContainers") or ()],
        (spec.get("resources") or {}).get("requests"),
        spec.get("overhead"),
        [(s.get("name"), s.get("resources"), s.get("allocatedResources"))
         for key in ("containerStatuses", "initContainerStatuses") for s in status.get(key) or ()],
        resize_infeasible(pod),
    ), option=orjson.OPT_SORT_KEYS), digest_size=16).digest()


def _largest(*values: Any) -> Any:
    """The largest of some quantities (None or zero: absent, as kube's maxQuantity); None if all are."""
    best, best_milli = None, 0
    for value in values:
        if value is None:
            continue
        milli = to_milli(value)
        if milli > best_milli:
            best, best_milli = value, milli
    return best


def _effective(container: Mapping[str, Any], status: Mapping[str, Any] | None, infeasible: bool) -> Mapping[str, Any]:
    """The container with the requests it holds (kube's determineEffectiveResource)."""
    if status is None or status.get("resources") is None:
        return container
    desired = (container.get("resources") or {}).get("requests") or {}
    actuated = (status.get("resources") or {}).get("requests") or {}
    allocated = status.get("allocatedResources") or {}
    requests = {}
    for name in {*desired, *actuated, *allocated}:
        value = _largest(None if infeasible else desired.get(name), actuated.get(name), allocated.get(name))
        if value is not None:
            requests[name] = value
        elif name in desired:
            requests[name] = desired[name]  # an explicit zero stays explicit (no default request for it)
    if requests == desired:
        return container
    return {**container, "resources": {**(container.get("resources") or {}), "requests": requests}}


def occupied_pod(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    """The pod as its node holds it: each resizable container's requests replaced by the effective ones. The
    pod itself when its status reports no container resources (not started, or not resized)."""
    status = pod.get("status") or {}
    statuses = {s.get("name"): s for s in status.get("containerStatuses") or ()}
    init_statuses = {s.get("name"): s for s in status.get("initContainerStatuses") or ()}
    if not any(s.get("resources") is not None for s in (*statuses.values(), *init_statuses.values())):
        return pod
    infeasible = resize_infeasible(pod)
    spec = pod.get("spec") or {}
    containers = [_effective(c, statuses.get(c.get("name")), infeasible) for c in spec.get("containers") or ()]
    init = [_effective(c, init_statuses.get(c.get("name")), infeasible) if c.get("restartPolicy") == "Always" else c
            for c in spec.get("initContainers") or ()]
    unchanged = (all(a is b for a, b in zip(containers, spec.get("containers") or (), strict=True))
                 and all(a is b for a, b in zip(init, spec.get("initContainers") or (), strict=True)))
    if unchanged:  # the usual case: a running pod whose status agrees with its spec
        return pod
    return {**pod, "spec": {**spec, "containers": containers, "initContainers": init}}


def occupied_requests(info: PodInfo) -> tuple[Resources, Resources]:
    """(requests, non-zero requests) the pod holds on its node, counting an in-place resize under way. The
    parsed spec's when the status holds nothing else or a value cannot be read (the spec passed validation;
    the status is the kubelet's)."""
    if info.parse_error:
        return info.requests, info.non_zero_requests
    try:
        effective = occupied_pod(info.raw)
        if effective is info.raw:
            return info.requests, info.non_zero_requests
        return pod_requests(effective), pod_requests(effective, non_zero=True)
    except ValueError:
        return info.requests, info.non_zero_requests
