"""MetricCache: the latest value of every metric for every node, with when it was measured
(observed_at), when we got it (fetched_at) and from which source.

Every time here is on the scheduler's own clock: a sample's own stamp comes from another machine's
clock, so it is clamped to the fetch time (a sample stamped in the future would otherwise stay fresh
past maxAge and cover every in-flight placement). The same stamp fetched again is the same measurement:
it keeps the clamped time of its first fetch, so a frozen exporter ahead of us still goes stale.
Clamped samples are counted per source (SourceHealth.clamped). Values that age out are announced to
the listeners on the source's next refresh, so a filter they held can let parked pods go.

Each source refreshes on its own interval (longer after failures, see PolledSource) in its own
thread; the scheduling path only reads numpy columns built from the store (rebuilt once per change,
not per pod). A failed metric drops only itself; a failed source keeps its last values until their
ttl runs out and shows as down. Health bookkeeping is the source's (PolledSource); the cache adds
coverage and the values it refused.

Cost per refresh (5,000 nodes, a handful of metrics per source): the store is arrays per metric
(metrics_sched.telemetry.store): a source's values come as one batch per metric (MetricBatch; plain Samples
are grouped into batches first) and are stored by a few numpy operations, the slots of the source's nodes
remembered from its previous refresh. The bookkeeping after it (coverage, values ageing out, nodes gone)
is vectorised and looks at the refreshed source's own metrics only; each source's coverage is its own
refresh's to update. A column is rebuilt only when its own metric changed, not whenever any metric did,
by a gather through a slot -> row map kept while neither the table's rows nor the store's slots move.

Metrics a source reports per device (DeviceBatch) are also kept per (node, device id), beside the node value,
by the same rules (metrics_sched.telemetry.devices); plugins read them through `device_values` and
`device_value` (the Handle's MetricReader).
"""

from __future__ import annotations

import functools
import logging
import math
import threading
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from metrics_sched.config.contract import FreshnessContract
from metrics_sched.ports import FetchResult, NodeDirectory, Sample
from metrics_sched.state.node_table import BoolArray, FloatArray, NodeTable
from metrics_sched.supervision import Supervisor, Worker
from metrics_sched.telemetry.batch import BatchedFetchResult, MetricBatch
from metrics_sched.telemetry.devices import DeviceStore, DeviceValue
from metrics_sched.telemetry.first_answers import FirstAnswers
from metrics_sched.telemetry.health import SourceHealth
from metrics_sched.telemetry.polled import PolledSource
from metrics_sched.telemetry.store import NO_SOURCE, SENTINEL_LIMIT, IntArray, MetricValues

__all__ = ["SENTINEL_LIMIT", "DeviceValue", "MetricCache", "MetricColumn"]

log = logging.getLogger(__name__)


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


_FRESHNESS_MARGIN = 1e-3  # seconds


@dataclass
class _CachedColumn:
    key: tuple[int, int, int]  # (the metric's generation, rows_generation, capacity) the values were built for
    column: MetricColumn  # its fresh mask holds from `since` until shortly before `soonest`
    expires: FloatArray  # per row, when its value stops being fresh (-inf without one)
    since: float = math.inf  # inf: never judged
    soonest: float = math.inf  # the earliest expiry among the fresh rows (inf: none)


@dataclass
class _RowMap:
    """The slots of a metric's store that have a row in the table, and those rows."""

    key: tuple[int, int, int, int]  # (store.assigned, store.size, table.rows_generation, table.capacity)
    slots: IntArray  # slots with a row ...
    rows: IntArray  # ... and that row


