"""Score plugins that read the cluster (Reads.CLUSTER) and can keep a batch's scores up to date themselves.

A batched cycle re-runs such a plugin's PreScore and Score over every candidate, because its scores read
other nodes (domain counts). Most of them only read per-row counts summed per domain: after a placement only
the counts of the rows that changed move, and the scores are a gather from the per-domain sums. A plugin
that can say so implements `IncrementalScorer`: when the batcher stores a batch it asks for an
`IncrementalScores`, and each batched cycle then asks it for the raw scores now (what PreScore and Score would
give, bit for bit), or None, and the batch is refused (the full cycle runs).
"""

from __future__ import annotations

import abc

import numpy as np

from metrics_sched.framework.cycle_state import CycleState
from metrics_sched.model.podinfo import PodInfo
from metrics_sched.state.node_table import BoolArray, FloatArray, IntArray, NodeTable

__all__ = ["IncrementalScorer", "IncrementalScores", "row_positions"]


def row_positions(rows: IntArray, size: int) -> IntArray:
    """Per table row (`size` of them), its position among a batch's candidate `rows` (-1: not a candidate)."""
    position: IntArray = np.full(size, -1, dtype=np.int64)
    position[rows] = np.arange(rows.size, dtype=np.int64)
    return position


class IncrementalScores(abc.ABC):
    """One batch's scores of one plugin, over the batch's candidate rows, kept from the counts they read."""

    @abc.abstractmethod
    def rescore(self, cycle: CycleState, pod: PodInfo, table: NodeTable, changed: IntArray) -> FloatArray | None:
        """The raw scores over the batch's rows now, as the plugin's PreScore (which also writes its cycle state
        into `cycle`) and Score would give them; None when what they read changed beyond the counts (e.g. the
        pod's constraints): the batch is then not used. Called only while the batch's nodes are unchanged;
        `changed`: the rows whose pods changed since the scores were last kept (NodeTable.row_pod_stamp, which
        every placement, removal, relabelling and forget moves), ascending: no other row's counts moved."""

    def narrowed(self, table: NodeTable, keep: BoolArray, rows: IntArray,
                 position: IntArray) -> IncrementalScores | None:
        """The same scores over the batch's rows where `keep` (candidates left a batch: batching.drop): `rows`, with
        their row_positions `position` (shared with the batch, read-only); this object's state handed over (it is
        not used again: it may be changed in place and returned), when that is cheaper than preparing them afresh;
        None: the batcher prepares them afresh (PreScore, incremental_scores). Counts of rows changed since the last
        rescore are followed at the next one, as before."""
        return None

    def normalized(self) -> tuple[FloatArray, bool] | None:
        """What normalize_scores (the plugin's normalize(), held to its promise) gives for the raw scores the last
        rescore returned, and whether they have NaN, when the kept scores give it cheaper, bit for bit; None: the
        batcher normalises the raw scores itself."""
        return None


class IncrementalScorer(abc.ABC):
    """A Reads.CLUSTER score plugin whose batched scores can be kept up to date (its PreScore, if any, only
    prepares them: the batcher then calls neither)."""

    @abc.abstractmethod
    def incremental_scores(self, cycle: CycleState, pod: PodInfo, table: NodeTable,
                           rows: IntArray) -> IncrementalScores | None:
        """For a full cycle that just scored `rows` (its state in `cycle`): the scores to keep, or None."""
