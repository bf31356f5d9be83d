"""The in-flight ledger: load we have just placed that the telemetry cannot show yet.

A pod bound to a node adds its estimated effect (from its requests) to that node's metrics until a
sample measured after the bind covers it. Without this, a burst of pods all see the same "coldest,
idlest" node from the last scrape and herd onto it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from metrics_sched.state.node_table import FloatArray, NodeTable


@dataclass(frozen=True)
class _Placement:
    node: str
    at: float
    deltas: Mapping[str, float]


class InFlightLedgerStore:
    def __init__(self, *, horizon: float = 600.0, clock: Callable[[], float] = time.time) -> None:
        self.horizon = horizon
        self._clock = clock
        self._lock = threading.Lock()
        self._placements: dict[str, _Placement] = {}
        self._version = 0
        self._arrays: dict[str, tuple[tuple[int, int], FloatArray, FloatArray, FloatArray]] = {}

    def add(self, uid: str, node: str, deltas: Mapping[str, float], at: float | None = None) -> None:
        with self._lock:
            self._placements[uid] = _Placement(node, self._clock() if at is None else at, dict(deltas))
            self._version += 1

    def remove(self, uid: str) -> None:
        with self._lock:
            if self._placements.pop(uid, None) is not None:
                self._version += 1

    def prune(self) -> int:
        """Forgets placements older than the horizon (every sample has covered them by then)."""
        cutoff = self._clock() - self.horizon
        with self._lock:
            old = [uid for uid, p in self._placements.items() if p.at < cutoff]
            for uid in old:
                del self._placements[uid]
            if old:
                self._version += 1
            return len(old)

    def __len__(self) -> int:
        with self._lock:
            return len(self._placements)

    def by_node(self) -> dict[str, int]:
        with self._lock:
            counts: dict[str, int] = {}
            for placement in self._placements.values():
                counts[placement.node] = counts.get(placement.node, 0) + 1
            return counts

    def adjustment(self, metric: str, table: NodeTable, observed_at: FloatArray) -> FloatArray:
        """Per row: the summed deltas of placements made after that row's sample was measured."""
        key = (self._version, table.rows_generation)
        cached = self._arrays.get(metric)
        if cached is None or cached[0] != key:
            with self._lock:
                entries = [(table.index.get(p.node), p.at, p.deltas[metric])
                           for p in self._placements.values() if metric in p.deltas]
            entries = [e for e in entries if e[0] is not None]
            rows = np.array([e[0] for e in entries], dtype=np.float64)
            times = np.array([e[1] for e in entries], dtype=np.float64)
            deltas = np.array([e[2] for e in entries], dtype=np.float64)
            self._arrays[metric] = cached = (key, rows, times, deltas)
        _, rows, times, deltas = cached
        if rows.size == 0:
            return np.zeros(table.capacity)
        row_index = rows.astype(np.int64)
        uncovered = times >= observed_at[row_index]  # a sample taken at the bind instant cannot show it yet
        return np.bincount(row_index[uncovered], weights=deltas[uncovered], minlength=table.capacity)[
            : table.capacity].astype(np.float64)
