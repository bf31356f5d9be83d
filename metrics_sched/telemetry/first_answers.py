"""The telemetry sources that have not answered yet: scheduling waits for each one's first refresh to end, as
kube-scheduler waits for its informers to sync, so no pod is placed on what no source has measured yet.

A scheduler started against nodes that all read 92 °C bound a GPU pod created right after /readyz answered, before
the first Prometheus answer (a metric with onMissing `neutral` scored it as if cool). A first refresh that fails
counts as the answer (the pods then meet what the config says for a missing value, as they would later), and the
wait is bounded (`wait`'s timeout): a source that hangs delays scheduling by that much at most. /readyz names the
sources still waited for.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

__all__ = ["FirstAnswers"]


class FirstAnswers:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._waiting: set[str] = set()
        self._gave_up = False  # the bounded wait ran out: the ones left are no longer waited for

    def expect(self, name: str) -> None:
        """A source whose first refresh is to be waited for."""
        with self._cond:
            self._waiting.add(name)

    def answered(self, name: str) -> None:
        """The source's refresh ended, with values or without: it is no longer waited for."""
        with self._cond:
            if name in self._waiting:
                self._waiting.discard(name)
                self._cond.notify_all()

    def waiting_for(self) -> list[str]:
        """The sources scheduling still waits for (none once the wait gave up on them), sorted."""
        with self._cond:
            return [] if self._gave_up else sorted(self._waiting)

    def unanswered(self) -> list[str]:
        """The sources whose first refresh has not ended, waited for or not, sorted."""
        with self._cond:
            return sorted(self._waiting)

    def wait(self, timeout: float, stopped: Callable[[], bool] = lambda: False) -> list[str]:
        """Until every source answered, `timeout` seconds passed or `stopped()`; the sources that did not answer.
        Once the timeout has passed, none is waited for any more (`waiting_for` is empty)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while self._waiting and not stopped():
                left = deadline - time.monotonic()
                if left <= 0:
                    self._gave_up = True
                    break
                self._cond.wait(min(left, 0.1))  # bounded so `stopped` is looked at
            return sorted(self._waiting)
