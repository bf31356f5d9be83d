"""The API side of a preemption, off the scheduling thread (kube-scheduler's prepareCandidateAsync).

For the chosen candidate, in one background task: the preemptor's status.nominatedNodeName is set; the
nominations of lower-priority pods on that node are cleared (they may no longer fit there: cleared, they are
retried elsewhere sooner); then each victim is taken: a victim held at Permit is rejected, any other gets the
DisruptionTarget condition (reason PreemptionByScheduler) and is deleted, and a Preempted event is recorded
on it. The scheduling thread only decides; it never waits for these calls. While the task runs, the
preemptor does not preempt again while a victim is still there and not yet leaving (victims_of): it waits
in the queue for the victims' deletions, which requeue it through the filters' own events (AssignedPodDelete),
as upstream; once the last victim is leaving it is considered again even if the task has not returned yet
(upstream's lastVictimsPendingPreemption), so no deletion event can be missed.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from metrics_sched.framework import (
    ApiError,
    Nomination,
    PodInfo,
    PodRecord,
    PodWriter,
    Preemptor,
    SchedulingEvent,
    WaitingPods,
)

__all__ = ["PreemptionExecutor"]

log = logging.getLogger(__name__)


class PreemptionExecutor:
    def __init__(self, preemptor: Preemptor, writer: PodWriter, waiting_pods: WaitingPods, *, instance: str = "",
                 workers: int = 2, on_done: Callable[[str, bool], None] = lambda uid, ok: None) -> None:
        self._preemptor = preemptor
        self._writer = writer
        self._waiting = waiting_pods
        self._instance = instance
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="preemption")
        self._lock = threading.Lock()
        self._running: dict[str, frozenset[str]] = {}  # preemptor uid -> its victims' uids
        self._on_done = on_done  # (preemptor uid, every call succeeded)

    def victims_of(self, uid: str) -> frozenset[str]:
        """The victims of the preemption under way for this pod (empty when none is)."""
        with self._lock:
            return self._running.get(uid, frozenset())

    def submit(self, pod: PodInfo, node: str, victims: Sequence[PodRecord], cleared: Sequence[Nomination]) -> None:
        with self._lock:
            self._running[pod.uid] = frozenset(v.uid for v in victims)
        self._pool.submit(self._run, pod, node, tuple(victims), tuple(cleared))

    def clear(self, pod: PodInfo) -> None:
        """Clears the pod's status.nominatedNodeName: preemption no longer helps it."""
        self._pool.submit(self._call, f"clear the nomination of {pod.key}",
                          lambda: self._preemptor.set_nominated_node(pod.namespace, pod.name, None))

    def drain(self) -> None:
        """Waits for the tasks under way (tests; shutdown)."""
        self._pool.shutdown(wait=True)

    def _run(self, pod: PodInfo, node: str, victims: tuple[PodRecord, ...], cleared: tuple[Nomination, ...]) -> None:
        ok = True
        try:
            ok = self._call(f"nominate {pod.key} to {node}",
                            lambda: self._preemptor.set_nominated_node(pod.namespace, pod.name, node)) and ok
            for other in cleared:
                namespace, _, name = other.key.partition("/")
                ok = self._call(f"clear the nomination of {other.key}",
                                functools.partial(self._preemptor.set_nominated_node, namespace, name, None)) and ok
            for victim in victims:
                ok = self._take(pod, node, victim) and ok
        except Exception:
            log.exception("preemption for %s failed", pod.key)
            ok = False
        finally:
            with self._lock:
                self._running.pop(pod.uid, None)
            self._on_done(pod.uid, ok)

    def _take(self, pod: PodInfo, node: str, victim: PodRecord) -> bool:
        waiting = self._waiting.get(victim.uid)
        if waiting is not None:  # held at Permit: rejecting it frees its room, nothing to delete
            waiting.reject("DefaultPreemption", "preempted")
        else:
            message = f"{pod.scheduler_name}: preempting to accommodate a higher priority pod"
            if not self._call(f"mark {victim.key} DisruptionTarget", lambda: self._preemptor.mark_disruption_target(
                    victim.namespace, victim.name, message), gone_ok=True):
                return False
            if not self._call(f"delete {victim.key}", lambda: self._preemptor.delete_pod(
                    victim.namespace, victim.name, victim.uid), gone_ok=True):
                return False
        event = SchedulingEvent(
            namespace=victim.namespace, pod_name=victim.name, pod_uid=victim.uid, type="Normal", reason="Preempted",
            action="Preempting", note=f"Preempted by pod {pod.uid} on node {node}",
            reporting_controller=pod.scheduler_name, reporting_instance=self._instance or pod.scheduler_name)
        self._call(f"record Preempted on {victim.key}", lambda: self._writer.record_event(event))
        return True

    @staticmethod
    def _call(what: str, call: Callable[[], object], *, gone_ok: bool = False) -> bool:
        try:
            call()
            return True
        except ApiError as exc:
            if gone_ok and (exc.not_found or exc.conflict):  # already gone (or re-created): nothing to take
                return True
            log.warning("preemption: cannot %s: %s", what, exc)
            return False
