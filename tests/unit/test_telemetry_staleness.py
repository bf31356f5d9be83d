"""Stale and skewed telemetry: a GPU verdict does not outlive its value; a sample's stamp never runs ahead of
the scheduler's clock (clamped to the fetch, counted), so maxAge and the in-flight ledger still hold."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from metrics_sched.observability import SchedulerMetrics
from metrics_sched.ports import FetchResult, NodeDirectory
from metrics_sched.telemetry import MetricCache, PolledSource
from tests.unit.fakes import node, pod
from tests.unit.test_scheduler import drain
from tests.unit.test_telemetry_scoring import NOW, Clock, feed, gpu_nodes, make

pytestmark = pytest.mark.unit

HOUR = 3600.0
GPU_STALE_NEUTRAL = {
    "podInitialBackoffSeconds": 0.1, "podMaxBackoffSeconds": 0.1,  # the least allowed: a moved pod retries soon
    "metrics": {"gpu_temperature": {"maxAge": "30s", "ttl": "60s", "onMissing": "neutral"}},
    "profiles": [{"pluginConfig": [{"name": "GPUTemperature", "args": {"threshold": 80, "hysteresis": 5}}]}],
}


class Down(PolledSource):
    """A source that never answers: its refreshes only let the cache see its values age."""

    def __init__(self, clock: Clock) -> None:
        super().__init__("test", 5.0, ["gpu_temperature"], clock=clock)

    def fetch(self, nodes: NodeDirectory) -> FetchResult:
        raise ConnectionError("refused")


def with_down_source(cache: MetricCache, clock: Clock) -> None:
    cache.start(lambda: NodeDirectory(frozenset(), {}, {}, {}))  # before add_source: no thread, the test refreshes
    cache.add_source(Down(clock))


def test_a_hot_node_whose_temperature_goes_missing_is_readmitted_and_its_parked_pod_moves() -> None:
    clock = Clock()
    scheduler, api, cache = make(GPU_STALE_NEUTRAL, clock)
    with_down_source(cache, clock)
    gpu_nodes(scheduler, ["hot"])
    feed(cache, {"gpu_temperature": {"hot": 90}}, observed=NOW)
    api.add_pod(pod("p", gpus=1))
    drain(scheduler, api)
    assert api.binds == [] and scheduler.queue.lengths()["unschedulable"] == 1

    clock.now += 29  # still fresh: still hot
    cache.refresh("test")
    assert scheduler.queue.lengths()["unschedulable"] == 1
    clock.now += 2  # past maxAge, the exporter gone: the last verdict does not stick
    cache.refresh("test")
    assert scheduler.queue.lengths()["unschedulable"] == 0
    drain(scheduler, api)
    assert api.binds == [("default/p", "hot")]


def test_the_hysteresis_state_expires_with_the_value_that_set_it() -> None:
    clock = Clock()
    scheduler, api, cache = make(GPU_STALE_NEUTRAL, clock)
    gpu_nodes(scheduler, ["gpu"])
    feed(cache, {"gpu_temperature": {"gpu": 90}}, observed=NOW, fetched=NOW)
    clock.now += 20
    feed(cache, {"gpu_temperature": {"gpu": 78}}, observed=clock.now, fetched=clock.now)  # in the band, no gap
    api.add_pod(pod("kept-out", gpus=1))
    drain(scheduler, api)
    assert api.binds == []  # 78 °C is above 80 - 5 and the node was hot just before: hysteresis holds

    clock.now += 31  # the 78 °C value goes stale with nothing after it: the hot state goes with it
    feed(cache, {"gpu_temperature": {"gpu": 78}}, observed=clock.now, fetched=clock.now)
    drain(scheduler, api)
    assert api.binds == [("default/kept-out", "gpu")]


def test_with_deny_a_node_without_a_fresh_temperature_stays_filtered() -> None:
    config = {**GPU_STALE_NEUTRAL, "metrics": {"gpu_temperature": {"maxAge": "30s", "onMissing": "deny"}}}
    clock = Clock()
    scheduler, api, cache = make(config, clock)
    gpu_nodes(scheduler, ["gpu"])
    feed(cache, {"gpu_temperature": {"gpu": 90}}, observed=NOW)
    clock.now += 31
    api.add_pod(pod("p", gpus=1))
    drain(scheduler, api)
    assert api.binds == []
    assert "no fresh gpu_temperature" in api.events_for("default/p", "FailedScheduling")[0].note


def test_a_sample_stamped_in_the_future_is_clamped_to_its_fetch_and_counted() -> None:
    clock = Clock()
    scheduler, _, cache = make({"metrics": {"node_hourly_cost": {"maxAge": "30s", "ttl": "1h"}}}, clock)
    gpu_nodes(scheduler, ["a"])
    metrics = SchedulerMetrics(scheduler)
    table = scheduler.state.table
    row = table.index["a"]
    for _ in range(3):  # a frozen exporter whose clock is an hour ahead: the same stamp on every refresh
        feed(cache, {"node_hourly_cost": {"a": 2.0}}, observed=NOW + HOUR, fetched=clock.now)
        column = cache.column("node_hourly_cost", table)
        assert column.observed_at[row] == NOW  # its first fetch, not its own stamp nor the latest fetch
        clock.now += 10
    assert cache.column("node_hourly_cost", table).fresh[row]  # 30 s after the first fetch
    clock.now += 1
    assert not cache.column("node_hourly_cost", table).fresh[row]  # past maxAge, as any frozen value
    assert cache.node_values("a")["node_hourly_cost"]["stamp"] == NOW + HOUR
    assert cache.health["test"].clamped == 3

    families = {f.name: f for f in text_string_to_metric_families(metrics.exposition().decode())}
    samples = {s.name: s for s in families["metrics_sched_samples_clamped"].samples}
    assert samples["metrics_sched_samples_clamped_total"].labels == {"source": "test"}
    assert samples["metrics_sched_samples_clamped_total"].value == 3


def test_a_sample_stamped_in_the_past_is_not_clamped() -> None:
    clock = Clock()
    scheduler, _, cache = make(clock=clock)
    gpu_nodes(scheduler, ["a"])
    feed(cache, {"node_hourly_cost": {"a": 2.0}}, observed=NOW - 5, fetched=NOW)
    assert cache.column("node_hourly_cost", scheduler.state.table).observed_at[scheduler.state.table.index["a"]] == (
        NOW - 5)
    assert cache.health["test"].clamped == 0


@pytest.mark.parametrize("skew", [HOUR, 30.0, 0.0, -30.0], ids=["1h-ahead", "30s-ahead", "in-sync", "30s-behind"])
def test_the_in_flight_ledger_spreads_a_burst_whatever_the_sources_clock(skew: float) -> None:
    config: dict[str, Any] = {"profiles": [{"plugins": {"score": {
        "disabled": [{"name": "*"}], "enabled": [{"name": "NodeLoad", "weight": 1}]}}}]}
    scheduler, api, cache = make(config)
    names = [f"n{i}" for i in range(10)]
    for name in names:
        scheduler.handlers.on_node_event("ADDED", node(name, cpu="16", memory="64Gi"))
    # one node looks a little idler than the rest, the metrics never move again, the source's clock is off
    feed(cache, {"node_cpu_utilisation": {n: 0.30 if n != "n0" else 0.25 for n in names},
                 "node_load_per_cpu": {n: 0.5 for n in names}}, observed=NOW - 1 + skew)
    for i in range(100):
        api.add_pod(pod(f"p{i:03d}", cpu="500m", memory="256Mi"))
    drain(scheduler, api)
    per_node: dict[str, int] = {}
    for _, name in api.binds:
        per_node[name] = per_node.get(name, 0) + 1
    assert len(api.binds) == 100
    assert max(per_node.values()) <= 2 * 100 / len(names), per_node
