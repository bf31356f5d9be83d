"""Scheduler: the cluster state, the queue, one Framework per profile, the binder, and the loop.

One thread runs scheduling cycles (pop, filter, score, assume, reserve) while holding the state
lock, so a cycle sees a consistent table; binds and API reporting run on worker pools.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from metrics_sched.config.model import SchedulerConfig
from metrics_sched.framework.interfaces import ClusterEvent, Code, MetricAwarePlugin, Plugin, Status
from metrics_sched.framework.runtime import CycleResult, Framework
from metrics_sched.podinfo import PodInfo
from metrics_sched.ports import NodeDirectory, PodWriter
from metrics_sched.queue import SchedulingQueue
from metrics_sched.scheduler.binding import Binder, BindOutcome
from metrics_sched.scheduler.event_handlers import ClusterEventHandlers
from metrics_sched.scheduler.handle import SchedulerHandle
from metrics_sched.scheduler.reporting import PodReporter
from metrics_sched.state.cluster_state import ClusterState
from metrics_sched.telemetry.cache import MetricCache
from metrics_sched.telemetry.ledger import InFlightLedgerStore

log = logging.getLogger(__name__)

CycleObserver = Callable[[CycleResult], None]
BindObserver = Callable[[BindOutcome, CycleResult], None]


class Scheduler:
    def __init__(
        self,
        config: SchedulerConfig,
        plugins: dict[str, type[Plugin]],
        writer: PodWriter,
        *,
        is_leader: Callable[[], bool] = lambda: True,
        services: dict[str, Any] | None = None,
        instance: str | None = None,
    ) -> None:
        self.config = config
        self.state = ClusterState()
        services = dict(services or {})
        self.metrics: MetricCache = services.setdefault("metrics", MetricCache(config.metrics))
        self.ledger: InFlightLedgerStore = services.setdefault("ledger", InFlightLedgerStore())
        self.ledger.bind_table(self.state.table)
        self.handle = SchedulerHandle(self.state, {"pod_writer": writer, **services})
        self.frameworks = {p.scheduler_name: Framework(p, plugins, self.handle) for p in config.profiles}
        first = next(iter(self.frameworks.values()))
        self.queue = SchedulingQueue(
            first.queue_sort.sort_key,
            events_of=self._events_of,
            initial_backoff=config.pod_initial_backoff,
            max_backoff=config.pod_max_backoff,
            max_unschedulable=config.pod_max_in_unschedulable,
        )
        self.is_leader = is_leader
        self.reporter = PodReporter(writer, first.name, instance=instance)
        self.cycle_observers: list[CycleObserver] = []
        self.bind_observers: list[BindObserver] = []
        self.binder = Binder(self.state, self.queue, writer, self.reporter, workers=config.bind_workers,
                             is_leader=is_leader, on_outcome=self._bind_outcome)
        self.handlers = ClusterEventHandlers(self.state, self.queue, config.scheduler_names)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.metrics.on_update(self.metrics_updated)

    # -- wiring ----------------------------------------------------------------------------------
    def _events_of(self, pod: PodInfo, plugins: set[str]) -> set[ClusterEvent]:
        framework = self.frameworks.get(pod.scheduler_name)
        return framework.events_of(plugins) if framework else set(ClusterEvent)

    def _bind_outcome(self, outcome: BindOutcome, result: CycleResult) -> None:
        for observer in self.bind_observers:
            observer(outcome, result)

    def metrics_updated(self, metrics: set[str]) -> None:
        """After a telemetry refresh: if a metric filter may admit a node now, parked pods retry at once."""
        with self.state.lock:
            admitted = False
            for framework in self.frameworks.values():
                for plugin in framework.filters:
                    if isinstance(plugin, MetricAwarePlugin) and plugin.metrics_changed(self.state.table):
                        admitted = True
        if admitted:
            self.queue.move_all(ClusterEvent.METRIC_CHANGED)

    def node_directory(self) -> NodeDirectory:
        """Node names, InternalIPs and allocatable cpu/memory, for the metric sources (built off the hot path)."""
        with self.state.lock:
            table = self.state.table
            records = [r for r in table.records if r is not None]
        return NodeDirectory(
            names=frozenset(r.name for r in records),
            by_internal_ip={r.addresses["InternalIP"]: r.name for r in records if r.addresses.get("InternalIP")},
            cpu_allocatable={r.name: r.allocatable.get("cpu", 0) / 1000.0 for r in records},
            memory_allocatable={r.name: float(r.allocatable.get("memory", 0)) for r in records},
        )

    # -- the loop --------------------------------------------------------------------------------
    def schedule_one(self, timeout: float = 0.5) -> CycleResult | None:
        queued = self.queue.pop(timeout)
        if queued is None:
            return None
        pod = queued.info
        framework = self.frameworks.get(pod.scheduler_name)
        if framework is None or not self.handlers.responsible_for(pod) or pod.scheduling_gates:
            self.queue.done(pod.uid)
            return None
        if pod.parse_error:
            result = CycleResult(pod=pod, profile=framework.name)
            result.status = Status(Code.ERROR, pod.parse_error, "PodInfo")
            # Retrying cannot fix the pod: park it until it is updated (or the periodic flush).
            self.queue.unschedulable(pod.uid, {"PodInfo"})
            self.reporter.failed(pod, pod.parse_error, reason="SchedulerError")
            self._observe(result)
            return result
        try:
            with self.state.lock:
                if self.state.is_placed(pod.uid):
                    self.queue.done(pod.uid)  # already assumed or bound; the watch was behind
                    return None
                result = framework.schedule(pod, self.state.table)
                if result.node is not None:
                    self.state.assume(pod, result.node)
        except Exception as exc:
            log.exception("scheduling %s failed", pod.key)
            result = CycleResult(pod=pod, profile=framework.name)
            result.status = Status(Code.ERROR, repr(exc), "framework")
            self.queue.retry_later(pod.uid)
            self.reporter.failed(pod, f"scheduler error: {exc}", reason="SchedulerError")
            self._observe(result)
            return result

        if result.node is None:
            self.queue.unschedulable(pod.uid, result.rejected_by)
            self.reporter.failed(pod, result.message(), reason="Unschedulable")
            self._observe(result)
            return result

        for plugin in framework.reserves:
            status = plugin.reserve(result.cycle, pod, result.node)
            if not status.ok:
                for done in framework.reserves[: framework.reserves.index(plugin) + 1][::-1]:
                    done.unreserve(result.cycle, pod, result.node)
                self.state.forget(pod.uid)
                self.queue.retry_later(pod.uid)
                result.status = status
                self._observe(result)
                return result
        self._observe(result)
        self.binder.submit(framework, result)
        return result

    def _observe(self, result: CycleResult) -> None:
        for observer in self.cycle_observers:
            try:
                observer(result)
            except Exception:
                log.exception("cycle observer failed")

    def run(self) -> None:
        """Schedules until stop(); only while is_leader() (a standby keeps its caches warm)."""
        while not self._stop.is_set():
            if not self.is_leader():
                self._stop.wait(0.1)
                continue
            self.schedule_one()

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name="scheduling-loop", daemon=True)
        self._thread.start()

    def stop(self, drain_timeout: float = 30.0) -> bool:
        """Stops taking pods, waits for binds in flight; True if all finished."""
        self._stop.set()
        self.queue.close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        drained = self.binder.drain(drain_timeout)
        self.binder.shutdown()
        self.reporter.shutdown()
        return drained
