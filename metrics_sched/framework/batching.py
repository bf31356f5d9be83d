"""Opportunistic batching (kube-scheduler's KEP-5598, made exact): a pod of the same template as one scheduled
before reuses that cycle's feasibility and scores, and only what changed since is evaluated again.

kube-scheduler 1.36 keeps the sorted node list of the last cycle and hands the next compatible pod its head
once the last chosen node is full (1 pod per node, within 500 ms), and refuses pods with inter-pod or
topology spread constraints (default ones included). Here the reuse is exact: the decision is the one the
full cycle would make, bit for bit, scores, candidates and rejection counts included (tests/unit/test_batching).

A batch (one per template, the last MAX_TEMPLATES; stored from a template's second full cycle within as
many templates, so a stream that rarely repeats pays nothing) holds the cycle state after PreFilter and
PreScore, the candidate rows, each score term (raw, normalised, evidence), the weighted totals, the
rejection counts, and what it was computed against. What each plugin reads (signature.Reads, from
`Plugin.batch_scope`; None from any consulted plugin: no batch) decides what a batched cycle redoes:
- refused (the full cycle runs and stores a new batch) when anything global changed: a node added, removed
  or changed (NodeTable.nodes_generation), rows, labels, images, resource columns, the telemetry generation,
  a metric value about to go stale (TELEMETRY readers), a ledger entry removed, a plugin's token (e.g. the
  inter-pod terms placed pods carry), nominated pods to hold room for, or sampling (percentage below 100);
- the rows whose pods changed since (NodeTable.rows_changed_since: the last placement, forgets, pod events)
  are re-checked with the filters that read pods (or the ledger, when it took a placement for their metrics),
  through `FilterPlugin.filter_rows`; a candidate that no longer fits (a node filled up) leaves the batch as the
  full cycle would find it (Batcher._drop: counted under the first filter that now turns it down, and every term
  scored again over the candidates left; more than MAX_GONE at once end the batch). A changed row that is not a
  candidate keeps the batch while the filters before the one that turned it down first (the stored cycle's filter
  trace: the one its rejection is counted under) still let it through (filter_rows) and that one still turns it
  down for the same reasons (asked again only when its verdict could have moved: it reads pods, or a ledger
  metric that took a placement): it is turned down, and counted, as before;
- plugins reading other nodes (Reads.CLUSTER: PodTopologySpread with constraints, ZoneSpread, inter-pod
  terms of the pod's own) re-run PreFilter, PreScore and Score in full, over every candidate; a Filter of
  theirs that is not skipped makes the pod unbatchable. Those whose scores are per-row counts summed per
  domain (framework.incremental: PodTopologySpread's ScheduleAnyway constraints, ZoneSpread) keep them
  instead: the counts of the rows that moved update the domain sums, the scores are a gather;
- the changed rows are re-scored by the score plugins that read pods or the ledger; a term whose normalize()
  maps each value alone (a clip, the identity) is normalised on those rows only, any other over every
  candidate with its own normalize(), as the cycle does; the totals are recomputed on the changed rows only
  unless a normalised value moved elsewhere, and then from the first term that may move everywhere on (the
  batch keeps the sum of the terms before it, and each later term's addend: _Stages);
- the pick is the cycle's (Framework.choose: Placement plugins, highest total, the seeded random tie-break).
Reserve, Permit and binding run per pod as always, on a clone of the stored cycle state.
"""

from __future__ import annotations

import copy
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any, TypeVar

import numpy as np

from metrics_sched.framework.cycle_state import CycleState
from metrics_sched.framework.incremental import IncrementalScorer, IncrementalScores, row_positions
from metrics_sched.framework.interfaces import (
    FilterPlugin,
    Normalized,
    Plugin,
    PreFilterPlugin,
    PreScorePlugin,
    ScoreDetail,
    ScorePlugin,
    top_score,
    unchanged,
)
from metrics_sched.framework.runtime import (
    CycleResult,
    FilterStep,
    Framework,
    ScoreTerm,
    first_rejecter,
    normalize_scores,
)
from metrics_sched.framework.scoring import weighted_mean_down, weighted_sums_down
from metrics_sched.framework.signature import MAX_DIRTY, BatchScope, Reads, template_of
from metrics_sched.framework.status import Code, Status
from metrics_sched.model.podinfo import PodInfo
from metrics_sched.state.node_table import BoolArray, FloatArray, IntArray, NodeTable
from metrics_sched.telemetry.cache import MetricCache

__all__ = ["BatchStats", "Batcher"]

# Batches kept (templates interleave: several Deployments scaling at once); the least recently used goes first.
MAX_TEMPLATES = 16
# At most this many changed rows are compared and patched one by one with Python floats (fewer numpy calls).
_FEW = 8
# At most this many candidates leave a batch in one cycle (Batcher._drop); more: the full cycle.
MAX_GONE = 4
# A batch ends this long before a metric value it read goes stale (freshness is judged against `now` with a
# subtraction; the margin covers its rounding).
STALE_MARGIN = 1e-3
_CHANGES_ON_ROW = Reads.PODS | Reads.LEDGER
# normalize() implementations that map each value on its own (a clip, the identity): a changed row's normalised
# value is then normalize() of its raw value alone, and no other row's moves. Compared by identity, so a plugin
# that overrides normalize() is normalised over every candidate again.
_PER_NODE_NORMALIZE = frozenset({ScorePlugin.normalize, unchanged})
_NO_ROWS: IntArray = np.zeros(0, dtype=np.int64)  # never written to
_Array = TypeVar("_Array", FloatArray, IntArray)
# A filter re-checked on changed rows: it reads pods; the ledger metrics it reads.
_Recheck = tuple[FilterPlugin, bool, tuple[str, ...]]


