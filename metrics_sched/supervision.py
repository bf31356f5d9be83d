"""Supervision of the worker threads: the scheduling loop, the binder and reporter pools, the telemetry
source refreshers, the leader elector and the rebalancer.

In kube-scheduler an unexpected panic takes the whole process down, so the kubelet restarts it and the
lease is released. Here an exception only ends the thread that raised it, and the replica would go on
renewing its lease with nobody scheduling. So every worker reports to one Supervisor: a failure it
survives (it logged the pod, put it back in the queue and carried on) is counted by worker for
/metrics; a worker that cannot go on is *fatal*, which makes /healthz fail (the process is restarted)
and tells the app to stop (the lease is released at once instead of expiring).

What a worker calls:
- `failed(worker, exc, pod=...)` after it recovered from an unexpected exception (logs with the pod, counts);
- `fatal(worker, reason)` when it cannot continue;
- `spawn(worker, target, name=..., stopping=...)` to start a thread whose death (an exception escaping
  `target`, or `target` returning while `stopping()` is False) is fatal;
- `guard(worker, fn, pod=...)` to run one unit of work (a task of a pool, a refresh) that must not end the
  thread: an exception is `failed` and guard returns False.
"""

from __future__ import annotations

import enum
import logging
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)


class Worker(enum.StrEnum):
    """The kinds of worker thread: the `worker` label of metrics_sched_worker_failures_total."""

    SCHEDULING_LOOP = "scheduling_loop"
    BINDER = "binder"
    REPORTER = "reporter"
    SOURCE = "source"
    LEADER_ELECTION = "leader_election"
    REBALANCER = "rebalancer"


class Supervisor:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._failures = dict.fromkeys(Worker, 0)
        # Why each fatal worker stopped, by thread name (bounded by the number of threads).
        self._fatal: dict[str, str] = {}
        self._on_fatal: list[Callable[[str], None]] = []

    def failed(self, worker: Worker, exc: BaseException, *, pod: str | None = None) -> None:
        """An unexpected exception the worker survived: logged with the pod it was handling, counted."""
        with self._lock:
            self._failures[worker] += 1
        where = f" handling pod {pod}" if pod else ""
        log.error("%s: unexpected error%s: %r", worker, where, exc, exc_info=exc)

    def fatal(self, worker: Worker, reason: str, *, thread: str | None = None) -> None:
        """The worker cannot continue: /healthz fails from now on and the on_fatal listeners run (once per
        thread)."""
        name = thread or threading.current_thread().name
        message = f"{worker} ({name}): {reason}"
        with self._lock:
            if name in self._fatal:
                return
            self._fatal[name] = message
            listeners = list(self._on_fatal)
        log.critical("worker cannot continue: %s", message)
        for listener in listeners:
            try:
                listener(message)
            except Exception:
                log.exception("on_fatal listener failed")

    def on_fatal(self, listener: Callable[[str], None]) -> None:
        """listener(message) runs (in the failing thread) when a worker becomes fatal, e.g. to stop the app."""
        with self._lock:
            self._on_fatal.append(listener)
            already = list(self._fatal.values())
        for message in already:
            listener(message)

    def guard(self, worker: Worker, fn: Callable[[], object], *, pod: str | None = None) -> bool:
        """Runs one unit of work; an exception is counted and logged (`failed`) instead of ending the thread.
        True if fn returned."""
        try:
            fn()
        except Exception as exc:  # noqa: BLE001 - `failed` logs it with its traceback
            self.failed(worker, exc, pod=pod)
            return False
        return True

    def spawn(self, worker: Worker, target: Callable[[], None], *, name: str,
              stopping: Callable[[], bool]) -> threading.Thread:
        """Starts `target` in a daemon thread. It is expected to run until `stopping()` turns True: an
        exception escaping it, or returning before that, makes the worker fatal."""

        def run() -> None:
            try:
                target()
            except BaseException as exc:  # noqa: BLE001 - whatever ends the thread (even SystemExit) fails /healthz
                self.failed(worker, exc)
                self.fatal(worker, f"died: {exc!r}", thread=name)
                return
            if not stopping():
                self.fatal(worker, "exited while the scheduler runs", thread=name)

        thread = threading.Thread(target=run, name=name, daemon=True)
        thread.start()
        return thread

    # -- what /healthz and /metrics read ---------------------------------------------------------
    def problems(self) -> list[str]:
        """Why the process is unhealthy: one line per worker that cannot continue (empty when healthy)."""
        with self._lock:
            return sorted(self._fatal.values())

    def healthy(self) -> bool:
        with self._lock:
            return not self._fatal

    def failure_counts(self) -> dict[Worker, int]:
        """Unexpected exceptions survived, by worker (every worker present, 0 included)."""
        with self._lock:
            return dict(self._failures)
