"""MetricCache: the latest value of every metric for every node, with when it was measured
(observed_at), when we got it (fetched_at) and from which source.

Each source refreshes on its own interval (longer after failures, see PolledSource) in its own
thread; the scheduling path only reads numpy columns built from the store (rebuilt once per change,
not per pod). A failed metric drops only itself; a failed source keeps its last values until their
ttl runs out and shows as down. Health bookkeeping is the source's (PolledSource); the cache adds
coverage and the values it refused.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from metrics_sched.config.contract import FreshnessContract
from metrics_sched.ports import FetchResult, NodeDirectory
from metrics_sched.state.node_table import BoolArray, FloatArray, NodeTable
from metrics_sched.telemetry.health import SourceHealth
from metrics_sched.telemetry.polled import PolledSource

log = logging.getLogger(__name__)

SENTINEL_LIMIT = 1e15


@dataclass(frozen=True)
class MetricColumn:
    """One metric over the table's rows: value (NaN where none), ages, and which values are usable."""

    metric: str
    values: FloatArray
    observed_at: FloatArray
    fetched_at: FloatArray
    fresh: BoolArray
    sources: tuple[str, ...]
    contract: FreshnessContract


@dataclass
class _Entry:
    value: float
    observed_at: float
    fetched_at: float
    source: str


