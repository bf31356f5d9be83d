"""Metric cache freshness, the in-flight ledger and the telemetry plugins, in memory."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from metrics_sched.config import parse_config
from metrics_sched.framework import Scale
from metrics_sched.framework.registry import Registry
from metrics_sched.plugins import in_tree_registry
from metrics_sched.ports import FetchResult, Sample
from metrics_sched.scheduler import Scheduler
from metrics_sched.state.node_table import NodeTable
from metrics_sched.telemetry import FreshnessContract, MetricCache, OnMissing, SourceHealth
from metrics_sched.telemetry.ledger import InFlightLedgerStore
from tests.unit.fakes import FakeAPI, node, pod
from tests.unit.test_scheduler import drain

NOW = 1_800_000_000.0


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> float:
        return self.now


def make(config: dict[str, Any] | None = None, clock: Clock | None = None,
         registry: Registry | None = None) -> tuple[Scheduler, FakeAPI, MetricCache]:
    registry = registry or in_tree_registry(third_party=False)
    parsed = parse_config(config or {}, registry.catalog())
    clock = clock or Clock()
    cache = MetricCache(parsed.metrics, clock=clock)
    ledger = InFlightLedgerStore(clock=clock)
    api = FakeAPI()
    scheduler = Scheduler(parsed, registry.plugins, api, metrics=cache, ledger=ledger)
    api.watchers.append(scheduler.handlers)
    cache.health["test"] = SourceHealth("test", 5, [])
    return scheduler, api, cache


def feed(cache: MetricCache, values: dict[str, dict[str, float]], *, observed: float = NOW - 1,
         fetched: float = NOW) -> None:
    samples = [Sample(metric, node_name, value, observed) for metric, per in values.items()
               for node_name, value in per.items()]
    cache.ingest("test", FetchResult(samples, {}, {}), fetched_at=fetched)


def gpu_nodes(scheduler: Scheduler, names: list[str]) -> None:
    for name in names:
        scheduler.handlers.on_node_event("ADDED", node(name, cpu="64", memory="512Gi", gpus=8))


WEIGHT_CASES = [
    ("temperature dominates", {"GPUTemperature": 10, "NodeLoad": 1, "Cost": 1}, "cold"),
    ("cost dominates", {"GPUTemperature": 1, "NodeLoad": 1, "Cost": 10}, "cheap"),
    ("load dominates", {"GPUTemperature": 1, "NodeLoad": 10, "Cost": 1}, "idle"),
]


@pytest.mark.parametrize(("name", "weights", "winner"), WEIGHT_CASES, ids=[c[0] for c in WEIGHT_CASES])
def test_changing_only_the_weights_changes_the_choice(name: str, weights: dict[str, int], winner: str) -> None:
    config = {"profiles": [{"plugins": {"score": {
        "disabled": [{"name": "*"}],
        "enabled": [{"name": plugin, "weight": w} for plugin, w in weights.items()]}}}]}
    scheduler, api, cache = make(config)
    gpu_nodes(scheduler, ["cold", "cheap", "idle"])
    feed(cache, {
        "gpu_temperature": {"cold": 35, "cheap": 80, "idle": 80},
        "node_hourly_cost": {"cold": 30, "cheap": 2, "idle": 30},
        "node_cpu_utilisation": {"cold": 0.9, "cheap": 0.9, "idle": 0.05},
        "node_load_per_cpu": {"cold": 1.8, "cheap": 1.8, "idle": 0.1},
    })
    api.add_pod(pod("p", gpus=1))
    drain(scheduler, api)
    assert api.binds == [("default/p", winner)]


def test_hot_node_gets_no_gpu_pod_and_hysteresis_readmits_below_threshold_minus_delta() -> None:
    config = {"profiles": [{"pluginConfig": [{"name": "GPUTemperature", "args": {"threshold": 80, "hysteresis": 5}}]}]}
    scheduler, api, cache = make(config)
    gpu_nodes(scheduler, ["hot"])
    feed(cache, {"gpu_temperature": {"hot": 90}})
    api.add_pod(pod("p", gpus=1))
    drain(scheduler, api)
    assert api.binds == []
    assert "GPU above 80°C" in api.events_for("default/p", "FailedScheduling")[0].note
    assert scheduler.queue.lengths()["unschedulable"] == 1
    feed(cache, {"gpu_temperature": {"hot": 77}})  # below the threshold but not below threshold - delta
    assert scheduler.queue.lengths()["unschedulable"] == 1
    feed(cache, {"gpu_temperature": {"hot": 74}})  # re-admitted: the parked pod moves at once
    assert scheduler.queue.lengths()["unschedulable"] == 0
    drain(scheduler, api)
    assert api.binds == [("default/p", "hot")]


def test_cpu_pods_are_not_kept_off_hot_gpu_nodes() -> None:
    scheduler, api, cache = make()
    gpu_nodes(scheduler, ["hot"])
    feed(cache, {"gpu_temperature": {"hot": 99}})
    api.add_pod(pod("cpu-only"))
    drain(scheduler, api)
    assert api.binds == [("default/cpu-only", "hot")]


def test_stale_values_count_as_missing_and_missing_terms_reweight() -> None:
    config = {"metrics": {"gpu_temperature": {"maxAge": "30s", "ttl": "60s", "onMissing": "neutral"}}}
    clock = Clock()
    scheduler, api, cache = make(config, clock)
    gpu_nodes(scheduler, ["a", "b"])
    feed(cache, {"gpu_temperature": {"a": 90, "b": 40}}, observed=NOW - 45)  # frozen exporter: 45 s old
    column = cache.column("gpu_temperature", scheduler.state.table)
    assert not column.fresh[[scheduler.state.table.index["a"], scheduler.state.table.index["b"]]].any()
    api.add_pod(pod("p", gpus=1))
    result = scheduler.schedule_one(timeout=1)
    assert result is not None and result.node is not None  # a 90 °C reading that is stale does not filter
    term = next(t for t in result.terms if t.plugin == "GPUTemperature")
    assert np.isnan(term.normalized).all()
    assert np.isfinite(result.total).all()


def test_deny_on_missing_filters_nodes_without_fresh_values() -> None:
    config = {"metrics": {"gpu_temperature": {"onMissing": "deny"}}}
    scheduler, api, cache = make(config)
    gpu_nodes(scheduler, ["known", "unknown"])
    feed(cache, {"gpu_temperature": {"known": 60}})
    api.add_pod(pod("p", gpus=1))
    drain(scheduler, api)
    assert api.binds == [("default/p", "known")]


def test_ttl_expires_values_of_a_dead_source() -> None:
    config = {"metrics": {"node_hourly_cost": {"ttl": "10s", "maxAge": "1h"}}}
    clock = Clock()
    scheduler, _, cache = make(config, clock)
    gpu_nodes(scheduler, ["a"])
    feed(cache, {"node_hourly_cost": {"a": 3.0}})
    row = scheduler.state.table.index["a"]
    assert cache.column("node_hourly_cost", scheduler.state.table).fresh[row]
    clock.now += 11
    assert not cache.column("node_hourly_cost", scheduler.state.table).fresh[row]


def test_in_flight_ledger_prevents_herding_on_frozen_metrics() -> None:
    config = {"profiles": [{"plugins": {"score": {"disabled": [{"name": "*"}],
                                                  "enabled": [{"name": "NodeLoad", "weight": 1}]}}}]}
    scheduler, api, cache = make(config)
    names = [f"n{i}" for i in range(10)]
    for name in names:
        scheduler.handlers.on_node_event("ADDED", node(name, cpu="16", memory="64Gi"))
    # one node looks a little idler than the rest, and the metrics never move again
    feed(cache, {"node_cpu_utilisation": {n: 0.30 if n != "n0" else 0.25 for n in names},
                 "node_load_per_cpu": {n: 0.5 for n in names}})
    for i in range(100):
        api.add_pod(pod(f"p{i:03d}", cpu="500m", memory="256Mi"))
    drain(scheduler, api)
    per_node: dict[str, int] = {}
    for _, n in api.binds:
        per_node[n] = per_node.get(n, 0) + 1
    assert len(api.binds) == 100
    assert max(per_node.values()) <= 2 * 100 / len(names), per_node


def test_ledger_entries_stop_counting_once_a_newer_sample_covers_them() -> None:
    clock = Clock()
    scheduler, _, _ = make(clock=clock)
    gpu_nodes(scheduler, ["a"])
    table = scheduler.state.table
    ledger = scheduler.ledger
    ledger.add("uid1", "a", {"node_cpu_utilisation": 0.2}, at=NOW + 1)
    observed = np.full(table.capacity, NOW)
    assert ledger.adjustment("node_cpu_utilisation", table, observed)[table.index["a"]] == pytest.approx(0.2)
    observed = np.full(table.capacity, NOW + 2)  # a sample measured after the placement covers it (a new column)
    assert ledger.adjustment("node_cpu_utilisation", table, observed)[table.index["a"]] == 0.0



def ledger_on_two_nodes() -> tuple[NodeTable, InFlightLedgerStore]:
    """The scheduler's table with nodes a and b, and its in-flight ledger."""
    scheduler, _, _ = make(clock=Clock())
    gpu_nodes(scheduler, ["a", "b"])
    return scheduler.state.table, scheduler.ledger


