"""A batch (one template's stored cycle and what it was computed against), the batching figures, and the small
pieces every step of a batched cycle shares."""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

from metrics_sched.framework.batchable import Batchable, Reads
from metrics_sched.framework.cycle_state import CycleState
from metrics_sched.framework.handle import Handle
from metrics_sched.framework.interfaces import FilterPlugin, PreFilterPlugin, PreScorePlugin
from metrics_sched.framework.runtime.batching.terms import Term
from metrics_sched.framework.runtime.batching.totals import Stages
from metrics_sched.framework.runtime.results import CycleResult, FilterStep
from metrics_sched.framework.status import Code, Status
from metrics_sched.model.podinfo import PodInfo
from metrics_sched.state.node_table import FloatArray, IntArray, NodeTable

__all__ = ["CHANGES_ON_ROW", "MAX_GONE", "MAX_TEMPLATES", "STALE_MARGIN", "Batch", "BatchStats", "BatchableFilter",
           "Recheck", "copied", "ledger_changes", "light_result", "may_move", "prototype_of", "same_answer",
           "validity"]

# Batches kept (templates interleave: several Deployments scaling at once); the least recently used goes first.
MAX_TEMPLATES = 16

# At most this many candidates leave a batch in one cycle (drop); more: the full cycle.
MAX_GONE = 4
# A batch ends this long before a metric value it read goes stale (freshness is judged against `now` with a
# subtraction; the margin covers its rounding).
STALE_MARGIN = 1e-3
CHANGES_ON_ROW = Reads.PODS | Reads.LEDGER



class BatchableFilter(FilterPlugin, Batchable):
    """For the type checker only: a filter plugin with the batching hooks (no plugin derives from it)."""


# A filter re-checked on changed rows (a Batchable one: a filter that is not is never batched): it reads pods; the
# ledger metrics it reads.
Recheck = tuple[BatchableFilter, bool, tuple[str, ...]]


@dataclass
class Batch:
    template: Hashable
    validity: tuple[int | bool, ...]
    deadline: float
    stamp: int  # NodeTable.pod_stamp when the cycle it reuses began
    cycle: CycleState
    filter_skipped: frozenset[str]
    score_skipped: frozenset[str]
    rows: IntArray
    position: IntArray  # per table row (the capacity it was stored at): its position in `rows`, -1 if not there
    terms: list[Term]
    total: FloatArray
    rejections: Counter[str]
    rejected_by: frozenset[str]
    recheck: list[Recheck]  # the filters re-run on changed rows (as Term)
    ledger: dict[str, int]  # InFlightLedgerStore.appended of the metrics read, when the batch was last used
    cluster_pre_filters: list[tuple[PreFilterPlugin, bool]]  # re-run each cycle: (plugin, it answered Skip)
    cluster_pre_scores: list[PreScorePlugin]
    tokens: list[tuple[Callable[[], Hashable], Hashable]]  # BatchScope.token, and what it was
    # The totals' pieces, kept up to date; None while no term may move everywhere (the totals are patched per row:
    # drop() builds them for the moment when a candidate's leaving moves a term).
    stages: Stages | None
    # The stored cycle's filters (CycleResult.filter_trace): the feasible mask after each and its reasons, so a
    # changed row that is not a candidate can be told to be turned down, and counted, as before
    # (still_turned_down); a row that left the batch, as the filter that turned it down then does.
    trace: list[FilterStep]
    # Per trace position, a filter whose verdict a pod change on a row may move (it reads pods, or the ledger of
    # these metrics), else None.
    moves: list[Recheck | None]
    # The positions of the terms that may move (scored afresh, kept incrementally, or reading pods or the ledger):
    # the others keep their values for as long as the batch lives.
    active: list[int]
    # The fields every batched cycle's result starts from (light_result): the stored cycle's, which no code
    # changes in place (a result's mutable fields are fresh copies).
    prototype: tuple[dict[str, Any], tuple[str, ...]]


