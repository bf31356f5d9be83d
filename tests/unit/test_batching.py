"""Opportunistic batching: the same decisions as the full cycle, and batches that really are used.

The seeded scenario runs twice on the core bench's cluster (every built-in plugin, telemetry, ReplicaSets
spread by PodTopologySpread's defaults): once with batching off, once on, the profile's random tie-break
seeded alike. Between the pods: a node added, a node cordoned, a bound pod with inter-pod terms arriving,
placed pods deleted, an assumed pod forgotten, a telemetry refresh and the clock moving past a value's
maxAge. Every cycle's node, totals,
score terms, candidates and rejection counts must be the same, bit for bit.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from bench.core_bench import CORE_CONFIG, cluster, make_cluster
from bench.scenario import Harness, build_scheduler, node_object, pod_object
from metrics_sched.config import parse_config
from metrics_sched.config.errors import ConfigError
from metrics_sched.framework.runtime import CycleResult
from metrics_sched.framework.runtime.batching import Batcher, BatchStats
from metrics_sched.framework.runtime.batching.signature import template_of
from metrics_sched.model.podinfo import PodInfo, parse_pod
from metrics_sched.plugins import in_tree_registry

NODES = 120


def _pod(i: int, kind: int) -> PodInfo:
    name = f"t{kind}-{i:04d}"
    if kind == 0:  # a plain Deployment-like pod without a known owner
        return parse_pod(pod_object(name, cpu="100m", memory="500Mi"))
    if kind == 1:  # a ReplicaSet's replica: PodTopologySpread's system defaults (re-run in full every cycle)
        return parse_pod(pod_object(name, cpu="200m", memory="1Gi", owner="rs-01", labels={"app": "rs-01"}))
    if kind == 2:  # GPU pods fill nodes (8 GPUs each): candidates drop out
        return parse_pod(pod_object(name, cpu="1", memory="4Gi", gpus=1))
    if kind == 4:  # its own ScheduleAnyway constraints (hostname, zone, disk type), kept incrementally when batched,
        # and a preferred anti-affinity of its own (InterPodAffinity's PreScore and Score re-run in full)
        spread = [{"maxSkew": skew, "topologyKey": key, "whenUnsatisfiable": "ScheduleAnyway",
                   "labelSelector": {"matchLabels": {"app": "own"}}, "matchLabelKeys": ["track"],
                   "nodeTaintsPolicy": "Honor"}
                  for skew, key in ((1, "kubernetes.io/hostname"), (2, "topology.kubernetes.io/zone"),
                                    (1, "disk-type"))]
        term = {"labelSelector": {"matchLabels": {"app": "own"}}, "topologyKey": "kubernetes.io/hostname"}
        anti = {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 30, "podAffinityTerm": term}]}}
        return parse_pod(pod_object(name, cpu="300m", memory="1Gi", labels={"app": "own", "track": "a"},
                                    topologySpreadConstraints=spread, affinity=anti))
    return parse_pod(pod_object(name, cpu="500m", memory="2Gi",  # tolerates the special nodes, prefers ssd
                                tolerations=[{"key": "dedicated", "operator": "Equal", "value": "special",
                                              "effect": "NoSchedule"}],
                                affinity={"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                                    {"weight": 10, "preference": {"matchExpressions": [
                                        {"key": "disk-type", "operator": "In", "values": ["ssd"]}]}}]}}))


def _kinds(count: int) -> list[int]:
    rng = np.random.default_rng(3)
    kinds: list[int] = []
    while len(kinds) < count:  # runs of one template, as controllers create them, interleaved
        kinds.extend([int(rng.integers(0, 5))] * int(rng.integers(1, 30)))
    return kinds[:count]


def _events(harness: Harness) -> dict[int, Callable[[list[PodInfo]], None]]:
    state, handlers = harness.scheduler.state, harness.scheduler.handlers
    _, values = make_cluster(NODES, 0)

    def add_node(_: list[PodInfo]) -> None:
        handlers.on_node_event("ADDED", node_object("extra-0", cpu=64, memory_gib=256, gpus=8,
                                                    labels={"topology.kubernetes.io/zone": "zone-a"}))

    def cordon(_: list[PodInfo]) -> None:
        handlers.on_node_event("MODIFIED", node_object("node-00007", cpu=32, memory_gib=128, gpus=8,
                                                       unschedulable=True))

    def delete_pods(placed: list[PodInfo]) -> None:
        for info in placed[-40::7]:
            state.remove_pod(info.uid)

    def repel(_: list[PodInfo]) -> None:  # a bound pod whose anti-affinity keeps the ReplicaSet out of its zone
        anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "rs-01"}}, "topologyKey": "topology.kubernetes.io/zone"}]},
            "podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 50, "podAffinityTerm": {
                "labelSelector": {"matchLabels": {"app": "none"}}, "topologyKey": "kubernetes.io/hostname"}}]}}
        handlers.on_pod_event("ADDED", pod_object("repel", cpu="100m", memory="100Mi", node_name="node-00003",
                                                  affinity=anti))

    def add_bare_node(_: list[PodInfo]) -> None:  # no zone label: left out of zone spreading
        handlers.on_node_event("ADDED", node_object("bare-0", cpu=64, memory_gib=256, gpus=8))

    def delete_many(placed: list[PodInfo]) -> None:  # more changed rows than a batched cycle follows one by one
        for info in placed[-150::10]:
            state.remove_pod(info.uid)

    def forget(placed: list[PodInfo]) -> None:
        state.forget(placed[-1].uid)

    def refresh(_: list[PodInfo]) -> None:
        harness.clock.now += 5.0
        harness.feed({metric: {node: value * 1.1 for node, value in per.items()} for metric, per in values.items()})

    def age(_: list[PodInfo]) -> None:
        harness.clock.now += 3600.0  # past every maxAge: the values go stale, metric filters and scores change

    return {60: add_node, 110: cordon, 140: repel, 170: delete_pods, 200: add_bare_node, 230: forget, 280: refresh,
            300: delete_many, 330: delete_pods, 380: age, 430: refresh}


def _run(batching: bool, count: int, config: dict[str, Any] | None = None) -> tuple[list[CycleResult], Harness]:
    harness = cluster(NODES, seed=0, config=config)
    framework = harness.framework
    if not batching:
        framework.batcher = None
    framework.random.seed(11)
    state = harness.scheduler.state
    events = _events(harness)
    placed: list[PodInfo] = []
    results = []
    for i, kind in enumerate(_kinds(count)):
        if i in events:
            events[i](placed)
        info = _pod(i, kind)
        with state.lock:
            result = framework.schedule(info, state.table)
            if result.node is not None:
                state.assume(info, result.node)
        if result.node is not None:
            placed.append(info)
            for plugin in framework.reserves:
                plugin.reserve(result.cycle, info, result.node)
        results.append(result)
    return results, harness


def _decision(result: CycleResult) -> tuple[Any, ...]:
    terms = tuple((t.plugin, t.weight, t.raw.tobytes(), t.normalized.tobytes(),
                   tuple((e.metric, e.values[result.feasible_rows].tobytes(),
                          None if e.in_flight is None else e.in_flight.take(result.feasible_rows).tobytes())
                         for e in t.evidence))
                  for t in result.terms)
    return (result.node, result.row, result.status.code, result.total.tobytes(), result.feasible_rows.tobytes(),
            dict(result.rejections), frozenset(result.rejected_by), terms)


def test_batched_decisions_equal_unbatched_ones() -> None:
    count = 480
    plain, plain_harness = _run(False, count)
    batched, harness = _run(True, count)
    try:
        assert len(plain) == len(batched) == count
        for i, (a, b) in enumerate(zip(plain, batched, strict=True)):
            assert _decision(a) == _decision(b), f"cycle {i} differs: {a.node} vs {b.node}"
        batcher = harness.framework.batcher
        assert isinstance(batcher, Batcher)
        stats = batcher.stats
        # Batches were used, and every kind of invalidation happened along the way.
        assert stats.batched > count // 2, stats
        assert stats.refused["cluster changed"] >= 2, stats  # node added, cordoned
        assert stats.refused["telemetry ageing"] + stats.refused["cluster changed"] >= 4, stats
        assert stats.dropped >= 1, stats  # GPU nodes filled up: candidates left batches (Batcher._drop)
        assert stats.refused["totals not reproduced"] == 0, stats
        assert stats.past_non_candidates > 0, stats  # pods changed on rows the batch's filters had turned down
        assert stats.many_changed > 0, stats  # more changed candidates than are followed one by one
        # The spreading terms were kept incrementally (PreScore and Score not re-run), and moved the totals.
        kept = {entry.term.plugin for batch in batcher._batches for entry in batch.terms if entry.incremental}
        assert kept == {"PodTopologySpread", "ZoneSpread"}, kept
        assert stats.totals_recomputed > 0, stats
        assert sum(1 for r in plain if r.node is not None) > count * 0.9
    finally:
        plain_harness.stop()
        harness.stop()


def _gpu_pod(i: int) -> PodInfo:
    """1-GPU pods of two templates in turn: a ReplicaSet's (spread by PodTopologySpread's defaults and ZoneSpread,
    kept incrementally) and one without an owner; every 7th asks for 3 GPUs (nodes fill unevenly)."""
    gpus = 3 if i % 7 == 0 else 1
    if i % 2:
        return parse_pod(pod_object(f"g-{i:04d}", cpu="1", memory="4Gi", gpus=gpus, owner="rs-01",
                                    labels={"app": "rs-01"}))
    return parse_pod(pod_object(f"g-{i:04d}", cpu="1", memory="4Gi", gpus=gpus))


def _both_ways(nodes: int, seed: int, profile: str, pods: Callable[[int], PodInfo], count: int,
               tie_seed: int) -> tuple[list[CycleResult], list[CycleResult], BatchStats]:
    """The pods placed on a fresh cluster (the core bench's profile, or the default one) with batching off, then on,
    the random tie-break seeded alike: every decision must be the same, bit for bit. Both runs' results and the
    batched one's stats."""
    runs: list[tuple[list[CycleResult], Batcher | None]] = []
    for batching in (False, True):
        harness = cluster(nodes, seed=seed, config=None if profile == "core" else {})
        try:
            if not batching:
                harness.framework.batcher = None
            harness.framework.random.seed(tie_seed)
            runs.append(([harness.place(pods(i)) for i in range(count)], harness.framework.batcher))
        finally:
            harness.stop()
    (plain, _), (batched, batcher) = runs
    for i, (a, b) in enumerate(zip(plain, batched, strict=True)):
        assert _decision(a) == _decision(b), f"cycle {i} differs: {a.node} vs {b.node}"
    assert isinstance(batcher, Batcher)
    return plain, batched, batcher.stats


@pytest.mark.parametrize("profile", ["core", "default"])
def test_candidates_that_fill_up_leave_the_batch_with_the_full_cycles_decisions(profile: str) -> None:
    """Nodes of 8 GPUs filled by GPU pods: each full node leaves the batches that had it as a candidate (counted
    under NodeResourcesFit's reasons, the spreading terms prepared afresh over the candidates left), and every
    decision is the full cycle's, bit for bit, until no node is left. The core bench's profile and the default
    one (where no term of the owner-less template moves everywhere: its totals are patched per row)."""
    plain, batched, stats = _both_ways(30, 0, profile, _gpu_pod, 170, 5)
    assert stats.dropped >= 10, stats
    # The terms these pods have no preference in (NodeAffinity, ImageLocality: all zeros) were cut to the candidates
    # left instead of joined around those gone, and the decisions above are still the full cycle's, bit for bit.
    assert stats.cut_constant >= 2, stats
    assert stats.batched > 100, stats
    assert stats.refused["totals not reproduced"] == 0, stats  # one candidate left: summed in order too
    assert any(r.rejections.get("Insufficient nvidia.com/gpu") for r in batched)
    # Nodes full for the 3-GPU template that 1-GPU pods still land on: still turned down, for the same reasons.
    assert stats.past_non_candidates >= 10, stats
    assert stats.refused["changed row not a candidate"] == 0, stats
    assert plain[-1].node is None  # filled: the last ones fit nowhere


def _special_gpu_pod(i: int) -> PodInfo:
    """1-GPU pods that prefer the few `role: special` nodes (and tolerate their taint): those fill up first, the
    last of them taking NodeAffinity's highest score with it; every 5th asks for 4 GPUs."""
    special = {"matchExpressions": [{"key": "role", "operator": "In", "values": ["special"]}]}
    affinity = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 20, "preference": special}]}}
    return parse_pod(pod_object(f"s-{i:04d}", cpu="1", memory="4Gi", gpus=4 if i % 5 == 0 else 1, affinity=affinity,
                                tolerations=[{"key": "dedicated", "operator": "Equal", "value": "special",
                                              "effect": "NoSchedule"}]))