@dataclass(slots=True)
class _Term:
    term: ScoreTerm
    scorer: ScorePlugin
    cluster: bool  # scored afresh over every candidate in each batched cycle
    pods: bool  # reads the pods on a node: re-scored on the changed rows
    ledger: tuple[str, ...]  # the metrics whose in-flight entries it reads: re-scored on the changed rows when
    # the ledger took a placement for one of them
    gaps: bool  # the normalised values hold NaN (what the cycle's WeightedMean was told)
    per_node: bool  # its normalize() maps each value on its own
    # Its normalised values may move on rows that did not change: scored over every candidate, or re-scored on
    # the changed rows and normalised over every candidate (fixed at store time: _Term.of).
    everywhere: bool
    # Its normalize() is `unchanged` and it promises 0-100 (Normalized.COMPLETE: and never NaN): normalize_scores
    # gives its raw values back as they are, so a changed row's normalised value is its raw value.
    identity: bool
    # Kept up to date by the plugin (IncrementalScorer) instead of re-running its PreScore and Score.
    incremental: IncrementalScores | None = None
    # It never moves (not in _Batch.active), its raw and normalised values are each one double repeated, and
    # a candidate leaving keeps them (row-local scores, normalised alone or by the highest): the term over the
    # candidates left is its arrays' first values (views), where joining the blocks around the one gone copies them.
    # Set when the batch is stored (_constant), only kept through _drop's cut: a term with no preference (NodeAffinity,
    # TaintToleration, ImageLocality for most pods) is all zeros.
    constant: bool = False

    @classmethod
    def of(cls, term: ScoreTerm, scorer: ScorePlugin, cluster: bool, pods: bool, ledger: tuple[str, ...],
           gaps: bool, incremental: IncrementalScores | None) -> _Term:
        normalize = type(scorer).normalize
        per_node = normalize in _PER_NODE_NORMALIZE
        everywhere = cluster or (not per_node and (pods or bool(ledger)))
        identity = normalize is unchanged and scorer.normalized is not Normalized.UNCHECKED
        return cls(term, scorer, cluster, pods, ledger, gaps, per_node, everywhere, identity, incremental)


@dataclass
class _Stages:
    """The weighted totals in pieces, so a term whose normalised values moved everywhere costs one pass from it
    on: one matrix whose first row is what WeightedMean adds for the terms before the first that may move
    everywhere (the prefix) and each next row what it adds for one term from there (its part), so the totals are
    one reduction down the rows (numpy adds the rows of a C-contiguous matrix in order along axis 0: the same
    additions as WeightedMean's, in the same order), and the weight each row's total is divided by. Owned by the
    batch (never handed out), patched in place."""

    first: int  # the first term that may move everywhere (len(terms): none)
    matrix: FloatArray  # (1 + len(terms) - first, candidates): the prefix, then the parts of terms[first:]
    weights: FloatArray
    positive: bool = True  # every row has a weight (the usual case: a plain division)

    def weighed(self) -> None:
        """The weights changed."""
        self.positive = bool(self.weights.size == 0 or self.weights.min() > 0)


@dataclass
class _Batch:
    template: Hashable
    validity: tuple[int | bool, ...]
    deadline: float
    stamp: int  # NodeTable.pod_stamp when the cycle it reuses began
    cycle: CycleState
    filter_skipped: frozenset[str]
    score_skipped: frozenset[str]
    rows: IntArray
    position: IntArray  # per table row (the capacity it was stored at): its position in `rows`, -1 if not there
    terms: list[_Term]
    total: FloatArray
    rejections: Counter[str]
    rejected_by: frozenset[str]
    recheck: list[_Recheck]  # the filters re-run on changed rows (as _Term)
    ledger: dict[str, int]  # InFlightLedgerStore.appended of the metrics read, when the batch was last used
    cluster_pre_filters: list[tuple[PreFilterPlugin, bool]]  # re-run each cycle: (plugin, it answered Skip)
    cluster_pre_scores: list[PreScorePlugin]
    tokens: list[tuple[Callable[[], Hashable], Hashable]]  # BatchScope.token, and what it was
    # The totals' pieces, kept up to date; None while no term may move everywhere (the totals are patched per row:
    # _drop builds them for the moment when a candidate's leaving moves a term).
    stages: _Stages | None
    # The stored cycle's filters (CycleResult.filter_trace): the feasible mask after each and its reasons, so a
    # changed row that is not a candidate can be told to be turned down, and counted, as before
    # (_still_turned_down); a row that left the batch, as the filter that turned it down then does.
    trace: list[FilterStep]
    # Per trace position, a filter whose verdict a pod change on a row may move (it reads pods, or the ledger of
    # these metrics), else None.
    moves: list[_Recheck | None]
    # The positions of the terms that may move (scored afresh, kept incrementally, or reading pods or the ledger):
    # the others keep their values for as long as the batch lives.
    active: list[int]
    # The fields every batched cycle's result starts from (_light_result): the stored cycle's, which no code
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
    many_changed: int = 0  # batched cycles with more than _FEW changed candidates (compared and patched in numpy)
    dropped: int = 0  # candidates that left a batch because they no longer fit (Batcher._drop)
    cut_constant: int = 0  # terms cut to the candidates left instead of joined around those gone (_Term.constant)
    # Per plugin: the times its term was normalised (or scored) again when candidates left a batch (the others keep
    # their values: each normalised alone, the highest or the extremes stayed)
    renormalised: Counter[str] = field(default_factory=Counter)
    refused: Counter[str] = field(default_factory=Counter)


