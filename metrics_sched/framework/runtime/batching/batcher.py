"""The batched-cycle runner: a pod of a template seen before reuses that template's batch (the cycle computed on the
nodes that changed since), else the full cycle runs (runtime.full_cycle) and, for a template seen again, is stored
as a batch. It calls the full-cycle runner; the full-cycle runner never calls it."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Hashable

import numpy as np

from metrics_sched.framework.batchable import MAX_DIRTY
from metrics_sched.framework.interfaces import Plugin
from metrics_sched.framework.runtime.batching.batch import (
    MAX_GONE,
    MAX_TEMPLATES,
    STALE_MARGIN,
    Batch,
    BatchStats,
    ledger_changes,
    light_result,
    may_move,
    same_answer,
    validity,
)
from metrics_sched.framework.runtime.batching.drop import drop, still_turned_down
from metrics_sched.framework.runtime.batching.rescore import rescore
from metrics_sched.framework.runtime.batching.signature import template_of
from metrics_sched.framework.runtime.batching.store import stored_batch
from metrics_sched.framework.runtime.batching.totals import FEW, restage, row_total, rows_total, staged_total
from metrics_sched.framework.runtime.full_cycle import FullCycle
from metrics_sched.framework.runtime.results import CycleResult
from metrics_sched.model.podinfo import PodInfo
from metrics_sched.state.node_table import BoolArray, IntArray, NodeTable
from metrics_sched.telemetry.cache import MetricCache

__all__ = ["Batcher"]

_NO_ROWS: IntArray = np.zeros(0, dtype=np.int64)  # never written to

class Batcher:
    """One profile's batches; Framework.schedule hands it every pod when batching is on."""

    def __init__(self, full: FullCycle) -> None:
        self.full = full
        self.stats = BatchStats()
        self._batches: list[Batch] = []  # the most recently used last
        # The last templates seen: a batch is stored for a template seen again within MAX_TEMPLATES others, so a
        # stream of pods that rarely repeat (storing costs a little) never pays for batches it would not use.
        self._recent: OrderedDict[Hashable, None] = OrderedDict()
        consulted: dict[str, Plugin] = {}
        for plugin in (*full.pre_filters, *full.filters, *full.pre_scores, *(scorer for scorer, _ in full.scores)):
            consulted.setdefault(plugin.name, plugin)
        self._consulted = list(consulted.values())

    # -- the cycle -------------------------------------------------------------------------------
    def schedule(self, pod: PodInfo, table: NodeTable) -> CycleResult:
        full, stats = self.full, self.stats
        stamp = table.pod_stamp  # before the cycle: whatever changes from here on is re-checked next time
        template = template_of(pod)
        if template is None or (full.percentage < 100 and len(table) >= 100):
            stats.refuse("pod not batchable")
            stats.full += 1
            return full.schedule_unbatched(pod, table)
        batch = next((b for b in self._batches if b.template == template), None)
        if batch is not None:
            self._batches.remove(batch)
            result = self._batched(batch, pod, table, stamp)
            if result is not None:
                stats.batched += 1
                self._batches.append(batch)
                return result
        stats.full += 1
        result = full.schedule_unbatched(pod, table)
        if self._seen_recently(template):
            stored = stored_batch(full, stats, self._consulted, template, pod, table, result, stamp)
            if stored is not None:
                self._batches.append(stored)
                if len(self._batches) > MAX_TEMPLATES:
                    del self._batches[0]
                stats.stored += 1
        else:
            stats.refuse("template not seen recently")
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

    def _batched(self, batch: Batch, pod: PodInfo, table: NodeTable, stamp: int) -> CycleResult | None:
        """The cycle from the batch, or None (refused: the caller runs the full cycle)."""
        full = self.full
        stats = self.stats
        if batch.validity != validity(full.handle, table):
            stats.refuse("cluster changed")
            return None
        if batch.deadline < np.inf:
            metrics = full.handle.metrics
            if not isinstance(metrics, MetricCache) or metrics.clock() + STALE_MARGIN >= batch.deadline:
                stats.refuse("telemetry ageing")
                return None
        if full.cluster.nominations.held_for(pod, table):
            stats.refuse("nominated pods")
            return None
        for token, seen in batch.tokens:
            if token() != seen:
                stats.refuse("cluster changed")
                return None
        rows = batch.rows
        # Every row whose pods changed (what the cluster-reading scorers count from), and those among the candidates.
        pods_changed = dirty = table.rows_changed_since(batch.stamp)
        positions = _NO_ROWS
        if dirty.size:
            if dirty.size > MAX_DIRTY:
                stats.refuse("many rows changed")
                return None
            positions = batch.position[dirty]
            if (positions.item(0) if positions.size == 1 else int(positions.min())) < 0:
                inside = positions >= 0
                if not still_turned_down(batch, pod, table, dirty[~inside], self._ledger_changes(batch)):
                    stats.refuse("changed row not a candidate")
                    return None
                dirty, positions = dirty[inside], positions[inside]
                stats.past_non_candidates += 1

        result = light_result(batch, pod, len(table))
        cycle, clock, timings = result.cycle, time.perf_counter, result.timings
        for pre_filter, skipped in batch.cluster_pre_filters:
            started = clock()
            status = pre_filter.pre_filter(cycle, pod)
            timings.append((pre_filter.name, "PreFilter", clock() - started, status.code.value))
            if not same_answer(status, skipped):
                stats.refuse("cluster plugin changed")
                return None
        ledger = self._ledger_changes(batch) if batch.ledger else {}
        if dirty.size:
            fits: BoolArray | None = None
            for check in batch.recheck:
                plugin = may_move(check, ledger)
                if plugin is not None:
                    verdict = np.asarray(plugin.filter_rows(cycle, pod, table, dirty), dtype=bool)
                    if not verdict.all():
                        fits = verdict if fits is None else fits & verdict
            if fits is not None:
                gone = dirty[~fits]
                if gone.size > MAX_GONE or not drop(full, stats, batch, result, table, gone, ledger):
                    stats.refuse("candidate no longer fits")
                    return None
                stats.dropped += int(gone.size)
                dirty, rows = dirty[fits], batch.rows
                positions = batch.position[dirty]

        for pre in batch.cluster_pre_scores:
            started = clock()
            status = pre.pre_score(cycle, pod, table, rows)
            timings.append((pre.name, "PreScore", clock() - started, status.code.value))
            if not same_answer(status, pre.name in batch.score_skipped):
                stats.refuse("cluster plugin changed")
                return None

        rescored = rescore(stats, batch, result, table, dirty, positions, ledger, pods_changed)
        if rescored is None:
            stats.refuse("cluster plugin changed")
            return None
        whole, moved, changed, regaps = rescored
        terms = batch.terms
        if changed and batch.stages is not None:  # else no term moves everywhere: never summed
            restage(batch.stages, terms, changed, regaps, positions)
        if whole:
            assert batch.stages is not None  # `whole`: a term normalised over every candidate moved
            total = staged_total(batch.stages)
        elif moved:
            total = batch.total.copy()
            if positions.size > FEW:
                total[positions] = rows_total(terms, positions)
            else:
                for position in positions.tolist():
                    total[position] = row_total(terms, position)
        else:
            total = batch.total
        result.terms = [entry.term for entry in terms]
        result.total = total
        batch.total, batch.stamp = total, stamp
        if ledger:
            batch.ledger.update(ledger)
        if dirty.size > FEW:
            stats.many_changed += 1
        full.choose(result, table, rows)
        return result


    def _ledger_changes(self, batch: Batch) -> dict[str, int]:
        return ledger_changes(batch, self.full.handle.ledger.appended)
