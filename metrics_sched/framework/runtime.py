"""Framework: one profile's plugins and the whole cycle of a pod, in kube-scheduler's order.

Scheduling cycle (the scheduling thread, one pod at a time):
    PreFilter → Filter → [PostFilter when nothing fits] → PreScore → Score → NormalizeScore → weights
    → assume → Reserve → Permit (allow / reject / wait)
Binding cycle (a bind worker; for a waiting pod, only once every Permit plugin allowed it):
    PreBind → Bind → PostBind
Any failure after assume runs Unreserve in reverse order and un-assumes the pod (`unwind`), except an
ambiguous bind (outcome unknown), which keeps the pod assumed so it is never overcommitted.

Filters narrow a boolean mask over all rows (counting, per reason, the nodes each one rejected
among those still feasible, which gives kube-scheduler's "0/N nodes are available: ..." message);
scores are normalised to 0-100 per plugin, then combined as a weighted mean in which a term with
no value for a node (NaN) drops out and the others are re-weighted for that node.
"""

from __future__ import annotations

import logging
import math
import random
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple, TypeVar

import numpy as np

from metrics_sched.config.model import ProfileConfig
from metrics_sched.framework.cycle_state import CycleState
from metrics_sched.framework.events import EventHint
from metrics_sched.framework.handle import Handle, Services
from metrics_sched.framework.interfaces import (
    MAX_PERMIT_TIMEOUT,
    BindOutcomeKind,
    BindPlugin,
    BindStatus,
    Filtered,
    FilterPlugin,
    MetricAwarePlugin,
    MetricEvidence,
    Normalized,
    PermitPlugin,
    PlacementPlugin,
    Plugin,
    PostBindPlugin,
    PostFilterPlugin,
    PostFilterResult,
    PreBindPlugin,
    PreEnqueuePlugin,
    PreFilterPlugin,
    PreScorePlugin,
    QueueSortPlugin,
    ReservePlugin,
    ScoreDetail,
    ScorePlugin,
)
from metrics_sched.framework.scoring import WeightedMean
from metrics_sched.framework.status import SUCCESS, Code, Status
from metrics_sched.framework.waiting import WaitingPod
from metrics_sched.model.podinfo import PodInfo
from metrics_sched.state.node_table import BoolArray, FloatArray, IntArray, NodeTable

if TYPE_CHECKING:
    from metrics_sched.framework.batching import Batcher

__all__ = ["CycleResult", "FilterStep", "Framework", "ScoreTerm", "WhatIf", "normalize_scores"]

log = logging.getLogger(__name__)
P = TypeVar("P", bound=Plugin)


@dataclass
class ScoreTerm:
    plugin: str
    weight: int
    raw: FloatArray  # over the feasible rows
    normalized: FloatArray
    evidence: tuple[MetricEvidence, ...] = ()


class FilterStep(NamedTuple):
    """One filter that ran in a cycle (CycleResult.filter_trace), its arrays kept as references (the cycle computes
    them anyway): its name, the feasible mask after it, and its reasons (Filtered.reasons: what a row it turned down
    first is counted under)."""

    name: str
    feasible: BoolArray
    reasons: dict[str, BoolArray]