class MetricCache:
    def __init__(self, contracts: Mapping[str, FreshnessContract] | None = None,
                 *, clock: Callable[[], float] = time.time) -> None:
        self.contracts = dict(contracts or {})
        self._clock = clock
        self._lock = threading.Lock()
        self._store: dict[str, MetricValues[str]] = {}
        self._source_ids: dict[str, int] = {}  # source name -> its id in the store (MetricValues.source)
        self._source_names: list[str] = []
        self._row_maps: dict[str, _RowMap] = {}
        # The node names the store was last checked against for nodes gone; metrics written since then.
        self._checked_names: frozenset[str] | None = None
        self._written: set[str] = set()
        self._sources: dict[str, PolledSource] = {}
        self.health: dict[str, SourceHealth] = {}
        self.generation = 0
        # Per metric, bumped with every change of its values: what its column is rebuilt on.
        self._metric_generation: dict[str, int] = {}
        self._columns: dict[str, _CachedColumn] = {}
        self._devices = DeviceStore(self._lock)  # the per-device values, beside the node values in _store
        self._listeners: list[Callable[[set[str]], None]] = []
        # The sources whose first refresh has not ended: scheduling starts once none is left (or a bound passes).
        self.first_answers = FirstAnswers()
        self._threads: list[threading.Thread] = []
        self._stop = threading.Event()
        self._directory: Callable[[], NodeDirectory] | None = None
        self._expiry_checked: dict[str, float] = {}  # source -> when its values' expiry was last looked at
        # (source, seconds, ok) after every refresh, for the fetch-duration histogram.
        self.refresh_observers: list[Callable[[str, float, bool], None]] = []
        # Supervises the refresh threads (the scheduler hands over its own, which /healthz reads).
        self.supervisor = Supervisor()

    @property
    def clock(self) -> Callable[[], float]:
        """The clock freshness is judged by (and the in-flight ledger keys placements to)."""
        return self._clock

    def contract(self, metric: str) -> FreshnessContract:
        return self.contracts.get(metric, FreshnessContract())

    def add_source(self, source: PolledSource) -> None:
        self._sources[source.name] = source
        self.health[source.name] = source.health  # the same object: the source keeps it up to date
        self.first_answers.expect(source.name)

    def on_update(self, listener: Callable[[set[str]], None]) -> None:
        """listener(metrics) runs after each ingest that changed values (in the source's thread)."""
        self._listeners.append(listener)

    # -- background refresh ----------------------------------------------------------------------
    def set_directory(self, directory: Callable[[], NodeDirectory]) -> None:
        """Where refreshes get the nodes from, without starting the refresh threads (a bench driving `refresh`)."""
        self._directory = directory

    def start(self, directory: Callable[[], NodeDirectory]) -> None:
        self.set_directory(directory)
        for source in self._sources.values():
            thread = self.supervisor.spawn(Worker.SOURCE, functools.partial(self._loop, source),
                                           name=f"source-{source.name}", stopping=self._stop.is_set)
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
            # A refresh that raises (a bad directory, a listener) is counted; the source keeps refreshing.
            self.supervisor.guard(Worker.SOURCE, lambda: self.refresh(source.name))
            self._stop.wait(max(0.0, source.next_delay() - (time.monotonic() - started)))

    def refresh(self, name: str) -> None:
        """One refresh of one source (its own thread calls this; tests may call it directly). Its end, whatever it
        brought (values, a failure, an exception), is the source's answer for first_answers: after the ingest, so
        the values are there for the first pod."""
        try:
            self._refresh(name)
        finally:
            self.first_answers.answered(name)

    def _refresh(self, name: str) -> None:
        source = self._sources[name]
        assert self._directory is not None, "start() the cache (or set a directory) before refreshing"
        directory = self._directory()
        attempts = source.health.attempts
        result = source.poll(directory)
        if source.health.attempts != attempts:  # a refresh skipped by an open breaker fetched nothing to time
            self._observe_refresh(name, source.health.last_duration, result is not None)
        if result is None:
            swept = self._sweep_devices(name)
            self.update_coverage(directory, (name,))
            self._notify(swept | self._expired(name))
            return
        self.ingest(name, result, fetched_at=self._clock(), directory=directory)

    def _observe_refresh(self, name: str, seconds: float, ok: bool) -> None:
        for observer in self.refresh_observers:
            try:
                observer(name, seconds, ok)
            except Exception:
                log.exception("refresh observer failed")

    def _source_id(self, name: str) -> int:
        sid = self._source_ids.get(name)
        if sid is None:
            sid = self._source_ids[name] = len(self._source_names)
            self._source_names.append(name)
        return sid

    def fresh_values(self) -> dict[tuple[str, str], tuple[list[float], list[float]]]:
        """(metric, source) -> (values, ages) of every fresh entry, for scrape-time statistics."""
        now = self._clock()
        out: dict[tuple[str, str], tuple[list[float], list[float]]] = {}
        with self._lock:
            for metric, store in self._store.items():
                contract = self.contract(metric)
                fresh = np.flatnonzero(store.fresh(now, contract.max_age, contract.ttl))
                if not fresh.size:
                    continue
                sources = store.source[fresh]
                for sid in np.unique(sources).tolist():
                    slots = fresh[sources == sid]
                    out[(metric, self._source_names[sid])] = (
                        store.value[slots].tolist(), (now - store.observed[slots]).tolist())
        return out

    def ingest(self, name: str, result: FetchResult, *, fetched_at: float,
               directory: NodeDirectory | None = None) -> None:
        """Stores a refresh's samples and batches (the source's health is already recorded by its poll)."""
        changed: set[str] = set()
        bad = clamped = 0
        batches = result.batches if isinstance(result, BatchedFetchResult) else []
        device_batches = result.device_batches if isinstance(result, BatchedFetchResult) else []
        refused = 0
        with self._lock:
            sid = self._source_id(name)
            for batch in batches:
                stored = self._store_batch(sid, batch, fetched_at)
                if stored is None:  # a node twice in the batch: stored as Samples are (the last one counts)
                    bad_, clamped_ = self._store_samples(sid, batch.samples(), fetched_at, changed)
                else:
                    bad_, clamped_ = stored
                    if stored[0] < len(batch.nodes):
                        changed.add(batch.metric)
                bad, clamped = bad + bad_, clamped + clamped_
            if result.samples:
                bad_, clamped_ = self._store_samples(sid, result.samples, fetched_at, changed)
                bad, clamped = bad + bad_, clamped + clamped_
            if changed:
                self.generation += 1
                self._written |= changed
                for metric in changed:
                    self._metric_generation[metric] = self._metric_generation.get(metric, 0) + 1
            devices_changed = set()
            for device_batch in device_batches:
                generation = self._devices.generation.get(device_batch.metric, 0)
                bad_, clamped_, refused_ = self._devices.ingest(sid, device_batch, fetched_at)
                bad, clamped, refused = bad + bad_, clamped + clamped_, refused + refused_
                if self._devices.generation.get(device_batch.metric, 0) != generation:
                    devices_changed.add(device_batch.metric)
            if devices_changed:
                self.generation += 1  # what a batch of pods is valid for (a plugin may read device values)
        health = self.health.get(name)
        if health is not None:
            if bad:
                health.dropped["invalid"] = health.dropped.get("invalid", 0) + bad
            if refused:
                health.dropped["device_limit"] = health.dropped.get("device_limit", 0) + refused
            health.clamped += clamped
        swept = self._sweep_devices(name)
        if directory is not None:
            self._forget_gone_nodes(directory)
            self.update_coverage(directory, (name,))
        self._notify(changed | devices_changed | swept | self._expired(name))

    def _store_samples(self, sid: int, samples: list[Sample], fetched_at: float,
                       changed: set[str]) -> tuple[int, int]:
        """Samples grouped into one batch per metric (a node's last sample counts), stored; (invalid, clamped)."""
        bad = clamped = 0
        isfinite = math.isfinite
        grouped: dict[str, dict[str, tuple[float, float]]] = {}
        for sample in samples:
            value, stamp = sample.value, sample.observed_at
            if not isfinite(value) or abs(value) > SENTINEL_LIMIT or not isfinite(stamp):
                bad += 1  # the adapters drop these already; the cache never trusts them either
                continue
            grouped.setdefault(sample.metric, {})[sample.node] = (value, stamp)
        for metric, per_node in grouped.items():
            pairs = list(per_node.values())
            batch = MetricBatch.of(metric, list(per_node), [v for v, _ in pairs], [t for _, t in pairs])
            stored = self._store_batch(sid, batch, fetched_at)
            assert stored is not None  # one sample per node by construction
            clamped += stored[1]
            changed.add(metric)
        return bad, clamped

    def _store_batch(self, sid: int, batch: MetricBatch, fetched_at: float) -> tuple[int, int] | None:
        """Stores a batch's valid values (finite, within the sentinel limit, with a finite stamp); (invalid,
        clamped), or None when a node comes twice (nothing stored then)."""
        store = self._store.get(batch.metric)
        if store is None:
            store = self._store[batch.metric] = MetricValues()
        slots = store.slots_for(sid, batch.nodes)
        if slots is None:
            return None
        return store.store(sid, slots, batch.values, batch.observed_at, fetched_at)

    def _sweep_devices(self, name: str) -> set[str]:
        """Frees the devices of the source's metrics that no answer named for their ttl (after every refresh of
        it, answered or not: a source that stays down lets them go too); the metrics that lost some."""
        health = self.health.get(name)
        metrics = health.metrics if health is not None else list(self._devices.stores)
        with self._lock:
            swept = self._devices.sweep(metrics, self._clock(), self.contract)
            if swept:
                self.generation += 1
        return swept

    def _forget_gone_nodes(self, directory: NodeDirectory) -> None:
        """Values of nodes no longer in the cluster go: memory follows the current nodes (autoscaler churn
        replaces nodes all day), and no later refresh would ever overwrite them. Every metric is checked when
        the node set changed; otherwise only those written since the last check."""
        names = directory.names
        with self._lock:
            if names is self._checked_names or names == self._checked_names:
                metrics = [m for m in self._written if m in self._store]
            else:
                metrics = list(self._store)
            self._checked_names, self._written = names, set()
            for metric in metrics:
                store = self._store[metric]
                gone = store.slots.keys() - names  # a set difference in C: no loop over the nodes here
                if gone:
                    store.free(gone)
                    self.generation += 1
                    self._metric_generation[metric] = self._metric_generation.get(metric, 0) + 1
            if self._devices.forget_nodes(names):
                self.generation += 1

    def _expired(self, name: str) -> set[str]:
        """The metrics with a value from `name` that went stale since the last look: nothing else announces
        a value ageing out, and a filter it held may admit a node now."""
        now = self._clock()
        since = self._expiry_checked.get(name, -math.inf)
        self._expiry_checked[name] = now
        expired: set[str] = set()
        health = self.health.get(name)
        # Only this source's metrics can hold values from it.
        metrics = health.metrics if health is not None else list(self._store)
        with self._lock:
            sid = self._source_ids.get(name)
            if sid is None:
                return expired
            for metric in metrics:
                store = self._store.get(metric)
                if not store:
                    continue
                contract = self.contract(metric)
                expires = store.expires(contract.max_age, contract.ttl)
                if np.any((since < expires) & (expires <= now) & (store.source[: store.size] == sid)):
                    expired.add(metric)
            expired |= self._devices.expired(metrics, sid, since, now, self.contract)
        return expired

    def _notify(self, metrics: set[str]) -> None:
        if not metrics:
            return
        for listener in self._listeners:
            try:
                listener(metrics)
            except Exception:
                log.exception("metric listener failed")

    def update_coverage(self, directory: NodeDirectory, sources: Collection[str] | None = None) -> None:
        """Each source's share of the nodes with a fresh value from it, per metric (`sources`: only those;
        a refresh updates its own source's)."""
        now = self._clock()
        nodes = directory.names
        for health in self.health.values():
            if sources is not None and health.name not in sources:
                continue
            name = health.name
            for metric in health.metrics:
                contract = self.contract(metric)
                # Fresh: now - observed_at <= max_age and now - fetched_at <= ttl (the same floats compared).
                with self._lock:
                    store = self._store.get(metric)
                    sid = self._source_ids.get(name)
                    fresh = 0
                    if store and sid is not None:
                        mine = store.fresh(now, contract.max_age, contract.ttl) & (store.source[: store.size] == sid)
                        if store.slots.keys() <= nodes:  # every node held is current: no check per node
                            fresh = int(np.count_nonzero(mine))
                        else:
                            held = store.keys
                            fresh = sum(1 for slot in np.flatnonzero(mine).tolist() if held[slot] in nodes)
                    if sid is not None and metric in self._devices.stores:
                        health.devices[metric] = self._devices.fresh_count(metric, sid, now, contract, nodes)
                health.coverage[metric] = fresh / len(nodes) if nodes else 0.0

    # -- reads on the scheduling path ------------------------------------------------------------
    def column(self, metric: str, table: NodeTable) -> MetricColumn:
        """The metric over the table's rows; values cached per change, freshness per window of time.

        Freshness changes with time alone, but only when a fresh value reaches its expiry: the fresh mask
        is kept (the same MetricColumn object, which plugins may key their own caches on) until shortly
        before the earliest expiry among the fresh rows, then judged again by the contract's rule."""
        key = (self._metric_generation.get(metric, 0), table.rows_generation, table.capacity)
        cached = self._columns.get(metric)
        now = self._clock()
        if cached is None or cached.key != key:
            values = np.full(table.capacity, np.nan)
            observed = np.full(table.capacity, -np.inf)
            fetched = np.full(table.capacity, -np.inf)
            sources: set[str] = set()
            with self._lock:
                store = self._store.get(metric)
                if store is not None:
                    rows = self._row_map(metric, store, table)
                    slots = rows.slots
                    values[rows.rows] = store.value[slots]
                    observed[rows.rows] = store.observed[slots]
                    fetched[rows.rows] = store.fetched[slots]
                    held = store.source[slots]
                    sources = {self._source_names[sid] for sid in np.unique(held[held != NO_SOURCE]).tolist()}
            contract = self.contract(metric)
            expires = np.where(np.isnan(values), -np.inf,
                               np.minimum(observed + contract.max_age, fetched + contract.ttl))
            cached = _CachedColumn(key, MetricColumn(metric, values, observed, fetched,
                                                     np.zeros(table.capacity, dtype=bool), tuple(sorted(sources)),
                                                     contract), expires)
            self._columns[metric] = cached
        elif cached.since <= now <= cached.soonest - _FRESHNESS_MARGIN:
            # A margin before the expiry keeps float rounding (observed + maxAge vs now - observed) out of it.
            return cached.column
        column, contract = cached.column, cached.column.contract
        fresh = (~np.isnan(column.values)) & (now - column.observed_at <= contract.max_age) & (
            now - column.fetched_at <= contract.ttl)
        soonest = float(cached.expires[fresh].min()) if fresh.any() else math.inf
        cached.column = MetricColumn(column.metric, column.values, column.observed_at, column.fetched_at, fresh,
                                     column.sources, contract)
        cached.since, cached.soonest = now, soonest
        return cached.column

    def _row_map(self, metric: str, store: MetricValues[str], table: NodeTable) -> _RowMap:
        """The slots of `store` with a row in `table`, and their rows (a loop over the nodes only when the
        table's rows or the store's slots moved; under the lock)."""
        key = (store.assigned, store.size, table.rows_generation, table.capacity)
        known = self._row_maps.get(metric)
        if known is not None and known.key == key:
            return known
        index = table.index
        rows = np.fromiter((-1 if node is None else index.get(node, -1) for node in store.keys), dtype=np.intp,
                           count=store.size)
        slots = np.flatnonzero(rows >= 0)
        known = self._row_maps[metric] = _RowMap(key, slots, rows[slots])
        return known

    def fresh_until(self, metric: str, table: NodeTable) -> float:
        """When the first of the metric's values fresh now goes stale (inf: none will), as the column judges it."""
        self.column(metric, table)
        return self._columns[metric].soonest

    def device_values(self, metric: str, node: str) -> Mapping[str, DeviceValue]:
        """The node's devices with a fresh value of `metric` (by its contract): device id -> (value, observed_at).
        Empty for a metric not kept per device. No I/O; the same mapping object while nothing changed or expired."""
        return self._devices.values(metric, node, self._clock(), self.contract)

    def device_value(self, metric: str, node: str, device: str) -> DeviceValue | None:
        """One device's fresh value of `metric` and when it was measured, or None (none, or stale: missing by the
        contract)."""
        return self._devices.values(metric, node, self._clock(), self.contract).get(device)

    def node_values(self, node: str) -> dict[str, dict[str, Any]]:
        """Every metric held for one node, with ages and freshness (for /values and explain); a metric kept per
        device also lists its devices (`devices`: device id -> the same fields)."""
        now = self._clock()
        out = {}
        with self._lock:
            for metric, store in self._store.items():
                slot = store.held(node)
                if slot is None:
                    continue
                contract = self.contract(metric)
                observed, fetched = float(store.observed[slot]), float(store.fetched[slot])
                out[metric] = {
                    "value": float(store.value[slot]), "source": self._source_names[int(store.source[slot])],
                    "observed_at": observed,
                    # the source's own time; later than observed_at when its clock is ahead
                    "stamp": float(store.stamp[slot]),
                    "age": round(now - observed, 3), "fetched_age": round(now - fetched, 3),
                    "fresh": now - observed <= contract.max_age and now - fetched <= contract.ttl,
                }
            devices = self._devices.report(node, now, self.contract, self._source_names)
        for metric, entries in devices.items():
            if metric in out:  # beside its node value (readers of /values expect a value in every entry)
                out[metric]["devices"] = entries
        return out
