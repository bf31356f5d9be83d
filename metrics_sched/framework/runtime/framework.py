"""Framework: one profile's plugins and the whole cycle of a pod, in kube-scheduler's order.

Scheduling cycle (the scheduling thread, one pod at a time):
    the cycle runner (PreFilter → Filter → [PostFilter] → PreScore → Score → the pick) → assume → Reserve
    → Permit (allow / reject / wait)
Binding cycle (a bind worker; for a waiting pod, only once every Permit plugin allowed it):
    PreBind → Bind → PostBind
Any failure after assume runs Unreserve in reverse order and un-assumes the pod (`unwind`), except an
ambiguous bind (outcome unknown), which keeps the pod assumed so it is never overcommitted.

The cycle runner is chosen from the profile when the Framework is built: the full cycle over every node
(runtime.full_cycle, which the Framework is), or with opportunisticBatching the batched-cycle runner
(runtime.batching), which reuses an earlier cycle of the pod's template and runs the full one when it cannot.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping
from typing import TypeVar

from metrics_sched.config.model import ProfileConfig
from metrics_sched.framework.cycle_state import CycleState
from metrics_sched.framework.events import EventHint
from metrics_sched.framework.handle import Handle, Services
from metrics_sched.framework.interfaces import (
    MAX_PERMIT_TIMEOUT,
    BindOutcomeKind,
    BindPlugin,
    BindStatus,
    FilterPlugin,
    MetricAwarePlugin,
    PermitPlugin,
    Plugin,
    PostBindPlugin,
    PostFilterPlugin,
    PreBindPlugin,
    PreEnqueuePlugin,
    PreFilterPlugin,
    PreScorePlugin,
    QueueSortPlugin,
    ReservePlugin,
    ScorePlugin,
)
from metrics_sched.framework.runtime.batching import Batcher
from metrics_sched.framework.runtime.codes import BIND, PERMIT, PRE, REJECTIONS, RESERVE, checked
from metrics_sched.framework.runtime.full_cycle import FullCycle
from metrics_sched.framework.runtime.results import CycleResult
from metrics_sched.framework.status import SUCCESS, Code, Status
from metrics_sched.framework.waiting import WaitingPod
from metrics_sched.model.podinfo import PodInfo
from metrics_sched.state.node_table import NodeTable

__all__ = ["Framework"]

log = logging.getLogger(__name__)
P = TypeVar("P", bound=Plugin)


class Framework(FullCycle):
    def __init__(self, profile: ProfileConfig, plugins: Mapping[str, type[Plugin]], services: Services) -> None:
        self.profile = profile
        handle = Handle.of(services)
        handle.filters = self  # before any plugin is built, as a plugin may keep the handle's runner
        self.instances: dict[str, Plugin] = {}
        for point in profile.plugins:
            for ref in profile.enabled(point):
                if ref.name not in self.instances:
                    for index in plugins[ref.name].indexes:  # before the plugin, which may look them up at once
                        services.indexes.declare(index)
                    # The loader parsed the args; a profile built in code may pass a mapping (or nothing).
                    self.instances[ref.name] = plugins[ref.name](profile.plugin_args.get(ref.name), handle)

        name = profile.scheduler_name
        self.pre_enqueues = self._at("preEnqueue", PreEnqueuePlugin)
        sorts = self._at("queueSort", QueueSortPlugin)
        if len(sorts) != 1:
            raise ValueError(f"profile {name}: exactly one queueSort plugin must be enabled, got {len(sorts)}")
        self.queue_sort = sorts[0]
        super().__init__(
            name, handle, profile.percentage_of_nodes_to_score,
            pre_filters=self._at("preFilter", PreFilterPlugin), filters=self._at("filter", FilterPlugin),
            # A shadow profile nominates and preempts nothing: no PostFilter.
            post_filters=[] if profile.shadow else self._at("postFilter", PostFilterPlugin),
            pre_scores=self._at("preScore", PreScorePlugin),
            scores=[(self._typed(ref.name, ScorePlugin), ref.weight) for ref in profile.enabled("score")])
        self.reserves = self._at("reserve", ReservePlugin)
        self.permits = self._at("permit", PermitPlugin)
        self.pre_binds = self._at("preBind", PreBindPlugin)
        self.binders = self._at("bind", BindPlugin)
        self.post_binds = self._at("postBind", PostBindPlugin)
        self.metric_aware = [p for p in self.filters if isinstance(p, MetricAwarePlugin)]
        # The cycle runner, from the profile: the batched one runs this full cycle when it cannot reuse a batch
        # (None: every pod's cycle is the full one).
        self.batcher: Batcher | None = Batcher(self) if profile.opportunistic_batching else None

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
    def schedule(self, pod: PodInfo, table: NodeTable) -> CycleResult:
        """PreFilter → Filter → (PostFilter) → PreScore → Score: picks a node, changes nothing. With batching on,
        a pod of the same template as an earlier one may reuse that cycle (the same decision, computed on the
        nodes that changed: runtime.batching)."""
        if self.batcher is not None:
            return self.batcher.schedule(pod, table)
        return self.schedule_unbatched(pod, table)

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
            status = checked(call(result.cycle, result.pod, node), allowed, point)
        except Exception as exc:
            log.exception("%s %s failed for %s", point, plugin.name, result.pod.key)
            status = Status.error(repr(exc))
        result.timings.append((plugin.name, point, time.perf_counter() - started, status.code.text))
        return status.by(plugin.name)

    def _reserve(self, result: CycleResult) -> Status:
        node = result.node
        assert node is not None
        for plugin in self.reserves:
            status = self._call(result, plugin, "Reserve", RESERVE, plugin.reserve, node)
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
                status = checked(status, PERMIT, "Permit").by(plugin.name)
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
            status = self._call(result, plugin, "PreBind", PRE, plugin.pre_bind, node)
            if not status.ok:
                self.unwind(result)
                return _as_bind_status(status)
        bound: BindStatus | None = None
        for binder in self.binders:
            status = self._call(result, binder, "Bind", BIND, binder.bind, node)
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
        elif status.code in REJECTIONS:
            outcome = BindOutcomeKind.REJECTED
        else:
            outcome = BindOutcomeKind.ERROR
    consistent = ((outcome in _BOUND) == (status.code == Code.SUCCESS)
                  and (outcome == BindOutcomeKind.UNKNOWN) == (status.code == Code.PENDING)
                  and (outcome not in _GIVEN_UP or status.code in REJECTIONS))
    if not consistent:
        return BindStatus(Code.ERROR, f"{outcome} with status {status.code.value}: {status.reason}", status.plugin,
                          BindOutcomeKind.ERROR)
    return BindStatus(status.code, status.reason, status.plugin, outcome)
