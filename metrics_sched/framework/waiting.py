"""Pods held at Permit (kube-scheduler's waitingPod): every plugin that answered Wait must allow the pod
before its binding cycle starts; one reject, or a plugin's timeout, rejects it.

Waiting holds no thread: the pod sits here with a timer per plugin, and `on_done` is called once, with
SUCCESS or the rejecting status, from whichever thread resolved it (a plugin's allow/reject, a timer).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

from metrics_sched.framework.status import SUCCESS, Code, Status
from metrics_sched.model.podinfo import PodInfo

__all__ = ["WaitingPod", "WaitingPods"]


class WaitingPod:
    def __init__(self, pod: PodInfo, node: str, timeouts: dict[str, float],
                 on_done: Callable[[Status], None]) -> None:
        self.pod = pod
        self.node = node
        self._pending = set(timeouts)
        self._on_done = on_done
        self._lock = threading.Lock()
        self._done = False
        self._timers = [threading.Timer(seconds, self.reject, (plugin, f"waited {seconds:g}s at Permit"))
                        for plugin, seconds in timeouts.items()]
        for timer in self._timers:
            timer.daemon = True

    def _start(self) -> None:
        for timer in self._timers:
            timer.start()

    @property
    def pending_plugins(self) -> frozenset[str]:
        with self._lock:
            return frozenset(self._pending)

    def allow(self, plugin: str) -> None:
        """`plugin` lets the pod go; the binding cycle starts once no plugin is left waiting."""
        with self._lock:
            if self._done:
                return
            self._pending.discard(plugin)
            if self._pending:
                return
            self._done = True
        self._finish(SUCCESS)

    def reject(self, plugin: str, message: str) -> None:
        with self._lock:
            if self._done:
                return
            self._done = True
        self._finish(Status(Code.UNSCHEDULABLE, message, plugin))

    def _finish(self, status: Status) -> None:
        for timer in self._timers:
            timer.cancel()
        self._on_done(status)


class WaitingPods:
    """The waiting pods of one framework, by UID; plugins reach it through Handle.waiting_pods."""

    def __init__(self) -> None:
        self._pods: dict[str, WaitingPod] = {}
        self._lock = threading.Lock()

    def add(self, waiting: WaitingPod) -> None:
        with self._lock:
            self._pods[waiting.pod.uid] = waiting
        waiting._start()

    def remove(self, uid: str) -> None:
        with self._lock:
            self._pods.pop(uid, None)

    def get(self, uid: str) -> WaitingPod | None:
        with self._lock:
            return self._pods.get(uid)

    def __iter__(self) -> Iterator[WaitingPod]:
        with self._lock:
            return iter(list(self._pods.values()))

    def __len__(self) -> int:
        with self._lock:
            return len(self._pods)
