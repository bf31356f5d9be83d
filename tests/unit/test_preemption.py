"""DefaultPreemption in memory: kube-scheduler's victim selection, node choice, nominations and side effects."""

from __future__ import annotations

import copy
import threading
import time
from typing import Any

import numpy as np
import pytest

from metrics_sched.framework import FilterPlugin
from metrics_sched.framework.runtime import CycleResult
from metrics_sched.model.selectors import LabelSelector
from metrics_sched.plugins import BUILTIN
from metrics_sched.plugins.default_preemption.budgets import split_by_budget
from metrics_sched.plugins.default_preemption.candidates import Candidate, candidate_count
from metrics_sched.plugins.default_preemption.disruption_budgets import BUDGETS, Budget, parse_budget
from metrics_sched.plugins.default_preemption.outcome import PREEMPTION, PreemptionOutcome
from metrics_sched.plugins.default_preemption.plugin import DefaultPreemption
from metrics_sched.plugins.default_preemption.selection import pick_one_node
from metrics_sched.plugins.default_preemption.victims import select_victims
from metrics_sched.ports import ApiError
from metrics_sched.scheduler import Scheduler
from metrics_sched.state.pod_record import PodRecord
from tests.schedulers import make_scheduler
from tests.unit.fakes import FakeAPI, node, pod


