"""NodeName: a pod that names its node (spec.nodeName) fits only there."""

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


class NodeName(FilterPlugin, Batchable):
    name = "NodeName"
    node_local = True  # the node's name
    events = frozenset({ClusterEvent.NODE_ADDED})

    def batch_scope(self, pod: PodInfo) -> BatchScope | None:
        """Opportunistic batching: reads the node's name."""
        return BatchScope(Reads.NODE)

    def filter(self, cycle: CycleState, pod: PodInfo, table: NodeTable) -> Filtered:
        if not pod.node_name:
            return Filtered(np.ones(table.capacity, dtype=bool))
        feasible = np.zeros(table.capacity, dtype=bool)
        row = table.index.get(pod.node_name)
        if row is not None:
            feasible[row] = True
        return Filtered.single(feasible, "node(s) didn't match the requested node name")
