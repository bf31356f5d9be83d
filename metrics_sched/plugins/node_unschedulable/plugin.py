"""NodeUnschedulable: cordoned nodes (spec.unschedulable) take only pods that tolerate the cordon taint."""

from __future__ import annotations

import numpy as np

from metrics_sched.framework import (
    Batchable,
    BatchScope,
    ClusterEvent,
    CycleState,
    Filtered,
    FilterPlugin,
    NodeTable,
    PodInfo,
    Reads,
)

UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"


class NodeUnschedulable(FilterPlugin, Batchable):
    name = "NodeUnschedulable"
    node_local = True  # the node's unschedulable flag
    events = frozenset({ClusterEvent.NODE_ADDED, ClusterEvent.NODE_SCHEDULABLE})

    def batch_scope(self, pod: PodInfo) -> BatchScope | None:
        """Opportunistic batching: reads the node's spec.unschedulable."""
        return BatchScope(Reads.NODE)

    def filter(self, cycle: CycleState, pod: PodInfo, table: NodeTable) -> Filtered:
        if any(t.tolerates(UNSCHEDULABLE_TAINT, None, "NoSchedule") for t in pod.tolerations):
            return Filtered(np.ones(table.capacity, dtype=bool))
        return Filtered.single(~table.unschedulable, "node(s) were unschedulable")
