"""A circuit breaker over whole refreshes: a source that keeps failing is left alone for a while.

closed -> (failure_threshold consecutive failed refreshes) -> open for cool_down -> half_open: one
probe. A successful probe closes it and resets the cool-down; a failed one re-opens it with the
cool-down doubled, up to max_cool_down.

Any PolledSource may own one (the CMDB source does, from its `circuitBreaker` config); the source's
SourceHealth carries its state, so /sources shows it like any other health field.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from metrics_sched.telemetry.health import BreakerState, BreakerStatus


class CircuitBreaker:
    def __init__(self, *, failure_threshold: int = 3, cool_down: float = 30.0, max_cool_down: float = 300.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.failure_threshold = failure_threshold
        self.base_cool_down = cool_down
        self.max_cool_down = max(max_cool_down, cool_down)
        self._clock = clock
        self._lock = threading.Lock()
        self._state: BreakerState = "closed"
        self._failures = 0
        self._cool_down = cool_down
        self._open_until = 0.0
        self._opened = 0  # times it has opened

    @property
    def state(self) -> BreakerState:
        with self._lock:
            return self._state

    def allow(self) -> bool:
        """May a refresh go ahead now? Moves open -> half_open once the cool-down is over."""
        with self._lock:
            if self._state == "open":
                if self._clock() < self._open_until:
                    return False
                self._state = "half_open"
            return True

    def retry_in(self) -> float:
        """Seconds until an open breaker lets the next probe through (0 when not open)."""
        with self._lock:
            return self._retry_in_locked()

    def _retry_in_locked(self) -> float:
        return max(0.0, self._open_until - self._clock()) if self._state == "open" else 0.0

    def record_success(self) -> None:
        with self._lock:
            self._state = "closed"
            self._failures = 0
            self._cool_down = self.base_cool_down

    def record_failure(self) -> None:
        with self._lock:
            self._failures += 1
            if self._state == "half_open":
                self._cool_down = min(self._cool_down * 2, self.max_cool_down)
                self._open()
            elif self._state == "closed" and self._failures >= self.failure_threshold:
                self._open()

    def _open(self) -> None:
        self._state = "open"
        self._open_until = self._clock() + self._cool_down
        self._opened += 1

    def status(self, wall_now: float) -> BreakerStatus:
        """The state for the health model; `wall_now` (unix time) turns the monotonic reopening time into
        a wall-clock one that stays right between refreshes."""
        with self._lock:
            retry_in = self._retry_in_locked()
            return BreakerStatus(state=self._state, consecutive_failures=self._failures, cool_down=self._cool_down,
                                 opened=self._opened, reopens_at=wall_now + retry_in if self._state == "open" else None)
