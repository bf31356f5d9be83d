"""A sampling CPU profiler of every thread of the process, from the standard library alone.

Every `1/hz` seconds it reads each thread's current frame (`sys._current_frames()`) and counts the stack,
root first, under the thread's name. Why not a profiler package: pyinstrument (5.x) samples only the thread
that started it (it installs a per-thread profile hook; on Python 3.11 there is no hook for threads already
running), and py-spy / Austin read the process from outside through ptrace, which a pod does not get
(CAP_SYS_PTRACE) and which cannot be answered from inside the process's own HTTP server. Reading frames is
what those samplers do too; here it costs the sampling thread ~`threads x depth` attribute reads per tick
under the GIL, and nothing at all when no profile is being taken.

Wall-clock samples: a thread blocked in a wait is counted where it waits (like py-spy's default with
--idle), so a flame graph shows idle workers too; its leaf frame (`wait`, `select`...) says so.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from types import CodeType, FrameType
from typing import NamedTuple

MAX_HZ = 1000


class Frame(NamedTuple):
    """A function: its qualified name, its file (shortened to the import path), its first line."""

    name: str
    file: str
    line: int

    @property
    def label(self) -> str:
        # `;` separates frames in the collapsed format and a newline ends a stack: neither may appear inside.
        return f"{self.name} ({self.file}:{self.line})".replace(";", ":").replace("\n", " ")


Stack = tuple[Frame, ...]


@dataclass
class Profile:
    """Counted samples per (thread name, stack, root first); `interval` the nominal seconds between ticks."""

    interval: float
    duration: float = 0.0
    ticks: int = 0
    samples: Counter[tuple[str, Stack]] = field(default_factory=Counter)

    @property
    def total(self) -> int:
        return sum(self.samples.values())


class ProfilerBusy(RuntimeError):
    """A profile is already being taken: one at a time, so two clients do not double the overhead."""


def _short_file(filename: str, roots: tuple[str, ...]) -> str:
    """The file relative to the longest sys.path entry holding it: `metrics_sched/scheduler/scheduler.py`."""
    for root in roots:
        if filename.startswith(root):
            return filename[len(root):]
    return filename


def _roots() -> tuple[str, ...]:
    entries = {os.path.join(os.path.abspath(p), "") for p in sys.path if p}
    return tuple(sorted(entries, key=len, reverse=True))


class _Walker:
    """Turns frames into stacks of Frame, one Frame per code object (cached: code objects live long)."""

    def __init__(self) -> None:
        self._roots = _roots()
        self._frames: dict[CodeType, Frame] = {}

    def frame(self, code: CodeType) -> Frame:
        known = self._frames.get(code)
        if known is None:
            known = Frame(code.co_qualname, _short_file(code.co_filename, self._roots), code.co_firstlineno)
            self._frames[code] = known
        return known

    def stack(self, top: FrameType | None) -> Stack:
        frames: list[Frame] = []
        while top is not None:
            frames.append(self.frame(top.f_code))
            top = top.f_back
        frames.reverse()
        return tuple(frames)


def sample(seconds: float, hz: int, *, stop: threading.Event | None = None,
           clock: Callable[[], float] = time.monotonic) -> Profile:
    """Samples every thread but the calling one for `seconds` (or until `stop` is set), `hz` times a second."""
    if not 0 < hz <= MAX_HZ:
        raise ValueError(f"hz must be in (0, {MAX_HZ}], got {hz}")
    interval = 1.0 / hz
    stop = stop or threading.Event()
    walker = _Walker()
    profile = Profile(interval=interval)
    me = threading.get_ident()
    started = clock()
    end = started + seconds
    next_tick = started
    while True:
        names = {t.ident: t.name for t in threading.enumerate()}
        for ident, top in sys._current_frames().items():
            if ident != me:
                profile.samples[(names.get(ident, f"thread-{ident}"), walker.stack(top))] += 1
        profile.ticks += 1
        # Ticks on a fixed grid (not `interval` after the work) so the rate holds; a late tick is not repeated.
        next_tick = max(next_tick + interval, clock())
        if next_tick >= end or stop.wait(next_tick - clock()):
            break
    profile.duration = clock() - started
    return profile


class SamplingProfiler:
    """One profile at a time across the process's HTTP threads; a second one is refused (ProfilerBusy)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.stop = threading.Event()  # set at shutdown: a profile in progress ends early

    def profile(self, seconds: float, hz: int) -> Profile:
        if not self._lock.acquire(blocking=False):
            raise ProfilerBusy("a profile is already being taken")
        try:
            return sample(seconds, hz, stop=self.stop)
        finally:
            self._lock.release()


__all__ = ["MAX_HZ", "Frame", "Profile", "ProfilerBusy", "SamplingProfiler", "Stack", "sample"]
