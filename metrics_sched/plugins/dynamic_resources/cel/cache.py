"""SelectorCache: each distinct selector expression compiled once (upstream cel/cache.go).

Upstream keeps 10 entries per plugin instance and recompiles per scheduling cycle beyond that; this cache lives
as long as the plugin, across pods, so it holds every class and claim selector a cluster uses (a few hundred at
most). Only successful compiles are kept, as upstream: a bad expression fails each time it is asked for.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from metrics_sched.plugins.dynamic_resources.cel.selector import CompiledSelector, compile_selector

__all__ = ["DEFAULT_MAX_ENTRIES", "SelectorCache"]

DEFAULT_MAX_ENTRIES = 1024
# Compiles of different expressions run side by side; two threads asking for the same one wait for one compile
# (upstream's keymutex.NewHashed). A fixed set of locks, picked by hash, bounds the memory.
_STRIPES = 32


class SelectorCache:
    """Thread-safe LRU of compiled selectors."""

    def __init__(self, max_entries: int = DEFAULT_MAX_ENTRIES) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be at least 1")
        self._max = max_entries
        self._entries: OrderedDict[str, CompiledSelector] = OrderedDict()
        self._lock = threading.Lock()
        self._compile_locks = [threading.Lock() for _ in range(_STRIPES)]

    def compile(self, expression: str) -> CompiledSelector:
        """The compiled expression, from the cache or compiled now; CelCompileError when it does not compile."""
        found = self._get(expression)
        if found is not None:
            return found
        with self._compile_locks[hash(expression) % _STRIPES]:
            found = self._get(expression)
            if found is not None:
                return found
            compiled = compile_selector(expression)
            with self._lock:
                self._entries[expression] = compiled
                if len(self._entries) > self._max:
                    self._entries.popitem(last=False)
            return compiled

    def _get(self, expression: str) -> CompiledSelector | None:
        with self._lock:
            found = self._entries.get(expression)
            if found is not None:
                self._entries.move_to_end(expression)
            return found

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)
