"""Built-in plugins over a small node table: masks and scores."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from metrics_sched.framework import CycleState, Handle
from metrics_sched.model.podinfo import parse_pod
from metrics_sched.plugins.node_affinity.plugin import NodeAffinity
from metrics_sched.plugins.node_label_filter.plugin import NodeLabelFilter
from metrics_sched.plugins.node_label_score.plugin import NodeLabelScore
from metrics_sched.plugins.node_resources_fit.plugin import NodeResourcesFit
from metrics_sched.plugins.node_unschedulable.plugin import NodeUnschedulable
from metrics_sched.plugins.taint_toleration.plugin import TaintToleration
from metrics_sched.plugins.zone_spread.plugin import ZoneSpread
from metrics_sched.state.cluster_state import ClusterState
from metrics_sched.telemetry.cache import MetricCache
from metrics_sched.telemetry.ledger import InFlightLedgerStore
from tests.unit.fakes import FakeAPI, node, pod


def cluster() -> tuple[ClusterState, Handle]:
    state = ClusterState()
    state.upsert_node(node("a", labels={"zone": "z1", "disk-type": "ssd", "gen": "3", "role": "special"}))
    state.upsert_node(node("b", labels={"zone": "z1", "disk-type": "hdd", "gen": "5"}))
    state.upsert_node(node("c", labels={"zone": "z2", "gen": "x"},
                           taints=[{"key": "gpu", "value": "true", "effect": "NoSchedule"}]))
    state.upsert_node(node("d", labels={"zone": "z2"}, taints=[{"key": "soft", "effect": "PreferNoSchedule"}],
                           unschedulable=True))
    return state, Handle(state, MetricCache(), InFlightLedgerStore(), FakeAPI())


def feasible(plugin: Any, p: dict[str, Any], state: ClusterState) -> list[str]:
    verdict = plugin.filter(CycleState(), parse_pod(p), state.table)
    return sorted(state.table.names_of(np.flatnonzero(verdict.feasible & state.table.present)))


def expr(key: str, op: str, *values: str) -> dict[str, Any]:
    e: dict[str, Any] = {"key": key, "operator": op}
    if values:
        e["values"] = list(values)
    return e


def required(*terms: list[dict[str, Any]]) -> dict[str, Any]:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": t} for t in terms]}}}


AFFINITY = [
    ("In", required([expr("disk-type", "In", "ssd", "nvme")]), ["a"]),
    ("NotIn matches missing", required([expr("disk-type", "NotIn", "hdd")]), ["a", "c", "d"]),
    ("Exists", required([expr("disk-type", "Exists")]), ["a", "b"]),
    ("DoesNotExist", required([expr("disk-type", "DoesNotExist")]), ["c", "d"]),
    ("Gt ignores non-numbers", required([expr("gen", "Gt", "4")]), ["b"]),
    ("Lt", required([expr("gen", "Lt", "4")]), ["a"]),
    ("terms OR", required([expr("zone", "In", "z2")], [expr("gen", "In", "3")]), ["a", "c", "d"]),
    ("expressions AND", required([expr("zone", "In", "z1"), expr("gen", "In", "5")]), ["b"]),
]


@pytest.mark.parametrize(("name", "affinity", "expected"), AFFINITY, ids=[a[0] for a in AFFINITY])
def test_node_affinity_required(name: str, affinity: dict[str, Any], expected: list[str]) -> None:
    state, handle = cluster()
    assert feasible(NodeAffinity({}, handle), pod("p", affinity=affinity), state) == expected


def test_node_selector_and_match_fields() -> None:
    state, handle = cluster()
    plugin = NodeAffinity({}, handle)
    assert feasible(plugin, pod("p", nodeSelector={"zone": "z2"}), state) == ["c", "d"]
    fields = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["b"]}]}]}}}
    assert feasible(plugin, pod("p", affinity=fields), state) == ["b"]


def test_preferred_affinity_scores() -> None:
    state, handle = cluster()
    affinity = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 10, "preference": {"matchExpressions": [expr("zone", "In", "z2")]}},
        {"weight": 30, "preference": {"matchExpressions": [expr("disk-type", "In", "ssd")]}}]}}
    plugin = NodeAffinity({}, handle)
    rows = state.table.rows()
    scores = plugin.normalize(plugin.score(CycleState(), parse_pod(pod("p", affinity=affinity)), state.table, rows))
    assert dict(zip(state.table.names_of(rows), scores.tolist(), strict=True)) == {
        "a": 100.0, "b": 0.0, "c": 100 / 3, "d": 100 / 3}


def test_taints_and_tolerations() -> None:
    state, handle = cluster()
    plugin = TaintToleration({}, handle)
    assert feasible(plugin, pod("p"), state) == ["a", "b", "d"]
    tolerant = pod("p", tolerations=[{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}])
    assert feasible(plugin, tolerant, state) == ["a", "b", "c", "d"]
    rows = state.table.rows()
    scores = plugin.normalize(plugin.score(CycleState(), parse_pod(pod("p")), state.table, rows))
    assert scores.tolist() == [100.0, 100.0, 100.0, 0.0]  # d has an untolerated PreferNoSchedule


def test_cordoned_node() -> None:
    state, handle = cluster()
    plugin = NodeUnschedulable({}, handle)
    assert feasible(plugin, pod("p"), state) == ["a", "b", "c"]
    tolerant = pod("p", tolerations=[{"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}])
    assert feasible(plugin, tolerant, state) == ["a", "b", "c", "d"]


def test_node_label_filter_and_score() -> None:
    state, handle = cluster()
    assert feasible(NodeLabelFilter({"requiredLabels": {"role": "special"}}, handle), pod("p"), state) == ["a"]
    assert feasible(NodeLabelFilter({"absentLabels": ["disk-type"]}, handle), pod("p"), state) == ["c", "d"]
    scorer = NodeLabelScore({"labelWeights": {"disk-type": {"ssd": 100, "hdd": 20}}}, handle)
    scores = scorer.score(CycleState(), parse_pod(pod("p")), state.table, state.table.rows())
    assert scores.tolist() == [100.0, 20.0, 0.0, 0.0]


def test_least_and_most_allocated() -> None:
    state, handle = cluster()
    busy = parse_pod(pod("busy", cpu="3", memory="12Gi", node_name="a"))
    state.observe_bound_pod(busy)
    p = parse_pod(pod("p", cpu="1", memory="4Gi"))
    rows = state.table.rows()[:2]
    spread = NodeResourcesFit({}, handle).score(CycleState(), p, state.table, rows)
    pack = NodeResourcesFit({"scoringStrategy": {"type": "MostAllocated"}}, handle).score(
        CycleState(), p, state.table, rows)
    assert spread[1] > spread[0] and pack[0] > pack[1]
    assert spread[0] == 0.0 and pack[0] == 100.0  # a would be full


def test_zone_spread_prefers_the_emptier_zone() -> None:
    state, handle = cluster()
    owned = pod("x", node_name="a")
    owned["metadata"]["ownerReferences"] = [{"kind": "ReplicaSet", "uid": "rs1", "controller": True}]
    state.observe_bound_pod(parse_pod(owned))
    newcomer = pod("y")
    newcomer["metadata"]["ownerReferences"] = owned["metadata"]["ownerReferences"]
    plugin = ZoneSpread({"topologyKey": "zone"}, handle)
    scores = plugin.score(CycleState(), parse_pod(newcomer), state.table, state.table.rows())
    assert scores.tolist() == [0.0, 0.0, 100.0, 100.0]


@pytest.mark.parametrize(("label", "operator", "bound", "matches"), [
    ("1_0", "Gt", "1", False),  # Go's ParseInt takes no underscores
    ("99999999999999999999", "Gt", "1", False),  # beyond int64: not a number to Go
    ("9007199254740993", "Gt", "9007199254740992", True),  # exact, not as floats
    ("03", "Lt", "4", True),
    ("-2", "Lt", "+1", True),
    ("5", "Gt", "x", False),  # an operand that is not a number matches nothing
])
def test_gt_lt_read_label_values_as_go_int64(label: str, operator: str, bound: str, matches: bool) -> None:
    state = ClusterState()
    state.upsert_node(node("n", labels={"gen": label}))
    state.upsert_node(node("other"))
    handle = Handle(state, MetricCache(), InFlightLedgerStore(), FakeAPI())
    p = pod("p", affinity=required([expr("gen", operator, bound)]))
    assert feasible(NodeAffinity({}, handle), p, state) == (["n"] if matches else [])
