"""Gangs end to end in memory: all or nothing at Permit, failures that free every member together, the group's
backoff, the gang placed in one domain, and the PodGroup status reported."""

from __future__ import annotations

import threading
from typing import Any

from metrics_sched.framework.cycle_state import EXPLANATIONS
from metrics_sched.model.podinfo import parse_pod
from metrics_sched.observability import SchedulerMetrics
from metrics_sched.plugins.coscheduling.plugin import Coscheduling
from metrics_sched.plugins.coscheduling.pod_groups import POD_GROUP_KINDS
from metrics_sched.ports import PodGroupApi, PodGroupStatus
from metrics_sched.scheduler import Scheduler
from metrics_sched.scheduler.scheduler import Scheduler as _Scheduler
from tests.polling import poll
from tests.schedulers import make_scheduler
from tests.unit.fakes import FakeAPI, node, pod

ZONE = "topology.kubernetes.io/zone"
CRD: PodGroupApi = "scheduling.x-k8s.io/v1alpha1"
WORKLOAD: PodGroupApi = "scheduling.k8s.io/v1alpha2"
KIND = {kind.group_version: kind for kind in POD_GROUP_KINDS}  # the watched kind of each API


def gang_plugin(scheduler: Scheduler) -> Coscheduling:
    plugin = scheduler.frameworks["metrics-sched"].instances["Coscheduling"]
    assert isinstance(plugin, Coscheduling)
    return plugin


class StatusLog:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.written: list[tuple[str, str, str, PodGroupStatus]] = []

    def write_pod_group_status(self, api: Any, namespace: str, name: str, status: PodGroupStatus) -> None:
        with self.lock:
            self.written.append((api, namespace, name, status))

    def phases(self) -> list[str]:
        with self.lock:
            return [s.phase for *_, s in self.written]


def make(args: dict[str, Any] | None = None) -> tuple[Scheduler, FakeAPI, StatusLog]:
    api = FakeAPI()
    log = StatusLog()
    config = {"profiles": [{
        "schedulerName": "metrics-sched",
        "plugins": {"queueSort": {"enabled": [{"name": "Coscheduling"}], "disabled": [{"name": "PrioritySort"}]}},
        "pluginConfig": [{"name": "Coscheduling", "args": {"podGroupBackoffSeconds": 0.5, **(args or {})}}],
    }]}
    scheduler = make_scheduler(config, api, group_status_writer=log)
    return scheduler, api, log


def crd_group(name: str, min_member: int, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"namespace": "default", "name": name, "uid": f"uid-{name}",
                         "creationTimestamp": "2026-12-01T10:00:00Z"},
            "spec": {"minMember": min_member, **spec}}


def member(name: str, group: str, *, cpu: str = "1", **spec: Any) -> dict[str, Any]:
    body = pod(name, cpu=cpu, memory="1Gi", **spec)
    body["metadata"]["labels"] = {"scheduling.x-k8s.io/pod-group": group}
    return body


def run(scheduler: Scheduler, until: Any, timeout: float, what: str) -> None:
    """Scheduling cycles until `until()` holds."""
    def step() -> bool:
        scheduler.schedule_one(timeout=0.01)
        return bool(until())
    poll(step, timeout, what, interval=0.0)


def nodes(scheduler: _Scheduler, zone: str, count: int, cpu: str = "2") -> None:
    for i in range(count):
        scheduler.handlers.on_node_event("ADDED", node(f"{zone}-{i}", cpu=cpu, labels={ZONE: zone}))


def test_a_gang_that_only_partly_fits_binds_nothing_then_binds_whole_when_room_appears() -> None:
    scheduler, api, log = make()
    for i in range(3):  # no zones: the gang is placed by score, and 6 members reach Permit before one fits nowhere
        scheduler.handlers.on_node_event("ADDED", node(f"n{i}", cpu="2"))
    scheduler.handlers.on_object_event(KIND[CRD], "ADDED", crd_group("pg", 8))
    for i in range(8):
        api.add_pod(member(f"m{i}", "pg"))
    plugin = gang_plugin(scheduler)
    outcomes: list[str] = []
    plugin.tracker.observers.append(lambda key, outcome, seconds: outcomes.append(outcome))
    run(scheduler, lambda: len(scheduler.waiting_pods) == 6, 20, "six members waiting at Permit")
    run(scheduler, lambda: outcomes, 20, "the gang's attempt to fail")
    assert outcomes[0] == "member_unschedulable"
    poll(lambda: len(scheduler.waiting_pods) == 0 and scheduler.state.assumed_count() == 0, 5,
         "every waiting member rejected and unreserved together")
    assert api.binds == []
    run(scheduler, lambda: all(api.events_for(f"default/m{i}", "FailedScheduling") for i in range(8)), 10,
        "every member reported unschedulable")
    assert api.binds == []
    poll(lambda: "Pending" in log.phases(), 5, "the group's status Pending")

    scheduler.handlers.on_node_event("ADDED", node("n3", cpu="2"))
    run(scheduler, lambda: len(api.binds) == 8, 30, "all 8 members bound")
    poll(lambda: "Scheduled" in log.phases(), 5, "the group's status Scheduled")
    assert outcomes[-1] == "scheduled"
    assert scheduler.queue.lengths() == {"active": 0, "backoff": 0, "unschedulable": 0, "gated": 0}


