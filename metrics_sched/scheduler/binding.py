"""The bind loop: binds assumed pods asynchronously, with several workers.

After an error the API is asked what happened rather than guessed: a pod that shows spec.nodeName
was bound (by us or a racing replica) and is never bound again; a pod that is gone, or re-created
under the same name with another UID, is forgotten; only a pod still unbound is retried, with backoff.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from metrics_sched.framework.interfaces import Code
from metrics_sched.framework.runtime import CycleResult, Framework
from metrics_sched.podinfo import PodInfo
from metrics_sched.ports import ApiError, KubeObject, PodWriter
from metrics_sched.queue import SchedulingQueue
from metrics_sched.scheduler.reporting import PodReporter
from metrics_sched.state.cluster_state import ClusterState

log = logging.getLogger(__name__)

REREAD_ATTEMPTS = 5


@dataclass(frozen=True)
class BindOutcome:
    pod: PodInfo
    node: str
    result: str  # bound | already_bound | bound_elsewhere | gone | node_gone | not_leader | unknown | error
    detail: str = ""
    seconds: float = 0.0


class Binder:
    def __init__(
        self,
        state: ClusterState,
        queue: SchedulingQueue,
        writer: PodWriter,
        reporter: PodReporter,
        *,
        workers: int,
        is_leader: Callable[[], bool],
        max_pending: int | None = None,
        on_outcome: Callable[[BindOutcome, CycleResult], None] | None = None,
    ) -> None:
        self.state = state
        self.queue = queue
        self.writer = writer
        self.reporter = reporter
        self.is_leader = is_leader
        self.on_outcome = on_outcome
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="bind")
        self._in_flight = 0
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        # Backpressure: when binds fall behind, the scheduling loop waits here instead of piling up assumed
        # pods (and their cycle state) in an unbounded executor queue; the pods wait, cheaply, in activeQ.
        self.max_pending = max_pending or 4 * workers

    def submit(self, framework: Framework, result: CycleResult) -> Future[BindOutcome]:
        with self._idle:
            self._idle.wait_for(lambda: self._in_flight < self.max_pending)
            self._in_flight += 1
        return self.pool.submit(self._run, framework, result)

    def in_flight(self) -> int:
        with self._lock:
            return self._in_flight

    def drain(self, timeout: float) -> bool:
        """Waits for binds in flight (SIGTERM); True when none is left."""
        deadline = time.monotonic() + timeout
        with self._idle:
            while self._in_flight:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._idle.wait(left)
        return True

    def shutdown(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=False)

    def _run(self, framework: Framework, result: CycleResult) -> BindOutcome:
        started = time.perf_counter()
        try:
            outcome = self._bind(framework, result)
        except Exception as exc:
            log.exception("bind of %s failed unexpectedly", result.pod.key)
            self._undo(framework, result)
            self.queue.retry_later(result.pod.uid)
            outcome = BindOutcome(result.pod, result.node or "", "error", repr(exc))
        outcome = BindOutcome(outcome.pod, outcome.node, outcome.result, outcome.detail,
                              time.perf_counter() - started)
        if self.on_outcome:
            try:
                self.on_outcome(outcome, result)
            except Exception:
                log.exception("bind outcome observer failed")
        with self._idle:
            self._in_flight -= 1
            self._idle.notify_all()
        return outcome

    def _undo(self, framework: Framework, result: CycleResult) -> None:
        assert result.node is not None
        for plugin in reversed(framework.reserves):
            try:
                plugin.unreserve(result.cycle, result.pod, result.node)
            except Exception:
                log.exception("unreserve of %s failed", plugin.name)
        self.state.forget(result.pod.uid)

    def _bind(self, framework: Framework, result: CycleResult) -> BindOutcome:
        pod, node = result.pod, result.node
        assert node is not None
        if not self.is_leader():
            self._undo(framework, result)
            self.queue.retry_later(pod.uid)
            return BindOutcome(pod, node, "not_leader")
        if not self.state.has_node(node):
            self._undo(framework, result)
            self.queue.requeue(pod)
            return BindOutcome(pod, node, "node_gone")
        try:
            for plugin in framework.binders:
                status = plugin.bind(result.cycle, pod, node)
                if status.code != Code.SKIP:
                    break
        except ApiError as exc:
            return self._after_error(framework, result, exc)
        return self._bound(framework, result, "bound")

    def _bound(self, framework: Framework, result: CycleResult, how: str) -> BindOutcome:
        pod, node = result.pod, result.node
        assert node is not None
        self.queue.done(pod.uid)
        for plugin in framework.post_binds:
            try:
                plugin.post_bind(result.cycle, pod, node)
            except Exception:
                log.exception("postBind %s failed", plugin.name)
        # "already_bound": our bind answered ambiguously and the re-read shows the pod on our node: it was ours.
        self.reporter.scheduled(pod, node, result.cycle.get("summary", ""))
        return BindOutcome(pod, node, how)

    def _reread(self, pod: PodInfo) -> KubeObject | None:
        delay = 0.1
        for attempt in range(REREAD_ATTEMPTS):
            try:
                return self.writer.get_pod(pod.namespace, pod.name)
            except ApiError as exc:
                if attempt == REREAD_ATTEMPTS - 1:
                    raise
                log.warning("re-reading %s after a bind error: %s", pod.key, exc)
                time.sleep(delay)
                delay *= 2
        return None

    def _after_error(self, framework: Framework, result: CycleResult, error: ApiError) -> BindOutcome:
        pod, node = result.pod, result.node
        assert node is not None
        try:
            current = self._reread(pod)
        except ApiError as exc:
            # We cannot tell whether the bind happened. Keep the pod assumed (never overcommit) and
            # the same bind is retried later (a 409 then tells us it had happened).
            log.error("bind of %s to %s: outcome unknown (%s; re-read failed: %s)", pod.key, node, error, exc)
            with self._lock:
                self._in_flight += 1
            timer = threading.Timer(self.queue.backoff_duration(result.pod.attempts + 1),
                                    lambda: self.pool.submit(self._run, framework, result))
            timer.daemon = True
            timer.start()
            return BindOutcome(pod, node, "unknown", f"{error}; re-read: {exc}")
        if current is None or (current.get("metadata") or {}).get("uid") != pod.uid:
            self._undo(framework, result)
            self.queue.done(pod.uid)
            return BindOutcome(pod, node, "gone", str(error))
        bound_to = (current.get("spec") or {}).get("nodeName")
        if bound_to == node:
            return self._bound(framework, result, "already_bound")
        if bound_to:
            # Bound elsewhere (another scheduler instance won a race): the watch will count it there.
            self._undo(framework, result)
            self.queue.done(pod.uid)
            return BindOutcome(pod, node, "bound_elsewhere", f"bound to {bound_to}: {error}")
        self._undo(framework, result)
        self.queue.retry_later(pod.uid)
        self.reporter.failed(pod, f"binding rejected: {error}", reason="SchedulerError")
        return BindOutcome(pod, node, "error", str(error))
