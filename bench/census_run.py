"""`python -m bench.census_run <metrics-sched CLI arguments>`: the scheduler, plus an object census on SIGUSR1.

Each SIGUSR1 appends one line to $CENSUS_FILE: the live objects the garbage collector tracks (containers: dicts,
lists, tuples, instances), counted and sized (sys.getsizeof, shallow) per type. bench.e2e_profile --census takes
one when the scheduler is ready and one after the last bind: the difference is what the pods left behind, by
type, without tracemalloc's cost on every allocation.
"""

from __future__ import annotations

import gc
import json
import os
import signal
import sys
import threading
import time
from collections import Counter
from types import FrameType

from metrics_sched.app.cli import main


def census() -> dict[str, tuple[int, int]]:
    counts: Counter[str] = Counter()
    sizes: Counter[str] = Counter()
    for obj in gc.get_objects():
        name = type(obj).__qualname__
        module = type(obj).__module__
        key = name if module == "builtins" else f"{module}.{name}"
        counts[key] += 1
        sizes[key] += sys.getsizeof(obj)
    return {key: (counts[key], sizes[key]) for key in counts}


def _write(path: str) -> None:
    started = time.monotonic()
    line = json.dumps({"time": time.time(), "census": census(), "seconds": round(time.monotonic() - started, 2)})
    with open(path, "a", encoding="utf-8") as out:
        out.write(line + "\n")


def _on_signal(signum: int, frame: FrameType | None) -> None:
    path = os.environ.get("CENSUS_FILE")
    if path:
        # Not in the handler itself: it runs on the main thread between bytecodes, wherever that is.
        threading.Thread(target=_write, args=(path,), name="census", daemon=True).start()


if __name__ == "__main__":
    signal.signal(signal.SIGUSR1, _on_signal)
    sys.exit(main(sys.argv[1:]))
