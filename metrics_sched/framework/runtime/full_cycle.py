"""The full-cycle runner: one pod's scheduling cycle over every node, in kube-scheduler's order.

    PreFilter → Filter → [PostFilter when nothing fits] → PreScore → Score → NormalizeScore → weights → the pick

Filters narrow a boolean mask over all rows (counting, per reason, the nodes each one rejected among those still
feasible, which gives kube-scheduler's "0/N nodes are available: ..." message); scores are normalised to 0-100 per
plugin, then combined as a weighted mean in which a term with no value for a node (NaN) drops out and the others
are re-weighted for that node. It picks a node and changes nothing: assume, Reserve, Permit and binding are the
Framework's (runtime.framework). The batched-cycle runner (runtime.batching) calls this one, never the reverse.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Sequence

import numpy as np

from metrics_sched.framework.cycle_state import CycleState
from metrics_sched.framework.filtered import FEASIBLE_BEFORE, DryRun
from metrics_sched.framework.handle import Handle
from metrics_sched.framework.interfaces import (
    Filtered,
    FilterPlugin,
    Normalized,
    PlacementPlugin,
    PostFilterPlugin,
    PostFilterResult,
    PreFilterPlugin,
    PreScorePlugin,
    ScoreDetail,
    ScorePlugin,
)
from metrics_sched.framework.runtime.codes import PRE, REJECTIONS, RESERVE, checked
from metrics_sched.framework.runtime.results import CycleResult, FilterStep, ScoreTerm, WhatIf
from metrics_sched.framework.scoring import WeightedMean
from metrics_sched.framework.status import Code, Status
from metrics_sched.model.podinfo import PodInfo
from metrics_sched.state.node_table import BoolArray, FloatArray, IntArray, NodeTable

__all__ = ["FullCycle", "normalize_scores"]

log = logging.getLogger(__name__)

# kube-scheduler's minFeasibleNodesToFind: below this many nodes every node is scored, whatever the percentage.
_MIN_FEASIBLE_TO_FIND = 100


def normalize_scores(scorer: ScorePlugin, raw: FloatArray) -> tuple[FloatArray, bool]:
    """The plugin's normalize() of `raw`, held to 0-100 unless the plugin promises it (`scorer.normalized`), and
    whether it has NaN: the cycle's normalisation, which a batched cycle repeats on the rows that changed."""
    normalized = np.asarray(scorer.normalize(raw), dtype=np.float64)
    promise = scorer.normalized
    if promise is Normalized.COMPLETE:
        return normalized, False
    if promise is Normalized.IN_RANGE:
        return normalized, bool(np.isnan(normalized).any())
    return _bounded(normalized)


def _bounded(normalized: FloatArray) -> tuple[FloatArray, bool]:
    """A normalised score held to 0-100, anything not finite made NaN (no value); and whether it has NaN.
    Two reductions tell the usual case (every value already in range) from the one that needs the masks."""
    if normalized.size == 0:
        return normalized, False
    low, high = normalized.min(), normalized.max()  # NaN if any is NaN
    if low >= 0.0 and high <= 100.0:
        return normalized, False
    bounded = np.where(np.isfinite(normalized), np.clip(normalized, 0.0, 100.0), np.nan)
    return bounded, bool(np.isnan(bounded).any())



