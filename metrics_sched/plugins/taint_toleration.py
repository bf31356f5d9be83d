"""TaintToleration: NoSchedule/NoExecute taints must be tolerated; fewer untolerated
PreferNoSchedule taints score higher. Evaluated once per distinct taint set, not per node."""

from __future__ import annotations

import numpy as np

from metrics_sched.framework import (
    ClusterEvent,
    CycleState,
    Filtered,
    FilterPlugin,
    ScorePlugin,
    max_normalize,
)
from metrics_sched.model.podinfo import PodInfo
from metrics_sched.state.node_table import BoolArray, FloatArray, IntArray, NodeTable, Taint


def _tolerated(pod: PodInfo, taint: Taint) -> bool:
    return any(t.tolerates(taint.key, taint.value, taint.effect) for t in pod.tolerations)


def tolerated_rows(pod: PodInfo, table: NodeTable) -> BoolArray:
    """Rows whose NoSchedule/NoExecute taints the pod all tolerates (one check per distinct taint set)."""
    ok_sets = np.array([
        all(_tolerated(pod, t) for t in taints if t.effect in ("NoSchedule", "NoExecute"))
        for taints in table.taint_sets
    ], dtype=bool)
    result: BoolArray = ok_sets[table.taint_set]
    return result


class TaintToleration(FilterPlugin, ScorePlugin):
    name = "TaintToleration"
    events = frozenset({ClusterEvent.NODE_ADDED, ClusterEvent.NODE_TAINTS})

    def filter(self, cycle: CycleState, pod: PodInfo, table: NodeTable) -> Filtered:
        return Filtered.single(tolerated_rows(pod, table), "node(s) had untolerated taint(s)")

    def score(self, cycle: CycleState, pod: PodInfo, table: NodeTable, rows: IntArray) -> FloatArray:
        untolerated = np.array([
            sum(1 for t in taints if t.effect == "PreferNoSchedule" and not _tolerated(pod, t))
            for taints in table.taint_sets
        ], dtype=np.float64)
        result: FloatArray = untolerated[table.taint_set[rows]]
        return result

    def normalize(self, scores: FloatArray) -> FloatArray:
        return max_normalize(scores, reverse=True)
