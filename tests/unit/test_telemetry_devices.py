"""Per-device values in the MetricCache (metrics_sched.telemetry.devices) and their read through the Handle.

- a device's value is fresh by its metric's contract (maxAge on the measurement, ttl on the fetch), clamped to
  the fetch when stamped in the future, and a measurement fetched again does not get younger;
- invalid values (NaN, inf, sentinels, no stamp) are dropped and counted, the device keeping its last value;
- a device no answer names for its ttl is freed (answered or not: a source that stays down too), a node that
  leaves takes its devices, and churn (new device ids every refresh) leaves the store bounded; a node holds at
  most MAX_DEVICES_PER_NODE devices, the excess refused and counted;
- the bulk read is the same mapping while nothing changes, judged again at the earliest expiry; changes bump the
  cache's generation and tell the listeners; /values lists a node's devices beside its value;
- a plugin reads all of it through its Handle (metrics_sched.framework only).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import pytest

from metrics_sched.config.contract import FreshnessContract
from metrics_sched.framework import DeviceValue, Handle, Services
from metrics_sched.ports import FetchResult, NodeDirectory
from metrics_sched.state.cluster_state import ClusterState
from metrics_sched.telemetry import InFlightLedgerStore, MetricCache, PolledSource
from metrics_sched.telemetry.batch import BatchedFetchResult, DeviceBatch, DeviceKey, MetricBatch
from metrics_sched.telemetry.devices import MAX_DEVICES_PER_NODE
from metrics_sched.telemetry.health import SourceHealth
from tests.unit.fakes import FakeAPI

pytestmark = pytest.mark.unit

NOW = 1_000_000.0
MAX_AGE, TTL = 30.0, 60.0
CONTRACTS = {"temp": FreshnessContract(max_age=MAX_AGE, ttl=TTL)}


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def directory(*names: str) -> NodeDirectory:
    return NodeDirectory(frozenset(names), {}, {}, {})


def refresh(devices: dict[DeviceKey, tuple[float, float]], node_values: dict[str, float] | None = None,
            metric: str = "temp") -> BatchedFetchResult:
    """A refresh of `metric` with these device values ((node, device) -> (value, stamp)) and node values (the
    hottest device when not given)."""
    if node_values is None:
        node_values = {}
        for (node, _), (value, _) in devices.items():
            node_values[node] = max(node_values.get(node, -math.inf), value)
    stamp = min((s for _, s in devices.values() if math.isfinite(s)), default=NOW)
    return BatchedFetchResult(
        samples=[], dropped={}, errors={},
        batches=[MetricBatch.of(metric, list(node_values), list(node_values.values()), [stamp] * len(node_values))],
        device_batches=[DeviceBatch.of(metric, list(devices), [v for v, _ in devices.values()],
                                       [s for _, s in devices.values()])])


def make_cache(clock: Clock) -> MetricCache:
    cache = MetricCache(CONTRACTS, clock=clock)
    cache.health["prom"] = SourceHealth("prom", 10.0, ["temp"])
    return cache


def ingest(cache: MetricCache, clock: Clock, result: FetchResult, *nodes: str) -> None:
    cache.ingest("prom", result, fetched_at=clock.now, directory=directory(*(nodes or ("n1", "n2"))))


def plain(values: Mapping[str, DeviceValue], now: float) -> dict[str, tuple[float, float]]:
    """device -> (value, age)."""
    return {device: (v.value, round(v.age(now), 6)) for device, v in values.items()}


# -- freshness ---------------------------------------------------------------------------------------------------


def test_each_device_keeps_its_own_value_and_age_beside_the_node_value() -> None:
    clock = Clock(NOW)
    cache = make_cache(clock)
    ingest(cache, clock, refresh({("n1", "GPU-a"): (61.0, NOW - 5), ("n1", "GPU-b"): (90.0, NOW - 2),
                                  ("n2", "GPU-c"): (40.0, NOW - 1)}))
    assert plain(cache.device_values("temp", "n1"), clock.now) == {"GPU-a": (61.0, 5.0), "GPU-b": (90.0, 2.0)}
    assert cache.device_value("temp", "n2", "GPU-c") == DeviceValue(40.0, NOW - 1)
    assert cache.device_value("temp", "n2", "GPU-a") is None  # another node's device
    assert cache.device_value("temp", "n3", "GPU-a") is None and not cache.device_values("temp", "n3")
    assert not cache.device_values("load", "n1")  # a metric not kept per device
    assert cache.node_values("n1")["temp"]["value"] == 90.0  # the node value is the source's, as before
    assert cache.health["prom"].devices == {"temp": 3}


@pytest.mark.parametrize(("contract", "later", "fresh"), [
    # maxAge binds: the measurement's own age (it was 5 s old when fetched)
    (FreshnessContract(max_age=30.0, ttl=60.0), 25.0, True), (FreshnessContract(max_age=30.0, ttl=60.0), 25.5, False),
    # ttl binds: since it was fetched
    (FreshnessContract(max_age=120.0, ttl=60.0), 60.0, True), (FreshnessContract(max_age=120.0, ttl=60.0), 60.5, False),
])
def test_a_device_value_is_fresh_by_its_metrics_contract(contract: FreshnessContract, later: float,
                                                          fresh: bool) -> None:
    clock = Clock(NOW)
    cache = MetricCache({"temp": contract}, clock=clock)
    ingest(cache, clock, refresh({("n1", "GPU-a"): (61.0, NOW - 5)}))
    clock.now = NOW + later
    assert (cache.device_value("temp", "n1", "GPU-a") is not None) is fresh
    assert cache.node_values("n1")["temp"]["devices"]["GPU-a"]["fresh"] is fresh
    assert cache.node_values("n1")["temp"]["fresh"] is fresh  # as the node value, by the same rule


def test_a_stamp_from_the_future_is_clamped_to_the_fetch_and_the_same_stamp_again_does_not_get_younger() -> None:
    clock = Clock(NOW)
    cache = make_cache(clock)
    ingest(cache, clock, refresh({("n1", "GPU-a"): (61.0, NOW + 100)}))  # the exporter's clock is ahead
    assert cache.device_value("temp", "n1", "GPU-a") == DeviceValue(61.0, NOW)
    assert cache.health["prom"].clamped == 2  # the node value's stamp and the device's
    clock.now = NOW + 20
    ingest(cache, clock, refresh({("n1", "GPU-a"): (61.0, NOW + 100)}))  # frozen: the same measurement
    assert cache.device_value("temp", "n1", "GPU-a") == DeviceValue(61.0, NOW)  # the first fetch's time
    clock.now = NOW + MAX_AGE + 1
    ingest(cache, clock, refresh({("n1", "GPU-a"): (61.0, NOW + 100)}))
    assert cache.device_value("temp", "n1", "GPU-a") is None  # older than maxAge, however often fetched
    assert cache.node_values("n1")["temp"]["devices"]["GPU-a"]["stamp"] == NOW + 100


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf, 9.2e18])
def test_invalid_values_are_dropped_and_counted_and_the_device_keeps_its_last_value(bad: float) -> None:
    clock = Clock(NOW)
    cache = make_cache(clock)
    ingest(cache, clock, refresh({("n1", "GPU-a"): (61.0, NOW), ("n1", "GPU-b"): (62.0, NOW)}))
    clock.now = NOW + 10
    ingest(cache, clock, refresh({("n1", "GPU-a"): (bad, NOW + 10), ("n1", "GPU-b"): (63.0, NOW + 10)},
                                 node_values={"n1": 63.0}))
    assert plain(cache.device_values("temp", "n1"), clock.now) == {"GPU-a": (61.0, 10.0), "GPU-b": (63.0, 0.0)}
    assert cache.health["prom"].dropped == {"invalid": 1}
    # A stamp that is not finite is no measurement either.
    ingest(cache, clock, refresh({("n1", "GPU-b"): (64.0, math.nan)}, node_values={"n1": 64.0}))
    assert cache.device_value("temp", "n1", "GPU-b") == DeviceValue(63.0, NOW + 10)
    assert cache.health["prom"].dropped == {"invalid": 2}


def test_a_device_given_twice_in_one_batch_counts_once_with_its_last_value() -> None:
    clock = Clock(NOW)
    cache = make_cache(clock)
    batch = DeviceBatch.of("temp", [("n1", "GPU-a"), ("n1", "GPU-b"), ("n1", "GPU-a")], [50.0, 60.0, 70.0],
                           [NOW, NOW, NOW])
    ingest(cache, clock, BatchedFetchResult(samples=[], dropped={}, errors={}, device_batches=[batch]))
    assert plain(cache.device_values("temp", "n1"), clock.now) == {"GPU-a": (70.0, 0.0), "GPU-b": (60.0, 0.0)}


# -- ageing and memory -------------------------------------------------------------------------------------------


def held_devices(cache: MetricCache, metric: str = "temp") -> int:
    return len(cache._devices.stores[metric].slots)


def test_a_device_no_answer_names_for_its_ttl_is_freed_and_one_still_named_stays_even_when_stale() -> None:
    clock = Clock(NOW)
    cache = make_cache(clock)
    ingest(cache, clock, refresh({("n1", "GPU-a"): (61.0, NOW), ("n1", "GPU-b"): (62.0, NOW)}))
    # GPU-a leaves the answers; GPU-b stays in them, frozen (its stamp never moves: stale after maxAge).
    for step in range(1, 8):
        clock.now = NOW + 10 * step
        ingest(cache, clock, refresh({("n1", "GPU-b"): (62.0, NOW)}))
        gone = 10 * step > TTL
        assert ("GPU-a" not in cache.node_values("n1")["temp"]["devices"]) is gone, step
    assert held_devices(cache) == 1
    assert cache.node_values("n1")["temp"]["devices"]["GPU-b"]["fresh"] is False  # still named: kept, stale
    assert cache.device_value("temp", "n1", "GPU-b") is None


def test_a_source_that_stays_down_lets_its_devices_go_after_their_ttl() -> None:
    clock = Clock(NOW)

    class Down(PolledSource):
        answer: FetchResult | None = None

        def fetch(self, nodes: NodeDirectory) -> FetchResult:
            if self.answer is None:
                raise ConnectionError("refused")
            return self.answer

    source = Down("prom", 10.0, ["temp"], clock=clock)
    source.answer = refresh({("n1", "GPU-a"): (61.0, NOW)})
    cache = MetricCache(CONTRACTS, clock=clock)
    cache.add_source(source)
    cache.set_directory(lambda: directory("n1"))
    cache.refresh("prom")
    assert cache.device_value("temp", "n1", "GPU-a") == DeviceValue(61.0, NOW)
    source.answer = None
    clock.now = NOW + TTL
    cache.refresh("prom")
    assert held_devices(cache) == 1
    clock.now = NOW + TTL + 1
    cache.refresh("prom")
    assert held_devices(cache) == 0 and not cache.device_values("temp", "n1")


def test_a_node_that_leaves_takes_its_devices_with_it() -> None:
    clock = Clock(NOW)
    cache = make_cache(clock)
    ingest(cache, clock, refresh({("n1", "GPU-a"): (61.0, NOW), ("n2", "GPU-b"): (62.0, NOW)}), "n1", "n2")
    ingest(cache, clock, refresh({("n1", "GPU-a"): (61.0, NOW)}), "n1")
    assert held_devices(cache) == 1 and cache._devices.stores["temp"].by_node.keys() == {"n1"}
    assert cache.device_value("temp", "n2", "GPU-b") is None


def test_devices_churning_every_refresh_leave_the_store_bounded_by_what_the_ttl_covers() -> None:
    clock = Clock(NOW)
    cache = make_cache(clock)
    interval, gpus, nodes = 10.0, 8, ["n1", "n2"]
    window = int(TTL // interval) + 1  # refreshes whose devices may still be held
    for step in range(50):  # every refresh names new device ids (a relabelled exporter, replaced GPUs)
        clock.now = NOW + interval * step
        ingest(cache, clock, refresh({(n, f"GPU-{step}-{g}"): (50.0 + g, clock.now) for n in nodes
                                      for g in range(gpus)}), *nodes)
        store = cache._devices.stores["temp"]
        assert len(store.slots) <= window * gpus * len(nodes)
        # Freed slots are reused: the arrays do not grow past the bound either.
        assert store.size <= (window + 1) * gpus * len(nodes)
        assert len(cache.device_values("temp", "n1")) == gpus * min(step + 1, int(MAX_AGE // interval) + 1)


def test_a_node_holds_at_most_max_devices_per_node_and_the_excess_is_counted() -> None:
    clock = Clock(NOW)
    cache = make_cache(clock)
    many = {("n1", f"d{i}"): (float(i), NOW) for i in range(MAX_DEVICES_PER_NODE + 10)}
    ingest(cache, clock, refresh({**many, ("n2", "GPU-a"): (5.0, NOW)}))
    assert len(cache.device_values("temp", "n1")) == MAX_DEVICES_PER_NODE
    assert cache.device_value("temp", "n2", "GPU-a") == DeviceValue(5.0, NOW)  # other nodes unaffected
    assert cache.health["prom"].dropped == {"device_limit": 10}
    ingest(cache, clock, refresh({**many, ("n2", "GPU-a"): (5.0, NOW)}))
    assert cache.health["prom"].dropped == {"device_limit": 20}


# -- reads, changes, report --------------------------------------------------------------------------------------


def test_the_bulk_read_is_the_same_mapping_until_a_change_or_the_earliest_expiry() -> None:
    clock = Clock(NOW)
    cache = make_cache(clock)
    ingest(cache, clock, refresh({("n1", "GPU-a"): (61.0, NOW - 20), ("n1", "GPU-b"): (62.0, NOW)}))
    first = cache.device_values("temp", "n1")
    clock.now = NOW + 5
    assert cache.device_values("temp", "n1") is first  # no change, nothing expired: no work, no allocation
    clock.now = NOW + MAX_AGE - 20 + 0.5  # GPU-a is older than maxAge now
    second = cache.device_values("temp", "n1")
    assert second is not first and set(second) == {"GPU-b"}
    generation = cache.generation
    changes: list[set[str]] = []
    cache.on_update(changes.append)
    ingest(cache, clock, refresh({("n1", "GPU-b"): (70.0, clock.now)}))
    assert cache.generation > generation and changes and "temp" in changes[-1]
    assert cache.device_value("temp", "n1", "GPU-b") == DeviceValue(70.0, clock.now)


def test_values_report_lists_a_nodes_devices_beside_its_value() -> None:
    clock = Clock(NOW)
    cache = make_cache(clock)
    ingest(cache, clock, refresh({("n1", "GPU-b"): (62.0, NOW - 3), ("n1", "GPU-a"): (61.0, NOW - 1)}))
    entry = cache.node_values("n1")["temp"]
    assert entry["value"] == 62.0 and list(entry["devices"]) == ["GPU-a", "GPU-b"]
    assert entry["devices"]["GPU-b"] == {"value": 62.0, "source": "prom", "observed_at": NOW - 3, "stamp": NOW - 3,
                                         "age": 3.0, "fetched_age": 0.0, "fresh": True}


def test_a_plugin_reads_device_values_through_its_handle() -> None:
    clock = Clock(NOW)
    cache = make_cache(clock)
    ingest(cache, clock, refresh({("n1", "GPU-0c1f"): (44.0, NOW - 2), ("n1", "GPU-77aa"): (81.0, NOW)}))
    handle = Handle.of(Services(cluster=ClusterState(), metrics=cache, ledger=InFlightLedgerStore(),
                                pod_writer=FakeAPI()))

    def coolest(node: str) -> str | None:  # what a DRA plugin's rank does with a node's devices
        devices = handle.metrics.device_values("temp", node)
        return min(devices, key=lambda d: devices[d].value) if devices else None

    assert coolest("n1") == "GPU-0c1f" and coolest("n2") is None
    clock.now = NOW + 3
    reading = handle.metrics.device_value("temp", "n1", "GPU-77aa")
    assert reading is not None and (reading.value, reading.age(handle.metrics.clock())) == (81.0, 3.0)
    value, observed_at = reading  # a (value, observed_at) pair
    assert (value, observed_at) == (81.0, NOW)
