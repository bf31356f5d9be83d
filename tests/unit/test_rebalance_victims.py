"""Which pods may be moved at all, what the state parses for it, and the framework's what-if."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from metrics_sched.config.model import SelectorExpression
from metrics_sched.model.podinfo import parse_pod
from metrics_sched.rebalance import RebalanceConfig, Verdict
from metrics_sched.state.cluster_state import ClusterState, disruption
from tests.unit.fakes import node, pod
from tests.unit.test_rebalance_rebalancer import COOL, HOT, INTERVAL, Rig, planned


def test_the_state_parses_what_victim_selection_needs_once() -> None:
    state = ClusterState()
    state.upsert_node(node("a"))
    body = pod("p", node_name="a", priority=7, namespace="ns")
    body["metadata"]["ownerReferences"] = [
        {"kind": "Workflow", "name": "wf", "uid": "1"},  # not the controller
        {"kind": "StatefulSet", "name": "db", "uid": "2", "controller": True}]
    body["metadata"]["annotations"] = {"kubernetes.io/config.mirror": "x", "metrics-sched.io/evictable": "false"}
    state.observe_bound_pod(parse_pod(body))
    record = state.record(body["metadata"]["uid"])
    assert record is not None
    assert (record.priority, record.scheduler_name, record.controller, record.mirror, record.evictable) == (
        7, "metrics-sched", "StatefulSet/ns/db", True, False)
    assert disruption(pod("q")).controller is None
    assert disruption({"metadata": {"annotations": {"metrics-sched.io/evictable": "true"}}}).evictable


NEVER: list[tuple[str, dict[str, Any]]] = [
    ("daemonset", {"kind": "DaemonSet"}),
    ("mirror", {"annotations": {"kubernetes.io/config.mirror": "abc"}}),
    ("standalone", {"owner": None}),
    ("opted-out", {"annotations": {"metrics-sched.io/evictable": "false"}}),
    ("above-max-priority", {"priority": 1001}),
    ("another-scheduler", {"scheduler": "default-scheduler"}),
]


@pytest.mark.parametrize(("name", "place"), NEVER, ids=[n[0] for n in NEVER])
def test_pods_that_are_never_evicted(name: str, place: dict[str, Any]) -> None:
    rig = Rig(RebalanceConfig(rules=(HOT,), interval_seconds=INTERVAL, max_priority=1000, margin=0.0))
    rig.place(name, "a", **place)
    verdicts = rig.hot_for(300, COOL)
    assert verdicts == [] and rig.rebalancer.candidates == 0
    assert [b.node for b in rig.rebalancer.bad_nodes()] == ["a"]


def test_at_max_priority_is_still_evictable_and_no_cap_means_any_priority() -> None:
    rig = Rig(RebalanceConfig(rules=(HOT,), interval_seconds=INTERVAL, max_priority=1000))
    rig.place("p", "a", priority=1000)
    assert planned(rig.hot_for(300, COOL)) == ["default/p"]
    rig = Rig()
    rig.place("p", "a", priority=2_000_000_000)
    assert planned(rig.hot_for(300, COOL)) == ["default/p"]


def test_a_pod_of_another_scheduler_is_movable_when_it_matches_the_selector() -> None:
    config = RebalanceConfig(rules=(HOT,), interval_seconds=INTERVAL, pod_selector={"team": "ml", "tier": "batch"})
    rig = Rig(config)
    rig.place("theirs", "a", owner="rs1", scheduler="default-scheduler",
              labels={"team": "ml", "tier": "batch"})
    rig.place("half", "a", owner="rs2", scheduler="default-scheduler", labels={"team": "ml"})
    assert rig.rebalancer.candidates == 0
    verdicts = rig.hot_for(300, COOL)
    assert rig.rebalancer.candidates == 1
    assert [v.pod for v in verdicts] == ["default/theirs"]


def test_terminating_and_only_assumed_pods_are_not_candidates() -> None:
    rig = Rig()
    body = rig.place("leaving", "a")
    body["metadata"]["deletionTimestamp"] = "2026-11-30T12:05:00Z"
    rig.scheduler.handlers.on_pod_event("MODIFIED", body)
    assumed = pod("assumed", gpus=1)
    assumed["metadata"]["ownerReferences"] = [{"kind": "ReplicaSet", "name": "x", "uid": "x", "controller": True}]
    rig.scheduler.state.assume(parse_pod(assumed), "a")
    assert rig.hot_for(300, COOL) == [] and rig.rebalancer.candidates == 0


def test_what_if_scores_the_pods_own_node_even_where_a_filter_rejects_it() -> None:
    rig = Rig()
    rig.temperatures({"a": 91.0, "b": 40.0, "c": 88.0})
    framework = rig.scheduler.frameworks["metrics-sched"]
    table = rig.scheduler.state.table
    a, b, c = (table.index[n] for n in "abc")
    outcome = framework.what_if(parse_pod(pod("p", gpus=1)), table, np.array([a]))
    assert outcome.status.ok
    assert outcome.feasible.tolist() == [b]  # a and c are too hot for a GPU pod
    assert outcome.rows.tolist() == sorted([a, b])
    assert dict(outcome.rejections) == {"node(s) had a GPU above 85°C": 2}
    totals = dict(zip(outcome.rows.tolist(), outcome.total.tolist(), strict=True))
    assert totals[b] > totals[a]
    assert c not in totals
    # The cycle's own choice, from the same code: b.
    assert framework.schedule(parse_pod(pod("p", gpus=1)), table).node == "b"


def test_a_pod_its_profile_refuses_outright_is_skipped_with_the_plugins_words() -> None:
    rig = Rig()
    rig.place("claims", "a", resourceClaims=[{"name": "gpu", "resourceClaimName": "c"}])
    [verdict] = rig.hot_for(300, COOL)
    assert verdict.verdict == Verdict.SKIPPED
    assert '; DynamicResources: resourceclaim.resource.k8s.io "c" not found' in verdict.reason


DISK = [{"name": "scratch", "emptyDir": {}}]
MEMORY = [{"name": "shm", "emptyDir": {"medium": "Memory"}}]
KEPT: list[tuple[str, dict[str, Any], str]] = [
    ("safe-to-evict-false", {"annotations": {"cluster-autoscaler.kubernetes.io/safe-to-evict": "false"}},
     'annotated cluster-autoscaler.kubernetes.io/safe-to-evict: "false"'),
    ("local-storage", {"volumes": DISK},
     "local storage: emptyDir scratch is not memory-backed (rebalance.evictLocalStoragePods: false)"),
    ("coscheduling-gang", {"labels": {"scheduling.x-k8s.io/pod-group": "trainers"}},
     "a member of gang default/trainers (scheduling.x-k8s.io PodGroup): a gang is never split"),
    ("workload-gang", {"schedulingGroup": {"podGroupName": "trainers"}},
     "a member of gang default/trainers (scheduling.k8s.io PodGroup): a gang is never split"),
]


@pytest.mark.parametrize(("name", "place", "reason"), KEPT, ids=[k[0] for k in KEPT])
def test_issue44_pods_operators_keep_in_place_are_skipped_with_why(name: str, place: dict[str, Any],
                                                                    reason: str) -> None:
    """Issue 44: the annotations operators already use, local storage, and gangs (never split: by default a gang
    member is not moved at all)."""
    rig = Rig(RebalanceConfig(rules=(HOT,), interval_seconds=INTERVAL, margin=0.0))
    rig.place(name, "a", **place)
    [verdict] = rig.hot_for(300, COOL)
    assert verdict.verdict == Verdict.SKIPPED
    assert verdict.reason.endswith(reason), verdict.reason


MOVED: list[tuple[str, dict[str, Any], RebalanceConfig]] = [
    ("memory-emptydir", {"volumes": MEMORY}, RebalanceConfig(rules=(HOT,), interval_seconds=INTERVAL)),
    ("descheduler-evict", {"volumes": DISK, "annotations": {"descheduler.alpha.kubernetes.io/evict": ""}},
     RebalanceConfig(rules=(HOT,), interval_seconds=INTERVAL)),
    ("safe-to-evict-true", {"volumes": DISK, "annotations": {"cluster-autoscaler.kubernetes.io/safe-to-evict": "true"}},
     RebalanceConfig(rules=(HOT,), interval_seconds=INTERVAL)),
    ("opted-in-by-config", {"volumes": DISK},
     RebalanceConfig(rules=(HOT,), interval_seconds=INTERVAL, evict_local_storage_pods=True)),
]


@pytest.mark.parametrize(("name", "place", "config"), MOVED, ids=[m[0] for m in MOVED])
def test_issue44_local_storage_pods_move_when_memory_backed_or_opted_in(name: str, place: dict[str, Any],
                                                                       config: RebalanceConfig) -> None:
    rig = Rig(config)
    rig.place(name, "a", **place)
    assert planned(rig.hot_for(300, COOL)) == [f"default/{name}"]


def test_issue44_the_pod_selector_takes_match_expressions() -> None:
    config = RebalanceConfig(rules=(HOT,), interval_seconds=INTERVAL, pod_selector={"team": "ml"},
                             pod_selector_expressions=(SelectorExpression("tier", "In", ("batch", "dev")),
                                                       SelectorExpression("pinned", "DoesNotExist")))
    rig = Rig(config)
    rig.place("batch", "a", owner="rs1", scheduler="default-scheduler", labels={"team": "ml", "tier": "batch"})
    rig.place("web", "a", owner="rs2", scheduler="default-scheduler", labels={"team": "ml", "tier": "web"})
    rig.place("pinned", "a", owner="rs3", scheduler="default-scheduler",
              labels={"team": "ml", "tier": "dev", "pinned": "yes"})
    verdicts = rig.hot_for(300, COOL)
    assert [v.pod for v in verdicts] == ["default/batch"]