class Batcher:
    """One profile's batches; Framework.schedule hands it every pod when batching is on."""

    def __init__(self, framework: Framework) -> None:
        self.framework = framework
        self.stats = BatchStats()
        self._batches: list[_Batch] = []  # the most recently used last
        # The last templates seen: a batch is stored for a template seen again within MAX_TEMPLATES others, so a
        # stream of pods that rarely repeat (storing costs a little) never pays for batches it would not use.
        self._recent: OrderedDict[Hashable, None] = OrderedDict()
        consulted: dict[str, Plugin] = {}
        for plugin in (*framework.pre_filters, *framework.filters, *framework.pre_scores,
                       *(scorer for scorer, _ in framework.scores)):
            consulted.setdefault(plugin.name, plugin)
        self._consulted = list(consulted.values())

    # -- the cycle -------------------------------------------------------------------------------
    def schedule(self, pod: PodInfo, table: NodeTable) -> CycleResult:
        framework = self.framework
        stamp = table.pod_stamp  # before the cycle: whatever changes from here on is re-checked next time
        template = template_of(pod)
        if template is None or (framework.percentage < 100 and len(table) >= 100):
            self.stats.refused["pod not batchable"] += 1
            self.stats.full += 1
            return framework.schedule_unbatched(pod, table)
        batch = next((b for b in self._batches if b.template == template), None)
        if batch is not None:
            self._batches.remove(batch)
            result = self._batched(batch, pod, table, stamp)
            if result is not None:
                self.stats.batched += 1
                self._batches.append(batch)
                return result
        self.stats.full += 1
        result = framework.schedule_unbatched(pod, table)
        if self._seen_recently(template):
            self._store(template, pod, table, result, stamp)
        else:
            self.stats.refused["template not seen recently"] += 1
        return result

    def _seen_recently(self, template: Hashable) -> bool:
        recent = self._recent
        if template in recent:
            recent.move_to_end(template)
            return True
        recent[template] = None
        if len(recent) > MAX_TEMPLATES:
            recent.popitem(last=False)
        return False

    def _validity(self, table: NodeTable) -> tuple[int | bool, ...]:
        handle = self.framework.handle
        return (table.capacity, table.rows_generation, table.nodes_generation, table.labels_generation,
                table.images_generation, len(table.resources), handle.metrics.generation, handle.ledger.removals,
                len(handle.ledger) > 0)

    def _batched(self, batch: _Batch, pod: PodInfo, table: NodeTable, stamp: int) -> CycleResult | None:
        """The cycle from the batch, or None (refused: the caller runs the full cycle)."""
        framework = self.framework
        refused = self.stats.refused
        if batch.validity != self._validity(table):
            refused["cluster changed"] += 1
            return None
        if batch.deadline < np.inf:
            metrics = framework.handle.metrics
            if not isinstance(metrics, MetricCache) or metrics.clock() + STALE_MARGIN >= batch.deadline:
                refused["telemetry ageing"] += 1
                return None
        if framework.cluster.nominations.held_for(pod, table):
            refused["nominated pods"] += 1
            return None
        for token, seen in batch.tokens:
            if token() != seen:
                refused["cluster changed"] += 1
                return None
        rows = batch.rows
        # Every row whose pods changed (what the cluster-reading scorers count from), and those among the candidates.
        pods_changed = dirty = table.rows_changed_since(batch.stamp)
        positions = _NO_ROWS
        if dirty.size:
            if dirty.size > MAX_DIRTY:
                refused["many rows changed"] += 1
                return None
            positions = batch.position[dirty]
            if (positions.item(0) if positions.size == 1 else int(positions.min())) < 0:
                inside = positions >= 0
                if not self._still_turned_down(batch, pod, table, dirty[~inside]):
                    refused["changed row not a candidate"] += 1
                    return None
                dirty, positions = dirty[inside], positions[inside]
                self.stats.past_non_candidates += 1

        result = _light_result(batch, pod, len(table))
        cycle, clock, timings = result.cycle, time.perf_counter, result.timings
        for pre_filter, skipped in batch.cluster_pre_filters:
            started = clock()
            status = pre_filter.pre_filter(cycle, pod)
            timings.append((pre_filter.name, "PreFilter", clock() - started, status.code.value))
            if not _same(status, skipped):
                refused["cluster plugin changed"] += 1
                return None
        ledger = self._ledger_changes(batch) if batch.ledger else {}
        if dirty.size:
            fits: BoolArray | None = None
            for check in batch.recheck:
                plugin = _may_move(check, ledger)
                if plugin is not None:
                    verdict = np.asarray(plugin.filter_rows(cycle, pod, table, dirty), dtype=bool)
                    if not verdict.all():
                        fits = verdict if fits is None else fits & verdict
            if fits is not None:
                gone = dirty[~fits]
                if gone.size > MAX_GONE or not self._drop(batch, result, table, gone, ledger):
                    refused["candidate no longer fits"] += 1
                    return None
                self.stats.dropped += int(gone.size)
                dirty, rows = dirty[fits], batch.rows
                positions = batch.position[dirty]

        for pre in batch.cluster_pre_scores:
            started = clock()
            status = pre.pre_score(cycle, pod, table, rows)
            timings.append((pre.name, "PreScore", clock() - started, status.code.value))
            if not _same(status, pre.name in batch.score_skipped):
                refused["cluster plugin changed"] += 1
                return None

        rescored = self._rescore(batch, result, table, dirty, positions, ledger, pods_changed)
        if rescored is None:
            refused["cluster plugin changed"] += 1
            return None
        whole, moved, changed, regaps = rescored
        terms = batch.terms
        if changed and batch.stages is not None:  # else no term moves everywhere: never summed
            _restage(batch.stages, terms, changed, regaps, positions)
        if whole:
            assert batch.stages is not None  # `whole`: a term normalised over every candidate moved
            total = _staged_total(batch.stages)
        elif moved:
            total = batch.total.copy()
            if positions.size > _FEW:
                total[positions] = _rows_total(terms, positions)
            else:
                for position in positions.tolist():
                    total[position] = _row_total(terms, position)
        else:
            total = batch.total
        result.terms = [entry.term for entry in terms]
        result.total = total
        batch.total, batch.stamp = total, stamp
        if ledger:
            batch.ledger.update(ledger)
        if dirty.size > _FEW:
            self.stats.many_changed += 1
        framework.choose(result, table, rows)
        return result

    def _drop(self, batch: _Batch, result: CycleResult, table: NodeTable, gone: IntArray,
              ledger: dict[str, int]) -> bool:
        """Candidates whose pods changed and that no longer fit (a node filled up) leave the batch as the full
        cycle would find them: each counted under the reasons of the first filter that now turns it down, that
        filter's trace no longer passing it, the candidates without it. The terms lose its position: a term's
        normalised values are kept (the others') when its normalize() maps each value alone, or with the highest
        that stays (normalize_by_top), else normalised again over the candidates left; its raw scores are kept
        unless they may read the candidates (ScorePlugin.row_local_scores, scores_kept_without: a minmax scale
        whose extremes left), then scored again. Those kept incrementally are narrowed (or prepared afresh:
        PodTopologySpread's weights count the candidates), and, as every term read from the cluster, scored over
        every candidate by _rescore in this cycle: here their values are only kept in place. The totals' pieces
        lose the position too, those that moved written again (_narrowed_stages). In place, batch and result (its
        candidates and rejection counts); False: not possible (nothing would be left, or a plugin's answer
        changed), the caller refuses the batch."""
        framework, pod, cycle = self.framework, result.pod, result.cycle
        if gone.size >= batch.rows.size:
            return False  # nothing left: the full cycle (and its PostFilter)
        trace = list(batch.trace)
        rejections = _copied(batch.rejections)
        rejected_by = set(batch.rejected_by)
        for row in gone.tolist():
            at = np.array([row], dtype=np.int64)
            first, rejecter = 0, None  # the first filter that now turns it down, in the trace's order
            for position, check in enumerate(batch.moves):
                plugin = _may_move(check, ledger)
                if plugin is not None and not plugin.filter_rows(cycle, pod, table, at).all():
                    first, rejecter = position, plugin
                    break
            if rejecter is None:
                return False
            reasons = rejecter.reasons_on_row(cycle, pod, table, row)
            if reasons is None:
                return False  # its filter_rows and filter disagree: the full cycle's is the answer
            for reason in reasons:
                rejections[reason] += 1
            rejected_by.add(rejecter.name)
            step = trace[first]
            trace[first] = step._replace(reasons=_with_row(step.reasons, reasons, row, step.feasible.shape[0]))
            for position in range(first, len(trace)):
                step = trace[position]
                mask = step.feasible.copy()  # the stored cycle's result may still hold it
                mask[row] = False
                trace[position] = step._replace(feasible=mask)
        keep = np.ones(batch.rows.size, dtype=bool)
        keep[batch.position[gone]] = False
        # The positions gone, ascending: every array over the candidates loses them by joining the blocks between
        # them (_without), a few times cheaper than a boolean mask, and a drop narrows two per term.
        at = np.sort(batch.position[gone])
        rows = _without(batch.rows, at)
        positions = row_positions(rows, batch.position.shape[0])
        pre_scores = {pre.name: pre for pre in framework.pre_scores}
        moved: list[int] = []  # the terms whose normalised values are not the old ones without the rows gone
        for index, entry in enumerate(batch.terms):
            old, scorer = entry.term, entry.scorer
            if entry.incremental is not None:
                kept = entry.incremental.narrowed(table, keep, rows, positions)
                if kept is None:  # prepared afresh over the candidates left, as the full cycle does
                    pre = pre_scores.get(scorer.name)
                    if pre is not None and not _same(pre.pre_score(cycle, pod, table, rows),
                                                     scorer.name in batch.score_skipped):
                        return False
                    assert isinstance(scorer, IncrementalScorer)
                    kept = scorer.incremental_scores(cycle, pod, table, rows)
                    if kept is None:
                        return False
                entry.incremental = kept
            if entry.cluster:
                # Scored afresh over every candidate in this cycle anyway (_rescore): kept in place until then.
                entry.term = _narrowed_term(old, _without(old.raw, at), at)
                continue
            if entry.constant:  # the values it keeps are all the same: the first ones of each array
                left = old.raw.shape[0] - at.shape[0]
                raw = old.raw[:left]
                entry.term = ScoreTerm(old.plugin, old.weight, raw, raw if old.normalized is old.raw
                                       else old.normalized[:left], old.evidence)
                self.stats.cut_constant += 1
                continue
            if scorer.row_local_scores() or scorer.scores_kept_without(table, batch.rows, gone):
                raw, evidence = _without(old.raw, at), old.evidence
                if entry.per_node or (scorer.normalize_by_top and top_score(raw) == top_score(old.raw)):
                    # each normalised value its own raw value's (and the highest's, which stays): they stay
                    entry.term = _narrowed_term(old, raw, at)
                    continue
            else:
                # Scored again over the candidates left: a score may read the candidates (a minmax scale).
                scored = scorer.score(cycle, pod, table, rows)
                detail = scored if isinstance(scored, ScoreDetail) else ScoreDetail(scored)
                raw, evidence = np.asarray(detail.scores, dtype=np.float64), detail.evidence
            normalized, gaps = normalize_scores(scorer, raw)
            entry.gaps = entry.gaps or gaps
            entry.term = ScoreTerm(old.plugin, old.weight, raw, normalized, evidence)
            moved.append(index)
            self.stats.renormalised[old.plugin] += 1
        terms = batch.terms
        stages = batch.stages
        if stages is not None:
            stages = batch.stages = _narrowed_stages(stages, terms, at, moved)
        if moved and not any(entry.cluster for entry in terms):
            batch.total = _staged_total(stages if stages is not None else _stages(terms))
        else:
            # Each candidate's total as it was (its normalised values are), or computed again over every candidate
            # by this cycle's _rescore (a term read from the cluster moves everywhere).
            batch.total = _without(batch.total, at)
        batch.rows, batch.position = rows, positions
        batch.trace, batch.rejections, batch.rejected_by = trace, rejections, frozenset(rejected_by)
        batch.prototype[0]["feasible_rows"] = rows
        result.feasible_rows = rows
        dict.update(result.rejections, rejections)
        result.rejected_by = set(rejected_by)
        return True

    def _still_turned_down(self, batch: _Batch, pod: PodInfo, table: NodeTable, rows: IntArray) -> bool:
        """Whether rows that were not candidates, and whose pods changed since, are still turned down by the same
        filter for the same reasons (so not candidates, and counted as before): the filters before it whose verdict
        could have moved still let them through (filter_rows, as candidates are re-checked), and that filter, when its
        verdict could have moved (it reads pods, or a ledger metric that took a placement: a node that filled up for
        this template while smaller pods still land on it), still turns each down under the same reasons
        (FilterPlugin.reasons_on_row)."""
        ledger = self._ledger_changes(batch)
        for row in rows.tolist():
            first = first_rejecter(batch.trace, row)
            if first is None:
                return False
            at = np.array([row], dtype=np.int64)
            for position in range(first):
                plugin = _may_move(batch.moves[position], ledger)
                if plugin is not None and not plugin.filter_rows(batch.cycle, pod, table, at).all():
                    return False
            rejecter = _may_move(batch.moves[first], ledger)
            if rejecter is None:
                continue
            now = rejecter.reasons_on_row(batch.cycle, pod, table, row)
            if now is None or now != _row_reasons(batch.trace[first].reasons, row):
                return False  # a candidate again, or counted otherwise: the full cycle says how
        return True

    def _ledger_changes(self, batch: _Batch) -> dict[str, int]:
        """The ledger metrics the batch reads that took a placement since it was last used, with their counts."""
        appended = self.framework.handle.ledger.appended
        changed: dict[str, int] = {}
        for metric, seen in batch.ledger.items():
            now = appended.get(metric, 0)
            if now != seen:
                changed[metric] = now
        return changed

    def _rescore(self, batch: _Batch, result: CycleResult, table: NodeTable, dirty: IntArray, positions: IntArray,
                 ledger: dict[str, int], pods_changed: IntArray) -> tuple[bool, bool, list[int], bool] | None:
        """Brings the batch's terms up to now, in place (a refused batch is dropped: the caller never keeps one
        half-updated). Returns whether a normalised value moved outside the changed rows (the totals are then
        recomputed over every candidate), whether a changed row's normalised value moved, the positions of the
        terms whose normalised values are a new array, and whether one of those that may move everywhere had or
        has gaps (the weights are then recomputed). None: an incremental plugin's scores cannot be kept."""
        cycle, pod, rows, clock, timings = result.cycle, result.pod, batch.rows, time.perf_counter, result.timings
        terms = batch.terms
        whole = moved = regaps = False
        changed: list[int] = []
        some = dirty.size > 0
        # A few changed rows (the usual one: the last placement) are compared and patched with Python floats.
        places = positions.tolist() if 0 < dirty.size <= _FEW else None
        for index in batch.active:  # the terms that may move at all (the others keep their values)
            entry = terms[index]
            old = entry.term
            scorer = entry.scorer
            if entry.incremental is not None:
                started = clock()
                kept = entry.incremental.rescore(cycle, pod, table, pods_changed)
                if kept is None:
                    return None
                raw, evidence = kept, old.evidence
            elif entry.cluster:
                started = clock()
                scored = scorer.score(cycle, pod, table, rows)
                detail = scored if isinstance(scored, ScoreDetail) else ScoreDetail(scored)
                raw, evidence = np.asarray(detail.scores, dtype=np.float64), detail.evidence
            elif some and (entry.pods or (ledger and not ledger.keys().isdisjoint(entry.ledger))):
                started = clock()
                scored = scorer.score(cycle, pod, table, dirty)
                if isinstance(scored, ScoreDetail):
                    fresh, evidence = scored.scores, scored.evidence
                else:
                    fresh, evidence = scored, ()
                old_raw = old.raw
                if places is not None:
                    values = fresh.tolist()
                    if len(places) == 1:  # the usual case: one placement's row
                        x, y = values[0], old_raw.item(places[0])
                        same = x == y or (x != x and y != y)  # NaN equal to NaN
                    else:
                        same = all(x == y or (x != x and y != y)
                                   for x, y in zip(values, [old_raw.item(at) for at in places], strict=True))
                else:
                    fresh = np.asarray(fresh, dtype=np.float64)
                    same = _equal(fresh, old_raw[positions])
                if same:
                    # The same scores; the evidence (whole-table arrays, e.g. the ledger's latest) is taken as is.
                    if evidence is not old.evidence:
                        entry.term = ScoreTerm(old.plugin, old.weight, old_raw, old.normalized, evidence)
                    continue
                raw = old_raw.copy()  # the results handed out keep theirs
                if places is not None:
                    for at, value in zip(places, values, strict=True):
                        raw[at] = value
                else:
                    raw[positions] = fresh
                if entry.identity:
                    # normalize_scores gives the raw values back (the same array, as the cycle's term holds): the
                    # normalised values moved where the raw ones did. A NaN only where promised (IN_RANGE).
                    timings.append((scorer.name, "Score", clock() - started, "Success"))
                    moved = True
                    if not entry.gaps and scorer.normalized is Normalized.IN_RANGE and (
                            any(value != value for value in values) if places is not None
                            else bool(np.isnan(fresh).any())):
                        entry.gaps = True
                    entry.term = ScoreTerm(old.plugin, old.weight, raw, raw, evidence)
                    changed.append(index)
                    continue
                if entry.per_node:
                    # The cycle's bounding maps each value on its own too (NaN for anything not finite, else
                    # clipped to 0-100): the changed rows alone give their values, the others keep theirs.
                    fresh_normalized, fresh_gaps = normalize_scores(scorer, np.asarray(fresh, dtype=np.float64))
                    timings.append((scorer.name, "Score", clock() - started, "Success"))
                    moved = moved or not _equal(old.normalized[positions], fresh_normalized)
                    normalized = old.normalized.copy()
                    normalized[positions] = fresh_normalized
                    # `gaps` only picks WeightedMean's path, which gives the same numbers either way: a NaN gone
                    # from a changed row may leave it True.
                    entry.gaps = entry.gaps or fresh_gaps
                    entry.term = ScoreTerm(old.plugin, old.weight, raw, normalized, evidence)
                    changed.append(index)
                    continue
            else:
                continue
            # Normalised over every candidate, as the cycle does (an incremental plugin may hand them over kept).
            given = entry.incremental.normalized() if entry.incremental is not None else None
            normalized, gaps = normalize_scores(scorer, raw) if given is None else given
            timings.append((scorer.name, "Score", clock() - started, "Success"))
            # Scores read from the cluster move with nearly every placement (spreading: at least on the node
            # placed on): compared, they would be recomputed all the same.
            if not entry.cluster and gaps == entry.gaps and _equal(normalized, old.normalized):
                normalized = old.normalized  # nothing moved: the totals stand
            else:
                if not whole:
                    whole = True
                    self.stats.totals_recomputed += 1
                changed.append(index)
                regaps = regaps or gaps or entry.gaps
            entry.gaps = gaps
            entry.term = ScoreTerm(old.plugin, old.weight, raw, normalized, evidence)
        return whole, moved, changed, regaps

    # -- storing ---------------------------------------------------------------------------------
    def _store(self, template: Hashable, pod: PodInfo, table: NodeTable, result: CycleResult, stamp: int) -> None:
        """Keeps a successful full cycle for the pods of its template, if every plugin can say what it reads."""
        refused = self.stats.refused
        if result.node is None or not result.status.ok:
            refused["cycle did not place"] += 1
            return
        scopes: dict[str, BatchScope] = {}
        for plugin in self._consulted:
            scope = plugin.batch_scope(pod)
            if scope is None:
                refused[f"{plugin.name} cannot sign"] += 1
                return
            scopes[plugin.name] = scope
        framework = self.framework
        filter_skipped = result.filter_skipped
        recheck: list[_Recheck] = []
        ledger: dict[str, int] = {}
        appended = framework.handle.ledger.appended
        for plugin in framework.filters:
            if plugin.name in filter_skipped:
                continue
            scope = scopes[plugin.name]
            reads = scope.filter_reads
            if reads & Reads.CLUSTER:
                refused[f"{plugin.name} filters on the cluster"] += 1
                return
            if reads & _CHANGES_ON_ROW:
                metrics = scope.metrics if reads & Reads.LEDGER else ()
                recheck.append((plugin, bool(reads & Reads.PODS), metrics))
                ledger.update((m, appended.get(m, 0)) for m in metrics)
        deadline = self._deadline(table, [m for s in scopes.values() if s.reads & Reads.TELEMETRY for m in s.metrics])
        if deadline is None:
            refused["telemetry without a clock"] += 1
            return
        cluster = {name for name, scope in scopes.items() if scope.reads & Reads.CLUSTER}
        scorers = {scorer.name: scorer for scorer, _ in framework.scores}
        terms: list[_Term] = []
        for term in result.terms:
            scope = scopes[term.plugin]
            metrics = scope.metrics if scope.reads & Reads.LEDGER else ()
            ledger.update((m, appended.get(m, 0)) for m in metrics)
            scorer = scorers[term.plugin]
            incremental = None
            if term.plugin in cluster and isinstance(scorer, IncrementalScorer):
                incremental = scorer.incremental_scores(result.cycle, pod, table, result.feasible_rows)
            terms.append(_Term.of(term, scorer, term.plugin in cluster, bool(scope.reads & Reads.PODS), metrics,
                                  scorer.normalized is not Normalized.COMPLETE
                                  and bool(np.isnan(term.normalized).any()), incremental))
        stages = _stages(terms)
        if not np.array_equal(_staged_total(stages), result.total, equal_nan=True):
            refused["totals not reproduced"] += 1  # a defect: the batch would not give the cycle's decisions
            return
        # An incremental plugin's PreScore only prepares its scores: the batched cycle asks the plugin instead.
        kept = {entry.term.plugin for entry in terms if entry.incremental is not None}
        on_row = {entry[0].name: entry for entry in recheck}
        trace = result.filter_trace
        moves = [on_row.get(step.name) for step in trace]
        active = [index for index, entry in enumerate(terms)
                  if entry.incremental is not None or entry.cluster or entry.pods or entry.ledger]
        for index in set(range(len(terms))).difference(active):
            terms[index].constant = _constant(terms[index])
        prototype = _prototype(framework.name, result)
        self._batches.append(_Batch(
            template=template, validity=self._validity(table), deadline=deadline, stamp=stamp,
            cycle=result.cycle.clone(), filter_skipped=filter_skipped, score_skipped=frozenset(result.skipped),
            rows=result.feasible_rows, position=row_positions(result.feasible_rows, table.capacity), terms=terms,
            total=result.total, rejections=Counter(result.rejections),
            rejected_by=frozenset(result.rejected_by), recheck=recheck, ledger=ledger,
            cluster_pre_filters=[(p, p.name in filter_skipped) for p in framework.pre_filters if p.name in cluster],
            cluster_pre_scores=[p for p in framework.pre_scores if p.name in cluster and p.name not in kept],
            tokens=[(scope.token, scope.token()) for scope in scopes.values() if scope.token is not None],
            stages=stages if stages.first < len(terms) else None, trace=trace, moves=moves, active=active,
            prototype=prototype))
        if len(self._batches) > MAX_TEMPLATES:
            del self._batches[0]
        self.stats.stored += 1

    def _deadline(self, table: NodeTable, metrics: Sequence[str]) -> float | None:
        """When the first value the batch read goes stale (inf: none will); None: no clock to tell."""
        if not metrics:
            return float(np.inf)
        reader = self.framework.handle.metrics
        if not isinstance(reader, MetricCache):
            return None
        return min(reader.fresh_until(metric, table) for metric in dict.fromkeys(metrics))


