"""A small bounded cache whose entries expire: the review answers, so that a scraper every 30 s (or a burst of
`explain` requests) costs the API server one review per TTL, not one per request."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class TTLCache(Generic[K, V]):
    """At most `max_entries` answers, the least recently used evicted first; each kept for the TTL given when it
    was put. Thread-safe (the HTTP server answers on several threads)."""

    def __init__(self, max_entries: int, *, clock: Callable[[], float] = time.monotonic) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be >= 1")
        self._max = max_entries
        self._clock = clock
        self._entries: OrderedDict[K, tuple[float, V]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: K) -> tuple[bool, V | None]:
        """(True, value) while cached and fresh, else (False, None)."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return False, None
            expires, value = entry
            if self._clock() >= expires:
                del self._entries[key]
                return False, None
            self._entries.move_to_end(key)
            return True, value

    def put(self, key: K, value: V, ttl: float) -> None:
        if ttl <= 0:
            return  # a TTL of 0 turns caching off for this kind of answer
        with self._lock:
            self._entries[key] = (self._clock() + ttl, value)
            self._entries.move_to_end(key)
            while len(self._entries) > self._max:
                self._entries.popitem(last=False)

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)