@dataclass
class BatchStats:
    """For the bench and tests: cycles reused, full cycles that stored a batch, and why a batch was not used."""

    batched: int = 0
    full: int = 0  # cycles run in full (the pod not batchable, no batch for its template, or its batch refused)
    stored: int = 0
    totals_recomputed: int = 0  # batched cycles whose normalisation moved (every candidate's total computed)
    past_non_candidates: int = 0  # batched cycles after pods changed on rows that are not candidates (still not)
    many_changed: int = 0  # batched cycles with more than FEW changed candidates (compared and patched in numpy)
    dropped: int = 0  # candidates that left a batch because they no longer fit (drop)
    cut_constant: int = 0  # terms cut to the candidates left instead of joined around those gone (Term.constant)
    # Per plugin: the times its term was normalised (or scored) again when candidates left a batch (the others keep
    # their values: each normalised alone, the highest or the extremes stayed)
    renormalised: Counter[str] = field(default_factory=Counter)
    refused: Counter[str] = field(default_factory=Counter)  # by reason (a plugin's: "<plugin> <reason>")
    # By (plugin, reason), the plugin "" when the refusal is no plugin's: metrics_sched_batch_refusals_total.
    refusals: Counter[tuple[str, str]] = field(default_factory=Counter)

    def refuse(self, reason: str, plugin: str = "") -> None:
        """One cycle that did not reuse or store a batch, and why (a plugin's answer, or the cluster's state)."""
        self.refused[f"{plugin} {reason}" if plugin else reason] += 1
        self.refusals[plugin, reason] += 1


# CycleResult's fields each batched cycle sets afresh (all its mutable ones, today): never the prototype's.
OWN_FIELDS = ("pod", "nodes_total", "cycle", "timings", "terms", "rejections", "rejected_by", "skipped",
               "filter_trace")


def prototype_of(profile: str, stored: CycleResult) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The fields of a batched cycle's result before the cycle (those a fresh CycleResult has, with the stored
    cycle's candidates and skipped filters), copied into each result's __dict__ (light_result); and the names of
    any other field whose default is a mutable container (one added to CycleResult later): copied per result."""
    fields = dict(vars(CycleResult(pod=stored.pod, profile=profile)))
    fields.update(feasible_rows=stored.feasible_rows, filter_skipped=stored.filter_skipped)
    for name in OWN_FIELDS:
        del fields[name]
    mutable = tuple(name for name, value in fields.items() if isinstance(value, list | dict | set))
    return fields, mutable


def light_result(batch: Batch, pod: PodInfo, nodes_total: int) -> CycleResult:
    """CycleResult(pod=pod, profile=..., nodes_total=..., cycle=<a clone of the batch's>) with the batch's
    candidates, rejection counts and skipped plugins, as its constructor and field assignments would make it, at a
    tenth of the cost (the constructor's default factories were a tenth of a batched cycle): the prototype's
    immutable values are shared, every mutable one is a new object."""
    result: CycleResult = object.__new__(CycleResult)
    prototype, mutable = batch.prototype
    fields = prototype.copy()
    for name in mutable:
        fields[name] = copy.copy(fields[name])
    rejections = copied(batch.rejections)
    fields.update(pod=pod, nodes_total=nodes_total, cycle=batch.cycle.clone(), timings=[], terms=[],
                  rejections=rejections, rejected_by=set(batch.rejected_by), skipped=set(batch.score_skipped),
                  filter_trace=[])
    result.__dict__ = fields
    return result


def copied(counter: Counter[str]) -> Counter[str]:
    """A copy of `counter`: Counter(counter) counts its keys one by one, through Python."""
    out: Counter[str] = Counter.__new__(Counter)
    dict.update(out, counter)
    return out


def may_move(entry: Recheck | None, ledger: dict[str, int]) -> BatchableFilter | None:
    """The filter of a re-checked entry whose verdict on a row a pod change may have moved since the batch was last
    used (it reads pods, or a ledger metric that took a placement: `ledger`), else None."""
    if entry is None:
        return None
    plugin, pods, metrics = entry
    return plugin if pods or (ledger and not ledger.keys().isdisjoint(metrics)) else None



def same_answer(status: Status, skipped: bool) -> bool:
    """A re-run PreFilter / PreScore answered as it did for the batch: Skip again, or Success again."""
    return status.code == Code.SKIP if skipped else status.code == Code.SUCCESS




def ledger_changes(batch: Batch, appended: dict[str, int]) -> dict[str, int]:
    """The ledger metrics the batch reads that took a placement since it was last used (InFlightLedgerStore.appended
    now), with their counts."""
    changed: dict[str, int] = {}
    for metric, seen in batch.ledger.items():
        now = appended.get(metric, 0)
        if now != seen:
            changed[metric] = now
    return changed


def validity(handle: Handle, table: NodeTable) -> tuple[int | bool, ...]:
    """What a batch is valid for as long as it is the same: the table's shape and generations, the telemetry's, the
    ledger's removals."""
    return (table.capacity, table.rows_generation, table.nodes_generation, table.labels_generation,
            table.images_generation, len(table.resources), handle.metrics.generation, handle.ledger.removals,
            len(handle.ledger) > 0)
