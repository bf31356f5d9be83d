"""Values as batches (metrics_sched.telemetry.batch) through the array store of the MetricCache, and the
Prometheus reduce plan (adapters.prometheus.plan) that produces them.

- the cache stores a batch exactly as it stores the same values as Samples: columns, per-node values, fresh
  values, coverage, invalid values dropped and counted, clamping, a re-fetched measurement not getting
  younger, a node given twice (the last counts), nodes gone and their slots reused by new nodes;
- a value refreshed unchanged is fresh again (its fetch is new), whatever its value;
- the plan reduces an answer exactly as `reduce_result` does (refused values, unmatched series, missing
  timestamps), declines what it does not cover, and PrometheusSource reuses it while the series stay.
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from adapters.prometheus.client import Answer, MalformedBody, decode_result
from adapters.prometheus.config import MetricSpec
from adapters.prometheus.node_names import NodeIndex
from adapters.prometheus.plan import ReducePlan, build_plan
from adapters.prometheus.series import PART_LABEL, RawElement, reduce_result
from metrics_sched.config.contract import FreshnessContract
from metrics_sched.ports import FetchResult, NodeDirectory, Sample
from metrics_sched.state.node_table import NodeTable, parse_node
from metrics_sched.telemetry import MetricCache
from metrics_sched.telemetry.batch import BatchedFetchResult, MetricBatch, samples_of
from metrics_sched.telemetry.health import SourceHealth
from tests.unit.fakes import node

pytestmark = pytest.mark.unit

MAX_AGE, TTL = 30.0, 60.0
CONTRACTS = {m: FreshnessContract(max_age=MAX_AGE, ttl=TTL) for m in ("temp", "load")}


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def directory(names: list[str]) -> NodeDirectory:
    return NodeDirectory(frozenset(names), {}, {}, {})


def table_of(names: list[str]) -> NodeTable:
    table = NodeTable()
    for name in names:
        table.upsert(parse_node(node(name)))
    return table


def as_batches(samples: list[Sample]) -> BatchedFetchResult:
    """The same values as one batch per metric, in the samples' order (duplicates kept as they come)."""
    by_metric: dict[str, list[Sample]] = {}
    for s in samples:
        by_metric.setdefault(s.metric, []).append(s)
    return BatchedFetchResult(samples=[], dropped={}, errors={}, batches=[
        MetricBatch.of(m, [s.node for s in ss], [s.value for s in ss], [s.observed_at for s in ss])
        for m, ss in by_metric.items()])


def snapshot(cache: MetricCache, table: NodeTable, nodes: list[str]) -> dict[str, Any]:
    columns = {}
    for metric in ("temp", "load"):
        c = cache.column(metric, table)
        # NaN (no value) as None: NaN equals nothing, not even itself
        values = [None if math.isnan(v) else v for v in c.values.tolist()]
        columns[metric] = (values, c.observed_at.tolist(), c.fetched_at.tolist(), c.fresh.tolist(), c.sources)
    health = {k: (dict(h.coverage), dict(h.dropped), h.clamped) for k, h in cache.health.items()}
    return {"columns": columns, "values": {n: cache.node_values(n) for n in nodes}, "health": health,
            # (value, age) pairs in any order: they feed statistics
            "fresh": {k: sorted(zip(*pair, strict=True)) for k, pair in cache.fresh_values().items()}}


def paired_caches(clock: Clock) -> tuple[MetricCache, MetricCache]:
    caches = MetricCache(CONTRACTS, clock=clock), MetricCache(CONTRACTS, clock=clock)
    for cache in caches:
        for name in ("a", "b"):
            cache.health[name] = SourceHealth(name, 5.0, ["temp", "load"])
    return caches


