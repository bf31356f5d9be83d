"""Running one plugin's extension points the way the framework does, for table-driven plugin tests."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from metrics_sched.framework import Code, CycleState, Filtered, NodeTable, Status
from metrics_sched.model.podinfo import PodInfo, parse_pod
from metrics_sched.state.cluster_state import ClusterState
from metrics_sched.state.node_table import FloatArray, IntArray

Obj = Mapping[str, Any]


class ConstraintPlugin(Protocol):
    """A plugin at PreFilter, Filter, PreScore and Score (InterPodAffinity, PodTopologySpread)."""

    def pre_filter(self, cycle: CycleState, pod: PodInfo) -> Status: ...

    def filter(self, cycle: CycleState, pod: PodInfo, table: NodeTable) -> Filtered: ...

    def pre_score(self, cycle: CycleState, pod: PodInfo, table: NodeTable, rows: IntArray) -> Status: ...

    def score(self, cycle: CycleState, pod: PodInfo, table: NodeTable, rows: IntArray) -> FloatArray: ...

    def normalize(self, scores: FloatArray) -> FloatArray: ...


def filter_reasons(state: ClusterState, plugin: ConstraintPlugin, incoming: Obj,
                   names: Sequence[str]) -> tuple[Code, list[str | None]]:
    """PreFilter's code, then per node the first reason the Filter gives (None: the node passes)."""
    info = parse_pod(incoming)
    cycle = CycleState()
    code = plugin.pre_filter(cycle, info).code
    verdict = plugin.filter(cycle, info, state.table)
    out: list[str | None] = []
    for name in names:
        row = state.table.index[name]
        out.append(None if verdict.feasible[row] else
                   next(reason for reason, mask in verdict.reasons.items() if mask[row]))
    return code, out


def normalized_scores(state: ClusterState, plugin: ConstraintPlugin, incoming: Obj,
                      names: Sequence[str]) -> tuple[Code, list[int] | None]:
    """PreScore's code, then (unless it skipped) the normalised scores of the named (feasible) nodes."""
    info = parse_pod(incoming)
    cycle = CycleState()
    rows = np.array([state.table.index[n] for n in names], dtype=np.int64)
    code = plugin.pre_score(cycle, info, state.table, rows).code
    if code == Code.SKIP:
        return code, None
    raw = plugin.score(cycle, info, state.table, rows)
    return code, [int(s) for s in plugin.normalize(np.asarray(raw, dtype=np.float64))]
