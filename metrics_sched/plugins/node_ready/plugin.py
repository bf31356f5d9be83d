"""NodeReady: only nodes whose Ready condition is True.

kube-scheduler leaves this to the not-ready taints the node lifecycle controller adds; a scheduler
that may run without that controller (or ahead of it) checks the condition itself.
"""

from __future__ import annotations

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


class NodeReady(FilterPlugin, Batchable):
    name = "NodeReady"
    node_local = True  # the node's Ready condition
    events = frozenset({ClusterEvent.NODE_ADDED, ClusterEvent.NODE_SCHEDULABLE})

    def batch_scope(self, pod: PodInfo) -> BatchScope | None:
        """Opportunistic batching: reads the node's Ready condition."""
        return BatchScope(Reads.NODE)

    def filter(self, cycle: CycleState, pod: PodInfo, table: NodeTable) -> Filtered:
        return Filtered.single(table.ready.copy(), "node(s) were not ready")
