"""A circuit breaker over whole refreshes: a CMDB that keeps failing is left alone for a while.

closed -> (failure_threshold consecutive failed refreshes) -> open for cool_down -> half_open: one
probe. A successful probe closes it and resets the cool-down; a failed one re-opens it with the
cool-down doubled, up to max_cool_down.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, Literal

State = Literal["closed", "open", "half_open"]


class CircuitBreaker:
    def __init__(self, *, failure_threshold: int = 3, cool_down: float = 30.0, max_cool_down: float = 300.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.failure_threshold = failure_threshold
        self.base_cool_down = cool_down
        self.max_cool_down = max(max_cool_down, cool_down)
        self._clock = clock
        self._lock = threading.Lock()
        self._state: State = "closed"
        self._failures = 0
        self._cool_down = cool_down
        self._open_until = 0.0
        self.opened = 0  # times it has opened, for health()

    @property
    def state(self) -> State:
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
        with self._lock:
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
        self.opened += 1

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            retry_in = max(0.0, self._open_until - self._clock()) if self._state == "open" else 0.0
            return {"state": self._state, "consecutive_failures": self._failures, "cool_down": self._cool_down,
                    "retry_in": round(retry_in, 3), "opened": self.opened}
