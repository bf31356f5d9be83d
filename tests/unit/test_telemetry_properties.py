"""Telemetry properties under any history of outages, gaps, skewed clocks, NaN/Inf and hot/cold flips.

- a value that is not fresh never filters a node unless its metric says `onMissing: deny`; a fresh one
  filters by the threshold with hysteresis, and the hysteresis state ends with the value that set it;
- a value is fresh exactly while its measured time (its stamp, never later than its first fetch) is
  within maxAge and its fetch within ttl;
- every score and total is within 0-100;
- the in-flight ledger counts every placement made after a node's sample was fetched, whatever the stamp;
- no node takes more than twice its fair share of a burst, whatever the source's clock says.

The scheduler is the in-process harness of the benchmarks (bench/scenario.py), on a clock the test moves.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.scenario import SOURCE, Harness, build_scheduler, node_object, pod_object
from metrics_sched.model.podinfo import parse_pod
from metrics_sched.ports import FetchResult, NodeDirectory, Sample
from metrics_sched.telemetry import PolledSource

pytestmark = pytest.mark.unit

THRESHOLD, HYSTERESIS = 80.0, 5.0
MAX_AGE, TTL = 30.0, 60.0
NODES = ("g0", "g1", "g2", "g3")
PROPERTY_SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])

skews = st.one_of(st.sampled_from([0.0, -1.0, 5.0, 45.0, 3600.0, -25.0, -45.0, -3600.0, math.nan, math.inf]),
                  st.floats(-7200, 7200))
finite_skews = st.one_of(st.sampled_from([0.0, -1.0, 5.0, 45.0, 3600.0, -45.0, -3600.0]), st.floats(-7200, 7200))
temperatures = st.one_of(st.floats(0, 130), st.sampled_from([math.nan, math.inf, -math.inf, 1e300]),
                         st.floats(THRESHOLD - HYSTERESIS - 1, THRESHOLD + 1))  # the band, often
feed_step = st.tuples(st.just("feed"), st.dictionaries(st.sampled_from(NODES), st.tuples(temperatures, skews),
                                                       min_size=1))
wait_step = st.tuples(st.just("wait"), st.sampled_from([1.0, 10.0, 29.0, 31.0, 61.0]) | st.floats(0, 200))
outage_step = st.tuples(st.just("outage"), st.none())
histories = st.lists(st.one_of(feed_step, wait_step, outage_step), min_size=1, max_size=10)


class Down(PolledSource):
    """The harness's source, gone: a refresh only lets the cache see its values age."""

    def __init__(self, harness: Harness) -> None:
        super().__init__(SOURCE, 5.0, ["gpu_temperature"], clock=harness.clock)

    def fetch(self, nodes: NodeDirectory) -> FetchResult:
        raise ConnectionError("refused")


@dataclass
class Held:
    """What the spec says the cache holds for a node: the last valid sample's value and stamp, its fetch,
    and the first fetch of that same stamp (a stamp fetched again is the same measurement)."""

    value: float
    stamp: float
    first_fetch: float
    fetched: float

    def fresh(self, now: float) -> bool:
        return now - min(self.stamp, self.first_fetch) <= MAX_AGE and now - self.fetched <= TTL


def gpu_harness(on_missing: str) -> Harness:
    harness = build_scheduler({
        "metrics": {"gpu_temperature": {"maxAge": f"{MAX_AGE:g}s", "ttl": f"{TTL:g}s", "onMissing": on_missing}},
        "profiles": [{"pluginConfig": [{"name": "GPUTemperature",
                                        "args": {"threshold": THRESHOLD, "hysteresis": HYSTERESIS}}]}],
    })
    for name in NODES:
        harness.scheduler.handlers.on_node_event("ADDED", node_object(name, cpu=64, memory_gib=512, gpus=8))
    harness.cache.start(harness.scheduler.node_directory)  # before add_source: no thread, the test refreshes
    harness.cache.add_source(Down(harness))
    return harness


