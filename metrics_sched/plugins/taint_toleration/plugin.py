"""TaintToleration: NoSchedule/NoExecute taints must be tolerated; fewer untolerated
PreferNoSchedule taints score higher. Evaluated once per distinct taint set, not per node."""

from __future__ import annotations

from metrics_sched.framework import (
    Batchable,
    BatchScope,
    ClusterEvent,
    CycleState,
    Filtered,
    FilterPlugin,
    FloatArray,
    IntArray,
    NodeTable,
    Normalized,
    PodInfo,
    Reads,
    ScorePlugin,
    max_normalize,
    tolerated_rows,
    untolerated_preferred,
)


class TaintToleration(FilterPlugin, ScorePlugin, Batchable):
    name = "TaintToleration"
    node_local = True  # the node's taints
    normalized = Normalized.COMPLETE  # max_normalize (reversed) of taint counts
    normalize_by_top = True  # max_normalize
    events = frozenset({ClusterEvent.NODE_ADDED, ClusterEvent.NODE_TAINTS})

    def batch_scope(self, pod: PodInfo) -> BatchScope | None:
        """Opportunistic batching: reads the node's taints."""
        return BatchScope(Reads.NODE)

    def filter(self, cycle: CycleState, pod: PodInfo, table: NodeTable) -> Filtered:
        return Filtered.single(tolerated_rows(pod, table), "node(s) had untolerated taint(s)")

    def row_local_scores(self) -> bool:
        return True  # the row's taints

    def score(self, cycle: CycleState, pod: PodInfo, table: NodeTable, rows: IntArray) -> FloatArray:
        result: FloatArray = untolerated_preferred(pod, table)[rows]
        return result

    def normalize(self, scores: FloatArray) -> FloatArray:
        return max_normalize(scores, reverse=True)
