"""A bounded in-memory ring of decision records, served at /decisions (filter by pod, node, since)."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable

from metrics_sched.audit.record import DecisionRecord


class DecisionRing:
    def __init__(self, size: int = 10_000) -> None:
        self.size = size
        self._lock = threading.Lock()
        self._records: deque[DecisionRecord] = deque(maxlen=size)

    def add(self, record: DecisionRecord) -> None:
        with self._lock:
            self._records.append(record)

    def __len__(self) -> int:
        with self._lock:
            return len(self._records)

    def query(self, *, pod: str | None = None, node: str | None = None, since: float | None = None,
              limit: int = 100) -> list[DecisionRecord]:
        """Newest first. pod is "namespace/name"."""
        with self._lock:
            records: Iterable[DecisionRecord] = reversed(self._records)
            out = []
            for record in records:
                if since is not None and record.time < since:
                    break
                if pod is not None and record.pod != pod:
                    continue
                if node is not None and record.node != node:
                    continue
                out.append(record)
                if len(out) >= limit:
                    break
            return out