class Reference:
    """The cache's rules with one entry per node and metric, written out plainly: the oracle for the store.
    A node given twice in one refresh counts as given once, with its last valid value."""

    def __init__(self) -> None:
        self.entries: dict[tuple[str, str], tuple[float, float, float, str, float]] = {}

    def ingest(self, name: str, samples: list[Sample], fetched_at: float, nodes: frozenset[str]) -> None:
        last = {(s.metric, s.node): s for s in samples
                if math.isfinite(s.value) and abs(s.value) <= 1e15 and math.isfinite(s.observed_at)}
        for key, s in last.items():
            observed = min(s.observed_at, fetched_at)  # the scheduler's clock: never later than the fetch
            previous = self.entries.get(key)
            if previous is not None and previous[4] == s.observed_at and previous[3] == name:
                observed = min(observed, previous[1])  # the same measurement does not get younger
            self.entries[key] = (s.value, observed, fetched_at, name, s.observed_at)
        self.entries = {key: entry for key, entry in self.entries.items() if key[1] in nodes}

    def node_values(self, node: str, now: float) -> dict[str, tuple[Any, ...]]:
        out = {}
        for (metric, n), (value, observed, fetched, source, stamp) in self.entries.items():
            if n == node:
                fresh = now - observed <= MAX_AGE and now - fetched <= TTL
                out[metric] = (value, source, observed, stamp, round(now - fetched, 3), fresh)
        return out


def held(cache: MetricCache, node: str) -> dict[str, tuple[Any, ...]]:
    return {metric: (v["value"], v["source"], v["observed_at"], v["stamp"], v["fetched_age"], v["fresh"])
            for metric, v in cache.node_values(node).items()}


VALUES = [50.0, 50.0, 71.5, math.nan, math.inf, -3.0, 2e15, 0.0]


@pytest.mark.parametrize("seed", range(12))
def test_a_batch_is_stored_exactly_as_the_same_samples(seed: int) -> None:
    rng = random.Random(seed)
    clock = Clock(10_000.0)
    by_samples, by_batches = paired_caches(clock)
    reference = Reference()
    universe = [f"n{i}" for i in range(12)]
    current = universe[:8]
    stamps = [9_990.0, 9_995.0, 10_000.0]
    for _ in range(14):
        clock.now += rng.choice([1.0, 5.0, 29.0, 31.0, 61.0])
        if rng.random() < 0.3:  # nodes go, others come (slots freed and reused)
            current = rng.sample(universe, rng.randint(3, len(universe)))
        names = rng.sample(current, rng.randint(1, len(current)))
        if rng.random() < 0.2:
            names.append(rng.choice(names))  # a node twice: the last one counts
        source = rng.choice(["a", "a", "a", "b"])
        samples = [Sample(metric=rng.choice(["temp", "load"]), node=n, value=rng.choice(VALUES),
                          observed_at=rng.choice([*stamps[-2:] * 4, *stamps, clock.now + 20.0, math.nan]))
                   for n in names]
        stamps.append(clock.now + rng.choice([-3.0, 0.0, 15.0]))  # some ahead of us: clamped, then refetched
        dirs = directory(current)
        by_samples.ingest(source, FetchResult(samples, {}, {}), fetched_at=clock.now, directory=dirs)
        by_batches.ingest(source, as_batches(samples), fetched_at=clock.now, directory=dirs)
        reference.ingest(source, samples, clock.now, dirs.names)
        table = table_of(current)
        clock.now += rng.choice([0.0, 20.0, 40.0])
        assert snapshot(by_batches, table, universe) == snapshot(by_samples, table, universe)
        assert {n: held(by_batches, n) for n in universe} == {n: reference.node_values(n, clock.now) for n in universe}