class MetricCache:
    def __init__(self, contracts: Mapping[str, FreshnessContract] | None = None,
                 *, clock: Callable[[], float] = time.time) -> None:
        self.contracts = dict(contracts or {})
        self._clock = clock
        self._lock = threading.Lock()
        self._store: dict[str, dict[str, _Entry]] = {}
        self._sources: dict[str, PolledSource] = {}
        self.health: dict[str, SourceHealth] = {}
        self.generation = 0
        self._columns: dict[str, tuple[tuple[int, int, int], MetricColumn, float]] = {}
        self._listeners: list[Callable[[set[str]], None]] = []
        self._threads: list[threading.Thread] = []
        self._stop = threading.Event()
        self._directory: Callable[[], NodeDirectory] | None = None
        # (source, seconds, ok) after every refresh, for the fetch-duration histogram.
        self.refresh_observers: list[Callable[[str, float, bool], None]] = []

    def contract(self, metric: str) -> FreshnessContract:
        return self.contracts.get(metric, FreshnessContract())

    def add_source(self, source: PolledSource) -> None:
        self._sources[source.name] = source
        self.health[source.name] = source.health  # the same object: the source keeps it up to date

    def on_update(self, listener: Callable[[set[str]], None]) -> None:
        """listener(metrics) runs after each ingest that changed values (in the source's thread)."""
        self._listeners.append(listener)

    # -- background refresh ----------------------------------------------------------------------
    def start(self, directory: Callable[[], NodeDirectory]) -> None:
        self._directory = directory
        for source in self._sources.values():
            thread = threading.Thread(target=self._loop, args=(source,), name=f"source-{source.name}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        self._stop.set()
        for source in self._sources.values():
            try:
                source.close()
            except Exception:
                log.exception("closing source %s", source.name)

    def _loop(self, source: PolledSource) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            self.refresh(source.name)
            self._stop.wait(max(0.0, source.next_delay() - (time.monotonic() - started)))

    def refresh(self, name: str) -> None:
        """One refresh of one source (its own thread calls this; tests may call it directly)."""
        source = self._sources[name]
        assert self._directory is not None, "start() the cache (or set a directory) before refreshing"
        directory = self._directory()
        attempts = source.health.attempts
        result = source.poll(directory)
        if source.health.attempts != attempts:  # a refresh skipped by an open breaker fetched nothing to time
            self._observe_refresh(name, source.health.last_duration, result is not None)
        if result is None:
            self.update_coverage(directory)
            return
        self.ingest(name, result, fetched_at=self._clock(), directory=directory)

    def _observe_refresh(self, name: str, seconds: float, ok: bool) -> None:
        for observer in self.refresh_observers:
            try:
                observer(name, seconds, ok)
            except Exception:
                log.exception("refresh observer failed")

    def fresh_values(self) -> dict[tuple[str, str], tuple[list[float], list[float]]]:
        """(metric, source) -> (values, ages) of every fresh entry, for scrape-time statistics."""
        now = self._clock()
        out: dict[tuple[str, str], tuple[list[float], list[float]]] = {}
        with self._lock:
            for metric, per_node in self._store.items():
                contract = self.contract(metric)
                for entry in per_node.values():
                    age = now - entry.observed_at
                    if age <= contract.max_age and now - entry.fetched_at <= contract.ttl:
                        values, ages = out.setdefault((metric, entry.source), ([], []))
                        values.append(entry.value)
                        ages.append(age)
        return out

    def ingest(self, name: str, result: FetchResult, *, fetched_at: float,
               directory: NodeDirectory | None = None) -> None:
        """Stores a refresh's samples (the source's health is already recorded by its poll)."""
        changed: set[str] = set()
        bad = 0
        with self._lock:
            for sample in result.samples:
                value = sample.value
                if not math.isfinite(value) or abs(value) > SENTINEL_LIMIT or not math.isfinite(sample.observed_at):
                    bad += 1  # the adapters drop these already; the cache never trusts them either
                    continue
                per_node = self._store.setdefault(sample.metric, {})
                per_node[sample.node] = _Entry(value, sample.observed_at, fetched_at, name)
                changed.add(sample.metric)
            if changed:
                self.generation += 1
        health = self.health.get(name)
        if bad and health is not None:
            health.dropped["invalid"] = health.dropped.get("invalid", 0) + bad
        if directory is not None:
            self.update_coverage(directory)
        if changed:
            for listener in self._listeners:
                try:
                    listener(changed)
                except Exception:
                    log.exception("metric listener failed")

    def update_coverage(self, directory: NodeDirectory) -> None:
        now = self._clock()
        nodes = directory.names
        for health in self.health.values():
            for metric in health.metrics:
                contract = self.contract(metric)
                with self._lock:
                    entries = self._store.get(metric, {})
                    fresh = sum(
                        1 for node in nodes
                        if (e := entries.get(node)) is not None and e.source == health.name
                        and now - e.observed_at <= contract.max_age and now - e.fetched_at <= contract.ttl
                    )
                health.coverage[metric] = fresh / len(nodes) if nodes else 0.0

    # -- reads on the scheduling path ------------------------------------------------------------
    def column(self, metric: str, table: NodeTable) -> MetricColumn:
        """The metric over the table's rows; freshness evaluated now (cheap), values cached per change."""
        key = (self.generation, table.rows_generation, table.capacity)
        cached = self._columns.get(metric)
        if cached is None or cached[0] != key:
            values = np.full(table.capacity, np.nan)
            observed = np.full(table.capacity, -np.inf)
            fetched = np.full(table.capacity, -np.inf)
            sources: set[str] = set()
            with self._lock:
                for node, entry in self._store.get(metric, {}).items():
                    row = table.index.get(node)
                    if row is not None:
                        values[row] = entry.value
                        observed[row] = entry.observed_at
                        fetched[row] = entry.fetched_at
                        sources.add(entry.source)
            contract = self.contract(metric)
            column = MetricColumn(metric, values, observed, fetched, np.zeros(table.capacity, dtype=bool),
                                  tuple(sorted(sources)), contract)
            self._columns[metric] = (key, column, 0.0)
        else:
            column = cached[1]
        now = self._clock()
        contract = column.contract
        fresh = (~np.isnan(column.values)) & (now - column.observed_at <= contract.max_age) & (
            now - column.fetched_at <= contract.ttl)
        return MetricColumn(column.metric, column.values, column.observed_at, column.fetched_at, fresh,
                            column.sources, contract)

    def node_values(self, node: str) -> dict[str, dict[str, Any]]:
        """Every metric held for one node, with ages and freshness (for /values and explain)."""
        now = self._clock()
        out = {}
        with self._lock:
            for metric, per_node in self._store.items():
                entry = per_node.get(node)
                if entry is None:
                    continue
                contract = self.contract(metric)
                out[metric] = {
                    "value": entry.value, "source": entry.source, "observed_at": entry.observed_at,
                    "age": round(now - entry.observed_at, 3), "fetched_age": round(now - entry.fetched_at, 3),
                    "fresh": now - entry.observed_at <= contract.max_age and now - entry.fetched_at <= contract.ttl,
                }
        return out