@dataclass
class CycleResult:
    """Everything one attempt produced; the audit reads these typed fields, never the plugins' state."""

    pod: PodInfo
    profile: str
    node: str | None = None
    row: int | None = None
    status: Status = field(default_factory=Status)
    feasible_rows: IntArray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    total: FloatArray = field(default_factory=lambda: np.zeros(0))
    terms: list[ScoreTerm] = field(default_factory=list)
    rejections: Counter[str] = field(default_factory=Counter)
    rejected_by: set[str] = field(default_factory=set)
    nodes_total: int = 0
    timings: list[tuple[str, str, float, str]] = field(default_factory=list)  # plugin, point, seconds, status
    cycle: CycleState = field(default_factory=CycleState)
    nominated_node: str | None = None  # from PostFilter
    post_filter_message: str = ""  # what a successful PostFilter said (e.g. "preemption: ..."), appended to message()
    assumed: bool = False
    waiting: WaitingPod | None = None  # held at Permit (status WAIT) until Framework.hold() starts the wait
    skipped: set[str] = field(default_factory=set)  # plugins whose PreFilter/PreScore said Skip
    filter_skipped: frozenset[str] = frozenset()  # those whose PreFilter said Skip (set when scoring begins)
    bind_retries: int = 0  # binding cycles rerun because the bind's outcome was unknown
    summary: str = ""  # set by the audit: the Scheduled event's text
    # Each filter that ran: which filter turned a row down first and under which reasons, for opportunistic
    # batching's check of a changed row that was not a candidate.
    filter_trace: list[FilterStep] = field(default_factory=list)

    def release_arrays(self) -> None:
        """Drops the per-node arrays once the decision record holds what the audit needs: a result waiting
        for its bind must not keep megabytes of scores alive."""
        self.terms = []
        self.total = np.zeros(0)
        self.feasible_rows = np.zeros(0, dtype=np.int64)
        self.filter_trace = []

    def first_rejecter(self, row: int) -> int | None:
        """first_rejecter() in this cycle's filter_trace (None once the trace is released)."""
        return first_rejecter(self.filter_trace, row)

    def message(self) -> str:
        """Why the pod is not bound, in kube-scheduler's FailedScheduling shape."""
        if self.status.code == Code.ERROR:
            return f"running {self.status.plugin}: {self.status.reason}"
        if self.node is not None:  # chosen, then turned down by Reserve, Permit, PreBind or Bind
            return f"{self.status.plugin}: {self.status.reason}"
        if self.status.reason and not self.rejections:
            return f"0/{self.nodes_total} nodes are available: {self.status.reason}."
        parts = ", ".join(f"{count} {reason}" for reason, count in sorted(self.rejections.items()))
        tail = f" {self.post_filter_message}" if self.post_filter_message else ""
        return f"0/{self.nodes_total} nodes are available: {parts}.{tail}"


@dataclass
class WhatIf:
    """Framework.what_if's answer. status not ok: a PreFilter or PreScore turned the pod down (nothing scored)."""

    status: Status
    feasible: IntArray  # the rows every filter passes
    rows: IntArray  # the rows scored: the feasible ones and those asked for, ascending
    total: FloatArray  # weighted totals (0-100) over `rows`, as the cycle computes them
    rejections: Counter[str]  # reason -> nodes, as in CycleResult


# kube-scheduler's minFeasibleNodesToFind: below this many nodes every node is scored, whatever the percentage.
_MIN_FEASIBLE_TO_FIND = 100

# The codes each extension point may return; anything else is a plugin bug, turned into an Error.
_REJECTIONS = frozenset({Code.UNSCHEDULABLE, Code.UNRESOLVABLE})
_PRE = frozenset({Code.SUCCESS, Code.SKIP, Code.ERROR}) | _REJECTIONS
_RESERVE = frozenset({Code.SUCCESS, Code.ERROR}) | _REJECTIONS
_PERMIT = frozenset({Code.SUCCESS, Code.SKIP, Code.WAIT, Code.ERROR}) | _REJECTIONS
_BIND = frozenset({Code.SUCCESS, Code.SKIP, Code.PENDING, Code.ERROR}) | _REJECTIONS


def first_rejecter(trace: Sequence[FilterStep], row: int) -> int | None:
    """The position in a filter trace (CycleResult.filter_trace) of the filter that turned `row` down first (the one
    its rejection is counted under), or None when none did."""
    for position, step in enumerate(trace):
        if not step.feasible[row]:
            return position
    return None


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


def _checked(status: Status, allowed: frozenset[Code], point: str) -> Status:
    if status.code in allowed:
        return status
    return Status.error(f"{point} returned {status.code.value}, which {point} may not return ({status.reason})")


