"""Choosing the topology domain for a whole gang (plugins/coscheduling/placement.py), and the pod-group objects."""

from __future__ import annotations

import numpy as np
import pytest

from metrics_sched.model.group_membership import GroupApi, GroupKey, GroupRefError, group_of_raw
from metrics_sched.model.podinfo import parse_pod
from metrics_sched.plugins.coscheduling.placement import choose_domain, member_capacity
from metrics_sched.plugins.coscheduling.pod_groups import PodGroupStore, parse_pod_group
from metrics_sched.state.cluster_state import ClusterState
from tests.unit.fakes import node, pod

ZONE = "topology.kubernetes.io/zone"


def cluster(*zones: tuple[str, int, str]) -> ClusterState:
    """(zone, nodes, cpu per node)."""
    state = ClusterState()
    for zone, count, cpu in zones:
        for i in range(count):
            state.upsert_node(node(f"{zone}-{i}", cpu=cpu, labels={ZONE: zone}))
    return state


def request(state: ClusterState, cpu: int) -> np.ndarray:
    vector = state.table.vector({"cpu": cpu})
    vector[state.table.resource_column("pods")] = 1
    return vector


def test_the_best_scored_domain_that_holds_the_whole_gang_wins() -> None:
    state = cluster(("hot", 4, "4"), ("cold", 4, "4"))
    table = state.table
    rows = table.rows()
    names = table.names_of(rows)
    total = np.array([30.0 if n.startswith("hot") else 80.0 for n in names])
    choice = choose_domain(table, ZONE, rows, total, request(state, 2000), 8)  # 2 per node: 8 per zone
    assert choice.chosen is not None and choice.chosen.value == "cold"
    assert [d.value for d in choice.domains] == ["cold", "hot"]
    assert choice.chosen.capacity == 8 and choice.chosen.objective == pytest.approx(80.0)
    assert "topology.kubernetes.io/zone=cold holds all 8" in choice.explain()


def test_a_better_domain_too_small_for_the_gang_loses_to_one_that_fits() -> None:
    state = cluster(("small", 2, "4"), ("big", 4, "4"))
    rows = state.table.rows()
    total = np.array([99.0 if n.startswith("small") else 10.0 for n in state.table.names_of(rows)])
    choice = choose_domain(state.table, ZONE, rows, total, request(state, 2000), 8)
    assert choice.chosen is not None and choice.chosen.value == "big"
    assert {d.value: d.capacity for d in choice.domains} == {"big": 8, "small": 4}


def test_no_domain_holds_the_gang() -> None:
    state = cluster(("a", 2, "4"), ("b", 2, "4"))
    rows = state.table.rows()
    choice = choose_domain(state.table, ZONE, rows, np.full(rows.size, 50.0), request(state, 2000), 8)
    assert choice.chosen is None
    assert "no topology.kubernetes.io/zone domain can hold the 8 members" in choice.explain()


def test_the_objective_counts_the_places_the_members_would_take_best_first() -> None:
    # Zone x: one great node for 2 members, the rest poor; zone y: uniformly good. 4 members.
    state = cluster(("x", 3, "4"), ("y", 2, "4"))
    rows = state.table.rows()
    names = state.table.names_of(rows)
    scores = {"x-0": 100.0, "x-1": 0.0, "x-2": 0.0, "y-0": 70.0, "y-1": 70.0}
    total = np.array([scores[n] for n in names])
    choice = choose_domain(state.table, ZONE, rows, total, request(state, 2000), 4)
    by_value = {d.value: d for d in choice.domains}
    assert by_value["x"].objective == pytest.approx(50.0)  # 2 on x-0 (100), 2 on x-1 (0)
    assert choice.chosen is not None and choice.chosen.value == "y"


def test_capacity_is_the_scarcest_resource_and_unlabelled_nodes_are_left_out() -> None:
    state = cluster(("a", 1, "8"))
    state.upsert_node(node("bare", cpu="64"))
    table = state.table
    rows = table.rows()
    assert member_capacity(table, rows, request(state, 3000)).tolist() == [2, 21]
    choice = choose_domain(table, ZONE, rows, np.zeros(rows.size), request(state, 3000), 2)
    assert [d.value for d in choice.domains] == ["a"]
    assert choose_domain(table, "rack", rows, np.zeros(rows.size), request(state, 1000), 2).domains == ()


def test_pod_groups_of_both_apis() -> None:
    crd = parse_pod_group(GroupApi.COSCHEDULING, {
        "metadata": {"namespace": "ns", "name": "pg", "uid": "u", "creationTimestamp": "2026-12-01T10:00:00Z",
                     "annotations": {"metrics-sched.io/topology-key": "rack"}},
        "spec": {"minMember": 8, "scheduleTimeoutSeconds": 30, "minResources": {"cpu": "4"}}})
    assert (crd.min_member, crd.timeout, crd.topology_key, crd.min_resources) == (8, 30.0, "rack", {"cpu": 4000})
    assert crd.gang and crd.error is None
    workload = parse_pod_group(GroupApi.WORKLOAD, {
        "metadata": {"namespace": "ns", "name": "pg"},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 4}},
                 "schedulingConstraints": {"topologyConstraints": [{"topologyKey": ZONE}]}}})
    assert (workload.min_member, workload.timeout, workload.topology_key) == (4, None, ZONE)
    basic = parse_pod_group(GroupApi.WORKLOAD, {"metadata": {"name": "b"}, "spec": {"schedulingPolicy": {"basic": {}}}})
    assert not basic.gang and basic.error is None
    broken = parse_pod_group(GroupApi.COSCHEDULING, {"metadata": {"name": "x"},
                                                     "spec": {"minMember": 2, "minResources": {"cpu": "lots"}}})
    assert broken.error is not None and "minResources" in broken.error


def test_membership_from_the_label_or_the_scheduling_group() -> None:
    label = {"scheduling.x-k8s.io/pod-group": "pg"}
    assert group_of_raw("ns", label, {}) == GroupKey(GroupApi.COSCHEDULING, "ns", "pg")
    assert group_of_raw("ns", {}, {"schedulingGroup": {"podGroupName": "w"}}) == GroupKey(GroupApi.WORKLOAD, "ns", "w")
    assert group_of_raw("ns", {}, {}) is None
    with pytest.raises(GroupRefError, match="two groups"):
        group_of_raw("ns", {"scheduling.x-k8s.io/pod-group": "pg"}, {"schedulingGroup": {"podGroupName": "w"}})


def test_the_store_counts_pending_bound_and_gated_members() -> None:
    store = PodGroupStore()
    key = GroupKey(GroupApi.COSCHEDULING, "default", "pg")
    labels = {"scheduling.x-k8s.io/pod-group": "pg"}
    a = pod("a")
    a["metadata"]["labels"] = labels
    b = pod("b", schedulingGates=[{"name": "wait"}])
    b["metadata"]["labels"] = labels
    assert store.observe_pod(parse_pod(a)) == key  # a new member
    assert store.observe_pod(parse_pod(a)) is None  # the same again
    assert store.observe_pod(parse_pod(b)) == key
    assert store.member_count(key) == (2, 0, 1)
    b["spec"].pop("schedulingGates")
    assert store.observe_pod(parse_pod(b)) == key  # ungated: the group may go on now
    a["spec"]["nodeName"] = "n1"
    store.observe_pod(parse_pod(a))
    assert store.member_count(key) == (2, 1, 0)
    store.forget_pod(a["metadata"]["uid"])
    store.forget_pod(b["metadata"]["uid"])
    assert store.member_count(key) == (0, 0, 0)
