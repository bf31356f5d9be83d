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
- the rows whose pods changed since (NodeTable.row_pod_stamp: the last placement, forgets, pod events) are
  re-checked with the filters that read pods (or the ledger, when it took a placement for their metrics),
  through `FilterPlugin.filter_rows`; a changed row that is not a candidate, or a candidate that no longer
  fits, ends the batch (candidates and rejection counts would change: the full cycle recounts them);
- plugins reading other nodes (Reads.CLUSTER: PodTopologySpread with constraints, ZoneSpread, inter-pod
  terms of the pod's own) re-run PreFilter, PreScore and Score in full, over every candidate; a Filter of
  theirs that is not skipped makes the pod unbatchable;
- the changed rows are re-scored by the score plugins that read pods or the ledger; a term whose normalize()
  maps each value alone (a clip, the identity) is normalised on those rows only, any other over every
  candidate with its own normalize(), as the cycle does; the totals are recomputed on the changed rows only
  unless a normalised value moved elsewhere;
- the pick is the cycle's (Framework.choose: Placement plugins, highest total, the seeded random tie-break).
Reserve, Permit and binding run per pod as always, on a clone of the stored cycle state.
"""

from __future__ import annotations

import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field

import numpy as np

from metrics_sched.framework.cycle_state import CycleState
from metrics_sched.framework.interfaces import (
    FilterPlugin,
    Normalized,
    Plugin,
    PreFilterPlugin,
    PreScorePlugin,
    ScoreDetail,
    ScorePlugin,
    unchanged,
)
from metrics_sched.framework.runtime import CycleResult, Framework, ScoreTerm, normalize_scores
from metrics_sched.framework.scoring import WeightedMean
from metrics_sched.framework.signature import BatchScope, Reads, template_of
from metrics_sched.framework.status import Code, Status
from metrics_sched.model.podinfo import PodInfo
from metrics_sched.state.node_table import FloatArray, IntArray, NodeTable
from metrics_sched.telemetry.cache import MetricCache

__all__ = ["BatchStats", "Batcher"]

# Batches kept (templates interleave: two Deployments scaling at once); the least recently used goes first.
MAX_TEMPLATES = 8
# More changed rows than this since a batch: the full cycle is as cheap.
MAX_DIRTY = 64
# A batch ends this long before a metric value it read goes stale (freshness is judged against `now` with a
# subtraction; the margin covers its rounding).
STALE_MARGIN = 1e-3
_CHANGES_ON_ROW = Reads.PODS | Reads.LEDGER
# normalize() implementations that map each value on its own (a clip, the identity): a changed row's normalised
# value is then normalize() of its raw value alone, and no other row's moves. Compared by identity, so a plugin
# that overrides normalize() is normalised over every candidate again.
_PER_NODE_NORMALIZE = frozenset({ScorePlugin.normalize, unchanged})


@dataclass
class _Term:
    term: ScoreTerm
    scorer: ScorePlugin
    cluster: bool  # scored afresh over every candidate in each batched cycle
    pods: bool  # reads the pods on a node: re-scored on the changed rows
    ledger: tuple[str, ...]  # the metrics whose in-flight entries it reads: re-scored on the changed rows when
    # the ledger took a placement for one of them
    gaps: bool  # the normalised values hold NaN (what the cycle's WeightedMean was told)
    per_node: bool  # its normalize() maps each value on its own


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
    terms: list[_Term]
    total: FloatArray
    rejections: Counter[str]
    rejected_by: frozenset[str]
    recheck: list[tuple[FilterPlugin, bool, tuple[str, ...]]]  # the filters re-run on changed rows (as _Term)
    ledger: dict[str, int]  # InFlightLedgerStore.appended of the metrics read, when the batch was last used
    cluster_pre_filters: list[tuple[PreFilterPlugin, bool]]  # re-run each cycle: (plugin, it answered Skip)
    cluster_pre_scores: list[PreScorePlugin]
    tokens: list[tuple[Callable[[], Hashable], Hashable]]  # BatchScope.token, and what it was


@dataclass
class BatchStats:
    """For the bench and tests: cycles reused, full cycles that stored a batch, and why a batch was not used."""

    batched: int = 0
    stored: int = 0
    totals_recomputed: int = 0  # batched cycles whose normalisation moved (every candidate's total computed)
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
            return framework.schedule_unbatched(pod, table)
        batch = next((b for b in self._batches if b.template == template), None)
        if batch is not None:
            self._batches.remove(batch)
            result = self._batched(batch, pod, table, stamp)
            if result is not None:
                self.stats.batched += 1
                self._batches.append(batch)
                return result
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
        if any(token() != seen for token, seen in batch.tokens):
            refused["cluster changed"] += 1
            return None
        rows = batch.rows
        dirty: IntArray = np.flatnonzero(table.row_pod_stamp[: table.capacity] > batch.stamp)
        positions: IntArray = np.zeros(0, dtype=np.int64)
        if dirty.size:
            if dirty.size > MAX_DIRTY:
                refused["many rows changed"] += 1
                return None
            positions = np.searchsorted(rows, dirty)
            if int(positions[-1]) >= rows.size or not np.array_equal(rows[positions], dirty):
                refused["changed row not a candidate"] += 1
                return None

        result = CycleResult(pod=pod, profile=framework.name, nodes_total=len(table), cycle=batch.cycle.clone())
        cycle, clock = result.cycle, time.perf_counter
        for pre_filter, skipped in batch.cluster_pre_filters:
            started = clock()
            status = pre_filter.pre_filter(cycle, pod)
            result.timings.append((pre_filter.name, "PreFilter", clock() - started, status.code.value))
            if not _same(status, skipped):
                refused["cluster plugin changed"] += 1
                return None
        ledger = self._ledger_changes(batch)
        if dirty.size:
            for plugin, pods, read in batch.recheck:
                if (pods or any(m in ledger for m in read)) and not plugin.filter_rows(cycle, pod, table, dirty).all():
                    refused["candidate no longer fits"] += 1
                    return None

        result.feasible_rows = rows
        result.rejections = Counter(batch.rejections)
        result.rejected_by = set(batch.rejected_by)
        result.filter_skipped = batch.filter_skipped
        result.skipped = set(batch.score_skipped)
        for pre in batch.cluster_pre_scores:
            started = clock()
            status = pre.pre_score(cycle, pod, table, rows)
            result.timings.append((pre.name, "PreScore", clock() - started, status.code.value))
            if not _same(status, pre.name in batch.score_skipped):
                refused["cluster plugin changed"] += 1
                return None

        terms, whole, moved = self._rescore(batch, result, table, dirty, positions, ledger)
        if whole:
            mean = WeightedMean(rows.size)
            for entry in terms:
                mean.add(entry.term.normalized, entry.term.weight, gaps=entry.gaps)
            total = mean.result(empty=0.0)
        elif moved:
            total = batch.total.copy()
            for position in positions.tolist():
                total[position] = _row_total(terms, position)
        else:
            total = batch.total
        result.terms = [entry.term for entry in terms]
        result.total = total
        batch.terms, batch.total, batch.stamp = terms, total, stamp
        batch.ledger.update(ledger)
        framework.choose(result, table, rows)
        return result

    def _ledger_changes(self, batch: _Batch) -> dict[str, int]:
        """The ledger metrics the batch reads that took a placement since it was last used, with their counts."""
        appended = self.framework.handle.ledger.appended
        changed: dict[str, int] = {}
        for metric, seen in batch.ledger.items():
            now = appended.get(metric, 0)
            if now != seen:
                changed[metric] = now
        return changed

    def _rescore(self, batch: _Batch, result: CycleResult, table: NodeTable, dirty: IntArray,
                 positions: IntArray, ledger: dict[str, int]) -> tuple[list[_Term], bool, bool]:
        """The terms now; whether the totals must be recomputed over every candidate (a normalised value moved
        outside the changed rows); whether a changed row's normalised value moved."""
        cycle, pod, rows, clock = result.cycle, result.pod, batch.rows, time.perf_counter
        terms: list[_Term] = []
        whole = moved = False
        for entry in batch.terms:
            if not (entry.cluster or (dirty.size and (entry.pods or any(m in ledger for m in entry.ledger)))):
                terms.append(entry)
                continue
            scorer, old = entry.scorer, entry.term
            started = clock()
            scored = scorer.score(cycle, pod, table, rows if entry.cluster else dirty)
            detail = scored if isinstance(scored, ScoreDetail) else ScoreDetail(scored)
            fresh = np.asarray(detail.scores, dtype=np.float64)
            if entry.cluster:
                raw = fresh
            elif np.array_equal(fresh, old.raw[positions], equal_nan=True):
                # The same scores; the evidence (whole-table arrays, e.g. the ledger's latest) is taken as is.
                if detail.evidence is not old.evidence:
                    entry = _Term(ScoreTerm(old.plugin, old.weight, old.raw, old.normalized, detail.evidence),
                                  scorer, entry.cluster, entry.pods, entry.ledger, entry.gaps, entry.per_node)
                terms.append(entry)
                continue
            else:
                raw = old.raw.copy()
                raw[positions] = fresh
            if entry.per_node and not entry.cluster:
                # The cycle's bounding maps each value on its own too (NaN for anything not finite, else
                # clipped to 0-100): the changed rows alone give their values, the others keep theirs.
                changed, changed_gaps = normalize_scores(scorer, fresh)
                result.timings.append((scorer.name, "Score", clock() - started, "Success"))
                moved = moved or not np.array_equal(old.normalized[positions], changed, equal_nan=True)
                normalized = old.normalized.copy()
                normalized[positions] = changed
                # `gaps` only picks WeightedMean's path, which gives the same numbers either way: a NaN gone from
                # a changed row may leave it True.
                terms.append(_Term(ScoreTerm(old.plugin, old.weight, raw, normalized, detail.evidence), scorer,
                                   entry.cluster, entry.pods, entry.ledger, entry.gaps or changed_gaps, True))
                continue
            normalized, gaps = normalize_scores(scorer, raw)
            result.timings.append((scorer.name, "Score", clock() - started, "Success"))
            if not whole:
                kept = old.normalized.copy()
                kept[positions] = normalized[positions]
                whole = gaps != entry.gaps or not np.array_equal(kept, normalized, equal_nan=True)
                moved = moved or not np.array_equal(old.normalized[positions], normalized[positions], equal_nan=True)
                if whole:
                    self.stats.totals_recomputed += 1
            terms.append(_Term(ScoreTerm(old.plugin, old.weight, raw, normalized, detail.evidence), scorer,
                               entry.cluster, entry.pods, entry.ledger, gaps, entry.per_node))
        return terms, whole, moved

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
        recheck: list[tuple[FilterPlugin, bool, tuple[str, ...]]] = []
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
            terms.append(_Term(term, scorer, term.plugin in cluster, bool(scope.reads & Reads.PODS), metrics,
                               scorer.normalized is not Normalized.COMPLETE and bool(np.isnan(term.normalized).any()),
                               type(scorer).normalize in _PER_NODE_NORMALIZE))
        self._batches.append(_Batch(
            template=template, validity=self._validity(table), deadline=deadline, stamp=stamp,
            cycle=result.cycle.clone(), filter_skipped=filter_skipped, score_skipped=frozenset(result.skipped),
            rows=result.feasible_rows, terms=terms, total=result.total, rejections=Counter(result.rejections),
            rejected_by=frozenset(result.rejected_by), recheck=recheck, ledger=ledger,
            cluster_pre_filters=[(p, p.name in filter_skipped) for p in framework.pre_filters if p.name in cluster],
            cluster_pre_scores=[p for p in framework.pre_scores if p.name in cluster],
            tokens=[(scope.token, scope.token()) for scope in scopes.values() if scope.token is not None]))
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


def _row_total(terms: Sequence[_Term], position: int) -> float:
    """One candidate's weighted total as WeightedMean computes it (NaN terms drop out; 0 when none has a value):
    the same float operations in the same order, on the one row (a few changed rows: no pass over the table)."""
    total = weights = 0.0
    for entry in terms:
        value = float(entry.term.normalized[position])
        if value == value:  # not NaN
            total += value * entry.term.weight
            weights += entry.term.weight
    return total / weights if weights > 0 else 0.0


def _same(status: Status, skipped: bool) -> bool:
    """A re-run PreFilter / PreScore answered as it did for the batch: Skip again, or Success again."""
    return status.code == Code.SKIP if skipped else status.code == Code.SUCCESS
