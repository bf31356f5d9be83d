"""Tells the pod what happened: events (Scheduled / FailedScheduling) and the PodScheduled condition.

These writes go through workers of their own (as many as the binder's by default) so a slow API never delays a
bind, and the one event per bound pod keeps up with the binds. The Scheduled events of a batch of binds are the
exception while they are few: the bind worker that finds no bind waiting after the batch writes them itself, one pod
at a time and only while no bind waits, one such worker at a time (write_gathered): waking a writer thread for
them cost the scheduling loop more than the writes (a GIL hand-off across CPUs; bench, 5,000 nodes: ~10 % of its
decisions/s). They are
asynchronous, so a verdict can be overtaken by the pod's fate; what keeps a stale one off the pod:
- only the latest verdict per pod waits (a new one replaces it), and a waiting verdict is dropped once
  the pod is bound (`scheduled`, `bound`) or deleted (`forget`);
- the condition patch carries the pod's resourceVersion, so a patch already on its way when the pod was
  bound fails with 409 instead of pinning `Unschedulable` on a running pod. After a 409 the pod is read
  again: bound, deleted or re-created means drop, still pending means patch that version.
What waits is bounded: per pod one verdict and a few events, and at most `max_pending` pods (beyond
that the least recently reported pod's reports are dropped; its next attempt reports again).

Repeated events become a series, as client-go's tools/events recorder does: events are isomorphic when
type, action, reason, reporting controller and instance and the pod agree (not the note). The first is
created; the second turns it into a series (count 2, PATCHed); later ones only count, and the count is
written when the series ends (no isomorphic event for 6 minutes) or every 30 minutes while it lasts
(which also keeps the Event from expiring on the API server's event TTL).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, TypeVar

from metrics_sched.model.podinfo import PodInfo
from metrics_sched.ports import ApiError, EventSeries, KubeObject, PodWriter, SchedulingEvent
from metrics_sched.supervision import Supervisor, Worker

log = logging.getLogger(__name__)

RETRY_ATTEMPTS = 6
RETRY_INITIAL = 0.5  # seconds, doubling: gives up after ~15 s
MAX_CONFLICTS = 5  # a pod whose status changes this often under a pending verdict gets it at its next attempt
SERIES_FINISH = 6 * 60.0  # seconds without an isomorphic event: the series is over (client-go's finishTime)
SERIES_REFRESH = 30 * 60.0  # a running series is written at least this often (client-go's refreshTime)
SERIES_TICK = 60.0  # how often idle workers look for series to finish or refresh
MAX_PENDING = 1000  # pods with reports waiting (client-go queues at most 1,000 events)
# Pods waiting per awake worker before another is woken (_signal). client-go writes a recorder's events one at a
# time; here a worker takes what waits in turn, and more wake as the backlog grows.
PODS_PER_WORKER = 8

T = TypeVar("T")
_EventKey = tuple[str, str, str]  # type, action, reason: the rest of client-go's key is the pod and us
SCHEDULED = "Scheduled"
_SCHEDULED_KEY: _EventKey = ("Normal", "Binding", SCHEDULED)


@dataclass(eq=False)
class _Series:
    """One event and its recurrences; guarded by the reporter's lock."""

    event: SchedulingEvent
    last_observed: float
    count: int = 1
    name: str | None = None  # set once the Event exists
    written: int = 0  # the count the API has
    written_at: float = 0.0


@dataclass(frozen=True)
class _Verdict:
    """PodScheduled=False with this reason and message."""

    reason: str
    message: str
    resource_version: str  # of the pod the attempt saw: the patch's precondition


@dataclass(eq=False)
class _PodReports:
    """What waits to be written about one pod."""

    namespace: str
    name: str
    uid: str
    condition: _Verdict | None = None
    events: list[_Series] = field(default_factory=list)


@dataclass
class ReportStats:
    conditions_written: int = 0
    events_created: int = 0
    series_updated: int = 0
    stale_dropped: int = 0  # verdicts dropped because the pod was bound, deleted or re-created
    conflicts: int = 0  # condition patches refused because the pod had changed (each followed by a re-read)
    overflow_dropped: int = 0  # pods whose reports were dropped because too many pods were waiting