class FullCycle:
    """One profile's scheduling cycle over every node (the Framework is one; the batched runner calls it)."""

    def __init__(self, name: str, handle: Handle, percentage: int, *, pre_filters: Sequence[PreFilterPlugin],
                 filters: Sequence[FilterPlugin], post_filters: Sequence[PostFilterPlugin],
                 pre_scores: Sequence[PreScorePlugin], scores: Sequence[tuple[ScorePlugin, int]]) -> None:
        self.name = name
        self.handle = handle
        self.cluster = handle.cluster
        self.pre_filters = list(pre_filters)
        self.filters = list(filters)
        self.post_filters = list(post_filters)
        self.pre_scores = list(pre_scores)
        self.scores = list(scores)
        self.placements = [p for p in self.filters if isinstance(p, PlacementPlugin)]
        self.random = random.Random()
        self.percentage = percentage
        self._next_start = 0  # where the next sample of feasible nodes starts (round-robin, as upstream)

    def _sample(self, rows: IntArray, all_nodes: int) -> IntArray:
        """percentageOfNodesToScore below 100: only that share of the nodes (at least 100) goes on to scoring,
        taken round-robin from where the last cycle stopped (kube-scheduler's numFeasibleNodesToFind and
        nextStartNodeIndex). The filters have already run over every node (one vector pass each), so what is
        saved is scoring; the default, 100, scores every feasible node."""
        if self.percentage >= 100 or all_nodes < _MIN_FEASIBLE_TO_FIND:
            return rows
        wanted = max(all_nodes * self.percentage // 100, _MIN_FEASIBLE_TO_FIND)
        if rows.size <= wanted:
            return rows
        # Past the last feasible row, searchsorted answers rows.size: the order then wraps to the first row.
        start = int(np.searchsorted(rows, self._next_start))
        order = np.concatenate([rows[start:], rows[:start]])
        taken = np.sort(order[:wanted])
        self._next_start = int(order[wanted - 1]) + 1
        return taken

    # -- scheduling cycle ------------------------------------------------------------------------
    def run_filters(self, cycle: CycleState, pod: PodInfo, table: NodeTable) -> Filtered:
        """Every filter, as the cycle runs them; for PostFilter's what-if runs on a cloned cycle state."""
        return self._filter(cycle, pod, table, None)

    def _filter(self, cycle: CycleState, pod: PodInfo, table: NodeTable, result: CycleResult | None) -> Filtered:
        """Narrows a mask over all rows. With a result, counts per reason the nodes each filter rejected
        among those still feasible (kube-scheduler's "0/N nodes are available: ..."), and times each."""
        feasible = table.present[: table.capacity].copy()
        count = int(np.count_nonzero(feasible))
        reasons: dict[str, BoolArray] = {}
        skipped = result.skipped if result is not None else set()
        clock = time.perf_counter
        for plugin in self.filters:
            if plugin.name in skipped:
                continue
            started = clock()
            cycle.write(FEASIBLE_BEFORE, feasible)
            verdict = plugin.filter(cycle, pod, table)
            if verdict.error is not None:
                # The attempt ends here with an Error (backoff, then a retry), as upstream's Filter error does.
                if result is not None:
                    result.status = Status.error(verdict.error, plugin.name)
                    result.rejected_by.add(plugin.name)
                    result.timings.append((plugin.name, "Filter", clock() - started, "Error"))
                return Filtered(np.zeros(table.capacity, dtype=bool), reasons, verdict.error)
            before = feasible
            feasible = before & verdict.feasible
            remaining = int(np.count_nonzero(feasible))
            rejected, count = count - remaining, remaining
            if result is None:  # a what-if run returns the reasons; a cycle counts them instead
                for reason, rows in verdict.reasons.items():
                    reasons[reason] = rows & before
            else:
                if rejected:
                    result.rejected_by.add(plugin.name)
                    for reason, rows in verdict.reasons.items():
                        rejected_here = int(np.count_nonzero(rows & before))
                        if rejected_here:
                            result.rejections[reason] += rejected_here
                result.timings.append((plugin.name, "Filter", clock() - started,
                                       "Unschedulable" if rejected else "Success"))
                result.filter_trace.append(FilterStep(plugin.name, feasible, verdict.reasons))
            if not count:
                break
        return Filtered(feasible, reasons)

    def schedule_unbatched(self, pod: PodInfo, table: NodeTable) -> CycleResult:
        """The whole cycle over every node."""
        result = CycleResult(pod=pod, profile=self.name, nodes_total=len(table))
        # Nominated pods of at least this pod's priority hold the room preemption made for them (kube-scheduler's
        # RunFilterPluginsWithNominatedPods): counted on their nodes for PreFilter and Filter, never for scoring.
        with self.cluster.simulated(added=self.cluster.nominations.held_for(pod, table)):
            passed = self._pre_filter(result)
            if passed:
                rows: IntArray = np.flatnonzero(
                    self._filter(result.cycle, pod, table, result).feasible).astype(np.int64, copy=False)
        if not passed:
            if result.status.code in REJECTIONS:
                self._post_filter(result, table)
            return result
        if result.status.code == Code.ERROR:  # a filter's error: no PostFilter, the pod backs off
            result.feasible_rows = rows
            return result
        if rows.size == 0:
            result.feasible_rows = rows
            result.status = Status(Code.UNSCHEDULABLE, "no node fits" if not result.rejections else "",
                                   ",".join(sorted(result.rejected_by)))
            self._post_filter(result, table)
            return result
        rows = self._sample(rows, len(table))
        result.feasible_rows = rows

        if not self._score(result, table, rows):
            return result
        self.choose(result, table, rows)
        return result

    def choose(self, result: CycleResult, table: NodeTable, rows: IntArray) -> None:
        """The pick among the scored `rows` (result.total): the placement plugins' narrowing, then the highest
        total, ties broken at random (as kube-scheduler's selectHost). result.node stays None when a placement
        plugin turns the pod down."""
        placed, allowed = self._place(result, table, rows)
        if not placed:
            return
        total = result.total if allowed is None else np.where(allowed, result.total, -np.inf)
        # The first highest, and the others only when there are (count_nonzero makes no array of positions): the
        # same pick as a draw among flatnonzero(total == max), and the same draws.
        pick = int(total.argmax())
        top = total[pick]
        if top != top or np.count_nonzero(total == top) > 1:  # tied, or NaN (then max() is NaN too: as before)
            best = np.flatnonzero(total == total.max())
            pick = int(best[self.random.randrange(best.size)]) if best.size > 1 else int(best[0])
        result.row = int(rows[pick])
        result.node = table.name(result.row)

    def what_if(self, pod: PodInfo, table: NodeTable, also: IntArray) -> WhatIf:
        """What the cycle would make of `pod`, changing and picking nothing (the rebalancer's simulation):
        PreFilter → Filter → PreScore → Score, the rows in `also` scored with the feasible ones even where a
        filter rejects them, so a pod's own node (which the heat filter may turn down) is compared with where
        it could go in one normalisation. No PostFilter: nothing is nominated or preempted."""
        with self.cluster.lock:
            result = CycleResult(pod=pod, profile=self.name, nodes_total=len(table))
            empty = np.zeros(0, dtype=np.int64)
            if not self._pre_filter(result):
                return WhatIf(result.status, empty, empty, np.zeros(0), result.rejections)
            feasible = np.flatnonzero(self._filter(result.cycle, pod, table, result).feasible).astype(np.int64)
            rows = np.union1d(feasible, np.asarray(also, dtype=np.int64)).astype(np.int64)
            if rows.size == 0 or not self._score(result, table, rows):
                return WhatIf(result.status, feasible, empty, np.zeros(0), result.rejections)
            return WhatIf(result.status, feasible, rows, result.total, result.rejections)

    def dry_run(self, pod: PodInfo, table: NodeTable, cycle: CycleState | None = None) -> DryRun | None:
        """PreFilter and Filter over the state as it is now (preemption's what-if runs, inside
        ClusterState.simulated): the verdict, and what the filters that had something to check (not skipped by
        their PreFilter) declare about it. None when a PreFilter turns the pod down.

        `cycle`: the pod's own cycle state (a PostFilter's), as upstream's SelectVictimsOnNode clones it. The
        PreFilters run again on a clone of it: that recomputes what they derive from the cluster's pods in the
        simulated state (upstream's AddPod/RemovePod), and a PreFilter that admits a pod once per cycle (a gang's
        backoff) finds what it decided and keeps it. None: a fresh cycle (a pod whose cycle this is not)."""
        result = CycleResult(pod=pod, profile=self.name, nodes_total=len(table))
        if cycle is not None:
            result.cycle = cycle.clone()
        if not self._pre_filter(result):
            return None
        verdict = self._filter(result.cycle, pod, table, None)
        in_play = [p for p in self.filters if p.name not in result.skipped]
        resolvable = frozenset(r for r in verdict.reasons if any(p.resolvable(r) for p in in_play))
        return DryRun(verdict, resolvable, all(p.node_local for p in in_play))

    def rank(self, pod: PodInfo, table: NodeTable, rows: IntArray) -> FloatArray | None:
        """The weighted totals the cycle would give `rows` (filters or not): PostFilter's tie-break."""
        answer = self.what_if(pod, table, rows)
        if not answer.status.ok or answer.rows.size == 0:
            return None
        position = np.searchsorted(answer.rows, rows)
        return np.asarray(answer.total[position], dtype=np.float64)

    def _pre_filter(self, result: CycleResult) -> bool:
        """Every PreFilter in order; False (result.status says why) when one turns the pod down."""
        cycle, pod, clock = result.cycle, result.pod, time.perf_counter
        for pre_filter in self.pre_filters:
            started = clock()
            status = checked(pre_filter.pre_filter(cycle, pod), PRE, "PreFilter").by(pre_filter.name)
            result.timings.append((pre_filter.name, "PreFilter", clock() - started, status.code.text))
            if status.code == Code.SKIP:
                result.skipped.add(pre_filter.name)  # its Filter has nothing to check for this pod
            elif not status.ok:
                result.status = status
                result.rejected_by.add(pre_filter.name)
                return False
        return True

    def _score(self, result: CycleResult, table: NodeTable, rows: IntArray) -> bool:
        """PreScore → Score → normalise → weights over `rows`, into result.terms and result.total; False
        (result.status says why) when a PreScore fails."""
        cycle, pod, clock = result.cycle, result.pod, time.perf_counter
        result.filter_skipped = frozenset(result.skipped)
        result.skipped.clear()  # PreScore's skips are about scores
        for pre in self.pre_scores:
            started = clock()
            status = checked(pre.pre_score(cycle, pod, table, rows), PRE, "PreScore").by(pre.name)
            result.timings.append((pre.name, "PreScore", clock() - started, status.code.text))
            if status.code == Code.SKIP:
                result.skipped.add(pre.name)
            elif not status.ok:
                result.status = status
                return False

        mean = WeightedMean(rows.size)
        for scorer, weight in self.scores:
            if scorer.name in result.skipped:
                continue
            started = clock()
            scored = scorer.score(cycle, pod, table, rows)
            detail = scored if isinstance(scored, ScoreDetail) else ScoreDetail(scored)
            raw = np.asarray(detail.scores, dtype=np.float64)
            normalized, gaps = normalize_scores(scorer, raw)
            result.terms.append(ScoreTerm(scorer.name, weight, raw, normalized, detail.evidence))
            mean.add(normalized, weight, gaps=gaps)
            result.timings.append((scorer.name, "Score", clock() - started, "Success"))
        result.total = mean.result(empty=0.0)
        return True

    def _place(self, result: CycleResult, table: NodeTable, rows: IntArray) -> tuple[bool, BoolArray | None]:
        """The placement plugins' narrowing of the scored rows: (True, None) when none narrows (every row stays, no
        mask built: the usual case), (True, mask) otherwise; (False, None) when one turns the pod down or the
        narrowing leaves no row (result.status says why)."""
        allowed: BoolArray | None = None
        for plugin in self.placements:
            started = time.perf_counter()
            mask, status = plugin.place(result.cycle, result.pod, table, rows, result.total)
            status = checked(status, RESERVE, "Placement").by(plugin.name)
            result.timings.append((plugin.name, "Placement", time.perf_counter() - started, status.code.text))
            if not status.ok:
                result.status = status
                result.rejected_by.add(plugin.name)
                return False, None
            if mask is not None:
                allowed = mask if allowed is None else allowed & mask  # never changed in place
        if allowed is not None and not allowed.any():
            result.status = Status(Code.UNSCHEDULABLE, "placement left no scored node", "")
            return False, None
        return True, allowed

    def _post_filter(self, result: CycleResult, table: NodeTable) -> None:
        """Nothing fits: PostFilter plugins in order until one succeeds (e.g. nominates a node). Their
        errors are logged; the pod stays Unschedulable with the filters that rejected it."""
        for plugin in self.post_filters:
            started = time.perf_counter()
            try:
                found, status = plugin.post_filter(result.cycle, result.pod, table, result.rejections)
            except Exception as exc:
                log.exception("PostFilter %s failed for %s", plugin.name, result.pod.key)
                found, status = PostFilterResult(), Status.error(repr(exc))
            result.timings.append((plugin.name, "PostFilter", time.perf_counter() - started, status.code.value))
            if status.code == Code.SUCCESS:
                # e.g. "preemption: ... are being preempted": FailedScheduling says what is under way. A PostFilter
                # that could not help keeps the filters' message (the decision record has its reason).
                result.post_filter_message = status.reason
                result.nominated_node = found.nominated_node
                return
            if status.code == Code.ERROR:
                log.error("PostFilter %s for %s: %s", plugin.name, result.pod.key, status.reason)
