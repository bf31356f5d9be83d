"""Per-device values: the MetricCache's store of a metric's value per (node, device id), and the reads plugins make.

DRA hands out single devices, so a plugin choosing a GPU needs that GPU's own temperature, not the node's hottest.
A source configured for it (Prometheus: `deviceLabels`) sends a metric's per-device values as a DeviceBatch next to
its node values; they are kept here by the cache's rules (same freshness contract, same clamping of stamps from
the future, invalid values dropped and counted).

Memory follows the current cluster, as the node store's does: a node that leaves takes its devices with it, and
a device that stops appearing in the answers (a GPU replaced, a label that changed) is freed once it has not been
seen for its metric's ttl (its value was unusable from then on anyway). So the store holds the devices answered
within the last ttl, never more than MAX_DEVICES_PER_NODE per node (a label naming something per-process rather
than per-device would otherwise grow it by the answer: the excess is refused and counted as `device_limit`).

The reads (`values`) are on the scheduling path: a node's fresh devices come as one mapping, built once per
change of the metric and kept (the same object) until the earliest expiry among them, like the node columns;
a lookup is then two dict reads and a comparison, no lock, no allocation. Everything else runs under the
cache's lock.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, NamedTuple

import numpy as np

from metrics_sched.config.contract import FreshnessContract
from metrics_sched.state.node_table import FloatArray
from metrics_sched.telemetry.batch import DeviceBatch, DeviceKey
from metrics_sched.telemetry.store import NO_SLOT, NO_SOURCE, SENTINEL_LIMIT, MetricValues

__all__ = ["MAX_DEVICES_PER_NODE", "DeviceStore", "DeviceValue", "DeviceValues"]

# Far above any real node (8 GPUs, 7 MIG instances each: 56); a bound against a label that is not a device's.
MAX_DEVICES_PER_NODE = 256
# Freshness is re-judged this long before the earliest expiry (float rounding of observed + maxAge vs now).
_FRESHNESS_MARGIN = 1e-3

ContractOf = Callable[[str], FreshnessContract]


class DeviceValue(NamedTuple):
    """A device's fresh value and when it was measured (observed_at: unix seconds on the scheduler's clock, the
    sample's stamp clamped to its fetch, as MetricColumn.observed_at: what evidence and the in-flight ledger key
    on). A time rather than an age, so that the mapping holding it stays valid, unchanged, while time passes."""

    value: float
    observed_at: float

    def age(self, now: float) -> float:
        """Seconds since it was measured (`now` from the same clock: MetricReader.clock)."""
        return now - self.observed_at


_NO_DEVICES: Mapping[str, DeviceValue] = MappingProxyType({})


class DeviceValues(MetricValues[DeviceKey]):
    """One metric's per-device values, with each node's devices (node -> device id -> slot: the bulk read, and
    freeing a node's devices) and when each key last appeared in an answer (`seen`, valid value or not; +inf for a
    free slot)."""

    def __init__(self) -> None:
        super().__init__()
        self.by_node: dict[str, dict[str, int]] = {}
        self.seen: FloatArray = np.empty(0)

    def _grow(self, needed: int) -> None:
        super()._grow(needed)
        if len(self.seen) < len(self.value):
            seen = np.full(len(self.value), np.inf)  # +inf: never due for a sweep (a free slot has nothing to free)
            seen[: len(self.seen)] = self.seen
            self.seen = seen

    def _slot(self, key: DeviceKey) -> int:
        slot = self.slots.get(key)
        if slot is not None:
            return slot
        node, device = key
        devices = self.by_node.get(node)
        if devices is None:
            devices = self.by_node[node] = {}
        elif len(devices) >= MAX_DEVICES_PER_NODE:
            return NO_SLOT
        slot = super()._slot(key)
        devices[device] = slot
        return slot

    def free(self, keys: Iterable[DeviceKey]) -> None:
        keys = list(keys)
        for node, device in keys:
            devices = self.by_node[node]
            self.seen[devices.pop(device)] = np.inf
            if not devices:
                del self.by_node[node]
        super().free(keys)


@dataclass
class _NodeView:
    values: Mapping[str, DeviceValue]  # the node's fresh devices, as judged at `since`
    since: float
    soonest: float  # the earliest expiry among them (inf: none)


@dataclass
class _Views:
    generation: int  # the metric's generation the views were built from
    nodes: dict[str, _NodeView] = field(default_factory=dict)


class DeviceStore:
    """Every per-device metric's values. The MetricCache holds one and calls everything but `values` under its
    lock; `values` takes it only to build a node's view."""

    def __init__(self, lock: Any) -> None:
        self._lock = lock
        self.stores: dict[str, DeviceValues] = {}
        self.generation: dict[str, int] = {}  # per metric, bumped with every change of its device values
        self._views: dict[str, _Views] = {}

    def _changed(self, metric: str) -> None:
        self.generation[metric] = self.generation.get(metric, 0) + 1

    # -- writes (under the cache's lock) -------------------------------------------------------------------------
    def ingest(self, sid: int, batch: DeviceBatch, fetched_at: float) -> tuple[int, int, int]:
        """Stores a batch's valid values; (invalid, clamped, refused for MAX_DEVICES_PER_NODE). A key given twice
        counts once, with its last value."""
        store = self.stores.get(batch.metric)
        if store is None:
            store = self.stores[batch.metric] = DeviceValues()
        keys, values, stamps = batch.keys, batch.values, batch.observed_at
        slots = store.slots_for(sid, keys)
        if slots is None:
            last = {key: i for i, key in enumerate(keys)}  # a dict keeps each key's last position
            picked = np.fromiter(last.values(), dtype=np.intp, count=len(last))
            keys, values, stamps = list(last), values[picked], stamps[picked]
            slots = store.slots_for(sid, keys)
            assert slots is not None  # each key once by construction
        named = slots[slots != NO_SLOT]
        store.seen[named] = fetched_at
        bad, clamped = store.store(sid, slots, values, stamps, fetched_at)
        refused = len(slots) - len(named)
        if refused:  # the invalid ones among them are counted as invalid already
            valid = np.isfinite(values) & (np.abs(values) <= SENTINEL_LIMIT) & np.isfinite(stamps)
            refused = int(np.count_nonzero(valid & (slots == NO_SLOT)))
        if len(values) - bad - refused > 0:  # some value stored
            self._changed(batch.metric)
        return bad, clamped, refused

    def forget_nodes(self, names: Collection[str]) -> set[str]:
        """Frees the devices of nodes no longer in the cluster; the metrics that lost some."""
        changed = set()
        for metric, store in self.stores.items():
            gone = store.by_node.keys() - names  # a set difference in C: no loop over the nodes here
            if gone:
                store.free([(node, device) for node in gone for device in store.by_node[node]])
                self._changed(metric)
                changed.add(metric)
        return changed

    def sweep(self, metrics: Collection[str], now: float, contract: ContractOf) -> set[str]:
        """Frees the devices of `metrics` that no answer has named for their ttl; the metrics that lost some."""
        changed = set()
        for metric in metrics:
            store = self.stores.get(metric)
            if store is None or not store.slots:
                continue
            ttl = contract(metric).ttl
            stale = np.flatnonzero(now - store.seen[: store.size] > ttl)
            if stale.size:
                keys = store.keys
                store.free([key for key in (keys[slot] for slot in stale.tolist()) if key is not None])
                self._changed(metric)
                changed.add(metric)
        return changed

    # -- bookkeeping (under the cache's lock) --------------------------------------------------------------------
    def expired(self, metrics: Collection[str], sid: int, since: float, now: float, contract: ContractOf) -> set[str]:
        """The metrics with a device value from source `sid` that went stale in (since, now]."""
        out = set()
        for metric in metrics:
            store = self.stores.get(metric)
            if not store:
                continue
            c = contract(metric)
            expires = store.expires(c.max_age, c.ttl)
            if np.any((since < expires) & (expires <= now) & (store.source[: store.size] == sid)):
                out.add(metric)
        return out

    def fresh_count(self, metric: str, sid: int, now: float, contract: FreshnessContract,
                    nodes: frozenset[str]) -> int:
        """How many devices of current nodes hold a fresh value of `metric` from source `sid`."""
        store = self.stores.get(metric)
        if not store:
            return 0
        mine = store.fresh(now, contract.max_age, contract.ttl) & (store.source[: store.size] == sid)
        if store.by_node.keys() <= nodes:
            return int(np.count_nonzero(mine))
        keys = store.keys
        return sum(1 for slot in np.flatnonzero(mine).tolist() if (key := keys[slot]) is not None and key[0] in nodes)

    def report(self, node: str, now: float, contract: ContractOf,
               source_names: list[str]) -> dict[str, dict[str, dict[str, Any]]]:
        """metric -> device -> its value, ages and freshness, for /values and explain (values stale or fresh)."""
        out: dict[str, dict[str, dict[str, Any]]] = {}
        for metric, store in self.stores.items():
            devices = store.by_node.get(node)
            if not devices:
                continue
            c = contract(metric)
            entries = {}
            for device, slot in sorted(devices.items()):
                sid = int(store.source[slot])
                if sid == NO_SOURCE:
                    continue
                observed, fetched = float(store.observed[slot]), float(store.fetched[slot])
                entries[device] = {
                    "value": float(store.value[slot]), "source": source_names[sid], "observed_at": observed,
                    "stamp": float(store.stamp[slot]), "age": round(now - observed, 3),
                    "fetched_age": round(now - fetched, 3),
                    "fresh": now - observed <= c.max_age and now - fetched <= c.ttl,
                }
            if entries:
                out[metric] = entries
        return out

    # -- the read on the scheduling path --------------------------------------------------------------------------
    def values(self, metric: str, node: str, now: float, contract: ContractOf) -> Mapping[str, DeviceValue]:
        """The node's devices with a fresh value of `metric`: device id -> (value, observed_at). The same mapping
        object while nothing changed and none of them expired."""
        generation = self.generation.get(metric, 0)
        views = self._views.get(metric)
        if views is None or views.generation != generation:
            if metric not in self.stores:
                return _NO_DEVICES
            views = self._views[metric] = _Views(generation)
        view = views.nodes.get(node)
        if view is not None and view.since <= now <= view.soonest - _FRESHNESS_MARGIN:
            return view.values
        view = views.nodes[node] = self._view(metric, node, now, contract(metric))
        return view.values

    def _view(self, metric: str, node: str, now: float, c: FreshnessContract) -> _NodeView:
        out: dict[str, DeviceValue] = {}
        soonest = math.inf
        with self._lock:
            store = self.stores.get(metric)
            devices = store.by_node.get(node) if store is not None else None
            if store is None or not devices:
                return _NodeView(_NO_DEVICES, now, math.inf)
            slots = np.fromiter(devices.values(), dtype=np.intp, count=len(devices))
            names = list(devices)
            observed, fetched, value = store.observed[slots], store.fetched[slots], store.value[slots]
        # The contract's rule, in the same float comparisons as the columns' (a free or valueless slot: -inf).
        fresh = (now - observed <= c.max_age) & (now - fetched <= c.ttl)
        if fresh.any():
            expires = np.minimum(observed + c.max_age, fetched + c.ttl)
            soonest = float(expires[fresh].min())
            for i in np.flatnonzero(fresh).tolist():
                out[names[i]] = DeviceValue(float(value[i]), float(observed[i]))
        return _NodeView(MappingProxyType(out) if out else _NO_DEVICES, now, soonest)
