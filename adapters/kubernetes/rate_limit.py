"""Client-side request rate limiting, as client-go's QPS/burst token bucket."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class TokenBucket:
    """Allows `burst` requests at once, refilling at `qps` per second.

    acquire() reserves a token under the lock and sleeps outside it, so waiting callers are served in
    arrival order and never hold each other up for longer than their own share.
    """

    def __init__(self, qps: float, burst: int, *, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError(f"qps must be > 0 and burst >= 1 (got qps={qps}, burst={burst})")
        self.qps = qps
        self.burst = burst
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._tokens = float(burst)
        self._updated = clock()
        self.waited_seconds = 0.0

    def acquire(self) -> float:
        """Blocks until a request may go; returns how long it waited."""
        with self._lock:
            now = self._clock()
            self._tokens = min(float(self.burst), self._tokens + (now - self._updated) * self.qps)
            self._updated = now
            self._tokens -= 1.0
            wait = -self._tokens / self.qps if self._tokens < 0 else 0.0
            self.waited_seconds += wait
        if wait > 0:
            self._sleep(wait)
        return wait
