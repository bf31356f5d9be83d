"""A bounded in-memory ring of decision records, served at /decisions (filter by kind, pod, node, owner, since;
page by id). Placements and the rebalancer's evictions share it: one timeline, one bound.

Records are kept as StoredDecisions (flat fields, one float array), and the term layouts they share are
kept once: the default 10,000 records cost about a sixth of what the dataclass records did.
"""

from __future__ import annotations

import threading
from array import array
from collections import deque

from metrics_sched.audit.record import DecisionRecord, EvictionRecord, Kind, Layout, StoredDecision, layout_of

# Layouts change only with the config or the sources that answer; a cap keeps a churn of them bounded.
_MAX_LAYOUTS = 256


class DecisionRing:
    def __init__(self, size: int = 10_000) -> None:
        self.size = size
        self._lock = threading.Lock()
        self._records: deque[StoredDecision | EvictionRecord] = deque(maxlen=size)
        self._layouts: dict[Layout, Layout] = {}

    def add(self, record: DecisionRecord, values: array[float] | None = None) -> StoredDecision:
        """Keeps the record; the returned entry is where the bind's outcome goes (see Auditor.on_bind). values:
        its candidates' numbers already packed (as audit.record.build_stored packs them)."""
        layout = layout_of(record)
        with self._lock:
            stored = StoredDecision(record, self._shared(layout), values)
            self._records.append(stored)
        return stored

    def keep(self, stored: StoredDecision) -> StoredDecision:
        """Keeps a record built as the ring stores it (audit.record.build_stored), its layout shared."""
        with self._lock:
            stored.layout = self._shared(stored.layout)
            self._records.append(stored)
        return stored

    def _shared(self, layout: Layout) -> Layout:
        shared = self._layouts.get(layout)
        if shared is None:
            if len(self._layouts) >= _MAX_LAYOUTS:
                self._layouts.clear()
            shared = self._layouts[layout] = layout
        return shared

    def add_eviction(self, record: EvictionRecord) -> None:
        with self._lock:
            self._records.append(record)

    def __len__(self) -> int:
        with self._lock:
            return len(self._records)

    def select(self, *, pod: str | None = None, node: str | None = None, since: float | None = None,
               before: int | None = None, limit: int = 100, kind: Kind | None = None,
               owner: str | None = None) -> list[StoredDecision | EvictionRecord]:
        """Newest first, at most `limit`. pod is "namespace/name"; `before` an id: only older records (paging);
        kind None means both kinds."""
        out: list[StoredDecision | EvictionRecord] = []
        if limit <= 0:
            return out
        with self._lock:
            for record in reversed(self._records):
                if since is not None and record.time < since:
                    break
                if before is not None and record.id >= before:
                    continue
                if pod is not None and record.pod != pod:
                    continue
                if node is not None and record.node != node:
                    continue
                if kind is not None and record.kind != kind:
                    continue
                if owner is not None and record.owner != owner:
                    continue
                out.append(record)
                if len(out) >= limit:
                    break
        return out

    def query(self, *, pod: str | None = None, node: str | None = None, since: float | None = None,
              before: int | None = None, limit: int = 100) -> list[DecisionRecord]:
        """As select() of the placements, as DecisionRecords."""
        return [s.to_record() for s in self.select(pod=pod, node=node, since=since, before=before, limit=limit,
                                                   kind="placement") if isinstance(s, StoredDecision)]
