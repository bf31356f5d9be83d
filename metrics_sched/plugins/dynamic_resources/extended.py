"""Extended resources backed by DRA (DRAExtendedResource, beta and on in 1.36; upstream's extendeddynamicresources.go
and deviceclass/extendedresourcecache).

A DeviceClass serves an extended resource: the one its spec.extendedResourceName names, and always
`deviceclass.resource.kubernetes.io/<class>`. A pod asking for such a resource (e.g. `nvidia.com/gpu: 1`) on a node
whose allocatable has none of it gets the devices through a claim the scheduler makes for it: one request per
container and resource, named `container-<i>-request-<j>` (i: the container's index among init containers then
containers, j: the resource's index among the container's sorted request names), init containers reusing what later
long-lived containers request.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from metrics_sched.framework import KubeObject, PodInfo

__all__ = [
    "EXTENDED_CLAIM_ANNOTATION",
    "IMPLICIT_PREFIX",
    "SPECIAL_CLAIM_NAME",
    "class_for_resources",
    "is_dra_extended_resource",
    "requests_and_mappings",
    "special_claim",
]

EXTENDED_CLAIM_ANNOTATION = "resource.kubernetes.io/extended-resource-claim"
IMPLICIT_PREFIX = "deviceclass.resource.kubernetes.io/"
Obj = dict[str, Any]  # a JSON object this module builds (and its callers may change)

# Not a valid claim name on purpose: the claim exists only in memory until PreBind creates it.
SPECIAL_CLAIM_NAME = "<extended-resources>"


def is_dra_extended_resource(name: str) -> bool:
    """IsDRAExtendedResourceName: an extended resource (domain-qualified, outside kubernetes.io, not requests.*)
    or a class's implicit name."""
    if name.startswith(IMPLICIT_PREFIX):
        return True
    if "/" not in name or name.startswith("requests."):
        return False
    domain = name.split("/", 1)[0]
    return not (domain == "kubernetes.io" or domain.endswith(".kubernetes.io"))


def class_for_resources(classes: Mapping[str, KubeObject]) -> dict[str, str]:
    """Extended resource name -> the class serving it: explicit names, the newest class winning a tie (then the
    lower name), and every class's implicit name."""
    explicit: dict[str, tuple[str, str]] = {}  # resource -> (creationTimestamp, class)
    for name, cls in classes.items():
        resource = (cls.get("spec") or {}).get("extendedResourceName")
        if not resource:
            continue
        created = str((cls.get("metadata") or {}).get("creationTimestamp") or "")
        known = explicit.get(resource)
        # RFC 3339 in UTC compares as text; newer wins, then the lexicographically lower name.
        if known is None or created > known[0] or (created == known[0] and name < known[1]):
            explicit[resource] = (created, name)
    found = {f"{IMPLICIT_PREFIX}{name}": name for name in classes}
    found.update({resource: cls for resource, (_, cls) in explicit.items()})
    return found


def _quantity(value: Any) -> int:
    try:
        return int(str(value))
    except ValueError:
        return 0  # extended resources are integers; anything else asks for none


def requests_and_mappings(pod: PodInfo, resources: Mapping[str, str]) -> tuple[list[Obj], list[Obj]]:
    """createRequestsAndMappings for the resources served through DRA on a node (resource -> class): the device
    requests sorted by name, and the container -> request mappings for the pod's status."""
    spec = pod.raw.get("spec") or {}
    inits: Sequence[Mapping[str, Any]] = spec.get("initContainers") or ()
    containers = [*inits, *(spec.get("containers") or ())]
    long_lived = [i for i, c in enumerate(containers) if i >= len(inits) or c.get("restartPolicy") == "Always"]
    short_lived = [i for i in range(len(inits)) if i not in long_lived]
    requests: list[Obj] = []
    mappings: list[Obj] = []
    for resource in sorted(resources):
        class_name = resources[resource]
        long_requests: list[Obj | None] = [None] * len(containers)
        long_maps: list[Obj] = []
        for i in long_lived:
            request, found = _container_request(i, containers[i], resource, class_name, [])
            long_requests[i] = request
            long_maps += found
        largest: Obj | None = None
        short_names: set[str] = set()
        short_maps: list[Obj] = []
        for i in short_lived:
            request, found = _container_request(i, containers[i], resource, class_name, long_requests[i:])
            if request is not None:
                short_names.add(request["name"])
                if largest is None or largest["exactly"]["count"] < request["exactly"]["count"]:
                    largest = request
            short_maps += found
        if largest is not None and len(short_names) > 1:
            short_names.discard(largest["name"])
            for mapping in short_maps:
                if mapping["requestName"] in short_names:
                    mapping["requestName"] = largest["name"]
        if largest is not None:
            requests.append(largest)
        requests += [r for r in long_requests if r is not None]
        mappings += long_maps + short_maps
    requests.sort(key=lambda r: str(r["name"]))
    return requests, mappings


def _container_request(index: int, container: Mapping[str, Any], resource: str, class_name: str,
                       reusable: Sequence[Obj | None]) -> tuple[Obj | None, list[Obj]]:
    asked = ((container.get("resources") or {}).get("requests") or {})
    if resource not in asked:
        return None, []
    wanted = _quantity(asked[resource])
    if wanted == 0:
        return None, []
    mappings: list[Obj] = []
    total = 0
    for request in reusable:
        if request is None:
            continue
        total += int(request["exactly"]["count"])
        mappings.append({"containerName": container.get("name", ""), "resourceName": resource,
                         "requestName": request["name"]})
        if total >= wanted:
            return None, mappings
    position = sorted(asked).index(resource)
    name = f"container-{index}-request-{position}"
    request = {"name": name, "exactly": {"deviceClassName": class_name, "allocationMode": "ExactCount",
                                         "count": wanted - total}}
    mappings.append({"containerName": container.get("name", ""), "resourceName": resource, "requestName": name})
    return request, mappings


def special_claim(pod: PodInfo, requests: list[Obj]) -> Obj:
    """The in-memory claim for the pod's DRA-served extended resources on one node (a stable temporary uid: the
    pending allocation is recorded under it until PreBind creates the claim)."""
    return {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {
            "namespace": pod.namespace, "name": SPECIAL_CLAIM_NAME, "uid": f"{pod.uid}/extended-resources",
            "generateName": f"{pod.name}-extended-resources-",
            "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": pod.name, "uid": pod.uid,
                                 "controller": True, "blockOwnerDeletion": True}],
            "annotations": {EXTENDED_CLAIM_ANNOTATION: "true"},
        },
        "spec": {"devices": {"requests": requests}},
    }
