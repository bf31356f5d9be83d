"""Storing a batch: a full cycle that placed its pod kept for the pods of its template, with what each consulted plugin
says it reads (Batchable.batch_scope; a plugin that is not Batchable is read as Reads.CLUSTER)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Sequence
from typing import cast

import numpy as np

from metrics_sched.framework.batchable import Batchable, BatchScope, Reads
from metrics_sched.framework.handle import Handle
from metrics_sched.framework.incremental import IncrementalScorer, row_positions
from metrics_sched.framework.interfaces import Normalized, Plugin, ScorePlugin
from metrics_sched.framework.runtime.batching.batch import (
    CHANGES_ON_ROW,
    Batch,
    BatchableFilter,
    BatchStats,
    Recheck,
    prototype_of,
    validity,
)
from metrics_sched.framework.runtime.batching.terms import BatchableScorer, Term, is_constant
from metrics_sched.framework.runtime.batching.totals import staged_total, stages_of
from metrics_sched.framework.runtime.full_cycle import FullCycle
from metrics_sched.framework.runtime.results import CycleResult
from metrics_sched.model.podinfo import PodInfo
from metrics_sched.state.node_table import NodeTable
from metrics_sched.telemetry.cache import MetricCache

__all__ = ["NOT_BATCHABLE", "stored_batch"]

# What a plugin that is not Batchable is taken to read: anything (its PreFilter, PreScore and Score run afresh in
# every batched cycle, over every candidate; a Filter of its that is not skipped keeps the pod out of batches).
NOT_BATCHABLE = BatchScope(Reads.CLUSTER)


def stored_batch(full: FullCycle, stats: BatchStats, consulted: Sequence[Plugin], template: Hashable, pod: PodInfo,
                 table: NodeTable, result: CycleResult, stamp: int) -> Batch | None:
    """A successful full cycle kept for the pods of its template, if every `consulted` plugin (those of PreFilter,
    Filter, PreScore and Score) can say what it reads; None (counted in `stats`) if not."""
    if result.node is None or not result.status.ok:
        stats.refuse("cycle did not place")
        return None
    scopes: dict[str, BatchScope] = {}
    for plugin in consulted:
        scope = _scope_of(plugin, pod)
        if scope is None:
            stats.refuse("cannot sign", plugin.name)
            return None
        scopes[plugin.name] = scope
    filter_skipped = result.filter_skipped
    recheck: list[Recheck] = []
    ledger: dict[str, int] = {}
    appended = full.handle.ledger.appended
    for plugin in full.filters:
        if plugin.name in filter_skipped:
            continue
        scope = scopes[plugin.name]
        reads = scope.filter_reads
        if reads & Reads.CLUSTER:
            # A Filter whose verdict may move on rows that did not change: only a full cycle has it right.
            stats.refuse("filters on the cluster" if scope is not NOT_BATCHABLE else "not batchable",
                         plugin.name)
            return None
        if reads & CHANGES_ON_ROW:  # a Batchable filter's answer (not NOT_BATCHABLE's)
            metrics = scope.metrics if reads & Reads.LEDGER else ()
            recheck.append((cast(BatchableFilter, plugin), bool(reads & Reads.PODS), metrics))
            ledger.update((m, appended.get(m, 0)) for m in metrics)
    deadline = _deadline(full.handle, table,
                         [m for s in scopes.values() if s.reads & Reads.TELEMETRY for m in s.metrics])
    if deadline is None:
        stats.refuse("telemetry without a clock")
        return None
    cluster = {name for name, scope in scopes.items() if scope.reads & Reads.CLUSTER}
    scorers = {scorer.name: scorer for scorer, _ in full.scores}
    terms: list[Term] = []
    for term in result.terms:
        scope = scopes[term.plugin]
        metrics = scope.metrics if scope.reads & Reads.LEDGER else ()
        ledger.update((m, appended.get(m, 0)) for m in metrics)
        scorer = scorers[term.plugin]
        incremental = None
        if term.plugin in cluster and isinstance(scorer, IncrementalScorer):
            incremental = scorer.incremental_scores(result.cycle, pod, table, result.feasible_rows)
        # A scorer that is not Batchable is in `cluster`: scored afresh, its hooks never asked.
        pods = bool(scope.reads & Reads.PODS)
        gaps = scorer.normalized is not Normalized.COMPLETE and bool(np.isnan(term.normalized).any())
        terms.append(Term.of(term, cast(BatchableScorer, scorer), term.plugin in cluster, pods, metrics, gaps,
                             incremental))
    stages = stages_of(terms)
    if not np.array_equal(staged_total(stages), result.total, equal_nan=True):
        stats.refuse("totals not reproduced")  # a defect: the batch would not give the cycle's decisions
        return None
    # An incremental plugin's PreScore only prepares its scores: the batched cycle asks the plugin instead.
    kept = {entry.term.plugin for entry in terms if entry.incremental is not None}
    on_row = {entry[0].name: entry for entry in recheck}
    trace = result.filter_trace
    moves = [on_row.get(step.name) for step in trace]
    active = [index for index, entry in enumerate(terms)
              if entry.incremental is not None or entry.cluster or entry.pods or entry.ledger]
    for index in set(range(len(terms))).difference(active):
        terms[index].constant = is_constant(terms[index])
    prototype = prototype_of(full.name, result)
    return Batch(
        template=template, validity=validity(full.handle, table), deadline=deadline, stamp=stamp,
        cycle=result.cycle.clone(), filter_skipped=filter_skipped, score_skipped=frozenset(result.skipped),
        rows=result.feasible_rows, position=row_positions(result.feasible_rows, table.capacity), terms=terms,
        total=result.total, rejections=Counter(result.rejections),
        rejected_by=frozenset(result.rejected_by), recheck=recheck, ledger=ledger,
        cluster_pre_filters=[(p, p.name in filter_skipped) for p in full.pre_filters if p.name in cluster],
        cluster_pre_scores=[p for p in full.pre_scores if p.name in cluster and p.name not in kept],
        tokens=[(scope.token, scope.token()) for scope in scopes.values() if scope.token is not None],
        stages=stages if stages.first < len(terms) else None, trace=trace, moves=moves, active=active,
        prototype=prototype)

def _deadline(handle: Handle, table: NodeTable, metrics: Sequence[str]) -> float | None:
    """When the first value the batch read goes stale (inf: none will); None: no clock to tell."""
    if not metrics:
        return float(np.inf)
    reader = handle.metrics
    if not isinstance(reader, MetricCache):
        return None
    return min(reader.fresh_until(metric, table) for metric in dict.fromkeys(metrics))


def _scope_of(plugin: Plugin, pod: PodInfo) -> BatchScope | None:
    """What `plugin` reads for `pod` (None: it cannot say). A plugin that is not Batchable reads anything
    (NOT_BATCHABLE), except one written against the hook before the protocol (a `batch_scope` of its own, no
    Batchable base): its answer stands where no other hook is asked of it (a Filter reading neither the pods nor
    the ledger on a node, no Score), else it too reads anything."""
    if isinstance(plugin, Batchable):
        return plugin.batch_scope(pod)
    hook = getattr(plugin, "batch_scope", None)
    if hook is None:
        return NOT_BATCHABLE
    scope: BatchScope | None = hook(pod)
    if scope is None or (not isinstance(plugin, ScorePlugin) and not scope.filter_reads & CHANGES_ON_ROW):
        return scope
    return NOT_BATCHABLE
