"""A stack dump of every thread, by name: what each is doing right now (a hung loop shows where it hangs)."""

from __future__ import annotations

import sys
import threading
import traceback


def thread_dump() -> str:
    frames = sys._current_frames()
    threads = sorted(threading.enumerate(), key=lambda t: t.name)
    parts = [f"{len(threads)} threads\n"]
    for thread in threads:
        kind = "daemon" if thread.daemon else "non-daemon"
        parts.append(f"\nThread {thread.name!r} (ident {thread.ident}, native id {thread.native_id}, {kind}):\n")
        top = frames.get(thread.ident) if thread.ident is not None else None
        parts.append("".join(traceback.format_stack(top)) if top is not None else "  (no Python frame)\n")
    return "".join(parts)


__all__ = ["thread_dump"]
