"""A pod's tolerations against every node's taints at once, one check per distinct taint set.

TaintToleration filters and scores with these; PodTopologySpread reads the same tolerated rows for its
nodeTaintsPolicy: Honor. Both go through one memo per table, so neither computes what the other already has.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from metrics_sched.model.podinfo import PodInfo
from metrics_sched.state.node_table import BoolArray, FloatArray, NodeTable, Taint

__all__ = ["tolerated_rows", "untolerated_preferred"]


def _tolerated(pod: PodInfo, taint: Taint) -> bool:
    return any(t.tolerates(taint.key, taint.value, taint.effect) for t in pod.tolerations)


class _PerTolerations:
    """Per table, arrays that depend only on the rows' taint sets and a pod's tolerations (most pods have the
    same, usually none): computed once per taint change instead of once per cycle. Read-only."""

    LIMIT = 64  # distinct tolerations kept per taint state

    def __init__(self) -> None:
        self._tables: weakref.WeakKeyDictionary[NodeTable, tuple[tuple[int, int], dict[Any, Any]]] = (
            weakref.WeakKeyDictionary())

    def get(self, table: NodeTable, key: Any, compute: Callable[[], npt.NDArray[Any]]) -> npt.NDArray[Any]:
        state = (table.taints_generation, table.capacity)
        held = self._tables.get(table)
        if held is None or held[0] != state:
            held = self._tables[table] = (state, {})
        arrays = held[1]
        found = arrays.get(key)
        if found is None:
            if len(arrays) >= self.LIMIT:
                arrays.clear()
            found = arrays[key] = compute()
            found.flags.writeable = False
        # No cast(npt.NDArray[Any], ...): its first argument is evaluated at run time, ~20 µs a call for the alias.
        return found


_MEMO = _PerTolerations()


def tolerated_rows(pod: PodInfo, table: NodeTable) -> BoolArray:
    """Rows whose NoSchedule/NoExecute taints the pod all tolerates (one check per distinct taint set; kept per
    taint state and tolerations). Read-only: copy before changing it."""
    def compute() -> BoolArray:
        ok_sets = np.array([
            all(_tolerated(pod, t) for t in taints if t.effect in ("NoSchedule", "NoExecute"))
            for taints in table.taint_sets
        ], dtype=bool)
        rows: BoolArray = ok_sets[table.taint_set]
        return rows
    return cast(BoolArray, _MEMO.get(table, ("tolerated", pod.tolerations), compute))


def untolerated_preferred(pod: PodInfo, table: NodeTable) -> FloatArray:
    """Per row, how many PreferNoSchedule taints the pod does not tolerate (kept as tolerated_rows is).
    Read-only: index it, do not change it."""
    def compute() -> FloatArray:
        untolerated = np.array([
            sum(1 for t in taints if t.effect == "PreferNoSchedule" and not _tolerated(pod, t))
            for taints in table.taint_sets
        ], dtype=np.float64)
        per_row: FloatArray = untolerated[table.taint_set]
        return per_row
    kept: FloatArray = _MEMO.get(table, ("untolerated", pod.tolerations), compute)
    return kept