class PodReporter:
    def __init__(self, writer: PodWriter, scheduler_name: str, *, instance: str | None = None,
                 workers: int = 8, max_pending: int = MAX_PENDING,
                 clock: Callable[[], float] = time.time, supervisor: Supervisor | None = None) -> None:
        self.writer = writer
        # Workers are supervised: an unexpected error is counted (and the worker goes on); a worker that
        # dies makes /healthz fail.
        self.supervisor = supervisor if supervisor is not None else Supervisor()
        self.controller = scheduler_name
        # Which replica acted: the leader-election identity when there is one.
        self.instance = instance or f"{scheduler_name}-{socket.gethostname()}"
        self.max_workers = workers
        self.max_pending = max_pending
        self.clock = clock
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)  # work arrived, or the reporter is closing
        self._idle = threading.Condition(self._lock)  # a worker finished a pod
        # Least recently reported first; a pod being written (busy) may wait here again for its next write.
        self._pending: OrderedDict[str, _PodReports] = OrderedDict()
        self._busy: set[str] = set()
        self._settled_busy: set[str] = set()  # busy pods bound or deleted meanwhile: drop what is in hand
        self._series: dict[str, dict[_EventKey, _Series]] = {}  # pod uid -> its open series
        self._threads: list[threading.Thread] = []
        self._waiting_workers = 0
        self._signalled = 0  # workers woken that have not taken their first pod yet
        self._gathered = False  # reports wait for wake() (scheduled(wake=False)) with no writer awake
        self._lent = False  # a bind worker writes them (write_gathered)
        self._next_tick = 0.0
        self._closed = False
        self._abandon = threading.Event()  # shutdown without waiting: stop retrying at once
        self._stats = ReportStats()

    # -- what the scheduler reports ----------------------------------------------------------------
    def scheduled(self, pod: PodInfo, node: str, summary: str = "", *, wake: bool = True) -> None:
        """The pod's Scheduled event. With wake=False (the binder, binding a batch) no writer is woken for it while
        none is awake and fewer than PODS_PER_WORKER pods wait: the caller writes them itself once its batch is
        bound (write_gathered), or calls wake(), instead of a writer contending for the GIL with the binds still to
        come and the scheduling loop."""
        note = f"Successfully assigned {pod.key} to {node}" + (f": {summary}" if summary else "")
        with self._lock:
            self._settle(pod.uid)
            self._event(pod, "Normal", SCHEDULED, "Binding", note, wake=wake)

    def write_gathered(self, stop: Callable[[], bool]) -> None:
        """Writes the reports gathered by scheduled(wake=False) on the calling thread, a bind worker whose batch is
        bound (waking a writer costs the scheduling loop a GIL hand-off, and the worker is awake anyway), one pod
        at a time while `stop()` is False (no bind waits for the worker: a slow write never holds a bind back) and
        no other bind worker is at it (at most one is lent); a writer is woken for what is left."""
        if not self._gathered:  # read without the lock, as wake()
            return
        with self._lock:
            if self._lent:
                return  # the lent worker takes these too, or wakes a writer for them when it stops
            self._lent, self._gathered = True, False
        try:
            while not stop():
                with self._lock:
                    reports = None if self._closed else self._claim()
                if reports is None:
                    return
                self._write_claimed(reports)
        finally:
            with self._lock:
                self._lent = False
                self._signal_if_pending()

    def wake(self) -> None:
        """Wakes a writer for the reports gathered by scheduled(wake=False), if any wait and none is awake."""
        if not self._gathered:  # read without the lock: set under it before the caller's own call returned
            return
        with self._lock:
            self._gathered = False
            self._signal_if_pending()

    def failed(self, pod: PodInfo, message: str, *, reason: Literal["Unschedulable", "SchedulerError"]) -> None:
        with self._lock:
            reports = self._event(pod, "Warning", "FailedScheduling", "Scheduling", message)
            if reports is None:
                return
            if reports.condition is not None:
                self._stats.stale_dropped += 1  # replaced: only the latest verdict matters
            reports.condition = _Verdict(reason, message, pod.resource_version)

    def bound(self, uid: str) -> None:
        """The pod is bound (by us or anyone): a verdict not yet written is stale."""
        with self._lock:
            self._settle(uid)

    def forget(self, uid: str) -> None:
        """The pod is deleted: nothing about it is worth writing any more."""
        with self._lock:
            self._settle(uid)
            if uid in self._pending and uid not in self._busy:
                self._drop(uid)
            self._series.pop(uid, None)

    def open_series(self) -> int:
        """Events still counted for aggregation (they expire SERIES_FINISH after their last occurrence)."""
        with self._lock:
            return sum(len(by_key) for by_key in self._series.values())

    def workers(self) -> int:
        """Writer threads started so far."""
        with self._lock:
            return len(self._threads)

    def stats(self) -> ReportStats:
        with self._lock:
            return dataclasses.replace(self._stats)

    def wait_idle(self, timeout: float = 10.0) -> bool:
        """Waits until every queued report has been written (tests, shutdown). Series counts that are only
        written when the series ends are not waited for."""
        self.wake()
        with self._lock:
            return self._idle.wait_for(lambda: not self._pending and not self._busy, timeout)

    def tick(self) -> None:
        """Finishes the series that are over and refreshes the long ones (the workers call this every
        SERIES_TICK seconds; tests call it with a moved clock)."""
        with self._lock:
            self._tick(self.clock())

    def shutdown(self, wait: bool = True) -> None:
        """Stops the workers; with wait, after they have written what is queued (gathered reports included)."""
        if wait:
            self.wake()
        with self._lock:
            self._closed = True
            self._waiting_workers = self._signalled = 0
            self._wake.notify_all()
            threads = list(self._threads)
        if not wait:
            self._abandon.set()
            return
        for thread in threads:
            thread.join()

    # -- queueing (under the lock) -----------------------------------------------------------------
    def _event(self, pod: PodInfo, type_: Literal["Normal", "Warning"], reason: str, action: str,
               note: str, *, wake: bool = True) -> _PodReports | None:
        """Counts the event into its series and queues what needs writing; the pod's reports, or None once
        the reporter is closed. `wake`: scheduled()'s."""
        if self._closed:
            return None
        now = self.clock()
        by_key = self._series.setdefault(pod.uid, {})
        key = (type_, action, reason)
        series = by_key.get(key)
        reports = self._reports(pod, wake)
        if series is None:
            event = SchedulingEvent(namespace=pod.namespace, pod_name=pod.name, pod_uid=pod.uid, type=type_,
                                    reason=reason, action=action, note=note, reporting_controller=self.controller,
                                    reporting_instance=self.instance)
            by_key[key] = series = _Series(event, now)
            reports.events.append(series)
        else:
            series.count += 1
            series.last_observed = now
            # The second occurrence makes it a series at once; later ones wait for the series' end or refresh.
            if series.written < 2 and series not in reports.events:
                reports.events.append(series)
        return reports

    def _reports(self, pod: PodInfo, wake: bool = True) -> _PodReports:
        reports = self._pending.get(pod.uid)
        if reports is None:
            reports = self._pending[pod.uid] = _PodReports(pod.namespace, pod.name, pod.uid)
        self._pending.move_to_end(pod.uid)
        self._trim()
        if wake or len(self._busy) + self._signalled or len(self._pending) >= PODS_PER_WORKER:
            self._signal()
        else:
            self._gathered = True  # wake() wakes a writer for them
        return reports

    def _trim(self) -> None:
        while len(self._pending) > self.max_pending:
            oldest = next((uid for uid in self._pending if uid not in self._busy), None)
            if oldest is None:
                return
            self._drop(oldest)
            self._stats.overflow_dropped += 1

    def _drop(self, uid: str) -> None:
        del self._pending[uid]
        self._idle.notify_all()

    def _settle(self, uid: str) -> None:
        reports = self._pending.get(uid)
        if reports is not None and reports.condition is not None:
            reports.condition = None
            self._stats.stale_dropped += 1
            if not reports.events and uid not in self._busy:
                self._drop(uid)
        if uid in self._busy:
            self._settled_busy.add(uid)

    def _tick(self, now: float) -> None:
        self._next_tick = now + SERIES_TICK
        for uid in list(self._series):
            by_key = self._series[uid]
            for key, series in list(by_key.items()):
                if now - series.last_observed > SERIES_FINISH:
                    del by_key[key]  # the next isomorphic event starts a new Event
                    due = series.count > series.written and series.count > 1
                else:
                    due = series.count > 1 and now - series.written_at >= SERIES_REFRESH
                if due and series.name is not None:
                    reports = self._pending.get(uid)
                    if reports is None:
                        event = series.event
                        reports = self._pending[uid] = _PodReports(event.namespace, event.pod_name, uid)
                    if series not in reports.events:
                        reports.events.append(series)
                    self._signal()
            if not by_key:
                del self._series[uid]
        self._trim()

    def _signal_if_pending(self) -> None:
        """_signal() when reports wait (under the lock)."""
        if self._pending:
            self._signal()

    def _signal(self) -> None:
        """Work arrived. Unless the awake workers (writing, or woken) have fewer than PODS_PER_WORKER pods each to
        take - each takes the next waiting pod before it waits again - one waiting worker is woken and no longer
        counted as waiting (so the next piece of work, arriving before it runs, does not count on it too), else
        another worker starts, up to max_workers. Writes wait on the API: under load more run at once as the
        backlog grows, up to the limit. Waking one costs the scheduling loop more than a write does (the woken
        thread contends for the GIL: scheduler.binding), so bursts (binds handed over in batches) are taken by
        few."""
        awake = len(self._busy) + self._signalled
        if awake and len(self._pending) <= PODS_PER_WORKER * awake:
            return
        if self._waiting_workers > 0:
            self._waiting_workers -= 1
            self._signalled += 1
            self._wake.notify()
        elif len(self._threads) < self.max_workers:
            self._signalled += 1
            thread = self.supervisor.spawn(Worker.REPORTER, self._work, name=f"report-{len(self._threads)}",
                                           stopping=lambda: self._closed)
            self._threads.append(thread)

    # -- the workers ---------------------------------------------------------------------------------
    def _work(self) -> None:
        woken = True  # started by _signal, and counted there
        while True:
            with self._lock:
                reports = self._take(woken)
                woken = False
                if reports is None:
                    return
            self._write_claimed(reports)

    def _claim(self) -> _PodReports | None:
        """The least recently reported pod no worker holds, now held (busy); None if there is none. Under the lock."""
        uid = next((uid for uid in self._pending if uid not in self._busy), None)
        if uid is None:
            return None
        self._busy.add(uid)
        return self._pending.pop(uid)

    def _write_claimed(self, reports: _PodReports) -> None:
        """Writes a claimed pod's reports, then lets go of it."""
        try:
            self._write(reports)
        except Exception as exc:  # noqa: BLE001 - logged and counted by the supervisor
            self.supervisor.failed(Worker.REPORTER, exc, pod=f"{reports.namespace}/{reports.name}")
        finally:
            with self._lock:
                self._busy.discard(reports.uid)
                self._settled_busy.discard(reports.uid)
                self._idle.notify_all()
            # More may have arrived for this pod while it was being written: the writer takes it next.

    def _take(self, woken: bool) -> _PodReports | None:
        """The least recently reported pod no worker holds (None when closing and nothing is left). `woken`: the
        worker arrives from _signal's count of those on their way (it leaves the count once, taking a pod or
        waiting; a worker whose wait timed out leaves it too: one more may then be woken than needed, never
        fewer)."""
        while True:
            now = self.clock()
            if now >= self._next_tick and not self._closed:
                self._tick(now)
            if woken:
                self._signalled = max(0, self._signalled - 1)
                woken = False
            reports = self._claim()
            if reports is not None:
                return reports
            if self._closed and not self._busy:
                return None
            if self._closed:
                self._idle.wait()  # a busy pod may queue more work for itself
                continue
            self._waiting_workers += 1
            if not self._wake.wait(max(0.0, self._next_tick - now)):
                # Timed out (a notify racing the timeout may have uncounted it already: never below 0).
                self._waiting_workers = max(0, self._waiting_workers - 1)
            woken = True

    def _write(self, reports: _PodReports) -> None:
        for series in reports.events:
            self._best_effort(reports, functools.partial(self._write_series, series))
        verdict = reports.condition
        if verdict is not None:
            self._best_effort(reports, functools.partial(self._write_condition, reports, verdict))

    def _best_effort(self, reports: _PodReports, write: Callable[[], None]) -> None:
        try:
            self._retrying(write)
        except ApiError as exc:
            log.warning("reporting about %s/%s failed: %s", reports.namespace, reports.name, exc)

    def _write_series(self, series: _Series) -> None:
        with self._lock:
            name, count, last = series.name, series.count, series.last_observed
            current = name is not None and count == series.written
            if current and self.clock() - series.written_at < SERIES_REFRESH:
                return
        try:
            if name is None:
                name = self.writer.record_event(series.event, EventSeries(count, last) if count > 1 else None)
            elif count > 1:
                self.writer.update_event_series(series.event, name, EventSeries(count, last))
            else:
                return
        except ApiError as exc:
            if exc.not_found:
                return  # the namespace is gone
            raise
        with self._lock:
            if series.name is None:
                self._stats.events_created += 1
            else:
                self._stats.series_updated += 1
            series.name, series.written, series.written_at = name, count, self.clock()
            if series.event.reason == SCHEDULED and series.count == count:
                # A bound pod is never scheduled again: nothing can join this series, so it is not kept for
                # SERIES_FINISH (at 100 binds/s that was 36,000 events held, a kilobyte or two each).
                by_key = self._series.get(series.event.pod_uid)
                if by_key is not None and by_key.get(_SCHEDULED_KEY) is series:
                    del by_key[_SCHEDULED_KEY]
                    if not by_key:
                        del self._series[series.event.pod_uid]

    def _write_condition(self, reports: _PodReports, verdict: _Verdict) -> None:
        version = verdict.resource_version or None
        if version is None:
            version = self._still_pending(reports)  # never patch blind: learn which version to patch
        for _ in range(MAX_CONFLICTS):
            if version is None or self._superseded(reports.uid):
                with self._lock:
                    self._stats.stale_dropped += 1
                return
            try:
                self.writer.set_pod_scheduled_condition(reports.namespace, reports.name, status="False",
                                                        reason=verdict.reason, message=verdict.message,
                                                        resource_version=version)
            except ApiError as exc:
                if exc.not_found:
                    return  # the pod is gone: nobody to tell
                if not exc.conflict:
                    raise
                with self._lock:
                    self._stats.conflicts += 1
                version = self._still_pending(reports)
                continue
            with self._lock:
                self._stats.conditions_written += 1
            return
        log.warning("PodScheduled of %s/%s not written: the pod kept changing", reports.namespace, reports.name)

    def _still_pending(self, reports: _PodReports) -> str | None:
        """The pod's current resourceVersion if it is still this pod and still waiting for a node."""
        return _pending_version(self.writer.get_pod(reports.namespace, reports.name), reports.uid)

    def _superseded(self, uid: str) -> bool:
        with self._lock:
            newer = self._pending.get(uid)
            return uid in self._settled_busy or (newer is not None and newer.condition is not None)

    def _retrying(self, call: Callable[[], T]) -> T:
        """The call, again after an ambiguous failure (the API is restarting or overloaded: a report lost now
        is an unexplained pod later); other errors propagate."""
        delay = RETRY_INITIAL
        for attempt in range(RETRY_ATTEMPTS):
            try:
                return call()
            except ApiError as exc:
                if not exc.ambiguous or attempt == RETRY_ATTEMPTS - 1 or self._abandon.is_set():
                    raise
                self._abandon.wait(delay)
                delay *= 2
        raise AssertionError("unreachable")


def _pending_version(pod: KubeObject | None, uid: str) -> str | None:
    if pod is None:
        return None
    metadata = pod.get("metadata") or {}
    if metadata.get("uid") != uid or metadata.get("deletionTimestamp") or (pod.get("spec") or {}).get("nodeName"):
        return None
    version = metadata.get("resourceVersion")
    return str(version) if version else None
