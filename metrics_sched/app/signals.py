"""Process signals, installed by the app from the main thread: SIGTERM and SIGINT stop the process gracefully
(the caller drains and releases what it holds), SIGUSR2 asks for a cache comparison."""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable
from types import FrameType

log = logging.getLogger("metrics_sched.app")


def stop_on_termination(stop: threading.Event, *, logged_as: str | None = None) -> None:
    """SIGTERM and SIGINT set `stop`; with `logged_as` each is logged as "signal NAME: <logged_as>"."""

    def on_signal(signum: int, _: FrameType | None) -> None:
        if logged_as is not None:
            log.info("signal %s: %s", signal.Signals(signum).name, logged_as)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)


def on_compare_request(request: Callable[[], None]) -> None:
    """SIGUSR2 calls `request`. Install it before anything may send the signal: its default action ends the
    process."""
    signal.signal(signal.SIGUSR2, lambda _signum, _frame: request())


__all__ = ["on_compare_request", "stop_on_termination"]
