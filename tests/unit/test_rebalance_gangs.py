"""Issue 44: `rebalance.gangs: whole` moves a gang (a PodGroup, or a Workload API scheduling group) whole or not
at all: every member read and judged, the whole group's placement simulated, all members within the limits
together, and the runner's Eviction dry run of every member before it evicts any.

The rebalancer runs over the real default profile (Coscheduling included) on the rig of
test_rebalance_rebalancer; the runner's gang handling also over a fake rebalancer."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from metrics_sched.audit import DecisionRing, EvictionRecord
from metrics_sched.model.group_membership import GroupApi, GroupKey
from metrics_sched.plugins.coscheduling.tracker import GangDecision
from metrics_sched.ports import ApiError
from metrics_sched.rebalance import EvictionLimits, EvictionVerdict, RebalanceConfig, Verdict
from metrics_sched.rebalance.runner import RebalanceRunner
from tests.unit.fakes import node
from tests.unit.test_gang_scheduling import CRD, KIND, WORKLOAD, crd_group, gang_plugin
from tests.unit.test_rebalance_rebalancer import (
    HOT,
    INTERVAL,
    NOW,
    SLIGHTLY_BETTER,
    WARM,
    Rig,
    planned,
    skipped,
    terminate,
)
from tests.unit.test_rebalance_runner import FakeRebalancer

pytestmark = pytest.mark.unit

GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
ZONE = "topology.kubernetes.io/zone"
ROOMY = EvictionLimits(per_node=10, per_namespace=10, cluster=10, cooldown_seconds=0)


def whole(limits: EvictionLimits = ROOMY, **kw: Any) -> RebalanceConfig:
    return RebalanceConfig(rules=(HOT,), interval_seconds=INTERVAL, limits=limits, gangs="whole", **kw)


def gang_rig(config: RebalanceConfig | None = None, nodes: dict[str, int] | None = None) -> Rig:
    return Rig(config or whole(), nodes=nodes)


def crd_gang(rig: Rig, name: str, min_member: int) -> None:
    rig.scheduler.handlers.on_object_event(KIND[CRD], "ADDED", crd_group(name, min_member))


def workload_gang(rig: Rig, name: str, min_member: int) -> None:
    rig.scheduler.handlers.on_object_event(KIND[WORKLOAD], "ADDED", {
        "metadata": {"namespace": "default", "name": name, "creationTimestamp": "2026-12-01T10:00:00Z"},
        "spec": {"schedulingPolicy": {"gang": {"minCount": min_member}}}})


def member(rig: Rig, name: str, node_name: str, group: str, api: str = CRD, **kw: Any) -> dict[str, Any]:
    """A running member of `group` (one Job owns them all unless `owner` says otherwise)."""
    kw.setdefault("owner", "train")
    kw.setdefault("kind", "Job")
    if api == CRD:
        return rig.place(name, node_name, labels={GROUP_LABEL: group, **kw.pop("labels", {})}, **kw)
    return rig.place(name, node_name, schedulingGroup={"podGroupName": group}, **kw)


COOL = {"a": 91.0, "b": 40.0, "c": 60.0}


@pytest.mark.parametrize("api", [CRD, WORKLOAD], ids=["podgroup-label", "workload-scheduling-group"])
def test_a_gang_on_a_hot_node_is_planned_whole_its_members_read_with_one_list(api: str) -> None:
    rig = gang_rig()
    (crd_gang if api == CRD else workload_gang)(rig, "g", 3)
    member(rig, "m0", "a", "g", api)
    member(rig, "m1", "a", "g", api)
    member(rig, "m2", "c", "g", api)  # on a good node: moves with its gang all the same
    rig.place("other", "c", owner="other")  # not a member: no verdict (c is not bad)
    verdicts = rig.hot_for(300, COOL)
    assert sorted(planned(verdicts)) == ["default/m0", "default/m1", "default/m2"], verdicts
    assert {v.gang for v in verdicts} == {"default/g"}
    assert {v.pod: v.node for v in verdicts} == {"default/m0": "a", "default/m1": "a", "default/m2": "c"}
    assert all(v.target == "b" for v in verdicts)  # the coolest, with room for all three
    for v in verdicts:
        assert v.rule == "hot-gpu" and v.reason.startswith("gpu_temperature 91.0 > 85 for 5m; gang default/g moves "
                                                           "whole (3 members, mean gain +"), v.reason
    assert "the filters of default/m0, default/m1 no longer admit its node" in verdicts[0].reason
    # One LIST per gang and tick, though two members are candidates on the hot node: the CRD's label narrows it.
    selector = f"{GROUP_LABEL}=g" if api == CRD else None
    assert rig.api.namespace_lists == [("default", selector)]  # `a` turned bad at the last tick only


def test_by_default_a_gang_member_stays_and_no_member_is_read() -> None:
    rig = Rig()
    crd_gang(rig, "g", 2)
    member(rig, "m0", "a", "g")
    member(rig, "m1", "a", "g")
    verdicts = rig.hot_for(300, COOL)
    assert planned(verdicts) == []
    assert all(r.endswith("a member of gang default/g (scheduling.x-k8s.io PodGroup): a gang is never split")
               for r in skipped(verdicts).values())
    assert rig.api.namespace_lists == []


@pytest.mark.parametrize(("extra", "why"), [
    ({"annotations": {"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"}},
     'member default/m2: annotated cluster-autoscaler.kubernetes.io/safe-to-evict: "false"'),
    ({"scheduler": "default-scheduler"},
     "member default/m2: placed by default-scheduler and not matched by rebalance.podSelector"),
    ({"priority": 5000}, "member default/m2: priority 5000 above 1000"),
    ({"owner": None}, "member default/m2: standalone (no controller would re-create it)"),
], ids=["safe-to-evict-false", "another-scheduler", "priority-cap", "standalone"])
def test_a_gang_with_one_member_that_may_not_move_stays_whole(extra: dict[str, Any], why: str) -> None:
    rig = gang_rig(whole(max_priority=1000))
    crd_gang(rig, "g", 3)
    member(rig, "m0", "a", "g")
    member(rig, "m1", "a", "g")
    member(rig, "m2", "c", "g", **extra)
    verdicts = rig.hot_for(300, COOL)
    assert planned(verdicts) == []
    reasons = skipped(verdicts)
    assert set(reasons) == {"default/m0", "default/m1"}  # the members on the bad node say why they stay
    for reason in reasons.values():
        assert reason.endswith(f"gang default/g moves whole or not at all: {why}"), reason
    assert {v.gang for v in verdicts} == {"default/g"}


def test_the_limits_take_all_members_or_none() -> None:
    # perNode 3 on `a`: a lower-priority pod goes first and takes one; the gang's 3 members there no longer fit.
    limits = EvictionLimits(per_node=3, per_namespace=10, cluster=10, cooldown_seconds=0)
    rig = gang_rig(whole(limits))
    crd_gang(rig, "g", 3)
    for i in range(3):
        member(rig, f"m{i}", "a", "g")
    rig.place("solo", "a", owner="solo", priority=-1)
    verdicts = rig.hot_for(300, COOL)
    assert planned(verdicts) == ["default/solo"]
    reasons = skipped(verdicts)
    assert set(reasons) == {"default/m0", "default/m1", "default/m2"}
    assert all(r.endswith("; limit: 3 per node per interval (3 members on a)") for r in reasons.values()), reasons
    # Room for all: the gang goes, and its one owner (the Job) is counted once, not as "one pod per owner".
    rig = gang_rig(whole(replace(limits, per_node=4)))
    crd_gang(rig, "g", 3)
    for i in range(3):
        member(rig, f"m{i}", "a", "g")
    rig.place("solo", "a", owner="solo", priority=-1)
    assert sorted(planned(rig.hot_for(300, COOL))) == ["default/m0", "default/m1", "default/m2", "default/solo"]
    # The cluster-wide limit counts them together too.
    rig = gang_rig(whole(replace(limits, per_node=10, cluster=2)))
    crd_gang(rig, "g", 3)
    for i in range(3):
        member(rig, f"m{i}", "a", "g")
    verdicts = rig.hot_for(300, COOL)
    assert planned(verdicts) == []
    assert all(r.endswith("; limit: 2 per interval cluster-wide (3 members)") for r in skipped(verdicts).values())


def test_the_simulation_counts_each_placed_member_for_the_next() -> None:
    # b is the coolest but holds one 4-GPU member only: the second member goes to c, not onto the same last room.
    rig = gang_rig(nodes={"a": 8, "b": 4, "c": 8})
    crd_gang(rig, "g", 2)
    member(rig, "m0", "a", "g", gpus=4)
    member(rig, "m1", "a", "g", gpus=4)
    verdicts = rig.hot_for(300, {"a": 91.0, "b": 30.0, "c": 60.0})
    assert sorted(planned(verdicts)) == ["default/m0", "default/m1"]
    assert sorted(v.target or "" for v in verdicts) == ["b", "c"]


def test_members_moved_together_do_not_push_their_target_over_a_rule() -> None:
    # Each member takes half of a 16-GPU node: +7.5 °C (the ledger's estimate, 15 °C for all GPUs busy). b (72 °C)
    # has room for both, and takes one (79.5 °C) but not two (87 °C > 85): the second goes to c (74 °C).
    rig = gang_rig(nodes={"a": 16, "b": 16, "c": 16})
    crd_gang(rig, "g", 2)
    member(rig, "m0", "a", "g", gpus=8)
    member(rig, "m1", "a", "g", gpus=8)
    verdicts = rig.hot_for(300, {"a": 91.0, "b": 72.0, "c": 74.0})
    assert sorted(v.target or "" for v in verdicts) == ["b", "c"], [v.reason for v in verdicts]


def test_a_gang_placed_in_one_zone_moves_to_one_zone() -> None:
    # Coscheduling places a gang in one zone (its default Domain placement). Zone z1's cool node b holds one
    # member only (a is bad): the gang goes to z2 whole, though b scores best for the first member.
    rig = gang_rig(nodes={"a": 8, "b": 4, "c": 8, "d": 8})
    for name, zone, gpus in (("a", "z1", 8), ("b", "z1", 4), ("c", "z2", 8), ("d", "z2", 8)):
        rig.scheduler.handlers.on_node_event("MODIFIED", node(name, cpu="64", memory="512Gi", gpus=gpus,
                                                              labels={ZONE: zone}))
    crd_gang(rig, "g", 2)
    member(rig, "m0", "a", "g", gpus=4)
    member(rig, "m1", "a", "g", gpus=4)
    verdicts = rig.hot_for(300, {"a": 91.0, "b": 30.0, "c": 50.0, "d": 55.0})
    assert sorted(planned(verdicts)) == ["default/m0", "default/m1"], [v.reason for v in verdicts]
    assert {v.target for v in verdicts} <= {"c", "d"}


def test_a_gang_no_one_zone_holds_moves_across_zones_as_coscheduling_would_place_it() -> None:
    # No zone holds both members (b and c take one each): the zone nobody asked for is a preference, so the
    # simulation falls back across zones as Coscheduling does, and the gang moves whole.
    rig = gang_rig(nodes={"a": 8, "b": 4, "c": 4})
    for name, zone, gpus in (("a", "z1", 8), ("b", "z1", 4), ("c", "z2", 4)):
        rig.scheduler.handlers.on_node_event("MODIFIED", node(name, cpu="64", memory="512Gi", gpus=gpus,
                                                              labels={ZONE: zone}))
    crd_gang(rig, "g", 2)
    member(rig, "m0", "a", "g", gpus=4)
    member(rig, "m1", "a", "g", gpus=4)
    verdicts = rig.hot_for(300, {"a": 91.0, "b": 30.0, "c": 50.0})
    assert sorted(planned(verdicts)) == ["default/m0", "default/m1"], [v.reason for v in verdicts]
    assert {v.target for v in verdicts} == {"b", "c"}


def test_a_gang_leaves_the_zone_its_last_attempt_chose() -> None:
    # The attempt that placed the gang chose zone z1 (Coscheduling keeps it, for late members); the replacement
    # gang is a new run that chooses afresh, and so does the simulation of it: z2.
    rig = gang_rig(nodes={"a": 8, "c": 8, "d": 8})
    for name, zone in (("a", "z1"), ("c", "z2"), ("d", "z2")):
        rig.scheduler.handlers.on_node_event("MODIFIED", node(name, cpu="64", memory="512Gi", gpus=8,
                                                              labels={ZONE: zone}))
    crd_gang(rig, "g", 2)
    uids = [member(rig, f"m{i}", "a", "g")["metadata"]["uid"] for i in range(2)]
    plugin = gang_plugin(rig.scheduler)
    key = GroupKey(GroupApi.COSCHEDULING, "default", "g")
    for uid in uids:
        plugin.tracker.reserve(key, uid, "a", set(uids))
    plugin.tracker.decide(key, GangDecision(key, ZONE, "z1", "default/m0", "the first run's choice"), None)
    plugin.tracker.complete(key)
    verdicts = rig.hot_for(300, {"a": 91.0, "c": 50.0, "d": 55.0})
    assert sorted(planned(verdicts)) == ["default/m0", "default/m1"], [v.reason for v in verdicts]
    assert {v.target for v in verdicts} <= {"c", "d"}
    assert plugin.tracker.decision(key) is not None  # the live gang's attempt is left as it was


def test_a_gang_whose_move_gains_less_than_the_margin_stays() -> None:
    # A rule stricter than the GPU filter: `a` is bad but still admits the members; b is only a little better, and
    # stays below the rule with both members' share (79 + 2 * 1.9 °C).
    rig = gang_rig(RebalanceConfig(rules=(WARM,), interval_seconds=INTERVAL, limits=ROOMY, gangs="whole"))
    crd_gang(rig, "g", 2)
    member(rig, "m0", "a", "g")
    member(rig, "m1", "a", "g")
    verdicts = rig.hot_for(300, {**SLIGHTLY_BETTER, "b": 79.0})
    assert planned(verdicts) == []
    reasons = skipped(verdicts)
    assert set(reasons) == {"default/m0", "default/m1"}
    assert all("gang default/g moves whole or not at all: its members' mean gain +" in r and
               r.endswith("is below the margin 10") for r in reasons.values()), reasons


def test_a_gang_whose_group_is_missing_stays() -> None:
    # The replacement could not be scheduled either: Coscheduling's PreFilter waits for the group to exist.
    rig = gang_rig()
    member(rig, "m0", "a", "g")
    member(rig, "m1", "a", "g")
    verdicts = rig.hot_for(300, COOL)
    assert planned(verdicts) == []
    assert all("waiting for pod group default/g (scheduling.x-k8s.io) to exist" in r
               for r in skipped(verdicts).values()), skipped(verdicts)


def test_the_gangs_owner_cooldown_starts_once_for_the_gang() -> None:
    limits = EvictionLimits(per_node=10, per_namespace=10, cluster=10, cooldown_seconds=600)
    rig = gang_rig(whole(limits))
    crd_gang(rig, "g", 2)
    member(rig, "m0", "a", "g")
    member(rig, "m1", "a", "g")
    verdicts = rig.hot_for(300, COOL)
    assert sorted(planned(verdicts)) == ["default/m0", "default/m1"]  # one owner (the Job), both planned
    for verdict in verdicts:
        rig.rebalancer.record_outcome(verdict, Verdict.EVICTED)
        terminate(rig, verdict.pod)
    # The Job's new member lands on the still-hot node: held by the cooldown the gang's eviction started.
    member(rig, "m2", "a", "g")
    [held] = rig.at(360, COOL)
    assert held.verdict == Verdict.SKIPPED and held.pod == "default/m2"
    assert "cooldown: Job/default/train had a pod evicted 1m ago (for 10m)" in held.reason, held.reason


class _Evictor:
    """The Eviction API over the rig: dry runs recorded; 429 for the protected pods; a real eviction terminates."""

    def __init__(self, rig: Rig | None = None, protected: set[str] | None = None,
                 fail_real: set[str] | None = None) -> None:
        self.rig, self.protected, self.fail_real = rig, protected or set(), fail_real or set()
        self.dry_runs: list[str] = []
        self.evicted: list[str] = []

    def evict(self, namespace: str, name: str, uid: str, *, dry_run: bool = False) -> None:
        key = f"{namespace}/{name}"
        if dry_run:
            self.dry_runs.append(key)
        if key in self.protected or (not dry_run and key in self.fail_real):
            raise ApiError(429, "Cannot evict pod as it would violate the pod's disruption budget.")
        if dry_run:
            return
        self.evicted.append(key)
        if self.rig is not None:
            terminate(self.rig, key)


def test_one_member_a_budget_protects_keeps_the_whole_gang_nothing_evicted() -> None:
    rig = gang_rig(whole(replace(ROOMY, cooldown_seconds=600)))  # back-offs: 2 intervals, doubling
    crd_gang(rig, "g", 3)
    for i in range(3):
        member(rig, f"m{i}", "a", "g")
    evictor = _Evictor(rig, protected={"default/m1"})
    ring = DecisionRing(100)
    runner = RebalanceRunner(rig.rebalancer, evictor, ring, dry_run=False, clock=rig.clock)
    verdicts: list[EvictionVerdict] = []
    for i in range(6):  # the streak builds (5 min), then the tick that tries
        rig.clock.now = NOW + i * INTERVAL
        rig.temperatures(COOL)
        verdicts = runner.tick()
    assert evictor.evicted == []
    assert evictor.dry_runs == ["default/m0", "default/m1"]  # stopped at the refusal
    outcome = {v.pod: (v.verdict, v.reason) for v in verdicts}
    assert {pod: o[0] for pod, o in outcome.items()} == {f"default/m{i}": Verdict.BLOCKED for i in range(3)}
    assert outcome["default/m1"][1].startswith("the Eviction API refused (429, a PodDisruptionBudget)")
    assert "(eviction dry run); gang default/g stays whole, nothing evicted" in outcome["default/m1"][1]
    assert outcome["default/m0"][1].startswith("gang default/g stays whole: the eviction dry run of default/m1 "
                                               "answered the Eviction API refused (429")
    records = [r for r in ring.select(kind="eviction") if isinstance(r, EvictionRecord)]
    assert {r.gang for r in records} == {"default/g"} and {r.verdict for r in records} == {"blocked"}
    # Backed off, every member: the next tick holds the gang instead of trying again at once.
    rig.clock.now = NOW + 6 * INTERVAL
    rig.temperatures(COOL)
    again = runner.tick()
    assert evictor.dry_runs == ["default/m0", "default/m1"] and evictor.evicted == []
    assert all(v.verdict == Verdict.SKIPPED and "back-off: eviction blocked" in v.reason for v in again), again


def test_every_member_is_dry_run_then_all_are_evicted() -> None:
    rig = gang_rig()
    crd_gang(rig, "g", 2)
    member(rig, "m0", "a", "g")
    member(rig, "m1", "c", "g")
    evictor = _Evictor(rig)
    runner = RebalanceRunner(rig.rebalancer, evictor, DecisionRing(100), dry_run=False, clock=rig.clock)
    for i in range(6):
        rig.clock.now = NOW + i * INTERVAL
        rig.temperatures(COOL)
        verdicts = runner.tick()
    assert evictor.dry_runs == ["default/m0", "default/m1"]
    assert evictor.evicted == ["default/m0", "default/m1"]
    assert [(v.pod, v.verdict, v.gang) for v in verdicts] == [("default/m0", Verdict.EVICTED, "default/g"),
                                                              ("default/m1", Verdict.EVICTED, "default/g")]


GANG = [EvictionVerdict(pod=f"ml/m{i}", uid=f"u{i}", owner="Job/ml/train", node="gpu-1", rule="hot-gpu",
                        verdict=Verdict.PLANNED, reason="gpu_temperature 91 > 85 for 6m; gang ml/g moves whole",
                        target="gpu-3", gain=20.0, gang="ml/g") for i in range(3)]
SOLO = replace(GANG[0], pod="ml/solo", uid="us", owner="ReplicaSet/ml/solo", gang=None)


def test_a_real_eviction_that_fails_after_the_dry_runs_does_not_stop_the_others() -> None:
    # One budget over two members allows one disruption: each dry run alone passes, the second eviction is refused.
    evictor = _Evictor(fail_real={"ml/m1"})
    rebalancer = FakeRebalancer([SOLO, *GANG])
    runner = RebalanceRunner(rebalancer, evictor, DecisionRing(100), dry_run=False)
    done = runner.tick()
    assert evictor.dry_runs == ["ml/m0", "ml/m1", "ml/m2"]
    assert evictor.evicted == ["ml/solo", "ml/m0", "ml/m2"]
    outcome = {v.pod: v for v in done}
    assert [outcome[f"ml/m{i}"].verdict for i in range(3)] == [Verdict.EVICTED, Verdict.BLOCKED, Verdict.EVICTED]
    assert all("gang ml/g split: ml/m1 not evicted, the other members were" in outcome[f"ml/m{i}"].reason
               for i in range(3))
    assert "after its eviction dry run passed" in outcome["ml/m1"].reason
    assert rebalancer.outcomes == [("ml/solo", Verdict.EVICTED), ("ml/m0", Verdict.EVICTED),
                                   ("ml/m1", Verdict.BLOCKED), ("ml/m2", Verdict.EVICTED)]


def test_a_dry_run_config_calls_no_eviction_api_for_a_gang() -> None:
    evictor = _Evictor()
    runner = RebalanceRunner(FakeRebalancer(GANG), evictor, DecisionRing(100), dry_run=True)
    done = runner.tick()
    assert evictor.dry_runs == [] and evictor.evicted == []
    assert [v.verdict for v in done] == [Verdict.PLANNED] * 3
    assert all(v.reason.startswith("dry run: would evict; ") for v in done)


def test_gangs_whole_needs_a_member_lister() -> None:
    rig = Rig()
    with pytest.raises(ValueError, match=r"rebalance\.gangs: whole needs a MemberLister"):
        type(rig.rebalancer)(whole(), rig.scheduler.frameworks["metrics-sched"], rig.scheduler.state, rig.cache,
                             frozenset({"metrics-sched"}), rig.clock, pods=rig.api)
