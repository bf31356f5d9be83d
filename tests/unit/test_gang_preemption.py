"""A gang preempts for all its members at once or not at all (issue 44, defect 2).

Before the fix, Coscheduling's PostFilter failed the gang and set its backoff before DefaultPreemption ran, and
preemption's dry run re-ran PreFilter in a fresh cycle, which Coscheduling refused during that backoff: a gang
never preempted ("not helpful" every attempt) while the same pods outside a group did.
"""

from __future__ import annotations

from typing import Any

from metrics_sched.framework import group_of
from metrics_sched.framework.cycle_state import EXPLANATIONS, CycleState
from metrics_sched.framework.runtime import CycleResult
from metrics_sched.model.podinfo import parse_pod
from metrics_sched.plugins.coscheduling.plugin import Coscheduling
from metrics_sched.plugins.coscheduling.pod_groups import POD_GROUP_KINDS
from metrics_sched.plugins.default_preemption.outcome import PREEMPTION
from metrics_sched.scheduler import Scheduler
from tests.unit.fakes import FakeAPI, node
from tests.unit.test_preemption import FakePreemptor, bound, inference, make, record_results, run_until

KIND = {kind.group_version: kind for kind in POD_GROUP_KINDS}["scheduling.x-k8s.io/v1alpha1"]


def full_nodes(scheduler: Scheduler, api: FakeAPI, count: int, victims: int = 4) -> None:
    """`count` nodes of 4 cpu, `victims` of them full with priority-0 pods of 1 cpu (the others empty)."""
    for i in range(count):
        scheduler.handlers.on_node_event("ADDED", node(f"n{i}", cpu="4", memory="16Gi"))
        for j in range(4 if i < victims else 0):
            api.add_pod(bound(f"train-{i}-{j}", f"n{i}"))


def group(name: str, min_member: int, topology_key: str | None = None) -> dict[str, Any]:
    """A PodGroup; with `topology_key`, one that requires a domain of it (the metrics-sched.io/topology-key
    annotation: without it, a domain is only a preference)."""
    annotations = {"metrics-sched.io/topology-key": topology_key} if topology_key else {}
    return {"metadata": {"namespace": "default", "name": name, "uid": f"uid-{name}", "annotations": annotations,
                         "creationTimestamp": "2026-12-01T10:00:00Z"},
            "spec": {"minMember": min_member}}


def gang_member(name: str, group_name: str | None, **spec: Any) -> dict[str, Any]:
    body = inference(name, cpu="4", **spec)  # a whole node each: the three must preempt on three nodes
    if group_name is not None:
        body["metadata"]["labels"] = {"scheduling.x-k8s.io/pod-group": group_name}
    return body


def members(api: FakeAPI, names: list[str]) -> list[tuple[str, str]]:
    return sorted((key, node_name) for key, node_name in api.binds if key.split("/")[1] in names)


def test_three_priority_pods_outside_a_group_preempt_and_bind() -> None:
    """The control: what the gang must also do."""
    scheduler, api, preemptor = make()
    full_nodes(scheduler, api, 3)
    for i in range(3):
        api.add_pod(gang_member(f"m{i}", None))
    run_until(scheduler, lambda: len(members(api, ["m0", "m1", "m2"])) == 3)
    assert {n for _, n in members(api, ["m0", "m1", "m2"])} == {"n0", "n1", "n2"}
    assert len(preemptor.deleted()) == 12


def test_a_gang_of_three_preempts_on_three_full_nodes_and_binds_all_three() -> None:
    scheduler, api, preemptor = make()
    results = record_results(scheduler)
    full_nodes(scheduler, api, 3)
    scheduler.handlers.on_object_event(KIND, "ADDED", group("pg", 3))
    for i in range(3):
        api.add_pod(gang_member(f"m{i}", "pg"))
    run_until(scheduler, lambda: len(members(api, ["m0", "m1", "m2"])) == 3, timeout=60)
    assert {n for _, n in members(api, ["m0", "m1", "m2"])} == {"n0", "n1", "n2"}
    assert len(preemptor.deleted()) == 12
    # All at once: the first member's preemption nominated every member, each on its own node.
    nominations = [(key, n) for kind, key, n in preemptor.calls if kind == "nominate" and n]
    assert len(nominations) == 3 and len({n for _, n in nominations}) == 3
    first = [o for o in (r.cycle.get(PREEMPTION) for r in results) if o is not None and o.node is not None]
    assert first, "the preemption outcome is recorded"
    assert "for the 3 member(s) of pod group" in _preemption_note(results)