def test_a_value_refreshed_unchanged_stays_fresh_and_a_refetched_measurement_keeps_its_time() -> None:
    clock = Clock(1_000.0)
    cache = MetricCache({"temp": FreshnessContract(max_age=MAX_AGE, ttl=TTL),
                         "load": FreshnessContract(max_age=1_000.0, ttl=TTL)}, clock=clock)
    nodes = ["n0", "n1"]
    table = table_of(nodes)
    rows = [table.index[n] for n in nodes]
    # n1's stamp is 10 s ahead of our clock: clamped to its first fetch, and kept there when fetched again.
    temp = MetricBatch.of("temp", nodes, [60.0, 61.0], [1_000.0, 1_010.0])
    load = MetricBatch.of("load", nodes, [0.5, 0.7], [990.0, 990.0])
    for _ in range(3):  # the same answer (values and stamps) at 1000, 1050, 1100
        cache.ingest("a", BatchedFetchResult([], {}, {}, batches=[temp, load]), fetched_at=clock.now,
                     directory=directory(nodes))
        clock.now += 50.0
    clock.now = 1_150.0  # 150 s after the first fetch, 50 s after the last: past ttl of the first
    column = cache.column("temp", table)
    assert column.fetched_at[rows].tolist() == [1_100.0, 1_100.0]
    assert column.observed_at[rows].tolist() == [1_000.0, 1_000.0]  # never younger than its first fetch
    assert not column.fresh[rows].any()  # 150 s since the measurement: past maxAge, however often fetched
    # Unchanged but refreshed: fresh by its last fetch (maxAge 1000 s here), not stale by its first.
    assert cache.column("load", table).fresh[rows].all()
    clock.now = 1_100.0 + TTL + 1.0
    assert not cache.column("load", table).fresh[rows].any()


def test_the_nodes_of_a_batch_keep_their_slots_and_a_new_order_is_mapped_anew() -> None:
    clock = Clock(1_000.0)
    cache = MetricCache(CONTRACTS, clock=clock)
    nodes = ["n0", "n1", "n2"]
    table = table_of(nodes)
    every = directory(nodes)
    first = MetricBatch.of("temp", nodes, [1.0, 2.0, 3.0], [999.0] * 3)
    cache.ingest("a", BatchedFetchResult([], {}, {}, batches=[first]), fetched_at=1_000.0, directory=every)
    again = MetricBatch("temp", nodes, np.array([4.0, 5.0, 6.0]), np.full(3, 999.5))  # the same list object
    cache.ingest("a", BatchedFetchResult([], {}, {}, batches=[again]), fetched_at=1_001.0, directory=every)
    values = cache.column("temp", table).values
    assert [values[table.index[n]] for n in nodes] == [4.0, 5.0, 6.0]
    reordered = MetricBatch.of("temp", ["n2", "n0", "n1"], [9.0, 7.0, 8.0], [999.5] * 3)
    cache.ingest("a", BatchedFetchResult([], {}, {}, batches=[reordered]), fetched_at=1_002.0, directory=every)
    values = cache.column("temp", table).values
    assert [values[table.index[n]] for n in nodes] == [7.0, 8.0, 9.0]
    # n1 leaves the cluster, n3 joins and takes its slot: the column follows the rows, n1's value is gone.
    cache.ingest("a", BatchedFetchResult([], {}, {}), fetched_at=1_003.0, directory=directory(["n0", "n2"]))
    assert "n1" not in cache.node_values("n1") and cache.node_values("n1") == {}
    joined = ["n0", "n2", "n3"]
    batch = MetricBatch.of("temp", joined, [10.0, 11.0, 12.0], [1_003.0] * 3)
    cache.ingest("a", BatchedFetchResult([], {}, {}, batches=[batch]), fetched_at=1_004.0,
                 directory=directory(joined))
    table = table_of(joined)
    column = cache.column("temp", table)
    assert [column.values[table.index[n]] for n in joined] == [10.0, 11.0, 12.0]
    assert cache.node_values("n3")["temp"]["value"] == 12.0


def test_samples_of_gives_every_value_of_a_result() -> None:
    plain = Sample("load", "n0", 1.0, 5.0)
    result = BatchedFetchResult([plain], {}, {}, batches=[MetricBatch.of("temp", ["n1"], [2.0], [6.0])])
    assert samples_of(result) == [plain, Sample("temp", "n1", 2.0, 6.0)]
    assert samples_of(FetchResult([plain], {}, {})) == [plain]
    with pytest.raises(ValueError, match="2 nodes, 1 values"):
        MetricBatch.of("temp", ["n0", "n1"], [1.0], [1.0])


