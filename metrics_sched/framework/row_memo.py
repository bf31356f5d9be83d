"""Per-row scores kept between cycles and patched on the rows whose pods changed.

A score that is an elementwise function of a node's own row (its allocatable, its requested resources) and of a
few numbers from the pod (its requests) need not be recomputed over every node each cycle: between two cycles
only the rows that took or lost a pod change (NodeTable.row_pod_stamp), usually the one the last pod went to.
RowScores keeps the function's values over every row per pod key and recomputes only those rows; the function
being elementwise, the values are the ones a computation over any subset of rows gives, bit for bit
(tests/unit/test_row_memo.py holds NodeResourcesFit and NodeResourcesBalancedAllocation to that).

Anything else that could change a row's value (a node added, removed or changed, rows reused, the table grown, a
resource column added) drops the kept values; they are computed afresh at the next cycle.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass

import numpy as np

from metrics_sched.state.node_table import FloatArray, IntArray, NodeTable

__all__ = ["RowScores"]

# Up to this many changed rows are recomputed one at a time in Python floats (compute_one).
_FEW = 4


@dataclass
class _Kept:
    validity: tuple[int, int, int, int, int]
    stamp: int  # NodeTable.pod_stamp the values are up to date with
    values: FloatArray  # over every row (absent rows included: their value is never read)


class RowScores:
    """One plugin's kept per-row values, per pod key (the least recently used of `limit` keys goes first)."""

    def __init__(self, limit: int = 16) -> None:
        self.limit = limit
        self._kept: OrderedDict[Hashable, _Kept] = OrderedDict()
        self._table: NodeTable | None = None

    def scores(self, key: Hashable, table: NodeTable, rows: IntArray,
               compute: Callable[[IntArray], FloatArray],
               compute_one: Callable[[int], float] | None = None) -> FloatArray:
        """compute(rows), from values kept for `key` and recomputed on the rows whose pods changed since.

        compute_one(row), when given, is compute() of one row in Python floats (the same IEEE operations in the
        same order, so the same double): a placement changes one row, and a dozen numpy calls on a one-row array
        cost several times the arithmetic."""
        if compute_one is not None and rows.shape[0] <= _FEW:
            # A few rows (a batched cycle re-scores the one a placement changed): computed from the table as it is,
            # the kept values left behind (their stamp says what they miss: the next call over many rows patches
            # them), with none of the bookkeeping, which costs several times the arithmetic.
            return np.array([compute_one(row) for row in rows.tolist()], dtype=np.float64)
        if table is not self._table:
            self._kept.clear()
            self._table = table
        validity = (table.nodes_generation, table.rows_generation, table.capacity, len(table.resources),
                    table.size)
        kept = self._kept.get(key)
        if kept is None or kept.validity != validity:
            every = np.arange(table.capacity, dtype=np.int64)
            kept = _Kept(validity, table.pod_stamp, np.asarray(compute(every), dtype=np.float64))
            self._kept[key] = kept
            if len(self._kept) > self.limit:
                self._kept.popitem(last=False)
        else:
            self._kept.move_to_end(key)
            if kept.stamp != table.pod_stamp:
                changed = table.rows_changed_since(kept.stamp)
                if compute_one is not None and changed.size <= _FEW:
                    values = kept.values
                    for row in changed.tolist():
                        values[row] = compute_one(row)
                elif changed.size:
                    kept.values[changed] = compute(changed)
                kept.stamp = table.pod_stamp
        result: FloatArray = kept.values[rows]
        return result