class Framework:
    def __init__(self, profile: ProfileConfig, plugins: Mapping[str, type[Plugin]], services: Services) -> None:
        self.profile = profile
        self.name = profile.scheduler_name
        self.handle = Handle.of(services)
        self.handle.filters = self
        self.cluster = services.cluster
        self.instances: dict[str, Plugin] = {}
        for point in profile.plugins:
            for ref in profile.enabled(point):
                if ref.name not in self.instances:
                    # The loader parsed the args; a profile built in code may pass a mapping (or nothing).
                    self.instances[ref.name] = plugins[ref.name](profile.plugin_args.get(ref.name), self.handle)

        self.pre_enqueues = self._at("preEnqueue", PreEnqueuePlugin)
        sorts = self._at("queueSort", QueueSortPlugin)
        if len(sorts) != 1:
            raise ValueError(f"profile {self.name}: exactly one queueSort plugin must be enabled, got {len(sorts)}")
        self.queue_sort = sorts[0]
        self.pre_filters = self._at("preFilter", PreFilterPlugin)
        self.filters = self._at("filter", FilterPlugin)
        self.post_filters = self._at("postFilter", PostFilterPlugin)
        self.pre_scores = self._at("preScore", PreScorePlugin)
        self.scores: list[tuple[ScorePlugin, int]] = [
            (self._typed(ref.name, ScorePlugin), ref.weight) for ref in profile.enabled("score")]
        self.reserves = self._at("reserve", ReservePlugin)
        self.permits = self._at("permit", PermitPlugin)
        self.pre_binds = self._at("preBind", PreBindPlugin)
        self.binders = self._at("bind", BindPlugin)
        self.post_binds = self._at("postBind", PostBindPlugin)
        self.metric_aware = [p for p in self.filters if isinstance(p, MetricAwarePlugin)]
        self.placements = [p for p in self.filters if isinstance(p, PlacementPlugin)]
        self.random = random.Random()
        self.percentage = profile.percentage_of_nodes_to_score
        self._next_start = 0  # where the next sample of feasible nodes starts (round-robin, as upstream)
        self.batcher: Batcher | None = None  # opportunistic batching (set by the scheduler when it is on)

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

    def _typed(self, name: str, interface: type[P]) -> P:
        plugin = self.instances[name]
        if not isinstance(plugin, interface):
            raise TypeError(f"plugin {name} does not implement {interface.__name__}")
        return plugin

    def _at(self, point: str, interface: type[P]) -> list[P]:
        return [self._typed(ref.name, interface) for ref in self.profile.enabled(point)]

    # -- queueing --------------------------------------------------------------------------------
    def events_of(self, plugin_names: set[str]) -> list[EventHint]:
        hints: list[EventHint] = []
        for name in plugin_names:
            plugin = self.instances.get(name)
            if plugin is not None:
                hints.extend(plugin.events_to_register())
        return hints

    def pre_enqueue(self, pod: PodInfo) -> Status:
        for plugin in self.pre_enqueues:
            status = plugin.pre_enqueue(pod)
            if not status.ok:
                return status.by(plugin.name)
        return SUCCESS

    def metrics_changed(self, table: NodeTable) -> bool:
        """After a telemetry refresh: True if a metric filter may admit a node now."""
        admitted = False
        for plugin in self.metric_aware:
            admitted = plugin.metrics_changed(table) or admitted  # every plugin sees the refresh
        return admitted

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
            verdict = plugin.filter(cycle, pod, table)
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

    def schedule(self, pod: PodInfo, table: NodeTable) -> CycleResult:
        """PreFilter → Filter → (PostFilter) → PreScore → Score: picks a node, changes nothing. With batching on,
        a pod of the same template as an earlier one may reuse that cycle (the same decision, computed on the
        nodes that changed: framework.batching)."""
        if self.batcher is not None:
            return self.batcher.schedule(pod, table)
        return self.schedule_unbatched(pod, table)

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
            if result.status.code in _REJECTIONS:
                self._post_filter(result, table)
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

    def dry_run(self, pod: PodInfo, table: NodeTable) -> tuple[Filtered, frozenset[str]] | None:
        """PreFilter and Filter in a fresh cycle over the state as it is now (preemption's what-if runs, inside
        ClusterState.simulated): the verdict and the filters that had something to check (not skipped by their
        PreFilter). None when a PreFilter turns the pod down."""
        result = CycleResult(pod=pod, profile=self.name, nodes_total=len(table))
        if not self._pre_filter(result):
            return None
        verdict = self._filter(result.cycle, pod, table, None)
        return verdict, frozenset(p.name for p in self.filters if p.name not in result.skipped)

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
            status = _checked(pre_filter.pre_filter(cycle, pod), _PRE, "PreFilter").by(pre_filter.name)
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
            status = _checked(pre.pre_score(cycle, pod, table, rows), _PRE, "PreScore").by(pre.name)
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
            status = _checked(status, _RESERVE, "Placement").by(plugin.name)
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

    def run_scheduling_cycle(self, pod: PodInfo,
                             on_permit: Callable[[CycleResult, Status], None]) -> CycleResult | None:
        """Schedule, assume, Reserve, Permit. result.status tells the scheduler what to do next: SUCCESS
        bind now; WAIT held at Permit (start the wait with hold(); `on_permit` is called once it ends);
        a rejection or error: the pod was un-assumed. None: the pod is already placed (the watch lags)."""
        with self.cluster.lock:
            if self.cluster.is_placed(pod.uid):
                return None
            result = self.schedule(pod, self.cluster.table)
            if result.node is None:
                return result
            self.cluster.assume(pod, result.node)
            result.assumed = True
        status = self._reserve(result)
        if status.ok:
            status = self._permit(result, on_permit)
        result.status = status
        return result

    def _call(self, result: CycleResult, plugin: Plugin, point: str, allowed: frozenset[Code],
              call: Callable[[CycleState, PodInfo, str], Status], node: str) -> Status:
        started = time.perf_counter()
        try:
            status = _checked(call(result.cycle, result.pod, node), allowed, point)
        except Exception as exc:
            log.exception("%s %s failed for %s", point, plugin.name, result.pod.key)
            status = Status.error(repr(exc))
        result.timings.append((plugin.name, point, time.perf_counter() - started, status.code.text))
        return status.by(plugin.name)

    def _reserve(self, result: CycleResult) -> Status:
        node = result.node
        assert node is not None
        for plugin in self.reserves:
            status = self._call(result, plugin, "Reserve", _RESERVE, plugin.reserve, node)
            if not status.ok:
                self.unwind(result)
                return status
        return SUCCESS

    def _permit(self, result: CycleResult, on_permit: Callable[[CycleResult, Status], None]) -> Status:
        node = result.node
        assert node is not None
        timeouts: dict[str, float] = {}
        for plugin in self.permits:
            started = time.perf_counter()
            try:
                status, timeout = plugin.permit(result.cycle, result.pod, node)
                status = _checked(status, _PERMIT, "Permit").by(plugin.name)
            except Exception as exc:
                log.exception("Permit %s failed for %s", plugin.name, result.pod.key)
                status, timeout = Status.error(repr(exc), plugin.name), 0.0
            result.timings.append((plugin.name, "Permit", time.perf_counter() - started, status.code.text))
            if status.code == Code.WAIT:
                # kube-scheduler caps a wait at 15 minutes; no timeout (or a nonsense one) means the cap.
                timeouts[plugin.name] = (min(max(0.0, timeout), MAX_PERMIT_TIMEOUT) if math.isfinite(timeout)
                                         else MAX_PERMIT_TIMEOUT)
            elif not status.ok:
                self.unwind(result)
                return status
        if not timeouts:
            return SUCCESS

        def resolved(status: Status) -> None:
            self.handle.waiting_pods.remove(result.pod.uid)
            if not status.ok:
                self.unwind(result)
            on_permit(result, status)

        result.waiting = WaitingPod(result.pod, node, timeouts, resolved)
        return Status.wait(f"waiting at Permit for {', '.join(sorted(timeouts))}", ",".join(sorted(timeouts)))

    def hold(self, result: CycleResult) -> None:
        """Starts the Permit wait of a pod whose cycle answered WAIT. Separate from the cycle so the caller
        records the decision first: an allow from another thread may start the binding at once."""
        if result.waiting is not None:
            self.handle.waiting_pods.add(result.waiting)

    def unwind(self, result: CycleResult) -> None:
        """Unreserve and un-assume the pod. As in kube-scheduler, every Reserve plugin's Unreserve runs, in
        reverse order, whether or not its Reserve ran or failed (Unreserve must be idempotent)."""
        node = result.node
        if node is not None:
            for plugin in reversed(self.reserves):
                try:
                    plugin.unreserve(result.cycle, result.pod, node)
                except Exception:
                    log.exception("unreserve of %s failed", plugin.name)
        if result.assumed:
            self.cluster.forget(result.pod.uid)
            result.assumed = False

    # -- binding cycle ---------------------------------------------------------------------------
    def run_binding_cycle(self, result: CycleResult) -> BindStatus:
        """PreBind → Bind → PostBind; the returned status always carries an outcome. On failure the pod is
        unwound, except when the bind's outcome is unknown (PENDING): it stays assumed and the same
        binding cycle is run again later."""
        node = result.node
        assert node is not None
        for plugin in self.pre_binds:
            status = self._call(result, plugin, "PreBind", _PRE, plugin.pre_bind, node)
            if not status.ok:
                self.unwind(result)
                return _as_bind_status(status)
        bound: BindStatus | None = None
        for binder in self.binders:
            status = self._call(result, binder, "Bind", _BIND, binder.bind, node)
            if status.code != Code.SKIP:
                bound = _as_bind_status(status)
                break
        if bound is None:
            bound = BindStatus(Code.ERROR, "no bind plugin bound the pod (all skipped)", "", BindOutcomeKind.ERROR)
        if bound.outcome == BindOutcomeKind.UNKNOWN:
            return bound
        if bound.code != Code.SUCCESS:
            self.unwind(result)
            return bound
        for post in self.post_binds:
            try:
                post.post_bind(result.cycle, result.pod, node)
            except Exception:
                log.exception("postBind %s failed", post.name)
        return bound