def test_pruning_forgets_placements_every_metric_of_which_a_newer_sample_covers() -> None:
    table, ledger = ledger_on_two_nodes()
    cpu, load = "node_cpu_utilisation", "node_load_per_cpu"
    ledger.add("on-a", "a", {cpu: 0.1, load: 0.2}, at=NOW + 1)
    ledger.add("on-b", "b", {cpu: 0.1, load: 0.2}, at=NOW + 1)
    ledger.add("later-on-a", "a", {cpu: 0.3}, at=NOW + 3)
    ledger.prune()
    assert len(ledger) == 3  # no metric read yet: nothing is known to cover them
    covers_a = np.full(table.capacity, NOW)
    # Measured after the first placement on a, and at the instant of the later one (which it cannot show yet).
    covers_a[table.index["a"]] = NOW + 3
    cpu_before = ledger.adjustment(cpu, table, covers_a).copy()
    ledger.prune()
    assert len(ledger) == 3  # on-a's load is not covered yet (its metric was not read against covers_a)
    load_before = ledger.adjustment(load, table, covers_a).copy()
    assert ledger.prune() == 1 and len(ledger) == 2 and ledger.by_node() == {"a": 1, "b": 1}
    np.testing.assert_array_equal(ledger.adjustment(cpu, table, covers_a), cpu_before)
    np.testing.assert_array_equal(ledger.adjustment(load, table, covers_a), load_before)
    assert ledger.adjustment(cpu, table, covers_a)[table.index["a"]] == pytest.approx(0.3)
    assert ledger.adjustment(cpu, table, covers_a)[table.index["b"]] == pytest.approx(0.1)


