"""Opportunistic batching as a plugin sees it: the opt-in `Batchable` protocol and what a plugin answers with.

Two pods of the same template get the same verdict and the same scores from every plugin wherever the cluster is
the same, so the second one may reuse the first one's cycle for every node that has not changed since (the engine:
framework.runtime.batching). A plugin takes part by subclassing `Batchable` and saying, per pod, what of the cluster
its verdict for one node reads (`batch_scope`: a `BatchScope` of `Reads`), or that it cannot say (None: that pod is
not batched). The other hooks have safe defaults and only make a batched cycle cheaper.

A plugin that is not Batchable (a third-party one written without batching in mind) keeps batching on for the rest
of its profile: it is treated as reading the whole cluster (Reads.CLUSTER), so a batched cycle runs its PreFilter,
PreScore and Score afresh, over every candidate; only when its Filter has something to check (its PreFilter did
not skip) is the pod refused, counted per plugin (metrics_sched_batch_refusals_total). One that defines
`batch_scope` without listing Batchable (written before the protocol) is taken at its word where no other hook is
asked of it (a Filter reading neither the pods nor the ledger on a node, no Score).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from metrics_sched.framework.cycle_state import CycleState
from metrics_sched.framework.interfaces import Filtered, FilterPlugin
from metrics_sched.model.podinfo import PodInfo
from metrics_sched.state.node_table import BoolArray, IntArray, NodeTable

__all__ = ["MAX_DIRTY", "BatchScope", "Batchable", "Reads", "has_only_local_volumes"]

# More changed rows than this since a batch: the full cycle is as cheap, so a batched cycle re-scores at most this
# many and the scorers size their few-rows paths to it (metric_score._FEW_SCORED).
MAX_DIRTY = 64


class Reads(enum.Flag):
    """What a plugin's Filter / Score verdict for one node reads, besides the pod (the batcher's invalidation).

    NONE      nothing of the cluster (pod-only, e.g. a PreFilter that skips)
    NODE      that node's own object (labels, taints, allocatable, images, readiness): any node change
              (a node added, removed or updated) ends every batch
    PODS      the pods placed on that node (requests, ports): the node is re-evaluated after an assume,
              forget or pod event on it
    LEDGER    the in-flight ledger's entries on that node: as PODS (an entry comes with an assume); an entry
              removed or aged out ends every batch
    TELEMETRY the telemetry cache: a new cache generation, or a value going stale, ends every batch
    CLUSTER   anything beyond that node (domain counts, other nodes' pods, volumes, workloads): the plugin's
              PreFilter, PreScore and Score run afresh in every batched cycle, over every candidate; a
              Filter that is not skipped makes the pod unbatchable
    """

    NONE = 0
    NODE = enum.auto()
    PODS = enum.auto()
    LEDGER = enum.auto()
    TELEMETRY = enum.auto()
    CLUSTER = enum.auto()


@dataclass(frozen=True)
class BatchScope:
    """A plugin's answer to "may pods like this one be batched": what it reads, and which metrics (TELEMETRY),
    whose freshness bounds how long a batch may live."""

    reads: Reads
    metrics: tuple[str, ...] = ()
    filtering: Reads | None = None  # what its Filter reads, when less than `reads` (None: the same)
    # State beyond the node the verdict depends on, as a cheap token that changes whenever that state does (e.g.
    # a generation): a batch is used only while it is the same.
    token: Callable[[], Hashable] | None = field(default=None, compare=False)

    @property
    def filter_reads(self) -> Reads:
        return self.reads if self.filtering is None else self.filtering


class Batchable:
    """The opt-in batching protocol: a plugin class lists it among its bases and implements `batch_scope`.

    The filter hooks (filter_rows, reasons_on_row) are asked only of a FilterPlugin, the score hooks
    (normalize_by_top, row_local_scores, scores_kept_without) only of a ScorePlugin; their defaults are the safe
    answers (derived from filter(); False: re-score). A score plugin that reads the cluster and can keep a batch's
    scores up to date itself also implements IncrementalScorer."""

    # normalize() maps each raw value with the highest of them alone (top_score: max_normalize's scale), so
    # candidates that leave a batch move no other normalised value while the highest stays (the batch's drop).
    # tests/unit/test_score_promises.py holds every built-in plugin that says so to it.
    normalize_by_top: ClassVar[bool] = False

    def batch_scope(self, pod: PodInfo) -> BatchScope | None:
        """What this plugin's verdict on one node reads of the cluster for `pod`, so that pods of the same template
        may reuse a cycle; None: it cannot say, and the pod is never batched."""
        raise NotImplementedError

    def filter_rows(self, cycle: CycleState, pod: PodInfo, table: NodeTable, rows: IntArray) -> BoolArray:
        """filter()'s verdict on `rows` only (a batched cycle re-checks the nodes that changed); override when a
        plugin can answer for a few rows without a pass over the table."""
        return np.asarray(self._filter(cycle, pod, table).feasible[rows], dtype=bool)

    def reasons_on_row(self, cycle: CycleState, pod: PodInfo, table: NodeTable, row: int) -> frozenset[str] | None:
        """filter()'s verdict on one row: None when it lets the row through, else the reasons it lists the row
        under (a batched cycle counts a node that filled up); override when a plugin can answer for one row
        without a pass over the table."""
        verdict = self._filter(cycle, pod, table)
        if verdict.feasible[row]:
            return None
        return frozenset(reason for reason, rows in verdict.reasons.items() if rows[row])

    def row_local_scores(self) -> bool:
        """Whether score() gives each row a value read from that row alone (its node, its pods, its telemetry),
        never from the other rows scored (a minmax scale over them, a count over the candidates): a batch that
        loses a candidate then keeps the others' raw scores. False re-scores them (the safe answer)."""
        return False

    def scores_kept_without(self, table: NodeTable, rows: IntArray, gone: IntArray) -> bool:
        """For a plugin whose scores read the candidates (row_local_scores False) and whose score() over the
        candidate `rows` gave a batch its raw scores (nothing it reads has changed since): whether score() over
        the candidates left when the rows `gone` leave gives the others the same raw scores (e.g. a minmax scale
        whose lowest and highest values are elsewhere). False re-scores them (the safe answer)."""
        return False

    def _filter(self, cycle: CycleState, pod: PodInfo, table: NodeTable) -> Filtered:
        assert isinstance(self, FilterPlugin), "the filter hooks are asked only of a FilterPlugin"
        return self.filter(cycle, pod, table)


# Volumes a pod carries that no volume plugin checks against the cluster (no claim, no disk, no limit).
_LOCAL_VOLUMES = frozenset({"configMap", "secret", "emptyDir", "downwardAPI", "projected"})


def has_only_local_volumes(pod: PodInfo) -> bool:
    """The volume plugins skip such a pod: nothing of it is checked against claims, disks or attach limits (their
    batch_scope answers for it)."""
    for volume in (pod.raw.get("spec") or {}).get("volumes") or ():
        if not isinstance(volume, Mapping) or not any(key in volume for key in _LOCAL_VOLUMES):
            return False
    return True
