"""An allocation snapshot on demand (tracemalloc): start tracing, then the top-N allocation sites since then.

tracemalloc hooks every allocation of the process while it traces: CPU on every allocation (the core bench
measured in docs/observability.md, "Profiling") and memory for each live traced block plus its traceback. So it is off
until asked (`start`) and can be turned off again (`stop`); it never starts by itself.
"""

from __future__ import annotations

import threading
import tracemalloc

MAX_FRAMES = 32
_IGNORED = (tracemalloc.Filter(False, tracemalloc.__file__),
            tracemalloc.Filter(False, "<frozen importlib._bootstrap*>"), tracemalloc.Filter(False, "<unknown>"))


def _mib(size: int) -> str:
    return f"{size / 2 ** 20:.1f} MiB"


class HeapTracer:
    """The baseline snapshot taken at `start`; `top` compares against it (or shows what is live, diff=False)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._baseline: tracemalloc.Snapshot | None = None

    @property
    def tracing(self) -> bool:
        return tracemalloc.is_tracing()

    def start(self, frames: int) -> str:
        with self._lock:
            if tracemalloc.is_tracing():
                return f"already tracing ({tracemalloc.get_traceback_limit()} frames)\n"
            tracemalloc.start(frames)
            self._baseline = tracemalloc.take_snapshot().filter_traces(_IGNORED)
            return f"tracing started ({frames} frames per allocation); until ?stop=1 every allocation is traced\n"

    def stop(self) -> str:
        with self._lock:
            was = tracemalloc.is_tracing()
            tracemalloc.stop()
            self._baseline = None
            return "tracing stopped\n" if was else "was not tracing\n"

    def top(self, n: int, *, key: str, diff: bool) -> str | None:
        """The report, or None while not tracing."""
        with self._lock:
            if not tracemalloc.is_tracing():
                return None
            snapshot = tracemalloc.take_snapshot().filter_traces(_IGNORED)
            current, peak = tracemalloc.get_traced_memory()
            lines = [f"traced: {_mib(current)} now, {_mib(peak)} peak; tracemalloc's own memory: "
                     f"{_mib(tracemalloc.get_tracemalloc_memory())}\n"]
            if diff and self._baseline is not None:
                lines.append(f"top {n} by growth since ?start=1 (key={key}):\n")
                for change in snapshot.compare_to(self._baseline, key)[:n]:
                    lines.append(f"{change.size_diff / 1024:+12.1f} KiB {change.count_diff:+9d} blocks "
                                 f"(now {change.size / 1024:.1f} KiB)  {_where(change.traceback)}\n")
            else:
                lines.append(f"top {n} live allocation sites (key={key}):\n")
                for stat in snapshot.statistics(key)[:n]:
                    lines.append(f"{stat.size / 1024:12.1f} KiB {stat.count:9d} blocks  {_where(stat.traceback)}\n")
            return "".join(lines)


def _where(traceback: tracemalloc.Traceback) -> str:
    # Most recent call first, so the allocating line leads even when a traceback has several frames.
    return " <- ".join(f"{frame.filename}:{frame.lineno}" for frame in reversed(traceback))


__all__ = ["MAX_FRAMES", "HeapTracer"]