def test_no_zone_holding_the_whole_gang_places_it_across_zones_by_default() -> None:
    # A zone the gang did not ask for is a preference (issue 47): 4 places per zone, 8 in all, a gang of 6 binds
    # whole across both, as Coscheduling and kube-scheduler's GangScheduling place it.
    scheduler, api, _ = make()
    nodes(scheduler, "a", 2)
    nodes(scheduler, "b", 2)
    scheduler.handlers.on_object_event(KIND[CRD], "ADDED", crd_group("pg", 6))
    for i in range(6):
        api.add_pod(member(f"m{i}", "pg"))
    run(scheduler, lambda: len(api.binds) == 6, 20, "all 6 members bound")
    zones = {node_name.split("-")[0] for _, node_name in api.binds}
    assert zones == {"a", "b"}, api.binds


def test_no_zone_holding_the_whole_gang_fails_it_before_any_member_waits_when_the_zone_is_required() -> None:
    scheduler, api, _ = make({"fallbackToMemberByMember": False})
    nodes(scheduler, "a", 2)
    nodes(scheduler, "b", 2)  # 4 places per zone, 8 in all: member by member it would fit
    scheduler.handlers.on_object_event(KIND[CRD], "ADDED", crd_group("pg", 6))
    for i in range(6):
        api.add_pod(member(f"m{i}", "pg"))
    run(scheduler, lambda: api.events_for("default/m0", "FailedScheduling"), 10, "the first member reported")
    message = api.events_for("default/m0", "FailedScheduling")[-1].note
    assert "no topology.kubernetes.io/zone domain can hold the 6 members" in message
    assert len(scheduler.waiting_pods) == 0 and api.binds == []


def test_waiting_members_time_out_together_and_free_their_nodes() -> None:
    scheduler, api, _ = make({"permitWaitingTimeSeconds": 0.5})
    nodes(scheduler, "a", 4)
    scheduler.handlers.on_object_event(KIND[CRD], "ADDED", crd_group("pg", 3))
    for i in range(3):
        api.add_pod(member(f"m{i}", "pg"))
    outcomes: list[str] = []
    plugin = gang_plugin(scheduler)
    plugin.tracker.observers.append(lambda key, outcome, seconds: outcomes.append(outcome))
    # Two members reach Permit; the third is held back (as if its cycle were slow).
    third = next(uid for uid, p in scheduler.queue._active.items() if p[1].info.name == "m2")
    with scheduler.queue._cond:
        scheduler.queue._active.pop(third)
    run(scheduler, lambda: len(scheduler.waiting_pods) == 2, 10, "two members waiting at Permit")
    assert scheduler.state.assumed_count() == 2
    poll(lambda: outcomes, 5, "the wait to time out")
    assert outcomes == ["timeout"]
    poll(lambda: len(scheduler.waiting_pods) == 0 and scheduler.state.assumed_count() == 0, 5,
         "both members rejected and unreserved together")
    assert api.binds == []


def test_a_gang_lands_in_the_cooler_zone_as_a_whole() -> None:
    scheduler, api, _ = make()
    nodes(scheduler, "hot", 4)
    nodes(scheduler, "cold", 4)
    # NodeResourcesFit spreads: pre-load the cold zone a little so member-by-member greed would go hot;
    # the gang's objective is what the profile scores, so make the hot zone score worse through load.
    for i in range(4):
        api.add_pod(pod(f"busy{i}", cpu="1", memory="8Gi", node_name=f"hot-{i}"))
    scheduler.handlers.on_object_event(KIND[CRD], "ADDED", crd_group("pg", 4))
    for i in range(4):
        api.add_pod(member(f"m{i}", "pg", cpu="500m"))
    notes: dict[str, tuple[str, ...]] = {}
    scheduler.cycle_observers.append(lambda result: notes.update({result.pod.name: result.cycle.get(EXPLANATIONS, ())}))
    run(scheduler, lambda: len(api.binds) == 4, 20, "the gang bound")
    assert {n.split("-")[0] for _, n in api.binds} == {"cold"}
    # Every member's record links to the one gang decision: the domain, who chose it and why.
    linked = {name: [n for n in found if n.startswith("gang default/pg")] for name, found in notes.items()}
    assert all(len(found) == 1 and "topology.kubernetes.io/zone=cold" in found[0] for found in linked.values())
    assert len({found[0] for found in linked.values()}) == 1 and len(linked) == 4