# CycleResult's fields each batched cycle sets afresh (all its mutable ones, today): never the prototype's.
_OWN_FIELDS = ("pod", "nodes_total", "cycle", "timings", "terms", "rejections", "rejected_by", "skipped",
               "filter_trace")


def _prototype(profile: str, stored: CycleResult) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The fields of a batched cycle's result before the cycle (those a fresh CycleResult has, with the stored
    cycle's candidates and skipped filters), copied into each result's __dict__ (_light_result); and the names of
    any other field whose default is a mutable container (one added to CycleResult later): copied per result."""
    fields = dict(vars(CycleResult(pod=stored.pod, profile=profile)))
    fields.update(feasible_rows=stored.feasible_rows, filter_skipped=stored.filter_skipped)
    for name in _OWN_FIELDS:
        del fields[name]
    mutable = tuple(name for name, value in fields.items() if isinstance(value, list | dict | set))
    return fields, mutable


def _light_result(batch: _Batch, pod: PodInfo, nodes_total: int) -> CycleResult:
    """CycleResult(pod=pod, profile=..., nodes_total=..., cycle=<a clone of the batch's>) with the batch's
    candidates, rejection counts and skipped plugins, as its constructor and field assignments would make it, at a
    tenth of the cost (the constructor's default factories were a tenth of a batched cycle): the prototype's
    immutable values are shared, every mutable one is a new object."""
    result: CycleResult = object.__new__(CycleResult)
    prototype, mutable = batch.prototype
    fields = prototype.copy()
    for name in mutable:
        fields[name] = copy.copy(fields[name])
    rejections = _copied(batch.rejections)
    fields.update(pod=pod, nodes_total=nodes_total, cycle=batch.cycle.clone(), timings=[], terms=[],
                  rejections=rejections, rejected_by=set(batch.rejected_by), skipped=set(batch.score_skipped),
                  filter_trace=[])
    result.__dict__ = fields
    return result


def _narrowed_term(old: ScoreTerm, raw: FloatArray, gone: IntArray) -> ScoreTerm:
    """`old` over the candidates left: `raw` (its raw scores without the positions `gone`) and its normalised values
    without them, the same array as `raw` when they were the same (a plugin whose scores are already 0-100)."""
    normalized = raw if old.normalized is old.raw else _without(old.normalized, gone)
    return ScoreTerm(old.plugin, old.weight, raw, normalized, old.evidence)


def _constant(entry: _Term) -> bool:
    """Whether _drop may cut the term's arrays instead of joining them (_Term.constant): its scores row-local and
    kept when a candidate leaves (normalised alone, or by the highest, which a constant array keeps), and its raw and
    normalised values each one double, bit for bit (0.0 and -0.0 are not one), over more than one candidate."""
    term, scorer = entry.term, entry.scorer
    if term.raw.shape[0] < 2 or not scorer.row_local_scores() or not (entry.per_node or scorer.normalize_by_top):
        return False
    return all(bool((bits == bits[0]).all()) for bits in (term.raw.view(np.int64), term.normalized.view(np.int64)))


def _copied(counter: Counter[str]) -> Counter[str]:
    """A copy of `counter`: Counter(counter) counts its keys one by one, through Python."""
    out: Counter[str] = Counter.__new__(Counter)
    dict.update(out, counter)
    return out


def _stages(terms: Sequence[_Term]) -> _Stages:
    """The totals' pieces for these terms (all of them computed afresh)."""
    first = next((i for i, entry in enumerate(terms) if entry.everywhere), len(terms))
    size = terms[0].term.normalized.shape[0] if terms else 0
    matrix: FloatArray = np.zeros((1 + len(terms) - first, size), dtype=np.float64)
    prefix = matrix[0]
    for entry in terms[:first]:
        prefix += _part(entry)
    for index, entry in enumerate(terms[first:], start=1):
        _write_part(entry, matrix[index])
    weights = np.zeros(size, dtype=np.float64)
    for entry in terms:
        weights += _weight(entry)
    stages = _Stages(first, matrix, weights)
    stages.weighed()
    return stages


def _narrowed_stages(stages: _Stages, terms: Sequence[_Term], gone: IntArray, moved: Sequence[int]) -> _Stages:
    """The pieces of `stages` without the candidates at the positions `gone` (ascending), for the terms now (moved:
    those whose normalised values are not the old ones without them): what _stages gives for them, each piece
    computed per row in the same order, so a piece no moved term feeds is the old one without those columns."""
    first = stages.first
    matrix = _without(stages.matrix, gone)
    if any(index < first for index in moved):
        prefix = matrix[0]
        prefix.fill(0.0)
        for entry in terms[:first]:
            prefix += _part(entry)
    for index in moved:
        if index >= first:
            _write_part(terms[index], matrix[1 + index - first])
    if any(terms[index].gaps for index in moved):
        weights: FloatArray = np.zeros(matrix.shape[1], dtype=np.float64)
        for entry in terms:
            weights += _weight(entry)
    else:
        weights = _without(stages.weights, gone)
    narrowed = _Stages(first, matrix, weights)
    narrowed.weighed()
    return narrowed


def _without(values: _Array, gone: IntArray) -> _Array:
    """`values` without the columns (last axis) at the positions `gone` (ascending): the blocks between them joined,
    C-ordered (a sum down the rows then runs in order), where a boolean mask over the columns of a matrix cost ten
    times as much."""
    if gone.shape[0] == 1:  # the usual drop: one candidate filled up
        at = gone.item(0)
        one: _Array = np.concatenate((values[..., :at], values[..., at + 1:]), axis=-1)
        return one
    bounds = [-1, *gone.tolist(), values.shape[-1]]
    joined: _Array = np.concatenate([values[..., start + 1:end] for start, end in pairwise(bounds)], axis=-1)
    return joined


def _part(entry: _Term) -> FloatArray:
    """What WeightedMean adds to the totals for the term (a NaN adds nothing; normalized * 1.0 is normalized)."""
    normalized, weight = entry.term.normalized, entry.term.weight
    if weight == 1 and not entry.gaps:
        return normalized
    part: FloatArray = normalized * weight
    if entry.gaps:
        part = np.where(np.isnan(normalized), 0.0, part)
    return part


def _write_part(entry: _Term, out: FloatArray) -> None:
    """_part(entry) written into `out` (a row of the stages' matrix)."""
    normalized, weight = entry.term.normalized, entry.term.weight
    if weight == 1:
        np.copyto(out, normalized)
    else:
        np.multiply(normalized, weight, out=out)
    if entry.gaps:
        out[np.isnan(normalized)] = 0.0


def _weight(entry: _Term) -> FloatArray | float:
    """What WeightedMean adds to each row's weight for the term (integers: any order gives the same sums)."""
    if entry.gaps:
        present: FloatArray = ~np.isnan(entry.term.normalized) * float(entry.term.weight)
        return present
    return float(entry.term.weight)


def _restage(stages: _Stages, terms: Sequence[_Term], changed: Sequence[int], regaps: bool,
             positions: IntArray) -> None:
    """Brings the pieces up to the terms now, given the positions of the terms whose normalised values are new
    arrays: a term that may move everywhere has its part written afresh (and the weights recomputed, if it had or
    has gaps); on the changed rows, the prefix, the weights and the other terms' parts are recomputed on their own
    (a term that may move everywhere has its part afresh, or the same values)."""
    first = stages.first
    matrix = stages.matrix
    for index in changed:
        entry = terms[index]
        if entry.everywhere:
            _write_part(entry, matrix[1 + index - first])
    weights = regaps
    if weights:
        stages.weights = np.zeros_like(stages.weights)
        for entry in terms:
            stages.weights += _weight(entry)
    if positions.size:
        # On the changed rows only what a changed term feeds moves: the prefix (when a term in it changed), the
        # changed terms' own parts, and the weights (when a changed term has gaps: its NaN may have come or gone;
        # a term's gaps never go back to False, so it covers the values before too).
        prefix_moved = bool(changed) and changed[0] < first
        own = [(terms[index].term.normalized, terms[index].term.weight, matrix[1 + index - first])
               for index in changed if index >= first and not terms[index].everywhere]
        reweigh = any(terms[index].gaps for index in changed if not terms[index].everywhere)
        prefix, row_weights = matrix[0], stages.weights
        before = [(entry.term.normalized, entry.term.weight) for entry in terms[:first]] if prefix_moved else []
        every = [(entry.term.normalized, entry.term.weight) for entry in terms] if reweigh else []
        if positions.size > _FEW:
            # The same operations on the rows gathered, a matrix per sum (a row per term, added down the rows in order,
            # as the Python loop below adds them): a Python float per row and term cost more beyond a few rows.
            if prefix_moved:
                prefix[positions] = _weighted_sums(before, positions)[0]
            for normalized, term_weight, part_of in own:
                values = normalized[positions]
                part_of[positions] = np.where(values == values, values * term_weight, 0.0)
            if reweigh:
                row_weights[positions] = _weighted_sums(every, positions)[1]
                if not (row_weights[positions] > 0).all():
                    stages.positive = False
        for position in positions.tolist() if positions.size <= _FEW else ():
            if prefix_moved:
                total = 0.0
                for normalized, term_weight in before:
                    value = normalized.item(position)
                    if value == value:  # not NaN
                        total += value * term_weight
                prefix[position] = total
            for normalized, term_weight, part_of in own:
                value = normalized.item(position)
                part_of[position] = value * term_weight if value == value else 0.0
            if reweigh:
                weight = 0.0
                for normalized, term_weight in every:
                    if normalized.item(position) == normalized.item(position):
                        weight += term_weight
                row_weights[position] = weight
                if weight <= 0:
                    stages.positive = False
        # A row that had no weight may have one now: look again (the usual case never gets here).
        weights = weights or not stages.positive
    if weights:
        stages.weighed()


def _staged_total(stages: _Stages) -> FloatArray:
    """WeightedMean's result (0 where no term has a weight) from the pieces: the same additions in the same
    order (one reduction down the matrix), divided by the same weights."""
    matrix = stages.matrix
    if matrix.shape[1] > 1:
        total: FloatArray = np.add.reduce(matrix, axis=0)
    else:
        # One candidate: down a single column numpy sums the (contiguous) values pairwise, not in order.
        total = matrix[0].copy()
        for part in matrix[1:]:
            total += part
    weights = stages.weights
    if stages.positive:
        total /= weights
        return total
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(weights > 0, total / np.where(weights > 0, weights, 1.0), 0.0)


def _equal(a: FloatArray, b: FloatArray) -> bool:
    """np.array_equal(a, b, equal_nan=True), with one comparison when no value differs (the usual answer)."""
    if a.shape != b.shape:
        return False
    if a.size <= 8:  # the changed rows (a few): Python's comparisons are cheaper than numpy's calls
        return all(x == y or (x != x and y != y) for x, y in zip(a.tolist(), b.tolist(), strict=True))
    differ = a != b  # NaN differs from everything, itself included
    if not differ.any():
        return True
    first = int(differ.argmax())
    if a[first] == a[first] or b[first] == b[first]:
        return False  # a value that really differs (the usual case when they are not equal)
    return bool(np.isnan(a[differ]).all() and np.isnan(b[differ]).all())


def _row_total(terms: Sequence[_Term], position: int) -> float:
    """One candidate's weighted total as WeightedMean computes it (NaN terms drop out; 0 when none has a value):
    the same float operations in the same order, on the one row (a few changed rows: no pass over the table)."""
    total = weights = 0.0
    for entry in terms:
        value = entry.term.normalized.item(position)
        if value == value:  # not NaN
            total += value * entry.term.weight
            weights += entry.term.weight
    return total / weights if weights > 0 else 0.0


def _gathered(terms: Sequence[tuple[FloatArray, float]], positions: IntArray) -> tuple[FloatArray, FloatArray]:
    """The terms' values at `positions` (more than one), a row per term, and their weights as a column: what
    scoring.weighted_sums_down and weighted_mean_down add down the rows in the terms' order (_row_total's order)."""
    values = np.array([normalized.take(positions) for normalized, _ in terms])
    return values, np.array([[weight] for _, weight in terms], dtype=np.float64)


def _weighted_sums(terms: Sequence[tuple[FloatArray, float]], positions: IntArray) -> tuple[FloatArray, FloatArray]:
    """Per position: the sum of value x weight over the terms whose value is not NaN, and of their weights."""
    if not terms:
        zeros: FloatArray = np.zeros(positions.size)
        return zeros, zeros
    return weighted_sums_down(*_gathered(terms, positions))


def _rows_total(terms: Sequence[_Term], positions: IntArray) -> FloatArray:
    """_row_total of each of several positions, in numpy (the same doubles)."""
    values, weights = _gathered([(entry.term.normalized, entry.term.weight) for entry in terms], positions)
    return weighted_mean_down(values, weights, empty=0.0)


def _may_move(entry: _Recheck | None, ledger: dict[str, int]) -> FilterPlugin | None:
    """The filter of a re-checked entry whose verdict on a row a pod change may have moved since the batch was last
    used (it reads pods, or a ledger metric that took a placement: `ledger`), else None."""
    if entry is None:
        return None
    plugin, pods, metrics = entry
    return plugin if pods or (ledger and not ledger.keys().isdisjoint(metrics)) else None


def _row_reasons(reasons: dict[str, BoolArray], row: int) -> set[str]:
    """The reasons a filter's verdict lists `row` under."""
    return {reason for reason, rows in reasons.items() if rows[row]}


def _with_row(reasons: dict[str, BoolArray], now: frozenset[str], row: int, size: int) -> dict[str, BoolArray]:
    """`reasons` (a filter's over `size` rows, kept by a batch) with `row` listed under the reasons `now` (that
    filter asked again) alone: copies, the stored cycle's result may still hold the originals."""
    out: dict[str, BoolArray] = {}
    for reason in reasons.keys() | now:
        rows = reasons[reason].copy() if reason in reasons else np.zeros(size, dtype=bool)
        rows[row] = reason in now
        out[reason] = rows
    return out


def _same(status: Status, skipped: bool) -> bool:
    """A re-run PreFilter / PreScore answered as it did for the batch: Skip again, or Success again."""
    return status.code == Code.SKIP if skipped else status.code == Code.SUCCESS