_BOUND = frozenset({BindOutcomeKind.BOUND, BindOutcomeKind.ALREADY_BOUND})
_GIVEN_UP = frozenset({BindOutcomeKind.GONE, BindOutcomeKind.BOUND_ELSEWHERE})


def _as_bind_status(status: Status) -> BindStatus:
    """The status with its outcome: derived from the code, or the plugin's own if it agrees with the code."""
    outcome = status.outcome if isinstance(status, BindStatus) else None
    if outcome is None:
        if status.code == Code.SUCCESS:
            outcome = BindOutcomeKind.BOUND
        elif status.code == Code.PENDING:
            outcome = BindOutcomeKind.UNKNOWN
        elif status.code in _REJECTIONS:
            outcome = BindOutcomeKind.REJECTED
        else:
            outcome = BindOutcomeKind.ERROR
    consistent = ((outcome in _BOUND) == (status.code == Code.SUCCESS)
                  and (outcome == BindOutcomeKind.UNKNOWN) == (status.code == Code.PENDING)
                  and (outcome not in _GIVEN_UP or status.code in _REJECTIONS))
    if not consistent:
        return BindStatus(Code.ERROR, f"{outcome} with status {status.code.value}: {status.reason}", status.plugin,
                          BindOutcomeKind.ERROR)
    return BindStatus(status.code, status.reason, status.plugin, outcome)
