"""Polling for exactly the condition a test asserts next, shared by unit and e2e tests."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def poll(check: Callable[[], T | None], timeout: float, what: str, interval: float = 0.1) -> T:
    """Returns check()'s first truthy result; fails with `what` after timeout seconds."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        last = check()
        if last:
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)
