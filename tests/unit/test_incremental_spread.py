"""The spreading scores opportunistic batching keeps incrementally (framework.incremental) are the ones
PreScore and Score compute afresh, bit for bit, through every kind of count change; and the exact shortcuts
behind them (PodTopologySpread's float normalisation, the batcher's array comparison) are what they replace."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from metrics_sched.framework import CycleState, Handle
from metrics_sched.framework.incremental import IncrementalScores
from metrics_sched.framework.runtime.batching.totals import equal
from metrics_sched.model.podinfo import PodInfo, parse_pod
from metrics_sched.plugins.pod_topology_spread.plugin import _IGNORED, HOSTNAME, ZONE, PodTopologySpread
from metrics_sched.plugins.zone_spread.plugin import ZoneSpread
from metrics_sched.scheduler.event_handlers import SERVICES
from metrics_sched.state.cluster_state import ClusterState
from metrics_sched.state.node_table import FloatArray, IntArray
from metrics_sched.telemetry.cache import MetricCache
from metrics_sched.telemetry.ledger import InFlightLedgerStore
from tests.unit.fakes import FakeAPI
from tests.unit.test_pod_topology_spread import SOFT, SYSTEM, Obj, cluster, mk_node, mk_pod, rs, spread, svc

pytestmark = pytest.mark.unit

APP = {"matchLabels": {"app": "web"}}
OWNER = ("apps/v1", "ReplicaSet", "web")
NOTHING: IntArray = np.zeros(0, dtype=np.int64)


def _nodes() -> list[Obj]:
    """24 nodes in 3 zones and 2 racks; 3 without a zone, one tainted."""
    nodes = []
    for i in range(24):
        labels = {HOSTNAME: f"n{i:02d}", "rack": f"r{i % 2}"}
        if i % 8 != 7:
            labels[ZONE] = f"z{i % 3}"
        taints = [{"key": "dedicated", "value": "x", "effect": "NoSchedule"}] if i == 5 else None
        nodes.append(mk_node(f"n{i:02d}", labels, taints))
    return nodes


def _changes(state: ClusterState, rng: np.random.Generator) -> list[Callable[[], None]]:
    """The ways the counts move: an assumed pod (matching or not, on a candidate or not), a bound pod relabelled,
    terminating or removed, an assumed pod forgotten."""
    placed: list[PodInfo] = []

    def assume() -> None:
        labels = {"app": "web" if rng.random() < 0.8 else "other", "track": "a"}
        info = parse_pod(mk_pod(labels=labels, ns="default", owner=OWNER))
        state.assume(info, f"n{int(rng.integers(0, 24)):02d}")
        placed.append(info)

    def forget() -> None:
        if placed:
            state.forget(placed.pop(int(rng.integers(0, len(placed)))).uid)

    def bound(change: str) -> None:
        node = f"n{int(rng.integers(0, 24)):02d}"
        body = mk_pod(labels={"app": "web", "track": "a"}, ns="default", node=node, owner=OWNER)
        state.observe_bound_pod(parse_pod(body))
        if change == "relabel":
            body["metadata"]["labels"] = {"app": "else"}
            state.observe_bound_pod(parse_pod(body))
        elif change == "terminate":
            body["metadata"]["deletionTimestamp"] = "2026-11-30T12:00:00Z"
            state.observe_bound_pod(parse_pod(body))
        else:
            state.remove_pod(body["metadata"]["uid"])

    return [assume, assume, assume, forget, lambda: bound("relabel"), lambda: bound("terminate"),
            lambda: bound("remove"), lambda: bound("keep")]


def _check(state: ClusterState, fresh: Callable[[], FloatArray], kept: IncrementalScores, info: PodInfo,
           seed: int, normalize: Callable[[FloatArray], FloatArray]) -> None:
    rng = np.random.default_rng(seed)
    changes = _changes(state, rng)
    table = state.table
    for step in range(80):
        stamp = table.pod_stamp
        # Mostly a few changes (followed one by one), now and then a burst (the same in numpy).
        for _ in range(int(rng.integers(0, 4)) if step % 10 else 14):
            changes[int(rng.integers(0, len(changes)))]()
        # What the batcher hands over: the rows whose pods changed since (every kind of change stamps its row).
        got = kept.rescore(CycleState(), info, table, np.flatnonzero(table.row_pod_stamp[: table.capacity] > stamp))
        assert got is not None
        want = fresh()
        assert got.tobytes() == want.tobytes(), f"step {step}: {got} != {want}"
        normalized = kept.normalized()
        if normalized is not None:  # handed over kept: normalize()'s of the raw scores, bit for bit
            assert normalized[0].tobytes() == np.asarray(normalize(want), dtype=np.float64).tobytes(), step
            assert not normalized[1]


OWN = [spread(1, HOSTNAME, SOFT, APP, match_label_keys=["track"], taints_policy="Honor"), spread(2, ZONE, SOFT, APP),
       spread(1, "rack", SOFT, APP)]


@pytest.mark.parametrize("constraints", [OWN, OWN[1:2], []], ids=["own constraints", "one constraint",
                                                                   "system defaults"])
def test_pod_topology_spread_scores_kept_from_the_counts(constraints: list[Obj]) -> None:
    own = bool(constraints)
    state, plugin = cluster(_nodes(), [], SYSTEM, [rs("web", APP)])
    info = parse_pod(mk_pod(labels={"app": "web", "track": "a"}, ns="default", constraints=constraints,
                            owner=OWNER))
    table = state.table
    rows = np.array([r for r in range(24) if r not in (3, 11)], dtype=np.int64)  # two nodes filtered out

    def fresh() -> FloatArray:
        cycle = CycleState()
        assert plugin.pre_score(cycle, info, table, rows).ok
        return np.asarray(plugin.score(cycle, info, table, rows), dtype=np.float64)

    first = CycleState()
    assert plugin.pre_score(first, info, table, rows).ok
    kept = plugin.incremental_scores(first, info, table, rows)
    assert kept is not None
    if own:
        assert (fresh() == _IGNORED).any()  # the zoneless nodes are ignored
    _check(state, fresh, kept, info, seed=len(constraints), normalize=plugin.normalize)
    # A batched cycle's state answers Score as the full cycle's does.
    cycle = CycleState()
    assert kept.rescore(cycle, info, table, NOTHING) is not None
    assert plugin.score(cycle, info, table, rows[::3]).tobytes() == fresh()[::3].tobytes()
    if not own:  # a Service selecting the pod changes its default constraints: not kept any more
        state.workloads.upsert(*svc({"track": "a"}, namespace="default"))
        assert kept.rescore(CycleState(), info, table, NOTHING) is None


@pytest.mark.parametrize("key", [ZONE, HOSTNAME], ids=["3 zones", "24 domains"])
def test_zone_spread_scores_kept_from_the_counts(key: str) -> None:
    state = ClusterState()
    for node in _nodes():
        state.upsert_node(node)
    plugin = ZoneSpread(ZoneSpread.Args(topology_key=key),
                        Handle(state, MetricCache(), InFlightLedgerStore(), FakeAPI()))
    info = parse_pod(mk_pod(labels={"app": "web"}, ns="default", owner=OWNER))
    table = state.table
    rows: IntArray = np.array([r for r in range(24) if r != 4], dtype=np.int64)
    kept = plugin.incremental_scores(CycleState(), info, table, rows)
    assert kept is not None

    def fresh() -> FloatArray:
        return np.asarray(plugin.score(CycleState(), info, table, rows), dtype=np.float64)

    _check(state, fresh, kept, info, seed=9, normalize=plugin.normalize)


def _upstream_normalize(scores: FloatArray) -> FloatArray:
    """PodTopologySpread.normalize as it was: integers throughout."""
    valid = scores != _IGNORED
    if not valid.any():
        return np.zeros_like(scores)
    low = float(scores[valid].min())
    high = max(float(scores[valid].max()), 0.0)
    if high == 0:
        return np.where(valid, 100.0, 0.0)
    normalized = (100 * (int(high) + int(low) - scores.astype(np.int64))) // int(high)
    return np.where(valid, normalized.astype(np.float64), 0.0)


def test_normalize_in_floats_is_the_integer_division() -> None:
    plugin = PodTopologySpread(SYSTEM, Handle(ClusterState(), MetricCache(), InFlightLedgerStore(), FakeAPI()))
    rng = np.random.default_rng(5)
    for case in range(3000):
        high = int(rng.choice([1, 7, 100, 9_973, 2**20, 2**39]))
        scores = rng.integers(0, high + 1, int(rng.integers(1, 60))).astype(np.float64)
        if case % 5 == 0:
            scores[rng.random(scores.size) < 0.2] = _IGNORED
        assert plugin.normalize(scores).tobytes() == _upstream_normalize(scores).tobytes(), scores


def test_equal_is_array_equal_with_nan() -> None:
    rng = np.random.default_rng(6)
    for _ in range(2000):
        a = rng.integers(0, 3, int(rng.integers(0, 20))).astype(np.float64)
        a[rng.random(a.size) < 0.2] = np.nan
        b = a.copy()
        if rng.random() < 0.5 and b.size:
            b[int(rng.integers(0, b.size))] = rng.choice([np.nan, 0.0, 1.0])
        assert equal(a, b) == np.array_equal(a, b, equal_nan=True)
    assert not equal(np.zeros(3), np.zeros(4))


def test_a_workload_change_while_a_batch_is_stored_is_not_lost() -> None:
    """A Service that starts selecting the Deployment's pods (the watch thread: no state lock) lands while a batch's
    spreading counts are being built, between the default selector's derivation and the workloads' generation being
    stored: the batch must not keep the old selector (it did, once: every later batched cycle spread by the old
    one). Simulated in one thread, the upsert made inside that window; batched and unbatched decisions agree."""

    from bench.core_bench import cluster as core_cluster
    from bench.scenario import pod_object

    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "svc", "namespace": "bench"},
               "spec": {"selector": {"tier": "x"}}}

    def run(batching: bool) -> list[Any]:
        harness = core_cluster(40, seed=0)
        try:
            framework = harness.framework
            if not batching:
                framework.batcher = None
            framework.random.seed(11)
            state, handlers = harness.scheduler.state, harness.scheduler.handlers
            for i in range(30):  # counted by the ReplicaSet's selector, not by the one the Service adds to it
                handlers.on_pod_event("ADDED", pod_object(f"old-{i}", cpu="10m", memory="10Mi", owner="rs-01",
                                                          labels={"app": "rs-01"}, node_name=f"node-{i % 3:05d}"))
            spread = next(p for p in framework.instances.values() if isinstance(p, PodTopologySpread))
            derive = spread.constraints
            fired = [False]

            def incremental_scores(cycle: Any, pod: Any, table: Any, rows: Any) -> Any:
                def racing(*args: Any, **kwargs: Any) -> Any:
                    out = derive(*args, **kwargs)
                    if not fired[0]:
                        fired[0] = True
                        handlers.on_object_event(SERVICES, "ADDED", service)
                    return out
                spread.constraints = racing  # type: ignore[method-assign]
                try:
                    return PodTopologySpread.incremental_scores(spread, cycle, pod, table, rows)
                finally:
                    spread.constraints = derive  # type: ignore[method-assign]

            spread.incremental_scores = incremental_scores  # type: ignore[method-assign]
            nodes = []
            for i in range(40):
                info = parse_pod(pod_object(f"new-{i}", cpu="100m", memory="100Mi", owner="rs-01",
                                            labels={"app": "rs-01", "tier": "x"}))
                with state.lock:
                    result = framework.schedule(info, state.table)
                    if result.node is not None:
                        state.assume(info, result.node)
                for plugin in framework.reserves:
                    plugin.reserve(result.cycle, info, result.node)
                if i == 1 and not fired[0]:  # unbatched: the same Service after the same pod
                    fired[0] = True
                    handlers.on_object_event(SERVICES, "ADDED", service)
                raw = next(t.raw for t in result.terms if t.plugin == "PodTopologySpread")
                nodes.append((result.node, raw.tobytes()))
            assert fired[0]
            if batching:
                assert framework.batcher is not None and framework.batcher.stats.batched > 30
            return nodes
        finally:
            harness.stop()

    assert run(batching=True) == run(batching=False)


def test_a_deployment_spread_by_kept_classes_decides_as_the_full_cycle() -> None:
    """Seeded: a Deployment's replicas on 150 nodes (PodTopologySpread's system defaults kept per class of
    candidates, ZoneSpread per zone), with placed replicas deleted now and then (a few rows, and more than a batched
    cycle follows one by one); batching on and off, every cycle's node, scores and totals the same bit for bit."""
    from bench.core_bench import cluster as core_cluster
    from bench.scenario import pod_object
    from tests.unit.test_batching import _decision

    def run(batching: bool) -> list[Any]:
        harness = core_cluster(150, seed=0)
        try:
            framework, state = harness.framework, harness.scheduler.state
            if not batching:
                framework.batcher = None
            framework.random.seed(5)
            placed: list[PodInfo] = []
            decisions = []
            for i in range(260):
                if i % 37 == 36:
                    for gone in placed[-(3 if i % 2 else 30)::3]:
                        state.remove_pod(gone.uid)
                info = parse_pod(pod_object(f"web-{i}", cpu="100m", memory="100Mi", owner="rs-01",
                                            labels={"app": "rs-01"}))
                with state.lock:
                    result = framework.schedule(info, state.table)
                    if result.node is not None:
                        state.assume(info, result.node)
                        placed.append(info)
                for plugin in framework.reserves:
                    plugin.reserve(result.cycle, info, result.node)
                decisions.append(_decision(result))
            if batching:
                assert framework.batcher is not None and framework.batcher.stats.batched > 200, framework.batcher
                assert framework.batcher.stats.many_changed > 0
            return decisions
        finally:
            harness.stop()

    assert run(batching=True) == run(batching=False)
