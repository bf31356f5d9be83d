"""Scheduler: the cluster state, the queue, one Framework per profile, the binder, and the loop.

The loop pops a pod, lets its profile's Framework run the scheduling cycle (which assumes the pod and
runs Reserve and Permit), and hands the binding cycle to the binder's workers. It holds no
extension-point logic of its own: what a cycle's Status does to the pod (a queue action and a report) is the
failure handler's table (scheduler.failures), which the binder and the Permit callback use too.

A shadow profile (`shadow: true`) observes the pods of its schedulerName (e.g. default-scheduler's, which
kube-scheduler binds): PreFilter → Filter → PreScore → Score pick where the pod would go, the cycle observers
record it, and nothing else happens: no assume, Reserve, Permit, bind, event or condition, and no PostFilter
(nothing is nominated or preempted). A pod is scored again only when the watch shows it changed, still pending.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Mapping

from metrics_sched.config.model import SchedulerConfig
from metrics_sched.framework.events import ClusterEvent, EventHint
from metrics_sched.framework.handle import Services
from metrics_sched.framework.interfaces import BindOutcomeKind, Plugin
from metrics_sched.framework.runtime import CycleResult, Framework
from metrics_sched.framework.status import Code, Status
from metrics_sched.model.podinfo import PodInfo
from metrics_sched.plugins.coscheduling.status import GroupStatusReporter
from metrics_sched.ports import (
    NodeDirectory,
    PodGroupStatusWriter,
    PodWriter,
    Preemptor,
    ResourceClaimWriter,
    VolumeWriter,
)
from metrics_sched.scheduler.binding import Binder, BindOutcome
from metrics_sched.scheduler.event_handlers import ClusterEventHandlers
from metrics_sched.scheduler.failures import FailureHandler, Outcome, attempt_outcome, permit_outcome
from metrics_sched.scheduler.queue import SchedulingQueue
from metrics_sched.scheduler.reporting import PodReporter
from metrics_sched.state.cluster_state import ClusterState
from metrics_sched.supervision import Supervisor, Worker
from metrics_sched.telemetry.cache import MetricCache
from metrics_sched.telemetry.ledger import InFlightLedgerStore

log = logging.getLogger(__name__)

# A failure outside any pod's attempt (the queue, the leader check) is retried after 0.1, 0.2, 0.4, 0.8 s;
# the fifth in a row means the loop cannot go on.
LOOP_FAILURE_LIMIT = 5
LOOP_RETRY_DELAY = 0.1

CycleObserver = Callable[[CycleResult], None]
BindObserver = Callable[[BindOutcome, CycleResult], None]


class Scheduler:
    def __init__(
        self,
        config: SchedulerConfig,
        plugins: Mapping[str, type[Plugin]],
        writer: PodWriter,
        *,
        is_leader: Callable[[], bool] = lambda: True,
        metrics: MetricCache | None = None,
        ledger: InFlightLedgerStore | None = None,
        instance: str | None = None,
        supervisor: Supervisor | None = None,
        volume_writer: VolumeWriter | None = None,
        preemptor: Preemptor | None = None,
        group_status_writer: PodGroupStatusWriter | None = None,
        claim_writer: ResourceClaimWriter | None = None,
    ) -> None:
        self.config = config
        # Every worker thread reports its unexpected failures here; /healthz and /metrics read it.
        self.supervisor = supervisor if supervisor is not None else Supervisor()
        self.state = ClusterState()
        self.metrics = metrics if metrics is not None else MetricCache(config.metrics)
        self.metrics.supervisor = self.supervisor
        # The ledger keys placements to the scheduler's clock, the one the cache judges freshness by.
        self.ledger = ledger if ledger is not None else InFlightLedgerStore(clock=self.metrics.clock)
        self.ledger.bind_table(self.state.table)
        services = Services(cluster=self.state, metrics=self.metrics, ledger=self.ledger, pod_writer=writer,
                            volume_writer=volume_writer, preemptor=preemptor, may_write=is_leader,
                            claim_writer=claim_writer)
        # PodGroup status goes out on its own thread: the cycle never waits for the API.
        self.group_status = GroupStatusReporter(group_status_writer) if group_status_writer is not None else None
        services.group_status = self.group_status
        self.waiting_pods = services.waiting_pods
        # The plugins' cluster indexes, declared as each Framework builds its plugins; the event handlers feed them.
        self.indexes = services.indexes
        # Each Framework picks its cycle runner (batched or full) and, for a shadow profile, drops PostFilter.
        self.frameworks = {p.scheduler_name: Framework(p, plugins, services) for p in config.profiles}
        first = next(iter(self.frameworks.values()))
        self.queue = SchedulingQueue(
            first.queue_sort.sort_key,
            events_of=self._events_of,
            pre_enqueue=self._pre_enqueue,
            initial_backoff=config.pod_initial_backoff,
            max_backoff=config.pod_max_backoff,
            max_unschedulable=config.pod_max_in_unschedulable,
        )
        services.activator.connect(self.queue.activate)
        self.is_leader = is_leader
        # One Scheduled event per bind: with fewer writers than binders the events fall behind the binds and,
        # past the reporter's bound, are dropped (kube-scheduler writes each event on a goroutine of its own).
        self.reporter = PodReporter(writer, first.name, instance=instance, workers=config.bind_workers,
                                    supervisor=self.supervisor)
        self.cycle_observers: list[CycleObserver] = []
        self.bind_observers: list[BindObserver] = []
        self.node_deleted_observers: list[Callable[[str], None]] = []  # e.g. drop the node's metric series
        self.failures = FailureHandler(self.state, self.queue, self.reporter, self.supervisor)
        self.binder = Binder(self.state, self.queue, self.reporter, workers=config.bind_workers,
                             is_leader=is_leader, on_outcome=self._bind_outcome, supervisor=self.supervisor,
                             failures=self.failures)
        self.handlers = ClusterEventHandlers(self.state, self.queue, config.scheduler_names,
                                             on_pod_deleted=self._pod_deleted, on_pod_bound=self.reporter.bound,
                                             on_node_deleted=self._node_deleted, indexes=self.indexes)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.metrics.on_update(self.metrics_updated)

    # -- wiring ----------------------------------------------------------------------------------
    def _events_of(self, pod: PodInfo, plugins: set[str]) -> list[EventHint]:
        framework = self.frameworks.get(pod.scheduler_name)
        return framework.events_of(plugins) if framework else [EventHint(e) for e in ClusterEvent]

    def _pre_enqueue(self, pod: PodInfo) -> bool:
        framework = self.frameworks.get(pod.scheduler_name)
        return framework is None or framework.pre_enqueue(pod).ok

    def _bind_outcome(self, outcome: BindOutcome, result: CycleResult) -> None:
        for observer in self.bind_observers:
            try:
                observer(outcome, result)
            except Exception:
                log.exception("bind observer failed")

    def metrics_updated(self, metrics: set[str]) -> None:
        """After a telemetry refresh: if a metric filter may admit a node now, parked pods retry at once."""
        with self.state.lock:
            admitted = False
            for framework in self.frameworks.values():
                admitted = framework.metrics_changed(self.state.table) or admitted
        if admitted:
            self.queue.move_all(ClusterEvent.METRIC_CHANGED, metrics)

    def node_directory(self) -> NodeDirectory:
        """Node names, InternalIPs, hostname labels and allocatable cpu/memory, for the metric sources (built off
        the hot path)."""
        with self.state.lock:
            table = self.state.table
            records = [r for r in table.records if r is not None]
        return NodeDirectory(
            names=frozenset(r.name for r in records),
            by_internal_ip={r.addresses["InternalIP"]: r.name for r in records if r.addresses.get("InternalIP")},
            cpu_allocatable={r.name: r.allocatable.get("cpu", 0) / 1000.0 for r in records},
            memory_allocatable={r.name: float(r.allocatable.get("memory", 0)) for r in records},
            hostnames={h: r.name for r in records if (h := r.labels.get("kubernetes.io/hostname"))},
        )

    # -- the loop --------------------------------------------------------------------------------
    def schedule_one(self, timeout: float = 0.5) -> CycleResult | None:
        began = self.binder.now()
        queued = self.queue.pop(0)
        if queued is None:
            self.binder.hand_over(more=False)  # about to wait: no bind is held back meanwhile
            queued = self.queue.pop(timeout)
            if queued is None:
                return None
            began = self.binder.now()  # the decision begins now: the wait is not its time
        else:
            self.binder.hand_over(more=True)
        pod = queued.info
        framework = self.frameworks.get(pod.scheduler_name)
        cycle: CycleResult | None = None
        try:
            if framework is None or not self.handlers.responsible_for(pod) or pod.scheduling_gates:
                self.queue.done(pod.uid)
                return None
            if pod.parse_error:
                result = CycleResult(pod=pod, profile=framework.name,
                                     status=Status.error(pod.parse_error, "PodInfo"))
                if framework.profile.shadow:  # recorded, never reported: the pod is not ours
                    self.queue.done(pod.uid)
                    self._observe(result)
                    return result
                self.failures.handle(Outcome.UNREADABLE, result)
                self._observe(result)
                return result
            if framework.profile.shadow:
                return self._shadow(pod, framework)
            cycle = framework.run_scheduling_cycle(pod, self._permit_resolved)
            if cycle is None:
                self.queue.done(pod.uid)  # already assumed or bound; the watch was behind
                return None
            self._observe(cycle)
            if cycle.waiting is not None:  # held at Permit: in flight until allowed, rejected or timed out
                framework.hold(cycle)
            elif cycle.status.code == Code.SUCCESS:
                # Held back while more pods wait (a batch is handed over at once: Binder's module docstring).
                self.binder.submit(framework, cycle, hold=True)
                self.binder.hand_over(more=self.queue.has_ready(), began=began)
            else:
                self.failures.handle(attempt_outcome(cycle.status), cycle)
            return cycle
        except Exception as exc:  # noqa: BLE001 - logged and counted by the supervisor
            return self._recover(pod, framework, cycle, exc)

    def _shadow(self, pod: PodInfo, framework: Framework) -> CycleResult | None:
        """Where the pod would go, recorded and nothing else: the pod is not assumed (the real scheduler's
        placement is what the state counts, once the watch shows it), nor reported, nor retried."""
        with self.state.lock:
            placed = self.state.is_placed(pod.uid)
            result = None if placed else framework.schedule(pod, self.state.table)
        self.queue.done(pod.uid)
        if result is not None:
            self._observe(result)
        return result

    def _recover(self, pod: PodInfo, framework: Framework | None, cycle: CycleResult | None,
                 exc: Exception) -> CycleResult:
        """An unexpected exception while handling `pod` (a bug, or a failure outside the plugins' own
        guards): count it, undo the attempt (Unreserve, un-assume) and requeue the pod with backoff, so the
        loop goes on with the next pod and this one is not lost nor left occupying its node."""
        self.supervisor.failed(Worker.SCHEDULING_LOOP, exc, pod=pod.key)
        profile = framework.name if framework is not None else pod.scheduler_name
        if framework is not None and framework.profile.shadow:  # nothing to undo, nothing to report: not ours
            self.queue.done(pod.uid)
            return cycle or CycleResult(pod=pod, profile=profile, status=Status.error(f"scheduler error: {exc!r}"))
        result = cycle or CycleResult(pod=pod, profile=profile)
        waiting = cycle.waiting if cycle is not None else None
        if waiting is not None and self.waiting_pods.get(pod.uid) is waiting:
            # Already held at Permit (another thread may be allowing it right now): rejecting it is the one
            # race-free way out, and runs the usual path (unwind, requeue, wake parked pods).
            self.supervisor.guard(Worker.SCHEDULING_LOOP, lambda: waiting.reject("", f"scheduler error: {exc!r}"),
                                  pod=pod.key)
            return result
        record = self.state.record(pod.uid)
        if cycle is None and record is not None and record.assumed:
            # Assumed by this attempt, whose result was lost with the exception: unwind what we know of it.
            result = CycleResult(pod=pod, profile=profile, node=record.node, assumed=True)
        result.status = Status.error(f"scheduler error: {exc!r}", "scheduler")
        self.failures.handle(Outcome.LOOP_EXCEPTION, result, framework)
        self._observe(result)
        return result

    def _permit_resolved(self, result: CycleResult, status: Status) -> None:
        """A pod held at Permit was allowed (bind it) or rejected (the framework already unwound it). Runs on
        whichever thread resolved it, so it never waits for room in the binder."""
        if status.ok:
            if not self._stop.is_set():
                framework = self.frameworks[result.profile]
                try:
                    self.binder.submit(framework, result, wait=False)
                except Exception as exc:  # noqa: BLE001 - logged and counted by the supervisor
                    self._recover(result.pod, framework, result, exc)
            return
        if self._stop.is_set():
            return  # stopping: the pod stays pending for the next leader
        if self.queue.deleted(result.pod.uid):
            self.failures.handle(Outcome.DELETED_WHILE_WAITING, result)
            return
        result.status = status
        self.failures.handle(permit_outcome(status), result)
        assert result.node is not None
        self._bind_outcome(BindOutcome(result.pod, result.node, BindOutcomeKind.REJECTED, status.reason), result)

    def _node_deleted(self, name: str) -> None:
        for observer in self.node_deleted_observers:
            self.supervisor.guard(Worker.SCHEDULING_LOOP, functools.partial(observer, name))

    def _pod_deleted(self, uid: str) -> None:
        """A deleted pod: no verdict is reported on it any more, and if held at Permit it is rejected at once
        (kube-scheduler's RejectWaitingPod)."""
        self.reporter.forget(uid)
        waiting = self.waiting_pods.get(uid)
        if waiting is not None:
            waiting.reject("", "pod deleted")

    def _observe(self, result: CycleResult) -> None:
        for observer in self.cycle_observers:
            try:
                observer(result)
            except Exception:
                log.exception("cycle observer failed")

    def run(self) -> None:
        """Schedules until stop(); only while is_leader() (a standby keeps its caches warm).

        A pod's attempt recovers from its own failures (schedule_one); a failure outside any pod (the queue,
        the leader check) is retried a few times, then the loop gives up and the supervisor fails /healthz:
        a replica that cannot schedule must not keep the lease."""
        failures = 0
        while not self._stop.is_set():
            try:
                if not self.is_leader():
                    self.binder.hand_over(more=False)  # the bind fence turns them back; not held forever
                    self._stop.wait(0.1)
                    continue
                self.schedule_one()
                failures = 0
            except Exception as exc:  # noqa: BLE001 - logged and counted by the supervisor
                failures += 1
                self.supervisor.failed(Worker.SCHEDULING_LOOP, exc)
                if failures >= LOOP_FAILURE_LIMIT:
                    self.supervisor.fatal(Worker.SCHEDULING_LOOP,
                                          f"{failures} failures in a row outside any pod, the last: {exc!r}")
                    return
                self._stop.wait(LOOP_RETRY_DELAY * 2 ** (failures - 1))

    def start(self) -> None:
        self._thread = self.supervisor.spawn(Worker.SCHEDULING_LOOP, self.run, name="scheduling-loop",
                                             stopping=self._stop.is_set)

    def stop(self, drain_timeout: float = 30.0) -> bool:
        """Stops taking pods, releases the pods held at Permit, waits for binds in flight; True if all finished."""
        self._stop.set()
        self.queue.close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        for waiting in self.waiting_pods:
            waiting.reject("", "scheduler stopping")
        drained = self.binder.drain(drain_timeout)
        self.binder.shutdown()
        self.reporter.shutdown()
        if self.group_status is not None:
            self.group_status.stop()
        return drained