@pytest.mark.parametrize("profile", ["core", "default"])
def test_candidates_that_leave_keep_the_others_scores_only_while_the_highest_and_extremes_stay(profile: str) -> None:
    """When candidates leave a batch, a term normalised by its highest value (NodeAffinity) keeps the others'
    values until the last preferred node fills up, and a minmax term (Cost) keeps them until its cheapest or
    dearest node leaves: both paths run, and every decision is the full cycle's, bit for bit."""
    _, _, stats = _both_ways(40, 2, profile, _special_gpu_pod, 200, 3)
    assert stats.dropped >= 10, stats
    renormalised = stats.renormalised
    assert 0 < renormalised["NodeAffinity"] < stats.dropped, stats  # the highest moved, then stayed
    assert 0 < renormalised["Cost"] < stats.dropped, stats  # an extreme left, then others did not
    assert renormalised["NodeResourcesFit"] == 0, stats  # each value its own


def test_a_changed_node_that_was_not_a_candidate_keeps_the_batch_while_counted_the_same() -> None:
    """A node full for a template changes (other pods land on it): the batch goes on while the filter that turned
    it down still does for the same reasons; a node now turned down for another reason too (its memory filled as
    well) sends the pod to the full cycle, whose counts then differ. Both runs give the same results throughout."""
    def big(i: int) -> PodInfo:
        return parse_pod(pod_object(f"big-{i}", cpu="1", memory="1Gi", gpus=8))

    def run(batching: bool) -> tuple[list[CycleResult], Harness]:
        harness = build_scheduler({})
        for i in range(4):
            harness.scheduler.handlers.on_node_event("ADDED", node_object(f"n{i}", cpu=64, memory_gib=64, gpus=8))
        if not batching:
            harness.framework.batcher = None
        state = harness.scheduler.state
        results = [harness.place(big(0)), harness.place(big(1))]  # two nodes full of GPUs; the batch is kept
        full = [r.node for r in results]
        assert None not in full
        with state.lock:  # a pod without GPUs lands on the first full node: still only short of GPUs
            state.assume(parse_pod(pod_object("small", cpu="1", memory="1Gi")), str(full[0]))
        results.append(harness.place(big(2)))
        with state.lock:  # the second fills up on memory too: now short of both
            state.assume(parse_pod(pod_object("hog", cpu="1", memory="63Gi")), str(full[1]))
        results.append(harness.place(big(3)))
        return results, harness

    (plain, plain_harness), (batched, harness) = run(False), run(True)
    try:
        for a, b in zip(plain, batched, strict=True):
            assert _decision(a) == _decision(b)
            assert a.rejections == b.rejections
        assert batched[2].rejections == {"Insufficient nvidia.com/gpu": 2}
        assert batched[3].rejections == {"Insufficient nvidia.com/gpu": 3, "Insufficient memory": 1}
        batcher = harness.framework.batcher
        assert isinstance(batcher, Batcher)
        assert batcher.stats.past_non_candidates == 1 and batcher.stats.batched == 1, batcher.stats
        assert batcher.stats.refused["changed row not a candidate"] == 1, batcher.stats
    finally:
        plain_harness.stop()
        harness.stop()


