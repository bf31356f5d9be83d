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
        self._latest_by_uid: dict[str, DecisionRecord] = {}

    def add(self, record: DecisionRecord) -> None:
        with self._lock:
            if len(self._records) == self.size:
                evicted = self._records[0]
                if self._latest_by_uid.get(evicted.uid) is evicted:
                    del self._latest_by_uid[evicted.uid]
            self._records.append(record)
            self._latest_by_uid[record.uid] = record

    def latest(self, uid: str) -> DecisionRecord | None:
        with self._lock:
            return self._latest_by_uid.get(uid)

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