@PROPERTY_SETTINGS
@given(on_missing=st.sampled_from(["neutral", "lowest", "deny"]), history=histories)
def test_gpu_verdicts_follow_fresh_values_only(on_missing: str, history: list[tuple[str, Any]]) -> None:
    harness = gpu_harness(on_missing)
    try:
        clock, cache, table = harness.clock, harness.cache, harness.scheduler.state.table
        gpu_pod = parse_pod(pod_object("p", cpu="1", memory="1Gi", gpus=1))
        held: dict[str, Held] = {}
        hot: set[str] = set()  # the spec's hysteresis state
        for kind, arg in history:
            if kind == "feed":
                samples = [Sample("gpu_temperature", n, t, clock.now + skew) for n, (t, skew) in arg.items()]
                cache.ingest(SOURCE, FetchResult(samples, {}, {}), fetched_at=clock.now)
                for n, (t, skew) in arg.items():
                    stamp = clock.now + skew
                    if math.isfinite(t) and abs(t) <= 1e15 and math.isfinite(stamp):
                        previous = held.get(n)
                        same = previous is not None and previous.stamp == stamp
                        held[n] = Held(t, stamp, previous.first_fetch if same and previous else clock.now, clock.now)
            elif kind == "wait":
                clock.now += arg
            else:
                cache.refresh(SOURCE)

            fresh_now = {n for n, h in held.items() if h.fresh(clock.now)}
            column = cache.column("gpu_temperature", table)
            assert {n for n in NODES if column.fresh[table.index[n]]} == fresh_now
            assert (column.observed_at <= column.fetched_at).all()  # never measured after we got it

            hot = {n for n in fresh_now if held[n].value > THRESHOLD
                   or (n in hot and held[n].value >= THRESHOLD - HYSTERESIS)}
            result = harness.framework.schedule(gpu_pod, table)
            feasible = set(table.names_of(result.feasible_rows))
            for n in NODES:
                if n not in fresh_now:
                    assert (n in feasible) == (on_missing != "deny"), (n, on_missing)  # stale: onMissing decides
                else:
                    assert (n in feasible) == (n not in hot), (n, held[n])
            if result.total.size:
                assert ((result.total >= 0) & (result.total <= 100)).all()
            for term in result.terms:
                finite = term.normalized[~np.isnan(term.normalized)]
                assert ((finite >= 0) & (finite <= 100)).all()
    finally:
        harness.stop()


@PROPERTY_SETTINGS
@given(skew=skews, placements=st.lists(st.tuples(st.sampled_from(NODES), st.floats(-100, 100), st.floats(0, 1)),
                                       max_size=20))
def test_the_ledger_counts_every_placement_made_after_the_fetch_whatever_the_stamp(
        skew: float, placements: list[tuple[str, float, float]]) -> None:
    harness = build_scheduler({"metrics": {"node_cpu_utilisation": {"maxAge": "3h", "ttl": "3h"}}})
    try:
        clock, table = harness.clock, harness.scheduler.state.table
        for name in NODES:
            harness.scheduler.handlers.on_node_event("ADDED", node_object(name, cpu=16, memory_gib=64, gpus=0))
        stamp = clock.now + skew
        harness.feed({"node_cpu_utilisation": dict.fromkeys(NODES, 0.5)}, observed=stamp)
        for i, (name, offset, delta) in enumerate(placements):
            harness.ledger.add(f"uid-{i}", name, {"node_cpu_utilisation": delta}, at=clock.now + offset)
        column = harness.cache.column("node_cpu_utilisation", table)
        adjustment = harness.ledger.adjustment("node_cpu_utilisation", table, column.observed_at)
        for name in NODES:
            row = table.index[name]
            measured = min(stamp, clock.now) if math.isfinite(stamp) else -math.inf  # no sample: nothing covers
            after_fetch = sum(d for n, offset, d in placements if n == name and offset > 0)
            expected = sum(d for n, offset, d in placements if n == name and clock.now + offset >= measured)
            assert adjustment[row] == pytest.approx(expected)
            assert adjustment[row] >= after_fetch - 1e-9  # a stamp ahead of us never hides a placement
    finally:
        harness.stop()


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(skew=finite_skews, n_nodes=st.integers(4, 8), per_node=st.integers(3, 5),
       utilisation=st.lists(st.floats(0.25, 0.30), min_size=8, max_size=8),
       refresh_every=st.sampled_from([0, 3, 7]))
def test_no_node_takes_more_than_twice_its_fair_share_of_a_burst(
        skew: float, n_nodes: int, per_node: int, utilisation: list[float], refresh_every: int) -> None:
    # Telemetry alone decides (nothing else spreads the pods), and stays fresh however far behind the clock is.
    harness = build_scheduler({
        "metrics": {m: {"maxAge": "3h", "ttl": "3h"} for m in ("node_cpu_utilisation", "node_load_per_cpu")},
        "profiles": [{"plugins": {"score": {"disabled": [{"name": "*"}], "enabled": [{"name": "NodeLoad"}]}}}]})
    try:
        scheduler, clock = harness.scheduler, harness.clock
        names = [f"n{i}" for i in range(n_nodes)]
        for name in names:
            scheduler.handlers.on_node_event("ADDED", node_object(name, cpu=16, memory_gib=64, gpus=0))
        # An exporter that never moves again, on a clock `skew` seconds off: the same values, the same stamp.
        values = {"node_cpu_utilisation": dict(zip(names, utilisation, strict=False)),
                  "node_load_per_cpu": dict.fromkeys(names, 0.5)}
        stamp = clock.now - 1 + skew
        harness.feed(values, observed=stamp)
        burst = n_nodes * per_node
        placed: dict[str, int] = {}
        for i in range(burst):
            if refresh_every and i and i % refresh_every == 0:
                clock.now += 2.0
                harness.feed(values, observed=stamp)
            scheduler.handlers.on_pod_event("ADDED", pod_object(f"p{i:03d}", cpu="500m", memory="256Mi"))
            result = scheduler.schedule_one(timeout=0)
            assert result is not None and result.node is not None
            placed[result.node] = placed.get(result.node, 0) + 1
        assert max(placed.values()) <= 2 * burst / n_nodes, placed
    finally:
        harness.stop()
