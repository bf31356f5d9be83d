"""What a placed pod holds on its node and carries for the rules that count pods, as read from its spec: computed
once per spec and shared by the records of the pods that have it (the replicas of a ReplicaSet).

Reading it was a fifth of a batched decision (ClusterState.assume): the requests with an in-place resize counted,
their row vector, the host ports, the inter-pod terms and the digest of the resource fields, per pod. A pod whose
status holds nothing of its own about resources (no container statuses, no infeasible resize: every pod waiting
to be scheduled) holds what its spec says (its inter-pod terms with its namespace and labels: a term's default
namespace, matchLabelKeys), so pods of an equal spec, namespace and labels get one shape. Others are read as before.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from metrics_sched.model.affinity import NO_TERMS, PodAffinityTerms, parse_affinity
from metrics_sched.model.json_key import JsonKey
from metrics_sched.model.podinfo import PodInfo
from metrics_sched.model.resize import ResourceFields, occupied_requests, resize_infeasible, resource_fields
from metrics_sched.model.resources import CPU, MEMORY
from metrics_sched.model.selectors import SelectorError
from metrics_sched.state.node_table import IntArray, NodeTable

__all__ = ["WILDCARD_IP", "HostPort", "PodShape", "PodShapes", "host_ports"]

# A host port as kube-scheduler keys it (HostPortInfo): (hostIP, protocol, hostPort), with an empty hostIP
# read as the wildcard 0.0.0.0 and an empty protocol as TCP.
HostPort = tuple[str, str, int]
WILDCARD_IP = "0.0.0.0"
# Shapes kept (one per spec among the pods being placed; the least recently used goes first).
MAX_SHAPES = 64


def host_ports(pod: Mapping[str, Any]) -> tuple[HostPort, ...]:
    """The host ports a pod holds on its node (kube-scheduler's util.GetHostPorts): the ports with a hostPort
    > 0 of its containers and of its sidecars (init containers with restartPolicy: Always)."""
    spec = pod.get("spec") or {}
    found: list[HostPort] = []
    sidecars = [c for c in spec.get("initContainers") or [] if c.get("restartPolicy") == "Always"]
    for container in (*sidecars, *(spec.get("containers") or [])):
        for port in container.get("ports") or ():
            raw = port.get("hostPort")
            if not raw:
                continue
            try:
                number = int(raw)
            except (TypeError, ValueError):
                continue
            if number > 0:
                found.append((port.get("hostIP") or WILDCARD_IP, port.get("protocol") or "TCP", number))
    return tuple(found)


@dataclass(frozen=True, slots=True)
class PodShape:
    vector: IntArray  # the requests held, as a table row (read-only when shared)
    nonzero: tuple[int, int]  # the non-zero CPU and memory requests (the balanced-allocation counts)
    host_ports: tuple[HostPort, ...]
    affinity: PodAffinityTerms
    resources: ResourceFields  # the fields `vector` was computed from (resize.resource_fields)


def read_shape(info: PodInfo, table: NodeTable) -> PodShape:
    """The pod's shape, read from it (its status included: a resize under way counts)."""
    requests, non_zero = occupied_requests(info)
    try:
        affinity = parse_affinity(info.raw)
    except SelectorError:  # the API server validated it; a term we cannot read selects nothing
        affinity = NO_TERMS
    return PodShape(table.vector(requests), (non_zero.get(CPU, 0), non_zero.get(MEMORY, 0)), host_ports(info.raw),
                    affinity, resource_fields(info.raw))


class PodShapes:
    """The shapes of the specs seen last (under the cluster state's lock)."""

    def __init__(self, table: NodeTable) -> None:
        self._table = table
        self._kept: OrderedDict[tuple[str, JsonKey, JsonKey, int], PodShape] = OrderedDict()

    def of(self, info: PodInfo) -> PodShape:
        raw = info.raw
        status = raw.get("status") or {}
        if (info.parse_error is not None or status.get("containerStatuses") or status.get("initContainerStatuses")
                or resize_infeasible(raw)):
            return read_shape(info, self._table)
        # The inter-pod terms read the pod's namespace (a term's default) and labels (matchLabelKeys); the vector's
        # length is the table's resource columns when it was made (columns are only ever added).
        key = (info.namespace, JsonKey(raw.get("spec") or {}), JsonKey(info.labels), len(self._table.resources))
        kept = self._kept
        shape = kept.get(key)
        if shape is not None:
            kept.move_to_end(key)
            return shape
        shape = read_shape(info, self._table)
        if shape.vector.shape[0] == key[3]:  # else it added a column: keyed by what it is now
            shape.vector.flags.writeable = False
            kept[key] = shape
            if len(kept) > MAX_SHAPES:
                kept.popitem(last=False)
        return shape