def test_pruning_compacts_only_once_removed_placements_are_many_and_keeps_the_adjustment() -> None:
    table, ledger = ledger_on_two_nodes()
    metric = "node_cpu_utilisation"
    for i in range(200):
        ledger.add(f"uid{i}", "ab"[i % 2], {metric: 0.01 * (i + 1)}, at=NOW + 1)
    observed = np.full(table.capacity, NOW)
    column = ledger._columns[metric]
    ledger.prune()  # nothing removed: the slots stay where they are
    assert ledger._columns[metric] is column and column.size == 200
    for i in range(0, 120):
        ledger.remove(f"uid{i}")
    expected = np.zeros(table.capacity)
    for i in range(120, 200):
        expected[table.index["ab"[i % 2]]] += 0.01 * (i + 1)
    before = ledger.adjustment(metric, table, observed).copy()
    ledger.prune()  # 120 removed against 80 live: compacted
    compacted = ledger._columns[metric]
    assert compacted is not column and compacted.size == 80 and compacted.alive[:80].all()
    np.testing.assert_allclose(ledger.adjustment(metric, table, observed), expected)
    np.testing.assert_allclose(before, expected)
    ledger.remove("uid150")  # slots found again after the compaction
    expected[table.index["ab"[150 % 2]]] -= 0.01 * 151
    np.testing.assert_allclose(ledger.adjustment(metric, table, observed), expected)
    assert len(ledger) == 79


@settings(max_examples=150, deadline=None)
@given(steps=st.lists(st.tuples(st.sampled_from(["add", "remove", "read", "sample", "prune"]), st.integers(0, 7),
                                st.floats(-2.0, 2.0, allow_nan=False)), min_size=1, max_size=60))
def test_the_adjustment_kept_between_reads_is_the_full_computation_bit_for_bit(
        steps: list[tuple[str, int, float]]) -> None:
    """Placements are added to the kept adjustment when it is next read (several at once when no cycle read it in
    between): the same doubles as a store computing it from its placements, and last_step names the rows. Pruning
    the covered ones in between changes none of it."""
    clock = Clock()
    scheduler, _, _ = make(clock=clock)
    names = [f"n{i}" for i in range(8)]
    gpu_nodes(scheduler, names)
    table = scheduler.state.table
    kept = InFlightLedgerStore(clock=clock)
    metric = "node_cpu_utilisation"
    observed = np.full(table.capacity, NOW)
    live: dict[str, tuple[str, float, float]] = {}
    last = kept.adjustment(metric, table, observed)
    for i, (action, at, delta) in enumerate(steps):
        if action == "add":
            uid = f"u{i}"
            live[uid] = (names[at], delta, NOW + 1 + i)
            kept.add(uid, names[at], {metric: delta}, at=NOW + 1 + i)
        elif action == "remove" and live:
            uid = sorted(live)[at % len(live)]
            del live[uid]
            kept.remove(uid)
        elif action == "sample":
            observed = observed.copy()
            observed[table.index[names[at]]] = NOW + 1 + i  # a sample covering that node's placements so far
        elif action == "prune":  # forgets covered placements: the reference keeps them, and they count for nothing
            kept.prune()
        else:
            full = InFlightLedgerStore(clock=clock)
            for uid, (name, d, when) in live.items():
                full.add(uid, name, {metric: d}, at=when)
            got = kept.adjustment(metric, table, observed)
            assert got.tobytes() == full.adjustment(metric, table, observed).tobytes()
            step = kept.last_step(metric)
            if step is not None and step[0] is got and step[1] is last:
                assert set(np.flatnonzero(got != last).tolist()) <= set(step[2])
                assert list(step[2]) == sorted(set(step[2]))
            last = got

