"""The rebalancer's decisions end to end in memory: a Scheduler over a FakeAPI and a MetricCache on a fake clock,
so the real default profile (GPUTemperature, NodeLoad, Cost and the resource scores) decides the simulation."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import pytest

from metrics_sched.audit import DecisionRing
from metrics_sched.ports import ApiError
from metrics_sched.rebalance import (
    EvictionLimits,
    EvictionVerdict,
    NodeRule,
    RebalanceConfig,
    Rebalancer,
    RuleKind,
    Verdict,
)
from metrics_sched.rebalance.runner import RebalanceRunner
from metrics_sched.scheduler import Scheduler
from metrics_sched.telemetry import MetricCache
from tests.unit.fakes import FakeAPI, node, pod
from tests.unit.test_telemetry_scoring import NOW, Clock, feed, make

HOT = NodeRule("hot-gpu", "gpu_temperature", RuleKind.ABOVE, threshold=85, for_seconds=300)
INTERVAL = 60.0


class Rig:
    """A cluster of GPU nodes, owned pods placed on them, telemetry fed on a fake clock, and the rebalancer."""

    def __init__(self, config: RebalanceConfig | None = None, nodes: Mapping[str, int] | None = None,
                 scheduler_config: dict[str, Any] | None = None) -> None:
        self.clock = Clock()
        self.scheduler, self.api, self.cache = make(scheduler_config, self.clock)
        for name, gpus in (nodes or {"a": 8, "b": 8, "c": 8}).items():
            self.scheduler.handlers.on_node_event("ADDED", node(name, cpu="64", memory="512Gi", gpus=gpus))
        self.config = config or RebalanceConfig(rules=(HOT,), interval_seconds=INTERVAL)
        self.rebalancer = rebalancer_for(self.config, self.scheduler, self.api, self.cache, self.clock)

    def place(self, name: str, node_name: str, *, owner: str | None = "rs", kind: str = "ReplicaSet",
              gpus: int = 1, annotations: dict[str, str] | None = None, labels: dict[str, str] | None = None,
              started: float | None = None, **kw: Any) -> dict[str, Any]:
        """A running pod (started: its status.startTime, else it runs since its creation, weeks before NOW)."""
        body = pod(name, node_name=node_name, gpus=gpus, **kw)
        if started is not None:
            body["status"]["startTime"] = _iso(started)
        body["metadata"]["labels"] = labels or {}
        if owner is not None:
            body["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": kind, "name": owner,
                                                    "uid": f"uid-{owner}", "controller": True}]
        if annotations:
            body["metadata"]["annotations"] = annotations
        body["status"]["phase"] = "Running"
        return self.api.add_pod(body)

    def temperatures(self, values: Mapping[str, float], *, age: float = 1.0) -> None:
        feed(self.cache, {"gpu_temperature": dict(values)}, observed=self.clock.now - age, fetched=self.clock.now)

    def at(self, offset: float, temperatures: Mapping[str, float] | None = None) -> list[EvictionVerdict]:
        """Moves the clock to NOW + offset, feeds fresh temperatures (if given) and ticks."""
        self.clock.now = NOW + offset
        if temperatures is not None:
            self.temperatures(temperatures)
        return self.rebalancer.tick()

    def hot_for(self, seconds: float, temperatures: Mapping[str, float]) -> list[EvictionVerdict]:
        """Ticks every interval while `temperatures` hold, `seconds` long; returns the last tick's verdicts."""
        start = self.clock.now - NOW
        steps = int(seconds // INTERVAL)
        verdicts: list[EvictionVerdict] = []
        for i in range(steps + 1):
            verdicts = self.at(start + i * INTERVAL, temperatures)
        return verdicts


def rebalancer_for(config: RebalanceConfig, scheduler: Scheduler, api: FakeAPI, cache: MetricCache,
                   clock: Clock) -> Rebalancer:
    return Rebalancer(config, scheduler.frameworks["metrics-sched"], scheduler.state, cache,
                      frozenset({"metrics-sched"}), clock, pods=api, members=api)


def terminate(rig: Rig, key: str) -> None:
    """What an eviction does first: the pod gets a deletionTimestamp (and the watch says so)."""
    body = rig.api.pods[key]
    body["metadata"]["deletionTimestamp"] = "2026-11-30T12:05:00Z"
    rig.scheduler.handlers.on_pod_event("MODIFIED", body)


def planned(verdicts: list[EvictionVerdict]) -> list[str]:
    return [v.pod for v in verdicts if v.verdict == Verdict.PLANNED]


def skipped(verdicts: list[EvictionVerdict]) -> dict[str, str]:
    return {v.pod: v.reason for v in verdicts if v.verdict == Verdict.SKIPPED}


COOL = {"a": 91.0, "b": 40.0, "c": 60.0}


def test_a_node_hot_for_longer_than_for_has_its_pod_planned_to_the_coolest_node() -> None:
    rig = Rig()
    rig.place("p", "a")
    assert rig.at(0, COOL) == []  # the streak starts
    assert rig.at(240, COOL) == []  # 4 minutes: not yet
    [verdict] = rig.at(300, COOL)
    assert verdict.verdict == Verdict.PLANNED
    assert (verdict.pod, verdict.node, verdict.rule, verdict.target) == ("default/p", "a", "hot-gpu", "b")
    assert verdict.owner == "ReplicaSet/default/rs"
    assert verdict.gain is not None and verdict.gain >= 10
    assert verdict.reason.startswith("gpu_temperature 91.0 > 85 for 5m; b scores ")
    assert verdict.reason.endswith(f"here (+{verdict.gain:.1f}); the pod's filters no longer admit this node")
    assert [(b.node, b.rule, b.value, b.threshold, b.since) for b in rig.rebalancer.bad_nodes()] == [
        ("a", "hot-gpu", 91.0, 85.0, NOW)]
    assert rig.rebalancer.candidates == 1


def test_a_dry_run_repeats_the_same_plan_and_changes_nothing() -> None:
    rig = Rig()
    rig.place("p", "a")
    first = rig.hot_for(300, COOL)
    rig.rebalancer.record_outcome(first[0], Verdict.PLANNED)  # a dry run
    again = rig.at(360, COOL)
    assert [(v.pod, v.verdict, v.target) for v in again] == [(v.pod, v.verdict, v.target) for v in first]
    assert rig.api.pods["default/p"]["spec"]["nodeName"] == "a"
    assert rig.scheduler.state.record(first[0].uid) is not None


WARM = NodeRule("warm-gpu", "gpu_temperature", RuleKind.ABOVE, threshold=83, for_seconds=300)
# b is below the rule, also with the pod's share moved there (+1.9 °C: the ledger's estimate for 1 of 8 GPUs).
SLIGHTLY_BETTER = {"a": 84.0, "b": 81.0, "c": 86.0}


def test_no_better_node_by_the_margin_gives_skipped_verdicts_never_planned() -> None:
    # A rule stricter than the GPU filter (83 < 85): a is bad but still admits the pod, b barely better.
    rig = Rig(RebalanceConfig(rules=(WARM,), interval_seconds=INTERVAL))
    rig.place("p", "a")
    verdicts = rig.hot_for(300, SLIGHTLY_BETTER)
    [verdict] = verdicts
    assert verdict.verdict == Verdict.SKIPPED
    assert verdict.target == "b" and verdict.gain is not None and verdict.gain < 10
    assert "no node better by 10 points (best: b " in verdict.reason


def test_a_node_the_pods_filters_no_longer_admit_is_left_whatever_the_margin() -> None:
    # a is above the GPU filter's threshold: the scheduler would not place the pod there today. b (not bad, also
    # with the pod's +1.9 °C) scores only a little better, but it admits the pod: the move is worth it.
    rig = Rig()
    rig.place("p", "a")
    [verdict] = rig.hot_for(300, {"a": 91.0, "b": 83.0, "c": 86.0})
    assert verdict.verdict == Verdict.PLANNED and verdict.target == "b"
    assert verdict.gain is not None and verdict.gain < 10
    assert verdict.reason.endswith("; the pod's filters no longer admit this node")


def test_no_other_node_that_fits_gives_a_skipped_verdict() -> None:
    rig = Rig()
    rig.place("p", "a")
    [verdict] = rig.hot_for(300, {"a": 91.0, "b": 90.0, "c": 88.0})
    assert verdict.verdict == Verdict.SKIPPED and verdict.target is None
    assert "no other node fits (3 node(s) had a GPU above 85°C)" in verdict.reason


def test_the_margin_is_configurable() -> None:
    rig = Rig(RebalanceConfig(rules=(WARM,), interval_seconds=INTERVAL, margin=0.0))
    rig.place("p", "a")
    [verdict] = rig.hot_for(300, SLIGHTLY_BETTER)
    assert verdict.verdict == Verdict.PLANNED and verdict.target == "b"


def test_lowest_priority_first_then_the_biggest_gain() -> None:
    # b is the coolest but has 4 GPUs: only pods asking for at most 4 can go there; c (warmer) takes the rest.
    rig = Rig(nodes={"a": 8, "b": 4, "c": 8})
    rig.place("important", "a", owner="rs1", priority=100)
    rig.place("big", "a", owner="rs2", gpus=6)
    rig.place("small", "a", owner="rs3")
    verdicts = rig.hot_for(300, {"a": 91.0, "b": 35.0, "c": 50.0})
    assert planned(verdicts) == ["default/small"]
    gains = {v.pod: v.gain for v in verdicts}
    assert gains["default/small"] > gains["default/big"] > 0  # type: ignore[operator]
    assert {v.pod: v.target for v in verdicts} == {"default/small": "b", "default/big": "c", "default/important": "b"}
    reasons = skipped(verdicts)
    assert reasons["default/big"].endswith("; limit: 1 per node per interval")
    assert reasons["default/important"].endswith("; limit: 1 per node per interval")
    # Both lower-priority pods come before the important one, whatever its gain.
    limits = EvictionLimits(per_node=2, per_namespace=5, cluster=5)
    rig2 = Rig(RebalanceConfig(rules=(HOT,), interval_seconds=INTERVAL, limits=limits), nodes={"a": 8, "b": 4, "c": 8})
    rig2.place("important", "a", owner="rs1", priority=100)
    rig2.place("big", "a", owner="rs2", gpus=6)
    rig2.place("small", "a", owner="rs3")
    assert planned(rig2.hot_for(300, {"a": 91.0, "b": 35.0, "c": 50.0})) == ["default/small", "default/big"]


@pytest.mark.parametrize(("limits", "expected", "reason"), [
    (EvictionLimits(per_node=5, per_namespace=1, cluster=5), 1, "limit: 1 per namespace per interval"),
    (EvictionLimits(per_node=5, per_namespace=5, cluster=2), 2, "limit: 2 per interval cluster-wide"),
    (EvictionLimits(per_node=5, per_namespace=5, cluster=5), 3, None),
], ids=["per-namespace", "cluster", "within"])
def test_limits_per_namespace_and_cluster_wide(limits: EvictionLimits, expected: int, reason: str | None) -> None:
    rig = Rig(RebalanceConfig(rules=(HOT,), interval_seconds=INTERVAL, limits=limits))
    for i in range(3):
        rig.place(f"p{i}", "a", owner=f"rs{i}")
    verdicts = rig.hot_for(300, COOL)
    assert len(planned(verdicts)) == expected
    assert all(r.endswith(reason) for r in skipped(verdicts).values()) if reason else not skipped(verdicts)


def test_one_pod_per_owner_per_tick_and_the_owners_cooldown_after_an_eviction() -> None:
    limits = EvictionLimits(per_node=5, per_namespace=5, cluster=5, cooldown_seconds=600)
    rig = Rig(RebalanceConfig(rules=(HOT,), interval_seconds=INTERVAL, limits=limits))
    rig.place("web-1", "a", owner="web")
    rig.place("web-2", "a", owner="web")
    verdicts = rig.hot_for(300, COOL)
    [first] = [v for v in verdicts if v.verdict == Verdict.PLANNED]
    [(other, why)] = skipped(verdicts).items()
    assert why.endswith("limit: one pod of ReplicaSet/default/web per cooldown")
    rig.rebalancer.record_outcome(first, Verdict.EVICTED)
    terminate(rig, first.pod)
    later = rig.at(360, COOL)
    assert planned(later) == []
    assert list(skipped(later)) == [other]
    assert "cooldown: ReplicaSet/default/web had a pod evicted 1m ago (for 10m)" in skipped(later)[other]
    assert planned(rig.at(300 + 600, COOL)) != []  # the cooldown is over


def test_a_blocked_eviction_backs_the_pod_off_for_two_intervals_then_doubling() -> None:
    rig = Rig()
    rig.place("guarded", "a")
    [verdict] = rig.hot_for(300, COOL)
    rig.rebalancer.record_outcome(verdict, Verdict.BLOCKED)
    [held] = rig.at(360, COOL)
    assert held.verdict == Verdict.SKIPPED
    assert "back-off: eviction blocked (429: a PodDisruptionBudget) 1m ago; next try in 1m" in held.reason
    [retried] = rig.at(420, COOL)  # two intervals later
    assert retried.verdict == Verdict.PLANNED
    rig.rebalancer.record_outcome(retried, Verdict.BLOCKED)  # again: four intervals now
    assert [v.verdict for v in rig.at(420 + 3 * INTERVAL, COOL)] == [Verdict.SKIPPED]
    assert [v.verdict for v in rig.at(420 + 4 * INTERVAL, COOL)] == [Verdict.PLANNED]


def test_an_evicted_pod_that_is_terminating_or_gone_is_not_considered_again() -> None:
    rig = Rig()
    rig.place("p", "a")
    [verdict] = rig.hot_for(300, COOL)
    rig.rebalancer.record_outcome(verdict, Verdict.EVICTED)
    terminate(rig, "default/p")
    assert rig.at(360, COOL) == [] and rig.rebalancer.candidates == 0
    rig.scheduler.handlers.on_pod_event("DELETED", rig.api.pods.pop("default/p"))
    assert rig.at(420, COOL) == [] and rig.rebalancer.candidates == 0


def test_a_pod_read_again_that_opted_out_meanwhile_is_skipped() -> None:
    rig = Rig()
    rig.place("p", "a")
    # Annotated after it was placed: the watch's update changes nothing the state counts, the read sees it.
    rig.api.pods["default/p"]["metadata"]["annotations"] = {"metrics-sched.io/evictable": "false"}
    [verdict] = rig.hot_for(300, COOL)
    assert verdict.verdict == Verdict.SKIPPED
    assert verdict.reason.endswith('annotated metrics-sched.io/evictable: "false"')


def test_a_pod_gone_from_the_api_gets_no_verdict() -> None:
    rig = Rig()
    rig.place("p", "a")
    del rig.api.pods["default/p"]  # the watch has not told the state yet
    assert rig.hot_for(300, COOL) == []
    assert rig.rebalancer.candidates == 1


def test_a_quantile_rule_on_cost_uses_the_same_simulation() -> None:
    expensive = NodeRule("expensive", "node_hourly_cost", RuleKind.QUANTILE, quantile=0.5, for_seconds=120)
    rig = Rig(RebalanceConfig(rules=(expensive,), interval_seconds=INTERVAL))
    rig.place("p", "a")
    costs = {"a": 12.0, "b": 2.0, "c": 3.0}
    for t in (0, 60, 120):
        rig.clock.now = NOW + t
        feed(rig.cache, {"node_hourly_cost": costs, "gpu_temperature": {"a": 50, "b": 50, "c": 50}},
             observed=rig.clock.now - 1, fetched=rig.clock.now)
        verdicts = rig.rebalancer.tick()
    [verdict] = verdicts
    assert verdict.verdict == Verdict.PLANNED and verdict.target == "b" and verdict.rule == "expensive"
    assert verdict.reason.startswith("node_hourly_cost 12.0 > 3 (cluster p50) for 2m; b scores ")


def test_a_pod_is_simulated_by_the_profile_that_placed_it() -> None:
    """Two profiles: the pod of the second one is re-placed by its own (here: one whose filters admit only c)."""
    only_c = {"plugins": {"filter": {"enabled": [{"name": "NodeLabelFilter"}]}},
              "pluginConfig": [{"name": "NodeLabelFilter", "args": {"requiredLabels": {"rack": "c"}}}]}
    rig = Rig(scheduler_config={"profiles": [{"schedulerName": "metrics-sched"},
                                             {"schedulerName": "picky", **only_c}]})
    rig.scheduler.handlers.on_node_event("MODIFIED", node("c", cpu="64", memory="512Gi", gpus=8,
                                                          labels={"rack": "c"}))
    frameworks = rig.scheduler.frameworks
    rig.rebalancer = Rebalancer(rig.config, frameworks["metrics-sched"], rig.scheduler.state, rig.cache,
                                frozenset(frameworks), rig.clock, pods=rig.api, frameworks=frameworks)
    rig.place("p", "a", scheduler="picky")
    [verdict] = rig.hot_for(300, COOL)  # b is the coolest, but the picky profile admits only c
    assert verdict.verdict == Verdict.PLANNED and verdict.target == "c"


class _PdbEvictor:
    """The Eviction API over the rig: 429 for the pods a PodDisruptionBudget protects, else the pod terminates."""

    def __init__(self, rig: Rig, protected: set[str]) -> None:
        self.rig, self.protected = rig, protected
        self.evicted: list[str] = []
        self.dry_runs: list[str] = []

    def evict(self, namespace: str, name: str, uid: str, *, dry_run: bool = False) -> None:
        key = f"{namespace}/{name}"
        if key in self.protected:
            raise ApiError(429, "Cannot evict pod as it would violate the pod's disruption budget.")
        if dry_run:
            self.dry_runs.append(key)
            return
        self.evicted.append(key)
        terminate(self.rig, key)


def test_issue44_defect9_a_blocked_pod_does_not_hold_its_nodes_slot() -> None:
    """Issue 44, defect 9: two hot nodes, perNode 1, cluster 2, no cooldown. On `a` a pod its PDB protects comes
    first and is refused (429) at every try; the ordinary pods on `a` must still go, one per tick, while `b`
    drains at the same rate."""
    limits = EvictionLimits(per_node=1, per_namespace=10, cluster=2, cooldown_seconds=0)
    rig = Rig(RebalanceConfig(rules=(HOT,), interval_seconds=INTERVAL, limits=limits),
              nodes={"a": 8, "b": 8, "c": 8, "d": 8})
    rig.place("guarded", "a", owner="db")
    rig.place("web-1", "a", owner="web")
    rig.place("web-2", "a", owner="web")
    rig.place("other-1", "b", owner="other")
    rig.place("other-2", "b", owner="other")
    evictor = _PdbEvictor(rig, {"default/guarded"})
    ring = DecisionRing(100)
    runner = RebalanceRunner(rig.rebalancer, evictor, ring, dry_run=False, clock=rig.clock)
    temperatures = {"a": 95.0, "b": 95.0, "c": 40.0, "d": 40.0}
    for i in range(6):  # the streak builds (5 min), then the ticks that evict
        rig.clock.now = NOW + i * INTERVAL
        rig.temperatures(temperatures)
        verdicts = runner.tick()
    first = list(evictor.evicted)
    assert sorted(first) == ["default/other-1", "default/web-1"]  # the first tick that evicts: one per node
    # One verdict per pod: web-1 went in place of the blocked pod (its "limit" verdict replaced, not repeated).
    outcome = {v.pod: (v.verdict, v.reason) for v in verdicts}
    assert len(verdicts) == len(outcome) == 5
    assert outcome["default/guarded"][0] == Verdict.BLOCKED
    assert outcome["default/web-1"][0] == Verdict.EVICTED
    assert outcome["default/web-1"][1].endswith("; in place of default/guarded (blocked)")
    assert outcome["default/web-2"][0] == Verdict.SKIPPED
    records = ring.select(kind="eviction", pod="default/web-1")
    assert [r.verdict for r in records] == ["evicted"]  # type: ignore[union-attr]
    rig.clock.now = NOW + 6 * INTERVAL
    rig.temperatures(temperatures)
    verdicts = runner.tick()
    assert sorted(evictor.evicted[len(first):]) == ["default/other-2", "default/web-2"]
    assert {v.pod: v.verdict for v in verdicts}["default/guarded"] in (Verdict.BLOCKED, Verdict.SKIPPED)


LOADED = NodeRule("overloaded", "node_load_per_cpu", RuleKind.ABOVE, threshold=1.5, for_seconds=300)


def _loaded_rig() -> Rig:
    rig = Rig(RebalanceConfig(rules=(LOADED,), interval_seconds=INTERVAL, margin=0.0),
              nodes={"a": 0, "b": 0, "c": 0})
    for name in ("a", "b", "c"):  # 4 CPUs each: the pod below asks for all of one node's
        rig.scheduler.handlers.on_node_event("MODIFIED", node(name, cpu="4", memory="64Gi"))
    return rig


def _load_for(rig: Rig, seconds: float, load: Mapping[str, float]) -> list[EvictionVerdict]:
    verdicts: list[EvictionVerdict] = []
    for t in range(0, int(seconds) + 1, int(INTERVAL)):
        rig.clock.now = NOW + t
        feed(rig.cache, {"node_load_per_cpu": dict(load)}, observed=rig.clock.now - 1, fetched=rig.clock.now)
        verdicts = rig.rebalancer.tick()
    return verdicts


def test_issue44_defect4_a_pod_whose_own_load_makes_its_node_bad_is_not_moved_to_a_node_it_would_make_bad() -> None:
    """Issue 44, defect 4: the pod alone makes `a` read 1.8 per CPU (rule > 1.5). Moved to b or c (0.3), it
    would make that node read 2.1: the rule would flag the target, and the pod would come back (ping-pong)."""
    rig = _loaded_rig()
    rig.place("busy", "a", gpus=0, cpu="4")
    [verdict] = _load_for(rig, 300, {"a": 1.8, "b": 0.3, "c": 0.3})
    assert verdict.verdict == Verdict.SKIPPED, verdict.reason
    assert "every node that fits would then break a rule" in verdict.reason
    assert "b: overloaded node_load_per_cpu 0.3 -> 2.1 > 1.5" in verdict.reason


def test_issue44_defect4_a_pod_whose_share_fits_the_target_still_moves() -> None:
    """The other side: a small pod among others on a node loaded by them all moves, its share added to the target."""
    rig = _loaded_rig()
    rig.place("small", "a", gpus=0, cpu="500m")
    rig.place("filler", "a", owner="other", gpus=0, cpu="3500m", scheduler="default-scheduler")
    verdicts = _load_for(rig, 300, {"a": 1.8, "b": 0.3, "c": 1.4})
    [verdict] = [v for v in verdicts if v.pod == "default/small"]
    # Its share: 1.8 * 0.5 / 4 = 0.225 per CPU. On c that is 1.625 (> 1.5): refused; b reads 0.525.
    assert verdict.verdict == Verdict.PLANNED and verdict.target == "b", verdict.reason


def test_issue44_defect4_the_same_for_heat_a_whole_node_gpu_pod_is_not_moved_onto_a_node_it_would_heat() -> None:
    """The ledger's estimate for GPU heat: all 8 GPUs busy add 15 °C. From 91 °C to b at 75 °C it would read 90 °C
    there, above the rule: refused; c (60 °C, 75 with it) takes it."""
    rig = Rig()
    rig.place("all-gpus", "a", gpus=8)
    [verdict] = rig.hot_for(300, {"a": 91.0, "b": 75.0, "c": 60.0})
    assert verdict.verdict == Verdict.PLANNED and verdict.target == "c", verdict.reason
    rig = Rig()
    rig.place("all-gpus", "a", gpus=8)
    [verdict] = rig.hot_for(300, {"a": 91.0, "b": 75.0, "c": 72.0})
    assert verdict.verdict == Verdict.SKIPPED and verdict.target is None
    assert verdict.reason.endswith("every node that fits would then break a rule with the pod's share "
                                   "(c: hot-gpu gpu_temperature 72.0 -> 87.0 > 85.0; "
                                   "b: hot-gpu gpu_temperature 75.0 -> 90.0 > 85.0)")


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_issue44_defect5_a_new_leader_honours_the_cooldown_of_an_eviction_it_did_not_see() -> None:
    """Issue 44, defect 5: the previous leader evicted a pod of `web` 420 s before this one's tick (cooldown
    10 min); its replacement runs on b since. A new leader (a fresh Rebalancer: no memory) must not evict a
    second pod of `web` until the cooldown would be over."""
    limits = EvictionLimits(per_node=5, per_namespace=5, cluster=5, cooldown_seconds=600)
    rig = Rig(RebalanceConfig(rules=(HOT,), interval_seconds=INTERVAL, limits=limits))
    rig.place("web-1", "a", owner="web")
    rig.place("db-1", "a", owner="db", started=NOW - 3600)
    evicted_at = NOW + 300 - 420
    rig.place("web-2", "b", owner="web", started=evicted_at + 2)  # the replacement
    verdicts = rig.hot_for(300, COOL)
    assert planned(verdicts) == ["default/db-1"]
    why = skipped(verdicts)["default/web-1"]
    assert why.endswith("cooldown: ReplicaSet/default/web has a pod started 6m58s ago, and this replica has "
                        "rebalanced for 5m only (an eviction by a previous leader would be as recent; for 10m)"), why
    # Once this replica has rebalanced for a whole cooldown, what it remembers is the whole story.
    assert "default/web-1" in planned(rig.at(300 + 360, COOL))