def test_unbatchable_pods_run_the_full_cycle() -> None:
    harness = cluster(40, seed=0)
    try:
        framework = harness.framework
        state = harness.scheduler.state
        host_path = {"name": "data", "hostPath": {"path": "/var/data"}}
        nominated = pod_object("nominated", cpu="100m", memory="500Mi")
        nominated["status"] = {"nominatedNodeName": "node-00001"}
        assert template_of(parse_pod(nominated)) is None
        for i in range(5):
            anti = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "anti"}}, "topologyKey": "kubernetes.io/hostname"}]}}
            info = parse_pod(pod_object(f"anti-{i}", cpu="100m", memory="500Mi", labels={"app": "anti"},
                                        affinity=anti))
            with state.lock:
                result = framework.schedule(info, state.table)
                assert result.node is not None
                state.assume(info, result.node)
        batcher = framework.batcher
        assert isinstance(batcher, Batcher)
        assert batcher.stats.batched == 0
        assert batcher.stats.refused["template not seen recently"] == 1  # a batch is kept from the second pod on
        assert batcher.stats.refused["InterPodAffinity filters on the cluster"] == 4
        for i in range(2):  # a volume the volume plugins would check: no plugin signs it, from the second pod on
            volume = parse_pod(pod_object(f"vol-{i}", cpu="100m", memory="500Mi", volumes=[host_path]))
            with state.lock:
                assert framework.schedule(volume, state.table).node is not None
        assert batcher.stats.refused["VolumeRestrictions cannot sign"] == 1, batcher.stats
    finally:
        harness.stop()