finite_or_not = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.just(float("nan")))


@settings(max_examples=300, deadline=None)
@given(values=st.lists(finite_or_not, min_size=1, max_size=40),
       better=st.sampled_from(["lower", "higher"]),
       method=st.sampled_from(["minmax", "range"]))
def test_normalised_scores_are_within_0_100_or_missing(values: list[float], better: Any, method: Any) -> None:
    with np.errstate(over="raise", invalid="raise"):  # no overflow on the way, even near the float limits
        scores = Scale(method, 0.0, 100.0).apply(np.array(values), better)
    finite = scores[~np.isnan(scores)]
    assert ((finite >= 0) & (finite <= 100)).all()
    assert np.isnan(scores[~np.isfinite(np.array(values))]).all()
    assert not np.isnan(scores[np.isfinite(np.array(values))]).any()  # every finite value is scored


def test_values_at_the_float_limits_are_scored_at_the_ends_of_the_scale() -> None:
    """minmax between -max and +max double: the difference overflows unless halved (it was a NaN, a missing
    value, for the highest, with overflow warnings)."""
    top = float(np.finfo(np.float64).max)
    values = np.array([-top, 0.0, top])
    with np.errstate(over="raise", invalid="raise"):
        assert Scale("minmax").apply(values, "higher").tolist() == [0.0, 50.0, 100.0]
        assert Scale("minmax").apply(values, "lower").tolist() == [100.0, 50.0, 0.0]
        wide = Scale("range", -top, top)
        assert [wide.apply_one(v, "higher") for v in values.tolist()] == [0.0, 50.0, 100.0]
        assert wide.apply(values, "higher").tolist() == [0.0, 50.0, 100.0]


@settings(max_examples=300, deadline=None)
@given(values=st.lists(st.floats(-1e6, 1e6), min_size=2, max_size=40),
       better=st.sampled_from(["lower", "higher"]),
       method=st.sampled_from(["minmax", "range"]))
def test_normalised_scores_are_monotonic_in_the_terms_direction(values: list[float], better: Any, method: Any) -> None:
    array = np.array(values)
    scores = Scale(method, -1000.0, 1000.0).apply(array, better)
    order = np.argsort(array, kind="stable")
    ranked = scores[order]
    steps = np.diff(ranked)
    assert (steps <= 1e-9).all() if better == "lower" else (steps >= -1e-9).all()


@settings(max_examples=100, deadline=None)
@given(temps=st.lists(st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.floats(20, 100)),
                      min_size=3, max_size=3),
       costs=st.lists(st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.floats(0, 50)),
                      min_size=3, max_size=3))
def test_scheduler_totals_stay_within_0_100_whatever_the_inputs(temps: list[float], costs: list[float]) -> None:
    scheduler, api, cache = make()
    names = ["a", "b", "c"]
    gpu_nodes(scheduler, names)
    samples = [Sample("gpu_temperature", n, t, NOW) for n, t in zip(names, temps, strict=True)]
    samples += [Sample("node_hourly_cost", n, c, NOW) for n, c in zip(names, costs, strict=True)]
    cache.ingest("test", FetchResult(samples, {}, {}), fetched_at=NOW)
    api.add_pod(pod("p", gpus=1))
    result = scheduler.schedule_one(timeout=1)
    assert result is not None
    if result.total.size:
        assert ((result.total >= 0) & (result.total <= 100)).all()
        for term in result.terms:
            finite = term.normalized[~np.isnan(term.normalized)]
            assert ((finite >= 0) & (finite <= 100)).all()


def test_contract_defaults() -> None:
    assert FreshnessContract().on_missing == OnMissing.NEUTRAL