# -- the Prometheus reduce plan -------------------------------------------------------------------------

INDEX = NodeIndex(NodeDirectory(frozenset(f"n{i}" for i in range(8)), {"10.0.0.3": "n3"}, {}, {}))
METRIC = MetricSpec(name="temp", query="t", timestamp_query="timestamp(t)", aggregation="max", node_labels=(),
                    sentinel_above=1e14)


def series(labels: dict[str, str], part: str, value: str) -> dict[str, Any]:
    return {"metric": {**labels, PART_LABEL: part}, "value": [2000.0, value]}


def body(answer: list[dict[str, Any]]) -> bytes:
    return json.dumps({"status": "success", "data": {"resultType": "vector", "result": answer}}).encode()


def typed(answer: list[dict[str, Any]]) -> object:
    return decode_result(body(answer))


def raw(answer: list[dict[str, Any]]) -> list[RawElement]:
    vector = Answer(body(answer)).vector
    assert vector is not None
    return vector


def plan_of(answer: list[dict[str, Any]]) -> ReducePlan | None:
    return build_plan(METRIC, typed(answer), raw(answer), INDEX)


def general(answer: list[dict[str, Any]]) -> list[tuple[str, float, float]]:
    reduced = reduce_result(METRIC, typed(answer), INDEX)
    return [(s.node, s.value, s.observed_at) for s in reduced.samples]


def planned(answer: list[dict[str, Any]]) -> list[tuple[str, float, float]] | None:
    plan = plan_of(answer)
    if plan is None:
        return None
    vector = raw(answer)
    assert plan.matches(vector, INDEX)
    reduced = plan.apply(METRIC, vector)
    if reduced is None:
        return None
    assert reduced.batch is not None
    return [(s.node, s.value, s.observed_at) for s in reduced.batch.samples()]


def both(answer: list[dict[str, Any]]) -> tuple[Any, Any]:
    """(the plan's reduction, the general one): samples and everything counted."""
    plan = plan_of(answer)
    assert plan is not None
    vector = raw(answer)
    assert plan.matches(vector, INDEX)
    fast = plan.apply(METRIC, vector)
    slow = reduce_result(METRIC, typed(answer), INDEX)
    assert fast is not None and fast.batch is not None
    return ((fast.batch.samples(), fast.dropped, fast.unmatched, fast.matched_by_rule, fast.unmatched_examples),
            ([Sample(s.metric, s.node, s.value, s.observed_at) for s in slow.samples], slow.dropped, slow.unmatched,
             slow.matched_by_rule, slow.unmatched_examples))


@pytest.mark.parametrize("seed", range(20))
def test_the_plan_reduces_an_answer_as_the_general_way_does(seed: int) -> None:
    rng = random.Random(seed)
    answer: list[dict[str, Any]] = []
    for i in rng.sample(range(8), rng.randint(1, 8)):
        labels = rng.choice([{"node": f"n{i}"}, {"hostname": f"n{i}", "job": "x"}])
        if i == 3 and rng.random() < 0.5:
            labels = {"instance": "10.0.0.3:9400"}
        answer.append(series(labels, "v", rng.choice(["50", "NaN", "-1", "+Inf", "1e15", "0", "99.5"])))
        if rng.random() < 0.8:  # some nodes have no timestamp series with their labels
            answer.append(series(labels, "t", str(1990.0 - rng.randint(0, 9))))
    for j in range(rng.randint(0, 3)):  # unmatched series
        answer.append(series(rng.choice([{"node": f"gone-{j}"}, {"job": f"j{j}"}]), "v", "5"))
    answer.append({"metric": {"node": "n7"}, "value": [2000.0, "3"]})  # no part: malformed
    rng.shuffle(answer)
    fast, slow = both(answer)
    assert fast == slow


