"""Tells the pod what happened: events (Scheduled / FailedScheduling) and the PodScheduled condition.

These writes go through a small pool of their own so a slow events API never delays a bind.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal

from metrics_sched.model.podinfo import PodInfo
from metrics_sched.ports import ApiError, PodWriter, SchedulingEvent

log = logging.getLogger(__name__)

RETRY_ATTEMPTS = 6
RETRY_INITIAL = 0.5  # seconds, doubling: gives up after ~15 s


class PodReporter:
    def __init__(self, writer: PodWriter, scheduler_name: str, *, instance: str | None = None,
                 workers: int = 8) -> None:
        self.writer = writer
        self.controller = scheduler_name
        # Which replica acted: the leader-election identity when there is one.
        self.instance = instance or f"{scheduler_name}-{socket.gethostname()}"
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="report")
        self._pending = 0
        self._idle = threading.Condition()

    def _submit(self, fn: Callable[..., None], *args: Any, **kwargs: Any) -> None:
        with self._idle:
            self._pending += 1
        self.pool.submit(self._safely, fn, *args, **kwargs)

    def wait_idle(self, timeout: float = 10.0) -> bool:
        """Waits until every queued report has been written (tests, shutdown)."""
        with self._idle:
            return self._idle.wait_for(lambda: self._pending == 0, timeout)

    def _event(self, pod: PodInfo, type_: Literal["Normal", "Warning"], reason: str, action: str,
               note: str) -> None:
        event = SchedulingEvent(namespace=pod.namespace, pod_name=pod.name, pod_uid=pod.uid, type=type_,
                                reason=reason, action=action, note=note, reporting_controller=self.controller,
                                reporting_instance=self.instance)
        self._submit(self.writer.record_event, event)

    def _safely(self, fn: Callable[..., None], *args: Any, **kwargs: Any) -> None:
        delay = RETRY_INITIAL
        try:
            for attempt in range(RETRY_ATTEMPTS):
                try:
                    fn(*args, **kwargs)
                    return
                except ApiError as exc:
                    if exc.not_found:
                        return  # the pod is gone: nobody to tell
                    if not exc.ambiguous or attempt == RETRY_ATTEMPTS - 1:
                        log.warning("reporting to the API failed: %s", exc)
                        return
                    # The API is restarting or overloaded: an event lost now is an unexplained pod later.
                    time.sleep(delay)
                    delay *= 2
        except Exception:
            log.exception("reporting to the API failed")
        finally:
            with self._idle:
                self._pending -= 1
                self._idle.notify_all()

    def scheduled(self, pod: PodInfo, node: str, summary: str = "") -> None:
        note = f"Successfully assigned {pod.key} to {node}" + (f": {summary}" if summary else "")
        self._event(pod, "Normal", "Scheduled", "Binding", note)

    def failed(self, pod: PodInfo, message: str, *, reason: Literal["Unschedulable", "SchedulerError"]) -> None:
        self._event(pod, "Warning", "FailedScheduling", "Scheduling", message)
        self._submit(self.writer.set_pod_scheduled_condition, pod.namespace, pod.name,
                     status="False", reason=reason, message=message)

    def shutdown(self, wait: bool = True) -> None:
        self.pool.shutdown(wait=wait)