def test_a_gang_that_preemption_cannot_make_room_for_whole_preempts_nothing() -> None:
    """Two of three nodes hold lower-priority pods; the third is full of pods of the gang's own priority: room for
    two members only, so no member preempts (a part of a gang placed evicts for nothing)."""
    scheduler, api, preemptor = make()
    results = record_results(scheduler)
    full_nodes(scheduler, api, 2)
    scheduler.handlers.on_node_event("ADDED", node("n2", cpu="4", memory="16Gi"))
    for j in range(4):
        api.add_pod(bound(f"peer-{j}", "n2", priority=1000))
    scheduler.handlers.on_object_event(KIND, "ADDED", group("pg", 3))
    for i in range(3):
        api.add_pod(gang_member(f"m{i}", "pg"))
    run_until(scheduler, lambda: sum(1 for r in results if r.cycle.get(PREEMPTION) is not None) >= 3, timeout=30)
    assert preemptor.calls == [] and api.binds == []
    reasons = [o.reason for o in (r.cycle.get(PREEMPTION) for r in results) if o is not None]
    assert any("pod group default/pg" in reason and "all 3" in reason for reason in reasons), reasons


def test_a_gang_placed_in_one_zone_preempts_in_the_one_zone_that_holds_it_whole() -> None:
    """Zone a's victims are cheaper by upstream's criteria (priority -10), but its 2 nodes hold only 2 members;
    member by member, preemption would evict in both zones and the gang then fits no single zone (the group
    requires one zone: its topology-key annotation). The plan tries zone a, then zone b, which holds all."""
    scheduler, api, preemptor = make()
    zone = "topology.kubernetes.io/zone"
    for name, zone_name, priority in (("a-0", "a", -10), ("a-1", "a", -10), ("b-0", "b", 0), ("b-1", "b", 0),
                                      ("b-2", "b", 0)):
        scheduler.handlers.on_node_event("ADDED", node(name, cpu="4", memory="16Gi", labels={zone: zone_name}))
        for j in range(4):
            api.add_pod(bound(f"train-{name}-{j}", name, priority=priority))
    scheduler.handlers.on_object_event(KIND, "ADDED", group("pg", 3, topology_key=zone))
    for i in range(3):
        api.add_pod(gang_member(f"m{i}", "pg"))
    run_until(scheduler, lambda: len(members(api, ["m0", "m1", "m2"])) == 3, timeout=60)
    assert sorted(n for _, n in members(api, ["m0", "m1", "m2"])) == ["b-0", "b-1", "b-2"]
    assert preemptor.deleted() == sorted(f"default/train-b-{i}-{j}" for i in range(3) for j in range(4))


def test_the_dry_run_keeps_the_cycles_own_prefilter_admission_after_the_gang_backs_off() -> None:
    """Upstream's SelectVictimsOnNode works on a clone of the cycle's state: a dry run given the cycle sees the
    gang admitted (as this cycle's PreFilter found it), though the attempt has failed and backs off since; a fresh
    dry run (a pod whose cycle this is not) is refused during the backoff. The cycle itself is left unchanged."""
    scheduler, api, _ = make()
    full_nodes(scheduler, api, 3)
    scheduler.handlers.on_object_event(KIND, "ADDED", group("pg", 3))
    for i in range(3):
        api.add_pod(gang_member(f"m{i}", "pg"))
    framework = scheduler.frameworks["metrics-sched"]
    plugin = framework.instances["Coscheduling"]
    assert isinstance(plugin, Coscheduling)
    info = parse_pod(api.pods["default/m0"])
    cycle = CycleState()
    assert plugin.pre_filter(cycle, info).ok
    before = dict(cycle._data)
    assert framework.dry_run(info, scheduler.state.table) is not None  # no backoff yet
    key = group_of(info)
    assert key is not None
    plugin._fail(key, "member_unschedulable", info.uid, "the test fails the attempt")
    assert plugin.tracker.backoff_left(key) > 0
    assert framework.dry_run(info, scheduler.state.table) is None  # a fresh cycle: refused while backing off
    ran = framework.dry_run(info, scheduler.state.table, cycle)
    assert ran is not None and not ran.verdict.feasible.any()  # admitted; the full nodes still reject it
    assert cycle._data == before


def _preemption_note(results: list[CycleResult]) -> str:
    notes = [note for r in results for note in (r.cycle.get(EXPLANATIONS) or ()) if "preemption:" in note]
    return "\n".join(notes)


__all__ = ["FakePreemptor"]