def test_the_plan_declines_what_it_does_not_cover() -> None:
    ok = [series({"node": "n0"}, "v", "50"), series({"node": "n0"}, "t", "1990")]
    assert planned(ok) == general(ok) == [("n0", 50.0, 1990.0)]
    # Two value series of one node (aggregated the general way): no plan.
    assert plan_of([*ok, series({"node": "n0", "gpu": "1"}, "v", "60")]) is None
    # A timestamp that is not finite: the general way (which then pairs by the node's oldest).
    assert planned([series({"node": "n0"}, "v", "50"), series({"node": "n0"}, "t", "NaN")]) is None
    # Plain JSON (a label that is not a string; raw labels are not read, the general decoding says so): no
    # plan. Nothing but malformed series: no plan either.
    assert plan_of([{"metric": {"node": 3}, "value": [1, "2"]}]) is None
    assert Answer(body([{"metric": {"node": "n0"}, "value": [1, 2]}])).vector is None  # not a [time, string] pair
    assert plan_of([{"metric": {"node": "n0"}, "value": [1, "2"]}]) is None
    assert build_plan(METRIC, [], [], INDEX) is None
    with pytest.raises(MalformedBody):
        Answer(b"<html>")
    # An answer with other series, or in another order, or against another node set, does not match.
    plan = plan_of(ok)
    assert plan is not None
    assert plan.matches(raw(ok), INDEX)
    assert not plan.matches(raw(ok[::-1]), INDEX)
    assert not plan.matches(raw([*ok, series({"node": "n1"}, "v", "1")]), INDEX)
    assert not plan.matches(raw([ok[0], series({"node": "n0", "gpu": "0"}, "t", "1990")]), INDEX)
    assert not plan.matches(raw(ok), NodeIndex(NodeDirectory(frozenset({"n0"}), {}, {}, {})))
    # A value that is not a number in a matching answer: declined at apply (dropped as malformed the general way).
    assert plan.apply(METRIC, raw([series({"node": "n0"}, "v", "fifty"), ok[1]])) is None


def test_the_source_keeps_its_plan_while_the_series_stay_and_makes_a_new_one_when_they_change() -> None:
    from adapters.prometheus.config import parse_config
    from adapters.prometheus.source import PrometheusSource

    spec = {"url": "http://127.0.0.1:1", "metrics": [{"name": "temp", "query": "t"}]}
    config = parse_config(spec, base_dir=Path("."))
    source = PrometheusSource("prom", config)
    answers: list[list[dict[str, Any]]] = []
    source._client.query_answer = lambda promql: Answer(body(answers[-1]))  # type: ignore[method-assign]
    nodes = NodeDirectory(frozenset({"n0", "n1"}), {}, {}, {})
    try:
        answers.append([series({"node": "n0"}, "v", "50"), series({"node": "n0"}, "t", "1990")])
        assert samples_of(source.fetch(nodes)) == [Sample("temp", "n0", 50.0, 1990.0)]
        plan = source._plans["temp"]
        answers.append([series({"node": "n0"}, "v", "51"), series({"node": "n0"}, "t", "1995")])
        assert samples_of(source.fetch(nodes)) == [Sample("temp", "n0", 51.0, 1995.0)]
        assert source._plans["temp"] is plan  # the same series: the same plan
        answers.append([*answers[-1], series({"node": "n1"}, "v", "7"), series({"node": "n1"}, "t", "1996")])
        assert samples_of(source.fetch(nodes)) == [Sample("temp", "n0", 51.0, 1995.0),
                                                   Sample("temp", "n1", 7.0, 1996.0)]
        assert source._plans["temp"] is not plan
        # Two series of one node: aggregated the general way, and no plan kept.
        answers.append([*answers[-1], series({"node": "n1", "gpu": "1"}, "v", "9")])
        assert samples_of(source.fetch(nodes))[-1] == Sample("temp", "n1", 9.0, 1996.0)
        assert "temp" not in source._plans
    finally:
        source.close()
