"""Progress lines for long operations (builds, cluster start, node creation, demo)."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    """Prints `[topic] message (elapsed)` lines; quiet=True keeps a run silent (tests)."""

    def __init__(self, topic: str, *, quiet: bool = False, stream: TextIO | None = None) -> None:
        self.topic = topic
        self.quiet = quiet
        self.stream = stream or sys.stderr
        self.started = time.monotonic()

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def __call__(self, message: str) -> None:
        if self.quiet:
            return
        print(f"[{self.topic}] {message} ({format_seconds(self.elapsed())})", file=self.stream, flush=True)


def format_seconds(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}m{secs:02d}s"
