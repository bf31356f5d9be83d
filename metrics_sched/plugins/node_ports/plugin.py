"""NodePorts: a pod's host ports must be free on the node, as kube-scheduler's NodePorts plugin
(pkg/scheduler/framework/plugins/nodeports) decides it.

A pod's host ports are those with a hostPort > 0 of its containers and sidecars (init containers with
restartPolicy: Always), each keyed (hostIP, protocol, hostPort) with an empty hostIP read as 0.0.0.0 and
an empty protocol as TCP. A port conflicts with one held on the node by a placed pod (bound, or assumed
by us) of the same protocol and port when the hostIPs are equal or either is 0.0.0.0 (HostPortInfo).

The cluster state keeps, per (protocol, port), a per-row count of the pods holding it, updated as pods are
placed, assumed, forgotten and removed; the filter only looks up the pod's own ports. A pod without host
ports is skipped at PreFilter, so its Filter does not run.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from metrics_sched.framework import (
    SUCCESS,
    WILDCARD_IP,
    Batchable,
    BatchScope,
    ClusterEvent,
    Code,
    CycleState,
    EventHint,
    Filtered,
    FilterPlugin,
    HostPort,
    NodeTable,
    PodInfo,
    PodRecord,
    PreFilterPlugin,
    QueueingHint,
    Reads,
    StateKey,
    Status,
    host_ports,
)

ERR_REASON = "node(s) didn't have free ports for the requested pod ports"

_PORTS = StateKey[tuple[HostPort, ...]]("NodePorts/ports")


def ports_conflict(wanted: Sequence[HostPort], used: Sequence[HostPort]) -> bool:
    """Whether any of `wanted` conflicts with any of `used` (HostPortInfo.CheckConflict, on two short lists)."""
    for ip, protocol, port in wanted:
        if port <= 0:
            continue
        for used_ip, used_protocol, used_port in used:
            if (used_port == port and used_protocol == protocol
                    and (ip == used_ip or WILDCARD_IP in (ip, used_ip))):
                return True
    return False


class NodePorts(PreFilterPlugin, FilterPlugin, Batchable):
    name = "NodePorts"
    node_local = True  # the host ports of the pods on the node
    resolvable_reasons = frozenset({ERR_REASON})  # removing the pod holding the port frees it
    events = frozenset({ClusterEvent.NODE_ADDED, ClusterEvent.POD_DELETED})

    def batch_scope(self, pod: PodInfo) -> BatchScope | None:
        """Opportunistic batching: reads the host ports of the pods on the node."""
        return BatchScope(Reads.NODE | Reads.PODS)

    def events_to_register(self) -> list[EventHint]:
        # Container ports are immutable, so only a deleted pod (freeing its ports) or a new node may help.
        return [EventHint(ClusterEvent.NODE_ADDED), EventHint(ClusterEvent.POD_DELETED, self._after_pod_deleted)]

    @staticmethod
    def _after_pod_deleted(pod: PodInfo, released: PodRecord | None) -> QueueingHint:
        """kube's isSchedulableAfterPodDeleted: only a deleted pod that held a port this pod wants helps."""
        if released is None:  # an un-assumed pod (its ports are unknown here): it may have held one
            return QueueingHint.QUEUE
        if not released.host_ports:
            return QueueingHint.SKIP
        return QueueingHint.QUEUE if ports_conflict(host_ports(pod.raw), released.host_ports) else QueueingHint.SKIP

    def pre_filter(self, cycle: CycleState, pod: PodInfo) -> Status:
        ports = host_ports(pod.raw)
        cycle.write(_PORTS, ports)
        if not ports:
            return Status(Code.SKIP)
        return SUCCESS

    def filter(self, cycle: CycleState, pod: PodInfo, table: NodeTable) -> Filtered:
        ports = cycle.get(_PORTS)
        if ports is None:  # PreFilter not enabled in this profile
            ports = host_ports(pod.raw)
        if not ports:
            return Filtered(np.ones(table.capacity, dtype=bool))
        conflicts = self.handle.cluster.host_port_conflicts(ports, table.capacity)
        return Filtered(~conflicts, {ERR_REASON: conflicts})
