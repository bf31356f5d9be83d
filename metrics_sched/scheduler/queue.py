"""The scheduling queue: activeQ (ordered by the QueueSort plugin), backoffQ, unschedulable and gated pods.

As in kube-scheduler: a failed attempt backs off 1 s doubling to 10 s; a pod no node fits is parked
until a cluster event that could help it (one its rejecting plugins listed) or until it has waited
`max_unschedulable` (5 min); if such an event arrived (or the pod itself changed) while the pod was
being scheduled, it goes to backoff instead of parking, so the event is not lost. Gated pods
(schedulingGates, or a PreEnqueue plugin that says not yet) wait outside the queue until the pod changes.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from metrics_sched.framework.events import ClusterEvent, EventHint
from metrics_sched.model.podinfo import PodInfo

SortKey = Callable[[PodInfo], tuple[Any, ...]]
# The events (with queueing hints) registered by the plugins that rejected a pod.
EventsOf = Callable[[PodInfo, set[str]], Iterable[EventHint]]
PreEnqueue = Callable[[PodInfo], bool]


@dataclass(slots=True)  # one per pending pod: no per-instance __dict__, and no empty set until it is rejected
class QueuedPod:
    info: PodInfo
    attempts: int = 0
    first_enqueued: float = 0.0
    enqueued: float = 0.0
    backoff_until: float = 0.0
    rejected_by: set[str] | None = None  # the plugins that turned it down last (None: none yet)
    popped_in_cycle: int = 0
    deleted: bool = False
    # The pod changed (spec or labels) while it was being scheduled: its verdict may be stale.
    updated_in_flight: bool = False

    @property
    def uid(self) -> str:
        return self.info.uid


class SchedulingQueue:
    def __init__(
        self,
        sort_key: SortKey,
        *,
        events_of: EventsOf,
        pre_enqueue: PreEnqueue = lambda pod: True,
        initial_backoff: float = 1.0,
        max_backoff: float = 10.0,
        max_unschedulable: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._sort_key = sort_key
        self._events_of = events_of
        self._pre_enqueue = pre_enqueue
        self.initial_backoff = initial_backoff
        self.max_backoff = max_backoff
        self.max_unschedulable = max_unschedulable
        self._clock = clock
        self._cond = threading.Condition()
        self._seq = itertools.count()
        self._active_heap: list[tuple[tuple[Any, ...], int, str]] = []
        self._active: dict[str, tuple[int, QueuedPod]] = {}
        self._backoff_heap: list[tuple[float, int, str]] = []
        self._backoff: dict[str, tuple[int, QueuedPod]] = {}
        self._unschedulable: dict[str, QueuedPod] = {}
        self._gated: dict[str, QueuedPod] = {}
        self._in_flight: dict[str, QueuedPod] = {}
        self._cycle = 0
        self._move_request_cycle = -1
        self._closed = False
        self._last_flush = clock()

    # -- adding and removing ---------------------------------------------------------------------
    def _known(self, uid: str) -> QueuedPod | None:
        for table in (self._active, self._backoff):
            entry = table.get(uid)
            if entry is not None:
                return entry[1]
        return self._unschedulable.get(uid) or self._gated.get(uid) or self._in_flight.get(uid)

    def _remove(self, uid: str) -> None:
        self._active.pop(uid, None)
        self._backoff.pop(uid, None)
        self._unschedulable.pop(uid, None)
        self._gated.pop(uid, None)

    def _push_active(self, qp: QueuedPod) -> None:
        seq = next(self._seq)
        self._active[qp.uid] = (seq, qp)
        heapq.heappush(self._active_heap, (self._sort_key(qp.info), seq, qp.uid))
        self._cond.notify()

    def _push_backoff(self, qp: QueuedPod) -> None:
        seq = next(self._seq)
        self._backoff[qp.uid] = (seq, qp)
        heapq.heappush(self._backoff_heap, (qp.backoff_until, seq, qp.uid))
        self._cond.notify()

    def add(self, info: PodInfo) -> None:
        """A pending pod appeared or changed."""
        with self._cond:
            now = self._clock()
            existing = self._known(info.uid)
            if existing is not None and info.uid in self._in_flight:
                # Picked up when the attempt ends; a change that may help keeps the pod from parking on the
                # verdict its attempt reached for the old pod.
                existing.updated_in_flight = existing.updated_in_flight or _may_help(existing.info, info)
                existing.info = info
                return
            if existing is not None:
                changed = _may_help(existing.info, info)
                existing.info = info
                if info.uid in self._unschedulable and changed:
                    # The user changed the pod: it may fit now.
                    del self._unschedulable[info.uid]
                    self._to_active_or_backoff(existing, now)
                elif info.uid in self._gated and self._enqueueable(info):
                    del self._gated[info.uid]
                    self._push_active(existing)
                elif info.uid in self._active:
                    self._remove(info.uid)
                    self._push_active(existing)
                return
            qp = QueuedPod(info=info, first_enqueued=now, enqueued=now)
            if not self._enqueueable(info):
                self._gated[info.uid] = qp
            else:
                self._push_active(qp)

    def update(self, info: PodInfo) -> None:
        """A newer version of a pod whose attempt is in flight (e.g. its bind): kept for a retry, never added."""
        with self._cond:
            qp = self._in_flight.get(info.uid)
            if qp is not None and not qp.deleted:
                qp.updated_in_flight = qp.updated_in_flight or _may_help(qp.info, info)
                qp.info = info

    def _enqueueable(self, info: PodInfo) -> bool:
        return not info.scheduling_gates and self._pre_enqueue(info)

    def delete(self, uid: str) -> None:
        with self._cond:
            self._remove(uid)
            if uid in self._in_flight:
                self._in_flight[uid].deleted = True

    def deleted(self, uid: str) -> bool:
        """True for a pod deleted while it was being scheduled (its attempt's outcome no longer matters)."""
        with self._cond:
            qp = self._in_flight.get(uid)
            return qp is not None and qp.deleted

    # -- popping ---------------------------------------------------------------------------------
    def pop(self, timeout: float | None = None) -> QueuedPod | None:
        """The next pod to schedule; None on timeout or when closed."""
        deadline = None if timeout is None else self._clock() + timeout
        with self._cond:
            while not self._closed:
                now = self._clock()
                self._flush(now)
                while self._active_heap:
                    _, seq, uid = heapq.heappop(self._active_heap)
                    entry = self._active.get(uid)
                    if entry is None or entry[0] != seq:
                        continue  # stale heap entry (removed or re-pushed)
                    del self._active[uid]
                    qp = entry[1]
                    if not self._enqueueable(qp.info):
                        self._gated[uid] = qp  # a PreEnqueue plugin says not yet (checked on every way in)
                        continue
                    self._cycle += 1
                    qp.popped_in_cycle = self._cycle
                    qp.attempts += 1
                    qp.info.attempts = qp.attempts  # the audit and the bind retry backoff read it
                    self._in_flight[uid] = qp
                    return qp
                wait = 1.0
                if self._backoff_heap:
                    wait = min(wait, max(0.0, self._backoff_heap[0][0] - now))
                if deadline is not None:
                    if now >= deadline:
                        return None
                    wait = min(wait, deadline - now)
                self._cond.wait(wait)
            return None

    def _flush(self, now: float) -> None:
        while self._backoff_heap and self._backoff_heap[0][0] <= now:
            _, seq, uid = heapq.heappop(self._backoff_heap)
            entry = self._backoff.get(uid)
            if entry is None or entry[0] != seq:
                continue
            del self._backoff[uid]
            self._push_active(entry[1])
        if now - self._last_flush >= 1.0:
            self._last_flush = now
            stale = [qp for qp in self._unschedulable.values() if now - qp.enqueued >= self.max_unschedulable]
            for qp in stale:
                del self._unschedulable[qp.uid]
                self._to_active_or_backoff(qp, now)

    # -- after an attempt ------------------------------------------------------------------------
    def backoff_duration(self, attempts: int) -> float:
        return float(min(self.max_backoff, self.initial_backoff * 2 ** max(0, attempts - 1)))

    def _to_active_or_backoff(self, qp: QueuedPod, now: float) -> None:
        qp.backoff_until = qp.enqueued + self.backoff_duration(qp.attempts)
        if qp.backoff_until > now:
            self._push_backoff(qp)
        else:
            self._push_active(qp)

    def _finish(self, uid: str) -> QueuedPod | None:
        qp = self._in_flight.pop(uid, None)
        if qp is None or qp.deleted:
            return None
        return qp

    def done(self, uid: str) -> None:
        """The attempt placed the pod (or gave it up): it leaves the queue."""
        with self._cond:
            self._in_flight.pop(uid, None)

    def unschedulable(self, uid: str, rejected_by: set[str]) -> None:
        with self._cond:
            qp = self._finish(uid)
            if qp is None:
                return
            now = self._clock()
            qp.enqueued = now
            qp.rejected_by = set(rejected_by)
            if self._move_request_cycle >= qp.popped_in_cycle or qp.updated_in_flight:
                # Something (the cluster, or the pod itself) changed while we were deciding; do not park on a
                # stale verdict.
                qp.updated_in_flight = False
                self._to_active_or_backoff(qp, now)
            else:
                self._unschedulable[uid] = qp

    def retry_later(self, uid: str, info: PodInfo | None = None) -> None:
        """An error (API failure, bind failure): back off and try again."""
        with self._cond:
            qp = self._finish(uid)
            if qp is None:
                return
            if info is not None:
                qp.info = info
            qp.updated_in_flight = False
            qp.enqueued = self._clock()
            qp.backoff_until = qp.enqueued + self.backoff_duration(qp.attempts)
            self._push_backoff(qp)

    def requeue(self, info: PodInfo) -> None:
        """A pod we had placed but must schedule again (its node vanished before the bind): a fresh start,
        with the pod as last seen. Only a pod whose attempt is in flight comes back: one deleted meanwhile
        (marked while in flight, or already gone from the queue) is not scheduled again."""
        with self._cond:
            previous = self._finish(info.uid)
            if previous is None:
                return
            now = self._clock()
            qp = QueuedPod(info=previous.info, first_enqueued=now, enqueued=now, attempts=1)
            self._to_active_or_backoff(qp, now)

    def move_all(self, event: ClusterEvent, detail: Any = None, *, besides: str | None = None) -> int:
        """A cluster event: parked pods whose rejecting plugins registered it (and whose queueing hint,
        given the event's object `detail`, says it may help) get another try; `besides` (the UID of the
        pod that caused the event, e.g. one un-assumed after its bind failed) stays where it is."""
        with self._cond:
            self._move_request_cycle = self._cycle
            now = self._clock()
            moved = [qp for qp in self._unschedulable.values()
                     if qp.uid != besides and self._helps(qp, event, detail)]
            for qp in moved:
                del self._unschedulable[qp.uid]
                self._to_active_or_backoff(qp, now)
            return len(moved)

    def activate(self, uids: Iterable[str]) -> int:
        """Pods a plugin wakes on purpose (kube-scheduler's PodsToActivate, e.g. a gang's members once the gang may
        go on): parked, backing off or gated (if their PreEnqueue passes now), they go straight to activeQ; one
        whose attempt is in flight goes to backoff rather than park when the attempt ends. Returns how many moved."""
        moved = 0
        with self._cond:
            for uid in uids:
                qp = self._unschedulable.pop(uid, None)
                if qp is None and uid in self._backoff:
                    qp = self._backoff.pop(uid)[1]
                if qp is None and uid in self._gated:
                    if not self._enqueueable(self._gated[uid].info):
                        continue
                    qp = self._gated.pop(uid)
                if qp is None:
                    if uid in self._in_flight:
                        self._in_flight[uid].updated_in_flight = True
                    continue
                self._push_active(qp)
                moved += 1
        return moved

    def _helps(self, qp: QueuedPod, event: ClusterEvent, detail: Any) -> bool:
        if not qp.rejected_by:
            return True
        return any(h.event == event and h.admits(qp.info, detail) for h in self._events_of(qp.info, qp.rejected_by))

    # -- observability and shutdown --------------------------------------------------------------
    def has_ready(self) -> bool:
        """Whether a pod waits in activeQ (a hint, read without the lock: the next pop may still wait)."""
        return bool(self._active)

    def lengths(self) -> dict[str, int]:
        with self._cond:
            return {"active": len(self._active), "backoff": len(self._backoff),
                    "unschedulable": len(self._unschedulable), "gated": len(self._gated)}

    def unschedulable_by_plugin(self) -> dict[tuple[str, str], int]:
        """(plugin, profile) -> pods parked as unschedulable that the plugin turned down (kube-scheduler's
        scheduler_unschedulable_pods); the profile is the pod's schedulerName. Read at scrape time."""
        counts: dict[tuple[str, str], int] = {}
        with self._cond:
            for qp in self._unschedulable.values():
                for plugin in qp.rejected_by or ():
                    key = (plugin, qp.info.scheduler_name)
                    counts[key] = counts.get(key, 0) + 1
        return counts

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()


def _may_help(old: PodInfo, new: PodInfo) -> bool:
    """An update of a pending pod that may change its verdict: its spec (requests, affinity, tolerations...)
    or its labels (its own affinity and spreading terms may select itself). Status and annotations cannot."""
    return old.raw.get("spec") != new.raw.get("spec") or old.labels != new.labels