def test_members_wait_for_their_group_and_for_enough_members() -> None:
    scheduler, api, _ = make()
    nodes(scheduler, "a", 4)
    for i in range(2):
        api.add_pod(member(f"m{i}", "pg"))
    run(scheduler, lambda: api.events_for("default/m0", "FailedScheduling") and
        api.events_for("default/m1", "FailedScheduling"), 10, "both members reported")
    assert "waiting for pod group default/pg" in api.events_for("default/m0", "FailedScheduling")[-1].note
    messages: list[str] = []
    scheduler.cycle_observers.append(lambda result: messages.append(result.message()))
    scheduler.handlers.on_object_event(KIND[CRD], "ADDED", crd_group("pg", 3))  # wakes both members at once
    run(scheduler, lambda: sum("pod group default/pg has 2 of its 3 members" in m for m in messages) == 2, 10,
        "both members turned down for want of a third")
    api.add_pod(member("m2", "pg"))
    run(scheduler, lambda: len(api.binds) == 3, 20, "the three bound once the third exists")


def test_the_workload_api_gang_binds_all_or_nothing() -> None:
    scheduler, api, _ = make()
    nodes(scheduler, "a", 2)  # room for 4
    scheduler.handlers.on_object_event(KIND[WORKLOAD], "ADDED", {
        "metadata": {"namespace": "default", "name": "wl", "creationTimestamp": "2026-12-01T10:00:00Z"},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 5}}}})
    for i in range(5):
        api.add_pod(pod(f"w{i}", cpu="1", memory="1Gi", schedulingGroup={"podGroupName": "wl"}))
    plugin = gang_plugin(scheduler)
    outcomes: list[str] = []
    plugin.tracker.observers.append(lambda key, outcome, seconds: outcomes.append(outcome))
    run(scheduler, lambda: outcomes, 20, "the attempt to fail")
    poll(lambda: scheduler.state.assumed_count() == 0, 5, "nothing held")
    assert api.binds == []
    scheduler.handlers.on_node_event("ADDED", node("a-2", cpu="2", labels={ZONE: "a"}))
    run(scheduler, lambda: len(api.binds) == 5, 30, "all five bound")


def test_queue_sort_keeps_a_group_together() -> None:
    scheduler, _, _ = make()
    scheduler.handlers.on_object_event(KIND[CRD], "ADDED", crd_group("pg", 2))
    plugin = gang_plugin(scheduler)
    lone = pod("lone")
    lone["metadata"]["creationTimestamp"] = "2026-12-01T11:00:00Z"
    a, b = member("a", "pg"), member("b", "pg")
    b["metadata"]["creationTimestamp"] = "2026-12-01T12:00:00Z"
    keys = sorted([(*plugin.sort_key(parse_pod(x)), x["metadata"]["name"]) for x in (lone, a, b)])
    assert [k[-1] for k in keys] == ["a", "b", "lone"]  # the group's creation time (10:00) for both members


def metric_line(metrics: SchedulerMetrics, prefix: str) -> float:
    text = metrics.exposition().decode()
    return float(next(line.rsplit(" ", 1)[1] for line in text.splitlines() if line.startswith(prefix)))


def test_gang_metrics_count_failed_attempts_pending_gangs_and_waits() -> None:
    scheduler, api, _ = make()
    metrics = SchedulerMetrics(scheduler)
    for i in range(2):
        scheduler.handlers.on_node_event("ADDED", node(f"n{i}", cpu="2"))
    scheduler.handlers.on_object_event(KIND[CRD], "ADDED", crd_group("pg", 5))
    for i in range(5):
        api.add_pod(member(f"m{i}", "pg"))
    assert metric_line(metrics, "metrics_sched_gang_groups_pending") == 1
    failed = 'metrics_sched_gang_timeouts_total{reason="member_unschedulable"}'
    run(scheduler, lambda: metric_line(metrics, failed) == 1, 20, "one failed attempt counted")
    scheduler.handlers.on_node_event("ADDED", node("n2", cpu="2"))
    run(scheduler, lambda: len(api.binds) == 5, 30, "all five bound")
    assert metric_line(metrics, 'metrics_sched_gang_wait_duration_seconds_count{outcome="scheduled"}') == 1
    assert metric_line(metrics, "metrics_sched_gang_groups_pending") == 0


def test_a_gang_placed_again_after_its_members_are_gone_chooses_its_domain_afresh() -> None:
    """Issue 44 (`rebalance.gangs: whole` evicts a gang together): the attempt that placed the gang's first run
    must not keep its replacements in that run's zone. Zone a is full by the time they come: they go to b."""
    scheduler, api, _ = make()
    nodes(scheduler, "a", 1)
    nodes(scheduler, "b", 1)
    api.add_pod(pod("busy", cpu="1", memory="1Gi", node_name="b-0"))  # a scores better for the first run
    scheduler.handlers.on_object_event(KIND[CRD], "ADDED", crd_group("pg", 1))
    api.add_pod(member("m0", "pg"))
    run(scheduler, lambda: len(api.binds) == 1, 10, "the first run bound")
    assert api.binds == [("default/m0", "a-0")]
    # The member is evicted; zone a fills up meanwhile; the replacement comes.
    api.delete_pod("default/m0")
    api.delete_pod("default/busy")
    api.add_pod(pod("filler", cpu="2", memory="1Gi", node_name="a-0"))
    api.add_pod(member("m1", "pg"))
    run(scheduler, lambda: len(api.binds) == 2, 10, "the replacement bound")
    assert api.binds[-1] == ("default/m1", "b-0")