def test_batching_is_on_by_default_and_can_be_turned_off() -> None:
    on = build_scheduler({"profiles": [{"schedulerName": "a"}, {"schedulerName": "b", "opportunisticBatching": False}]})
    try:
        assert isinstance(on.scheduler.frameworks["a"].batcher, Batcher)
        assert on.scheduler.frameworks["b"].batcher is None
    finally:
        on.stop()
    with pytest.raises(ConfigError) as raised:
        parse_config({"profiles": [{"opportunisticBatching": "yes"}]}, in_tree_registry(third_party=False).catalog())
    assert "opportunisticBatching" in str(raised.value)


def test_a_minmax_term_the_ledger_moves_is_scored_over_every_candidate() -> None:
    """A minmax metric term scales by the candidates' lowest and highest value, which a placement's in-flight
    entry moves: a batched cycle scores it over every candidate (Reads.CLUSTER), never over the changed rows
    alone (where one row is its own minimum and maximum, and would score 100)."""
    config = copy.deepcopy(CORE_CONFIG)
    for entry in config["profiles"][0]["pluginConfig"]:
        if entry["name"] == "CustomMetric":
            entry["args"] = {"metrics": [{"metric": "node_cpu_utilisation", "direction": "lower",
                                          "normalization": {"method": "minmax"}}]}
    count = 240
    plain, plain_harness = _run(False, count, config)
    batched, harness = _run(True, count, config)
    try:
        for i, (a, b) in enumerate(zip(plain, batched, strict=True)):
            assert _decision(a) == _decision(b), f"cycle {i} differs: {a.node} vs {b.node}"
        batcher = harness.framework.batcher
        assert isinstance(batcher, Batcher) and batcher.stats.batched > count // 2, batcher.stats if batcher else None
        assert any(entry.cluster for batch in batcher._batches for entry in batch.terms
                   if entry.term.plugin == "CustomMetric")
    finally:
        plain_harness.stop()
        harness.stop()