class FakePreemptor:
    """The Preemptor port on the FakeAPI: writes land on its pods and reach the watchers like the API's."""

    def __init__(self, api: FakeAPI) -> None:
        self.api = api
        self.calls: list[tuple[str, str, str | None]] = []
        self.lock = threading.Lock()

    def _modify(self, namespace: str, name: str, change: Any) -> None:
        key = f"{namespace}/{name}"
        with self.api.lock:
            found = self.api.pods.get(key)
            if found is None:
                raise ApiError(404, f"pods {name!r} not found")
            change(found)
            self.api._bump(found)
            snapshot = copy.deepcopy(found)
        for watcher in self.api.watchers:
            watcher.on_pod_event("MODIFIED", snapshot)

    def set_nominated_node(self, namespace: str, name: str, node: str | None) -> None:
        with self.lock:
            self.calls.append(("nominate", f"{namespace}/{name}", node))
        self._modify(namespace, name, lambda p: p.setdefault("status", {}).update(nominatedNodeName=node))

    def mark_disruption_target(self, namespace: str, name: str, message: str) -> None:
        with self.lock:
            self.calls.append(("condition", f"{namespace}/{name}", message))
        self._modify(namespace, name, lambda p: p.setdefault("status", {}).setdefault("conditions", []).append(
            {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler", "message": message}))

    def delete_pod(self, namespace: str, name: str, uid: str) -> None:
        key = f"{namespace}/{name}"
        with self.lock:
            self.calls.append(("delete", key, uid))
        with self.api.lock:
            found = self.api.pods.get(key)
        if found is None:
            raise ApiError(404, f"pods {name!r} not found")
        if found["metadata"]["uid"] != uid:
            raise ApiError(409, "Precondition failed: UID in precondition does not match")
        self.api.delete_pod(key)

    def deleted(self) -> list[str]:
        with self.lock:
            return sorted(key for kind, key, _ in self.calls if kind == "delete")


def make(config: dict[str, Any] | None = None) -> tuple[Scheduler, FakeAPI, FakePreemptor]:
    api = FakeAPI()
    preemptor = FakePreemptor(api)
    scheduler = make_scheduler(config, api, preemptor=preemptor)
    return scheduler, api, preemptor


def run_until(scheduler: Scheduler, done: Any, timeout: float = 60.0) -> None:
    """Scheduling cycles until `done()` (the condition the test asserts next) holds. A preemptor is retried once
    its victims' deletions arrive, after its backoff (1 s, doubling): the bound is generous."""
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, "condition not reached"
        scheduler.schedule_one(timeout=0.01)
    assert scheduler.binder.drain(10)


def bound(name: str, node_name: str, *, cpu: str = "1", priority: int = 0, started: str = "2026-11-30T12:00:00Z",
          labels: dict[str, str] | None = None) -> dict[str, Any]:
    body = pod(name, cpu=cpu, memory="100Mi", node_name=node_name, priority=priority)
    body["status"] = {"phase": "Running", "startTime": started}
    if labels:
        body["metadata"]["labels"] = labels
    return body


def full_pool(scheduler: Scheduler, api: FakeAPI, nodes: int = 3) -> None:
    """`nodes` nodes of 4 cpu, each full with four priority-0 training pods of 1 cpu."""
    for i in range(nodes):
        scheduler.handlers.on_node_event("ADDED", node(f"n{i}", cpu="4", memory="16Gi"))
        for j in range(4):
            api.add_pod(bound(f"train-{i}-{j}", f"n{i}", labels={"app": "train", "node": f"n{i}"}))


def inference(name: str = "infer", cpu: str = "2", priority: int = 1000, **spec: Any) -> dict[str, Any]:
    return pod(name, cpu=cpu, memory="100Mi", priority=priority, **spec)


def outcome_of(results: list[CycleResult], key: str) -> PreemptionOutcome | None:
    """The last preemption outcome recorded for the pod."""
    found = [r.cycle.get(PREEMPTION) for r in results if r.pod.key == key]
    return next((o for o in reversed(found) if o is not None), None)


def record_results(scheduler: Scheduler) -> list[CycleResult]:
    results: list[CycleResult] = []
    scheduler.cycle_observers.append(results.append)
    return results


# -- end to end in memory ------------------------------------------------------------------------------
def test_a_high_priority_pod_preempts_exactly_the_minimal_victims_then_binds_on_the_nominated_node() -> None:
    scheduler, api, preemptor = make()
    results = record_results(scheduler)
    full_pool(scheduler, api)
    api.add_pod(inference())
    run_until(scheduler, lambda: any(key == "default/infer" for key, _ in api.binds))
    assert api.binds[-1] == ("default/infer", nominated_node_of(api))  # bound where it was nominated
    deleted = preemptor.deleted()
    assert len(deleted) == 2 and len({key.rsplit("-", 1)[0] for key in deleted}) == 1  # two, on one node
    target = deleted[0].split("-")[1]
    assert api.binds[-1] == ("default/infer", f"n{target}")
    # Nominated first, each victim marked DisruptionTarget before its delete, and a Preempted event on each.
    kinds = [(kind, key) for kind, key, _ in preemptor.calls]
    assert kinds[0] == ("nominate", "default/infer")
    for key in deleted:
        assert kinds.index(("condition", key)) < kinds.index(("delete", key))
        [event] = api.events_for(key, "Preempted")
        assert event.note.startswith("Preempted by pod ") and event.note.endswith(f"on node n{target}")
    failed = api.events_for("default/infer", "FailedScheduling")
    assert failed and "preemption: 2 lower-priority pod(s) on node" in failed[0].note
    outcome = outcome_of(results, "default/infer")
    assert outcome is not None
    assert outcome.node == f"n{target}" and [v.priority for v in outcome.victims] == [0, 0]
    assert scheduler.state.nominations.get(api.pods["default/infer"]["metadata"]["uid"]) is None  # bound: gone


def nominated_node_of(api: FakeAPI) -> str | None:
    with api.lock:
        found = api.pods.get("default/infer")
        return None if found is None else (found.get("status") or {}).get("nominatedNodeName")


def test_a_budget_with_no_disruptions_allowed_steers_preemption_to_another_node() -> None:
    scheduler, api, preemptor = make()
    full_pool(scheduler, api)
    for protected in ("n0", "n2"):  # maxUnavailable: 0 over the pods of n0 and n2
        scheduler.handlers.on_object_event(BUDGETS, "ADDED", {
            "metadata": {"name": f"keep-{protected}", "namespace": "default"},
            "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"node": protected}}},
            "status": {"disruptionsAllowed": 0}})
    api.add_pod(inference())
    run_until(scheduler, lambda: len(api.binds) == 1)
    assert api.binds == [("default/infer", "n1")]
    assert all(key.startswith("default/train-1-") for key in preemptor.deleted())


def test_preemption_policy_never_never_preempts() -> None:
    scheduler, api, preemptor = make()
    results = record_results(scheduler)
    full_pool(scheduler, api)
    api.add_pod(inference(preemptionPolicy="Never"))
    run_until(scheduler, lambda: outcome_of(results, "default/infer") is not None)
    outcome = outcome_of(results, "default/infer")
    assert outcome is not None and outcome.reason == "not eligible due to preemptionPolicy=Never."
    assert preemptor.calls == [] and api.binds == []


def test_no_lower_priority_pods_no_preemption_and_upstreams_message_in_the_record() -> None:
    scheduler, api, preemptor = make()
    results = record_results(scheduler)
    full_pool(scheduler, api, nodes=2)
    api.add_pod(inference(priority=0))
    run_until(scheduler, lambda: outcome_of(results, "default/infer") is not None)
    outcome = outcome_of(results, "default/infer")
    assert outcome is not None and outcome.reason == (
        "0/2 nodes are available: 2 No preemption victims found for incoming pod.")
    assert preemptor.calls == []


def test_nodes_ruled_out_by_taints_or_affinity_are_never_candidates() -> None:
    scheduler, api, preemptor = make()
    full_pool(scheduler, api, nodes=2)
    scheduler.handlers.on_node_event("MODIFIED", node("n0", cpu="4", memory="16Gi",
                                                      taints=[{"key": "gpu", "value": "x", "effect": "NoSchedule"}]))
    api.add_pod(inference())
    run_until(scheduler, lambda: len(api.binds) == 1)
    assert api.binds == [("default/infer", "n1")]
    assert all(key.startswith("default/train-1-") for key in preemptor.deleted())


def test_the_nominated_room_is_held_against_lower_priority_pods_only() -> None:
    scheduler, api, preemptor = make()
    scheduler.handlers.on_node_event("ADDED", node("n0", cpu="4", memory="16Gi"))
    for j in range(4):
        api.add_pod(bound(f"train-{j}", "n0"))
    blocked = threading.Event()
    original = preemptor.delete_pod

    def slow_delete(namespace: str, name: str, uid: str) -> None:
        blocked.wait(10)  # victims leave only once the test says so
        original(namespace, name, uid)

    preemptor.delete_pod = slow_delete  # type: ignore[method-assign]
    api.add_pod(inference(cpu="2"))
    run_until(scheduler, lambda: len(scheduler.state.nominations) == 1)
    table = scheduler.state.table
    framework = scheduler.frameworks["metrics-sched"]
    # As if the victims were gone: a lower-priority pod must not fit in the held room, a higher one may. (The low
    # one has the victims' priority: nothing for it to preempt, so its cycle changes nothing.)
    victims = [r for r in scheduler.state.pods.values() if r.name.startswith("train-")][:2]
    with scheduler.state.simulated(removed=victims):
        low = framework.schedule(scheduler_pod(pod("low", cpu="2", priority=0)), table)
        high = framework.schedule(scheduler_pod(pod("high", cpu="2", priority=2000)), table)
    assert low.node is None and high.node == "n0"
    assert len(scheduler.state.nominations) == 1
    blocked.set()
    run_until(scheduler, lambda: ("default/infer", "n0") in api.binds)


def scheduler_pod(raw: dict[str, Any]) -> Any:
    from metrics_sched.model.podinfo import parse_pod

    raw["metadata"].setdefault("uid", raw["metadata"]["name"])
    return parse_pod(raw)


def test_disabling_the_plugin_turns_preemption_off() -> None:
    scheduler, api, preemptor = make({"profiles": [{"plugins": {"postFilter": {
        "disabled": [{"name": "DefaultPreemption"}]}}}]})
    full_pool(scheduler, api, nodes=1)
    api.add_pod(inference())
    run_until(scheduler, lambda: bool(api.events_for("default/infer", "FailedScheduling")))
    assert preemptor.calls == [] and "DefaultPreemption" not in scheduler.frameworks["metrics-sched"].instances


def test_the_simulation_restores_the_state_exactly() -> None:
    scheduler, api, _ = make()
    full_pool(scheduler, api, nodes=2)
    table = scheduler.state.table
    before = table.requested.copy()
    victims = [r for r in scheduler.state.pods.values() if r.node == "n0"]
    with scheduler.state.simulated(removed=victims):
        assert table.requested[table.index["n0"]].sum() == 0
    assert np.array_equal(table.requested, before)
    with pytest.raises(RuntimeError), scheduler.state.simulated(removed=victims):
        raise RuntimeError("a failing dry run")
    assert np.array_equal(table.requested, before) and all(v.row is not None for v in victims)


# -- the pieces, against upstream's rules ------------------------------------------------------------
def rec(name: str, priority: int, started: float = 0.0, labels: dict[str, str] | None = None) -> PodRecord:
    return PodRecord(uid=name, namespace="default", name=name, node="n", vector=np.zeros(1, dtype=np.int64),
                     nonzero=(0, 0), owner_key=None, assumed=False, row=0, labels=labels or {}, priority=priority,
                     started=started)


def test_split_by_budget_spends_each_budget_pod_by_pod_and_skips_already_disrupted() -> None:
    budget = Budget("default", "b", LabelSelector.from_set({"app": "a"}), allowed=1, disrupted=frozenset({"a0"}))
    pods = [rec("a0", 0, labels={"app": "a"}), rec("a1", 0, labels={"app": "a"}), rec("a2", 0, labels={"app": "a"}),
            rec("x", 0, labels={"app": "x"}), rec("bare", 0)]
    violating, fine = split_by_budget(pods, [budget])
    assert [p.name for p in violating] == ["a2"]  # a0 already counted, a1 spends the one allowed
    assert [p.name for p in fine] == ["a0", "a1", "x", "bare"]
    assert parse_budget({"metadata": {"name": "e", "namespace": "d"}, "spec": {"selector": {}}}).selector.nothing


def test_victims_are_reprieved_violating_first_then_by_importance() -> None:
    budget = Budget("default", "b", LabelSelector.from_set({"app": "p"}), allowed=0, disrupted=frozenset())
    pods = [rec("low-old", 1, 10.0), rec("low-new", 1, 20.0), rec("mid", 5, 30.0, labels={"app": "p"})]

    def fits(removed: Any) -> bool:  # the pod needs any one of the three gone
        return len(removed) >= 1

    victims, violating = select_victims(pods, [budget], fits) or ([], [])
    # "mid" violates the budget: reprieved first although it outranks the others; then low-old (the earlier
    # start: more important) is reprieved before low-new, which is the one taken.
    assert [v.name for v in victims] == ["low-new"] and violating == []
    victims, violating = select_victims(pods, [budget], lambda removed: len(removed) >= 3) or ([], [])
    assert [v.name for v in victims] == ["mid", "low-old", "low-new"] and [v.name for v in violating] == ["mid"]
    assert select_victims(pods, [], lambda removed: False) is None
    assert select_victims([], [], lambda removed: True) is None


def test_pick_one_node_follows_upstreams_criteria_in_order_then_the_profile_score() -> None:
    def cand(node: str, *victims: PodRecord, violating: int = 0) -> Candidate:
        return Candidate(node, 0, tuple(victims), frozenset(v.uid for v in victims[:violating]))

    def no_score(tied: object) -> dict[str, float]:
        return {}

    a = cand("a", rec("a1", 5), violating=1)
    b = cand("b", rec("b1", 7))
    assert pick_one_node([a, b], no_score).candidate.node == "b"  # fewest PDB violations
    c = cand("c", rec("c1", 3), rec("c2", 3))
    assert pick_one_node([b, c], no_score).candidate.node == "c"  # lowest highest priority
    d = cand("d", rec("d1", 3), rec("d2", 1))
    assert pick_one_node([c, d], no_score).candidate.node == "d"  # smallest sum
    e = cand("e", rec("e1", 3), rec("e2", 1), rec("e3", -2**31))
    f = cand("f", rec("f1", 3), rec("f2", 1))
    assert pick_one_node([e, f], no_score).candidate.node == "f"  # shifted sums: more victims sum more
    g = cand("g", rec("g1", 3, 100.0))
    h = cand("h", rec("h1", 3, 200.0))
    assert pick_one_node([g, h], no_score).decided_by == "latest start of the highest-priority victims"
    assert pick_one_node([g, h], no_score).candidate.node == "h"
    i = cand("i", rec("i1", 3, 100.0))
    pick = pick_one_node([g, i], lambda tied: {"g": 10.0, "i": 80.0})
    assert pick.candidate.node == "i" and pick.tied == ("g", "i") and "profile's score" in pick.decided_by


def test_candidate_count_is_upstreams() -> None:
    assert candidate_count(5000, 10, 100) == 500
    assert candidate_count(50, 10, 100) == 50
    assert candidate_count(500, 10, 100) == 100
    assert candidate_count(5000, 0, 10) == 10


def test_args_are_validated_with_the_field_named() -> None:
    from metrics_sched.config.errors import ArgsError

    with pytest.raises(ArgsError, match="minCandidateNodesPercentage"):
        DefaultPreemption.parse_args({"minCandidateNodesPercentage": 101})
    with pytest.raises(ArgsError, match="cannot both be zero"):
        DefaultPreemption.parse_args({"minCandidateNodesPercentage": 0, "minCandidateNodesAbsolute": 0})
    assert DefaultPreemption.parse_args(None).min_candidate_nodes_absolute == 100


class FailingPreemptor:
    def __init__(self, fail: dict[str, ApiError]) -> None:
        self.fail = fail
        self.calls: list[str] = []

    def _maybe(self, what: str) -> None:
        self.calls.append(what)
        if what in self.fail:
            raise self.fail[what]

    def set_nominated_node(self, namespace: str, name: str, node: str | None) -> None:
        self._maybe(f"nominate {name} {node}")

    def mark_disruption_target(self, namespace: str, name: str, message: str) -> None:
        self._maybe(f"condition {name}")

    def delete_pod(self, namespace: str, name: str, uid: str) -> None:
        self._maybe(f"delete {name}")


def test_the_executor_reports_failures_skips_gone_victims_and_rejects_waiting_ones() -> None:
    from metrics_sched.framework.waiting import WaitingPod, WaitingPods
    from metrics_sched.plugins.default_preemption.executor import PreemptionExecutor

    api = FakeAPI()
    preemptor = FailingPreemptor({"condition gone": ApiError(404, "not found"), "delete broken": ApiError(500, "x")})
    waiting = WaitingPods()
    done: list[tuple[str, bool]] = []
    finished = threading.Event()

    def on_done(uid: str, ok: bool) -> None:
        done.append((uid, ok))
        finished.set()

    executor = PreemptionExecutor(preemptor, api, waiting, on_done=on_done)
    rejected: list[str] = []
    held = scheduler_pod(pod("held"))
    waiting.add(WaitingPod(held, "n", {"Gang": 60.0}, lambda status: rejected.append(status.reason)))
    victims = [rec("gone", 0), rec("broken", 0), rec("fine", 0), dataclass_replace(rec("held", 0), uid=held.uid)]
    preemptor_pod = scheduler_pod(pod("infer", priority=1000))
    executor.submit(preemptor_pod, "n", victims, [])
    assert executor.victims_of(preemptor_pod.uid) == {"gone", "broken", "fine", held.uid} or finished.is_set()
    assert finished.wait(10)
    assert done == [(preemptor_pod.uid, False)]  # the 500 on "broken" makes it a failed preemption
    assert executor.victims_of(preemptor_pod.uid) == frozenset()
    assert preemptor.calls[0] == "nominate infer n"
    assert "delete gone" in preemptor.calls  # the condition's 404: already gone, the delete is harmless
    assert "delete fine" in preemptor.calls and "condition held" not in preemptor.calls
    assert rejected == ["preempted"]
    assert sorted(e.pod_name for e in api.events if e.reason == "Preempted") == ["fine", "gone", "held"]
    executor.drain()


def dataclass_replace(record: PodRecord, **changes: Any) -> PodRecord:
    import dataclasses

    return dataclasses.replace(record, **changes)


def test_a_nomination_seen_on_the_watch_holds_the_room_until_the_pod_is_bound_or_deleted() -> None:
    """After a restart or a leader change, a pending pod's status.nominatedNodeName is held again."""
    scheduler, _, _ = make()
    scheduler.handlers.on_node_event("ADDED", node("n0", cpu="4", memory="16Gi"))
    nominated = inference(cpu="2")
    nominated["status"]["nominatedNodeName"] = "n0"
    nominated["metadata"]["uid"] = "nominated-uid"
    scheduler.handlers.on_pod_event("ADDED", nominated)
    held = scheduler.state.nominations.get("nominated-uid")
    assert held is not None and held.node == "n0" and held.priority == 1000
    low = scheduler_pod(pod("low", cpu="3", priority=0))
    framework = scheduler.frameworks["metrics-sched"]
    assert framework.schedule(low, scheduler.state.table).node is None  # 2 of the 4 cpu are held
    assert framework.schedule(scheduler_pod(pod("low2", cpu="2")), scheduler.state.table).node == "n0"
    scheduler.handlers.on_pod_event("DELETED", nominated)
    assert len(scheduler.state.nominations) == 0
    assert framework.schedule(low, scheduler.state.table).node == "n0"


def test_a_nomination_follows_the_status_field_when_it_moves_or_is_cleared() -> None:
    """kube-scheduler's UpdateNominatedPod (issue 44): a nomination learned from status.nominatedNodeName moves when
    another leader nominates the pod elsewhere and goes when the field is cleared; an update without the field to a
    pod that never had it keeps the in-memory nomination (our own, whose status patch is still on its way)."""
    import copy

    scheduler, _, _ = make()
    for name in ("n0", "n1"):
        scheduler.handlers.on_node_event("ADDED", node(name, cpu="4", memory="16Gi"))
    nominated = inference(cpu="2")
    nominated["metadata"]["uid"] = "moving-uid"
    nominated["status"]["nominatedNodeName"] = "n0"
    scheduler.handlers.on_pod_event("ADDED", nominated)
    nominations = scheduler.state.nominations
    assert (held := nominations.get("moving-uid")) is not None and held.node == "n0"
    moved = copy.deepcopy(nominated)
    moved["status"]["nominatedNodeName"] = "n1"
    scheduler.handlers.on_pod_event("MODIFIED", moved)
    assert (held := nominations.get("moving-uid")) is not None and held.node == "n1"
    cleared = copy.deepcopy(moved)
    del cleared["status"]["nominatedNodeName"]
    scheduler.handlers.on_pod_event("MODIFIED", cleared)
    assert nominations.get("moving-uid") is None
    # Our own nomination, made in memory before the field reaches the watch: an update without it keeps it.
    own = copy.deepcopy(cleared)
    own["metadata"]["uid"] = "own-uid"
    nominations.nominate(scheduler_pod(own), "n0", scheduler.state.record_of)
    scheduler.handlers.on_pod_event("MODIFIED", own)
    assert (held := nominations.get("own-uid")) is not None and held.node == "n0"


@pytest.mark.parametrize("seed", range(12))
def test_the_all_nodes_dry_run_finds_what_the_node_by_node_one_finds(seed: int) -> None:
    """The batch path (node-local filters) gives every node the victims the one-node algorithm gives it."""
    import random

    rng = random.Random(seed)
    scheduler, api, _ = make()
    for i in range(rng.randint(1, 8)):
        scheduler.handlers.on_node_event("ADDED", node(f"n{i}", cpu=rng.choice(["2", "4"]), memory="16Gi"))
        used = 0
        for j in range(8):
            cpu = rng.choice([250, 500, 1000])
            if used + cpu > 4000:
                break
            used += cpu
            api.add_pod(bound(f"p{i}-{j}", f"n{i}", cpu=f"{cpu}m", priority=rng.choice([0, 10, 100]),
                              started=f"2026-11-30T12:00:{rng.randint(0, 59):02d}Z",
                              labels={"app": rng.choice("ab")}))
    for app in rng.sample("ab", rng.randint(0, 2)):
        scheduler.handlers.on_object_event(BUDGETS, "ADDED", {
            "metadata": {"name": app, "namespace": "default"},
            "spec": {"selector": {"matchLabels": {"app": app}}}, "status": {"disruptionsAllowed": rng.randint(0, 2)}})
    plugin = scheduler.frameworks["metrics-sched"].instances["DefaultPreemption"]
    assert isinstance(plugin, DefaultPreemption)
    preemptor_pod = scheduler_pod(inference(cpu=f"{rng.choice([500, 1500, 2500])}m"))
    table = scheduler.state.table
    rows = np.flatnonzero(table.present[: table.capacity])
    answers = []
    for local in (True, False):
        plugin.random.seed(seed)
        candidates, _ = plugin._dry_run(preemptor_pod, table, rows, [], local)
        answers.append(sorted((c.node, tuple(v.name for v in c.victims), c.pdb_violations) for c in candidates))
    assert answers[0] == answers[1]


def test_the_filters_declare_upstreams_codes_and_which_of_them_are_node_local() -> None:
    """What preemption reads off the filters (FilterPlugin.resolvable, FilterPlugin.node_local) is upstream's
    Unschedulable vs UnschedulableAndUnresolvable, and the dry run over all nodes at once only for the filters whose
    verdict on a node reads that node alone; a third-party filter declares neither."""
    filters = [cls for cls in BUILTIN.values() if issubclass(cls, FilterPlugin)]
    resolvable = {cls.name: sorted(r for r in ERR_REASONS if cls.resolvable(r)) for cls in filters}
    assert {name: reasons for name, reasons in resolvable.items() if reasons} == {
        "NodeResourcesFit": ["Insufficient cpu", "Insufficient nvidia.com/gpu", "Too many pods"],
        "NodePorts": ["node(s) didn't have free ports for the requested pod ports"],
        "InterPodAffinity": ["node(s) didn't match pod anti-affinity rules",
                             "node(s) didn't satisfy existing pods anti-affinity rules"],
        "PodTopologySpread": ["node(s) didn't match pod topology spread constraints"],
        "NodeVolumeLimits": ["node(s) exceed max volume count"],
        "VolumeRestrictions": ["node(s) had no available disk",
                               "node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod access mode "
                               "already in-use by another pod"],
    }
    assert {cls.name for cls in filters if cls.node_local} == {
        "NodeUnschedulable", "NodeReady", "NodeName", "NodePorts", "TaintToleration", "NodeAffinity",
        "NodeResourcesFit", "NodeVolumeLimits", "VolumeBinding", "VolumeZone", "GPUTemperature", "NodeLabelFilter",
        "GPUThermalForecast"}
    assert not FilterPlugin.node_local and not FilterPlugin.resolvable("Insufficient cpu")


# Reasons the built-in filters give, resolvable or not (a reason no filter declares is ruled out).
ERR_REASONS = (
    "Insufficient cpu", "Insufficient nvidia.com/gpu", "Too many pods", "node(s) had untolerated taint(s)",
    "node(s) didn't match Pod's node affinity/selector", "node(s) didn't have free ports for the requested pod ports",
    "node(s) didn't match pod affinity rules", "node(s) didn't match pod anti-affinity rules",
    "node(s) didn't satisfy existing pods anti-affinity rules", "node(s) didn't match pod topology spread constraints",
    "node(s) didn't match pod topology spread constraints (missing required label)", "node(s) exceed max volume count",
    "node(s) had no available disk", "node(s) were unschedulable", "node(s) were not ready",
    "node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod access mode already in-use by another pod",
)


class RefusingPreemptor:
    """Every write fails, so nothing the API shows changes either (no event can requeue the pod)."""

    def set_nominated_node(self, namespace: str, name: str, node: str | None) -> None:
        raise ApiError(500, "etcdserver: request timed out")

    def mark_disruption_target(self, namespace: str, name: str, message: str) -> None:
        raise ApiError(500, "etcdserver: request timed out")

    def delete_pod(self, namespace: str, name: str, uid: str) -> None:
        raise ApiError(500, "etcdserver: request timed out")


def test_a_preemption_whose_api_calls_fail_sends_the_pod_back_to_the_active_queue() -> None:
    """No victim leaves, so no deletion event would requeue the pod: it is activated, and tries again."""
    api = FakeAPI()
    scheduler = make_scheduler(api=api, preemptor=RefusingPreemptor())
    results = record_results(scheduler)
    full_pool(scheduler, api, nodes=1)
    api.add_pod(inference())

    def attempts() -> int:
        return sum(1 for r in results if r.pod.key == "default/infer"
                   and (o := r.cycle.get(PREEMPTION)) is not None and o.node is not None)

    run_until(scheduler, lambda: attempts() >= 2)
    assert api.binds == [] and len(api.pods) == 5
