"""PodTopologySpread, table-driven from kube-scheduler's own tests (pkg/scheduler/framework/plugins/podtopologyspread:
filtering_test.go TestSingleConstraint / TestMultipleConstraints / TestPreFilterState, scoring_test.go
TestPreScoreSkip / TestPodTopologySpreadScore), then the incremental per-row counts behind it and one run through
the whole Scheduler.

Upstream's objects are rebuilt as JSON: nodes carry only the labels upstream gives them (no automatic hostname
label), pods without a namespace are in "". Upstream's status codes map to our reasons: Unschedulable ->
ERR_CONSTRAINTS, UnschedulableAndUnresolvable -> ERR_MISSING_LABEL. Feature gates are as in 1.36
(NodeInclusionPolicyInPodTopologySpread and MatchLabelKeysInPodTopologySpread on); cases that only exist for a
gate turned off are left out ("feature gate disabled with ...", "matchLabelKeys ignored when feature gate
disabled" -- the latter is kept for scoring with the outcome the gate-on code gives, computed by hand and
marked as such).

TestPreFilterState compares upstream's private state (TpPairToMatchNum, TpKeyToDomainsNum); those cases are
ported by transcribing that expected state and deriving each node's Filter verdict from it with upstream's
Filter formula (matchNum + selfMatch - minMatchNum > maxSkew, minMatchNum 0 below minDomains). Also left out:
TestPreFilterStateAddPod/RemovePod (private state across preemption's AddPod/RemovePod, which we do not have;
the counts' add/remove is tested below as outcomes), TestPreScoreStateEmptyNodes (private weights; their
effect is in the scores), TestPreFilterDisabled, and the benchmarks.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Final

import numpy as np
import pytest

from metrics_sched.framework import Code, CycleState, Handle
from metrics_sched.model.podinfo import parse_pod
from metrics_sched.model.selectors import LabelSelector
from metrics_sched.plugins.pod_topology_spread.plugin import (
    ERR_CONSTRAINTS,
    ERR_MISSING_LABEL,
    HOSTNAME,
    ZONE,
    DefaultConstraint,
    PodTopologySpread,
)
from metrics_sched.ports import WorkloadKind
from metrics_sched.state.cluster_state import ClusterState
from metrics_sched.telemetry.cache import MetricCache
from metrics_sched.telemetry.ledger import InFlightLedgerStore
from tests.unit.fakes import FakeAPI
from tests.unit.fakes import node as fake_node
from tests.unit.fakes import pod as fake_pod
from tests.unit.plugin_runs import filter_reasons, normalized_scores
from tests.unit.test_scheduler import drain, make

pytestmark = pytest.mark.unit

Obj = dict[str, Any]
U, UU = ERR_CONSTRAINTS, ERR_MISSING_LABEL  # upstream's Unschedulable / UnschedulableAndUnresolvable
OK = None
HARD: Final = "DoNotSchedule"
SOFT: Final = "ScheduleAnyway"
FOO: Obj = {"matchExpressions": [{"key": "foo", "operator": "Exists"}]}
BAR: Obj = {"matchExpressions": [{"key": "bar", "operator": "Exists"}]}
TAINTS = [{"key": "node.kubernetes.io/unschedulable", "value": "", "effect": "NoSchedule"}]
LIST = PodTopologySpread.Args(defaulting_type="List")
SYSTEM = PodTopologySpread.Args()


# -- builders ------------------------------------------------------------------------------------------------
def mk_node(name: str, labels: Mapping[str, str] | None = None, taints: list[dict[str, str]] | None = None) -> Obj:
    body = fake_node(name, taints=taints)
    body["metadata"]["labels"] = dict(labels or {})
    return body


def zn(name: str, zone: str | None = None, **extra: str) -> Obj:
    """st.MakeNode().Name(name).Label("zone", zone).Label("node", name)."""
    labels = {"zone": zone} if zone else {}
    return mk_node(name, {**labels, "node": name, **extra})


def spread(max_skew: int, key: str, when: str, selector: Obj | None, min_domains: int | None = None,
           affinity_policy: str | None = None, taints_policy: str | None = None,
           match_label_keys: Sequence[str] | None = None) -> Obj:
    """st.PodWrapper.SpreadConstraint(maxSkew, key, when, selector, minDomains, nodeAffinityPolicy,
    nodeTaintsPolicy, matchLabelKeys); a selector of None is nil."""
    c: Obj = {"maxSkew": max_skew, "topologyKey": key, "whenUnsatisfiable": when}
    if selector is not None:
        c["labelSelector"] = selector
    if min_domains is not None:
        c["minDomains"] = min_domains
    if affinity_policy:
        c["nodeAffinityPolicy"] = affinity_policy
    if taints_policy:
        c["nodeTaintsPolicy"] = taints_policy
    if match_label_keys:
        c["matchLabelKeys"] = list(match_label_keys)
    return c


def mk_pod(name: str = "", *, labels: Mapping[str, str] | None = None, node: str | None = None, ns: str = "",
           constraints: Sequence[Obj] = (), node_selector: Mapping[str, str] | None = None,
           node_affinity: tuple[str, str, Sequence[str]] | None = None, terminating: bool = False,
           tolerate: str | None = None, owner: tuple[str, str, str] | None = None) -> Obj:
    body = fake_pod(name or f"p-{uuid.uuid4().hex[:8]}", namespace=ns, node_name=node)
    meta, spec = body["metadata"], body["spec"]
    if labels:
        meta["labels"] = dict(labels)
    if constraints:
        spec["topologySpreadConstraints"] = list(constraints)
    if node_selector is not None:
        spec["nodeSelector"] = dict(node_selector)
    if node_affinity is not None:
        key, op, values = node_affinity
        spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": key, "operator": op, "values": list(values)}]}]}}}
    if terminating:
        meta["deletionTimestamp"] = "2026-11-30T12:00:00Z"
    if tolerate:
        spec["tolerations"] = [{"key": tolerate, "operator": "Exists", "effect": "NoSchedule"}]
    if owner:
        api_version, kind, owner_name = owner
        meta["ownerReferences"] = [{"apiVersion": api_version, "kind": kind, "name": owner_name, "controller": True,
                                    "uid": f"uid-{owner_name}"}]
    return body


def foo_on(node: str, name: str = "", **labels: str) -> Obj:
    return mk_pod(name, labels={"foo": "", **labels}, node=node)


def on(node: str, labels: Mapping[str, str]) -> Obj:
    return mk_pod(labels=labels, node=node)


def cluster(nodes: Sequence[Obj], pods: Sequence[Obj], args: PodTopologySpread.Args = LIST,
            objs: Sequence[tuple[WorkloadKind, Obj]] = ()) -> tuple[ClusterState, PodTopologySpread]:
    state = ClusterState()
    for n in nodes:
        state.upsert_node(n)
    for p in pods:
        state.observe_bound_pod(parse_pod(p))
    for kind, obj in objs:
        state.workloads.upsert(kind, obj)
    return state, PodTopologySpread(args, Handle(state, MetricCache(), InFlightLedgerStore(), FakeAPI()))


def names_of(nodes: Sequence[Obj]) -> list[str]:
    return [n["metadata"]["name"] for n in nodes]


ABXY = [zn("node-a", "zone1"), zn("node-b", "zone1"), zn("node-x", "zone2"), zn("node-y", "zone2")]


def spread_2103() -> list[Obj]:
    """Matching pods spread as 2/1/0/3 over node-a/b/x/y."""
    return [foo_on("node-a"), foo_on("node-a"), foo_on("node-b"), foo_on("node-y"), foo_on("node-y"), foo_on("node-y")]


def incl_nodes(c_taints: bool = False) -> list[Obj]:
    """The nodes of the NodeAffinityPolicy/NodeTaintsPolicy cases: node-a/b/x labelled foo, node-y not."""
    return [zn("node-a", foo=""), zn("node-b", foo=""), zn("node-x", foo=""),
            mk_node("node-y", {"node": "node-y"}, TAINTS if c_taints else None)]


INCL_PODS = [foo_on("node-a", "p-b1"), foo_on("node-b", "p-b2"), foo_on("node-y", "p-y1")]

# -- filtering_test.go TestSingleConstraint ------------------------------------------------------------------
SINGLE: list[tuple[str, Obj, list[Obj], list[Obj], list[str | None]]] = [
    ("no existing pods", mk_pod(labels={"foo": ""}, constraints=[spread(1, "zone", HARD, FOO)]), ABXY, [],
     [OK, OK, OK, OK]),
    ("no existing pods, incoming pod doesn't match itself",
     mk_pod(labels={"foo": ""}, constraints=[spread(1, "zone", HARD, BAR)]), ABXY, [], [OK, OK, OK, OK]),
    ("existing pods in a different namespace do not count",
     mk_pod(labels={"foo": ""}, constraints=[spread(1, "zone", HARD, FOO)]), ABXY,
     [mk_pod(labels={"foo": ""}, ns="ns1", node="node-a"), mk_pod(labels={"foo": ""}, ns="ns2", node="node-a"),
      foo_on("node-x"), foo_on("node-y")], [OK, OK, U, U]),
    ("existing pods do not match null selector",
     mk_pod(labels={"foo": ""}, constraints=[spread(1, "zone", HARD, None)]), ABXY,
     [foo_on("node-x"), foo_on("node-y")], [OK, OK, OK, OK]),
    ("pods spread across zones as 3/3, all nodes fit",
     mk_pod(labels={"foo": ""}, constraints=[spread(1, "zone", HARD, FOO)]), ABXY,
     [foo_on("node-a"), foo_on("node-a"), foo_on("node-b"), foo_on("node-y"), foo_on("node-y"), foo_on("node-y")],
     [OK, OK, OK, OK]),
    ("pods spread across zones as 1/2 due to absence of label 'zone' on node-b",
     mk_pod(labels={"foo": ""}, constraints=[spread(1, "zone", HARD, FOO)]),
     [zn("node-a", "zone1"), mk_node("node-b", {"zon": "zone1", "node": "node-b"}), zn("node-x", "zone2"),
      zn("node-y", "zone2")],
     [foo_on("node-a"), foo_on("node-b"), foo_on("node-x"), foo_on("node-y")], [OK, UU, U, U]),
    ("pod cannot be scheduled as all nodes don't have label 'rack'",
     mk_pod(labels={"foo": ""}, constraints=[spread(1, "rack", HARD, FOO)]),
     [zn("node-a", "zone1"), zn("node-x", "zone2")], [], [UU, UU]),
    ("pods spread across nodes as 2/1/0/3, only node-x fits",
     mk_pod(labels={"foo": ""}, constraints=[spread(1, "node", HARD, FOO)]), ABXY, spread_2103(), [U, U, OK, U]),
    ("pods spread across nodes as 2/1/0/3, maxSkew is 2, node-b and node-x fit",
     mk_pod(labels={"foo": ""}, constraints=[spread(2, "node", HARD, FOO)]), ABXY, spread_2103(), [U, OK, OK, U]),
    ("pods spread across nodes as 2/1/0/3, but pod doesn't match itself",
     mk_pod(labels={"bar": ""}, constraints=[spread(1, "node", HARD, FOO)]), ABXY, spread_2103(), [U, OK, OK, U]),
    ("incoming pod has nodeAffinity, pods spread as 2/~1~/~0~/3, hence node-a fits",
     mk_pod(labels={"foo": ""}, node_affinity=("node", "In", ["node-a", "node-y"]),
            constraints=[spread(1, "node", HARD, FOO)]), ABXY, spread_2103(), [OK, OK, OK, U]),
    ("terminating Pods should be excluded",
     mk_pod(labels={"foo": ""}, constraints=[spread(1, "node", HARD, FOO)]),
     [mk_node("node-a", {"node": "node-a"}), mk_node("node-b", {"node": "node-b"})],
     [mk_pod(labels={"foo": ""}, node="node-a", terminating=True), foo_on("node-b")], [OK, U]),
    ("incoming pod has nodeAffinity, pods spread as 0/~2~/0/1, hence node-a fits",
     mk_pod(labels={"foo": ""}, node_affinity=("node", "NotIn", ["node-b"]),
            constraints=[spread(1, "zone", HARD, FOO)]), ABXY,
     [foo_on("node-b"), foo_on("node-b"), foo_on("node-y")], [OK, OK, U, U]),
    ("pods spread across nodes as 2/2/1, maxSkew is 2, and the number of domains < minDomains, then the third node "
     "fits",
     mk_pod(labels={"foo": ""}, constraints=[spread(2, "node", HARD, FOO, min_domains=4)]),
     [mk_node(f"node-{c}", {"node": f"node-{c}"}) for c in "abc"],
     [foo_on("node-a"), foo_on("node-a"), foo_on("node-b"), foo_on("node-b"), foo_on("node-c")], [U, U, OK]),
    ("pods spread across nodes as 2/2/1, maxSkew is 2, and the number of domains > minDomains, then the all nodes "
     "fit",
     mk_pod(labels={"foo": ""}, constraints=[spread(2, "node", HARD, FOO, min_domains=2)]),
     [mk_node(f"node-{c}", {"node": f"node-{c}"}) for c in "abc"],
     [foo_on("node-a"), foo_on("node-a"), foo_on("node-b"), foo_on("node-b"), foo_on("node-c")], [OK, OK, OK]),
    ("pods spread across zone as 2/1, maxSkew is 2 and the number of domains < minDomains, then the third and fourth "
     "nodes fit",
     mk_pod(labels={"foo": ""}, constraints=[spread(2, "zone", HARD, FOO, min_domains=3)]), ABXY,
     [foo_on("node-a"), foo_on("node-b"), foo_on("node-y")], [U, U, OK, OK]),
    ("pods spread across zone as 2/1, maxSkew is 2 and the number of domains > minDomains, then the all nodes fit",
     mk_pod(labels={"foo": ""}, constraints=[spread(2, "zone", HARD, FOO, min_domains=1)]), ABXY,
     [foo_on("node-a"), foo_on("node-b"), foo_on("node-y")], [OK, OK, OK, OK]),
    ("NodeAffinityPolicy honored with labelSelectors",
     mk_pod(labels={"foo": ""}, node_selector={"foo": ""}, constraints=[spread(1, "node", HARD, FOO)]),
     incl_nodes(), INCL_PODS, [U, U, OK, OK]),
    ("NodeAffinityPolicy ignored with labelSelectors",
     mk_pod(labels={"foo": ""}, node_selector={"foo": ""},
            constraints=[spread(1, "node", HARD, FOO, affinity_policy="Ignore")]),
     incl_nodes(), INCL_PODS, [U, U, OK, U]),
    ("NodeAffinityPolicy honored with nodeAffinity",
     mk_pod(labels={"foo": ""}, node_affinity=("foo", "In", [""]), constraints=[spread(1, "node", HARD, FOO)]),
     incl_nodes(), INCL_PODS, [U, U, OK, OK]),
    ("NodeAffinityPolicy ignored with nodeAffinity",
     mk_pod(labels={"foo": ""}, node_affinity=("foo", "In", [""]),
            constraints=[spread(1, "node", HARD, FOO, affinity_policy="Ignore")]),
     incl_nodes(), INCL_PODS, [U, U, OK, U]),
    ("NodeTaintsPolicy honored",
     mk_pod(labels={"foo": ""}, constraints=[spread(1, "node", HARD, FOO, taints_policy="Honor")]),
     incl_nodes(c_taints=True), INCL_PODS, [U, U, OK, OK]),
    ("NodeTaintsPolicy ignored",
     mk_pod(labels={"foo": ""}, constraints=[spread(1, "node", HARD, FOO)]),
     incl_nodes(c_taints=True), INCL_PODS, [U, U, OK, U]),
]


@pytest.mark.parametrize(("name", "incoming", "nodes", "pods", "want"), SINGLE, ids=[c[0][:90] for c in SINGLE])
def test_single_constraint(name: str, incoming: Obj, nodes: list[Obj], pods: list[Obj],
                           want: list[str | None]) -> None:
    state, plugin = cluster(nodes, pods)
    assert filter_reasons(state, plugin, incoming, names_of(nodes)) == (Code.SUCCESS, want)


# -- filtering_test.go TestMultipleConstraints ---------------------------------------------------------------
def two(zone_sel: Obj = FOO, node_sel: Obj = FOO, labels: Mapping[str, str] | None = None, **kw: Any) -> Obj:
    return mk_pod(labels=labels or {"foo": ""}, constraints=[spread(1, "zone", HARD, zone_sel),
                                                              spread(1, "node", HARD, node_sel)], **kw)


MULTIPLE: list[tuple[str, Obj, list[Obj], list[Obj], list[str | None]]] = [
    ("two Constraints on zone and node, spreads = [3/3, 2/1/0/3]", two(), ABXY, spread_2103(), [U, U, OK, U]),
    ("two Constraints on zone and node, spreads = [3/4, 2/1/0/4]", two(), ABXY, [*spread_2103(), foo_on("node-y")],
     [U, U, U, U]),
    ("Constraints hold different labelSelectors, spreads = [1/0, 1/0/0/1]",
     two(FOO, BAR, {"foo": "", "bar": ""}), ABXY, [on("node-a", {"foo": ""}), on("node-y", {"bar": ""})],
     [U, U, OK, U]),
    ("Constraints hold different labelSelectors, spreads = [1/0, 0/0/1/1]",
     two(FOO, BAR, {"foo": "", "bar": ""}), ABXY,
     [on("node-a", {"foo": ""}), on("node-x", {"bar": ""}), on("node-y", {"bar": ""})], [U, U, U, U]),
    ("Constraints hold different labelSelectors, spreads = [2/3, 1/0/0/1]",
     two(FOO, BAR, {"foo": "", "bar": ""}), ABXY,
     [on("node-a", {"foo": ""}), on("node-a", {"foo": "", "bar": ""}), on("node-y", {"foo": ""}),
      on("node-y", {"foo": "", "bar": ""}), on("node-y", {"foo": ""})], [U, OK, U, U]),
    ("Constraints hold different labelSelectors but pod doesn't match itself on 'zone' constraint",
     two(FOO, BAR, {"bar": ""}), ABXY,
     [on("node-a", {"foo": ""}), on("node-x", {"bar": ""}), on("node-y", {"bar": ""})], [OK, OK, U, U]),
    ("two Constraints on zone and node, absence of label 'node' on node-x, spreads = [1/1, 1/0/0/1]",
     two(), [zn("node-a", "zone1"), zn("node-b", "zone1"), mk_node("node-x", {"zone": "zone2"}), zn("node-y", "zone2")],
     [foo_on("node-a"), foo_on("node-y")], [U, OK, UU, U]),
    ("two node inclusion Constraints, zone: honor/ignore, node: ignore/ignore",
     mk_pod(labels={"foo": ""}, node_selector={"foo": ""},
            constraints=[spread(1, "zone", HARD, FOO), spread(1, "node", HARD, FOO, affinity_policy="Ignore")]),
     [zn("node-a", "zone1", foo=""), zn("node-b", "zone1", foo=""), zn("node-x", "zone2", foo=""),
      zn("node-y", "zone2")],
     [foo_on("node-a"), foo_on("node-b"), foo_on("node-y")], [U, U, OK, U]),
    ("two node inclusion Constraints, zone: honor/honor, node: honor/ignore",
     mk_pod(labels={"foo": ""}, constraints=[spread(1, "zone", HARD, FOO, taints_policy="Honor"),
                                              spread(1, "node", HARD, FOO)]),
     [zn("node-a", "zone1", foo=""), zn("node-b", "zone1", foo=""), zn("node-x", "zone2", foo=""),
      mk_node("node-y", {"zone": "zone2", "node": "node-y"}, TAINTS)],
     [foo_on("node-a"), foo_on("node-b"), foo_on("node-y")], [U, U, OK, U]),
    ("two node inclusion Constraints, zone: honor/ignore, node: honor/ignore",
     mk_pod(labels={"foo": ""}, node_selector={"foo": ""},
            constraints=[spread(1, "zone", HARD, FOO), spread(1, "node", HARD, FOO)]),
     [zn("node-a", "zone1", foo=""), zn("node-b", "zone1"), zn("node-x", "zone2", foo=""),
      mk_node("node-y", {"zone": "zone2", "node": "node-y", "foo": ""}, TAINTS)],
     [foo_on("node-a"), foo_on("node-b"), foo_on("node-y")], [U, OK, OK, U]),
    ("two node inclusion Constraints, zone: honor/honor, node: ignore/ignore",
     mk_pod(labels={"foo": ""}, node_selector={"foo": ""},
            constraints=[spread(1, "zone", HARD, FOO, taints_policy="Honor"),
                         spread(1, "node", HARD, FOO, affinity_policy="Ignore")]),
     [zn("node-a", "zone1", foo=""), zn("node-b", "zone1"), zn("node-x", "zone2", foo=""),
      mk_node("node-y", {"zone": "zone2", "node": "node-y", "foo": ""}, TAINTS)],
     [foo_on("node-a"), foo_on("node-b"), foo_on("node-y")], [U, U, OK, U]),
]


@pytest.mark.parametrize(("name", "incoming", "nodes", "pods", "want"), MULTIPLE,
                         ids=[c[0][:90] for c in MULTIPLE])
def test_multiple_constraints(name: str, incoming: Obj, nodes: list[Obj], pods: list[Obj],
                              want: list[str | None]) -> None:
    state, plugin = cluster(nodes, pods)
    assert filter_reasons(state, plugin, incoming, names_of(nodes)) == (Code.SUCCESS, want)


# -- filtering_test.go TestPreFilterState, as Filter verdicts ------------------------------------------------
# (key, maxSkew, minDomains, selfMatch) per hard constraint; TpPairToMatchNum; TpKeyToDomainsNum
Want = tuple[list[tuple[str, int, int, int]], dict[tuple[str, str], int], dict[str, int]]


def upstream_verdicts(nodes: Sequence[Obj], want: Want) -> list[str | None]:
    """Filter's verdict per node from upstream's expected preFilterState (filtering.go Filter/minMatchNum)."""
    constraints, match_num, domains = want
    out: list[str | None] = []
    for n in nodes:
        labels = n["metadata"]["labels"]
        verdict: str | None = None
        for key, max_skew, min_domains, self_match in constraints:
            if key not in labels:
                verdict = UU
                break
            values = [v for (k, _), v in match_num.items() if k == key]
            lowest = min(values) if values else 2**31 - 1
            if domains.get(key, 0) < min_domains:
                lowest = 0
            if match_num.get((key, labels[key]), 0) + self_match - lowest > max_skew:
                verdict = U
                break
        out.append(verdict)
    return out


def zones(z1: int, z2: int) -> dict[tuple[str, str], int]:
    return {("zone", "zone1"): z1, ("zone", "zone2"): z2}


def nodes_num(**counts: int) -> dict[tuple[str, str], int]:
    return {("node", f"node-{k}"): v for k, v in counts.items()}


ABXY_PODS_5 = [foo_on("node-a"), foo_on("node-a"), foo_on("node-b"), foo_on("node-y"), foo_on("node-y")]
ABXY_PODS_7 = [*ABXY_PODS_5, foo_on("node-y"), foo_on("node-y")]
FOO_A_PODS = [mk_pod(labels={"foo": "a"}, node=n) for n in ("node-a", "node-a", "node-b", "node-y", "node-y")]
BAR_PODS = [on("node-a", {"bar": ""}), on("node-b", {"bar": ""}), on("node-b", {"bar": ""}), mk_pod(node="node-c")]
ABC_BAR = [zn("node-a", foo=""), zn("node-b", foo=""), zn("node-c", bar="")]
ABC_TAINTED = [zn("node-a"), zn("node-b"), mk_node("node-c", {"node": "node-c", "bar": ""}, TAINTS)]

PRE_FILTER_STATE: list[tuple[str, Obj, list[Obj], list[Obj], Want]] = [
    ("clean cluster with one spreadConstraint",
     mk_pod(labels={"foo": ""}, constraints=[spread(5, "zone", HARD, {"matchLabels": {"foo": "bar"}})]), ABXY, [],
     ([("zone", 5, 1, 0)], zones(0, 0), {"zone": 2})),
    ("normal case with one spreadConstraint", mk_pod(labels={"foo": ""}, constraints=[spread(1, "zone", HARD, FOO)]),
     ABXY, ABXY_PODS_5, ([("zone", 1, 1, 1)], zones(3, 2), {"zone": 2})),
    ("normal case with null label selector", mk_pod(labels={"foo": ""}, constraints=[spread(1, "zone", HARD, None)]),
     ABXY, ABXY_PODS_5, ([("zone", 1, 1, 0)], zones(0, 0), {"zone": 2})),
    ("normal case with one spreadConstraint, on a 3-zone cluster",
     mk_pod(labels={"foo": ""}, constraints=[spread(1, "zone", HARD, FOO)]),
     [*ABXY, zn("node-o", "zone3"), zn("node-p", "zone3")], ABXY_PODS_5,
     ([("zone", 1, 1, 1)], {**zones(3, 2), ("zone", "zone3"): 0}, {"zone": 3})),
    ("namespace mismatch doesn't count", mk_pod(labels={"foo": ""}, constraints=[spread(1, "zone", HARD, FOO)]), ABXY,
     [foo_on("node-a"), mk_pod(labels={"foo": ""}, ns="ns1", node="node-a"), foo_on("node-b"),
      mk_pod(labels={"foo": ""}, ns="ns2", node="node-y"), foo_on("node-y")],
     ([("zone", 1, 1, 1)], zones(2, 1), {"zone": 2})),
    ("normal case with two spreadConstraints", two(), ABXY, ABXY_PODS_7,
     ([("zone", 1, 1, 1), ("node", 1, 1, 1)], {**zones(3, 4), **nodes_num(a=2, b=1, x=0, y=4)},
      {"zone": 2, "node": 4})),
    ("soft spreadConstraints should be bypassed",
     mk_pod(labels={"foo": ""}, constraints=[spread(1, "zone", SOFT, FOO), spread(1, "zone", HARD, FOO),
                                              spread(1, "node", SOFT, FOO), spread(1, "node", HARD, FOO)]),
     [zn("node-a", "zone1"), zn("node-b", "zone1"), zn("node-y", "zone2")], ABXY_PODS_7,
     ([("zone", 1, 1, 1), ("node", 1, 1, 1)], {**zones(3, 4), **nodes_num(a=2, b=1, y=4)}, {"zone": 2, "node": 3})),
    ("different labelSelectors - simple version", two(FOO, BAR, {"foo": "", "bar": ""}),
     [zn("node-a", "zone1"), zn("node-b", "zone1"), zn("node-y", "zone2")],
     [on("node-a", {"foo": ""}), on("node-b", {"bar": ""})],
     ([("zone", 1, 1, 1), ("node", 1, 1, 1)], {**zones(1, 0), **nodes_num(a=0, b=1, y=0)}, {"zone": 2, "node": 3})),
    ("different labelSelectors - complex pods", two(FOO, BAR, {"foo": "", "bar": ""}),
     [zn("node-a", "zone1"), zn("node-b", "zone1"), zn("node-y", "zone2")],
     [on("node-a", {"foo": ""}), on("node-a", {"foo": "", "bar": ""}), on("node-b", {"foo": ""}),
      on("node-y", {"foo": ""}), on("node-y", {"foo": "", "bar": ""}), on("node-y", {"foo": ""}),
      on("node-y", {"foo": "", "bar": ""})],
     ([("zone", 1, 1, 1), ("node", 1, 1, 1)], {**zones(3, 4), **nodes_num(a=1, b=0, y=2)}, {"zone": 2, "node": 3})),
    ("two spreadConstraints, and with podAffinity", two(node_affinity=("node", "NotIn", ["node-x"])), ABXY, ABXY_PODS_7,
     ([("zone", 1, 1, 1), ("node", 1, 1, 1)], {**zones(3, 4), **nodes_num(a=2, b=1, y=4)}, {"zone": 2, "node": 3})),
    ("NodeAffinityPolicy honored with labelSelectors",
     mk_pod(labels={"foo": ""}, node_selector={"foo": ""}, constraints=[spread(1, "node", HARD, BAR)]),
     ABC_BAR, BAR_PODS, ([("node", 1, 1, 0)], nodes_num(a=1, b=2), {"node": 2})),
    ("NodeAffinityPolicy ignored with labelSelectors",
     mk_pod(labels={"foo": ""}, node_selector={"foo": ""},
            constraints=[spread(1, "node", HARD, BAR, affinity_policy="Ignore")]),
     ABC_BAR, BAR_PODS, ([("node", 1, 1, 0)], nodes_num(a=1, b=2, c=0), {"node": 3})),
    ("NodeAffinityPolicy honored with nodeAffinity",
     mk_pod(labels={"foo": ""}, node_affinity=("foo", "In", [""]), constraints=[spread(1, "node", HARD, BAR)]),
     ABC_BAR, BAR_PODS, ([("node", 1, 1, 0)], nodes_num(a=1, b=2), {"node": 2})),
    ("NodeAffinityPolicy ignored with nodeAffinity",
     mk_pod(labels={"foo": ""}, node_affinity=("foo", "In", [""]),
            constraints=[spread(1, "node", HARD, BAR, affinity_policy="Ignore")]),
     ABC_BAR, BAR_PODS, ([("node", 1, 1, 0)], nodes_num(a=1, b=2, c=0), {"node": 3})),
    ("NodeTaintsPolicy ignored", mk_pod(labels={"foo": ""}, constraints=[spread(1, "node", HARD, BAR)]),
     ABC_TAINTED, BAR_PODS, ([("node", 1, 1, 0)], nodes_num(a=1, b=2, c=0), {"node": 3})),
    ("NodeTaintsPolicy honored",
     mk_pod(labels={"foo": ""}, constraints=[spread(1, "node", HARD, BAR, taints_policy="Honor")]),
     ABC_TAINTED, BAR_PODS, ([("node", 1, 1, 0)], nodes_num(a=1, b=2), {"node": 2})),
    ("NodeTaintsPolicy honored with tolerated taints",
     mk_pod(labels={"foo": ""}, tolerate="node.kubernetes.io/unschedulable",
            constraints=[spread(1, "node", HARD, BAR, taints_policy="Honor")]),
     ABC_TAINTED, BAR_PODS, ([("node", 1, 1, 0)], nodes_num(a=1, b=2, c=0), {"node": 3})),
    ("two node inclusion Constraints, zone: honor/ignore, node: ignore/ignore",
     mk_pod(labels={"foo": ""}, node_selector={"foo": ""},
            constraints=[spread(1, "zone", HARD, FOO), spread(1, "node", HARD, FOO, affinity_policy="Ignore")]),
     [zn("node-a", "zone1", foo=""), zn("node-b", "zone1"), zn("node-x", "zone2", foo="")],
     [foo_on("node-b"), foo_on("node-b"), foo_on("node-x")],
     ([("zone", 1, 1, 1), ("node", 1, 1, 1)], {**zones(0, 1), **nodes_num(a=0, b=2, x=1)}, {"zone": 2, "node": 3})),
    ("two node inclusion Constraints, zone: honor/honor, node: honor/ignore",
     mk_pod(labels={"foo": ""}, constraints=[spread(1, "zone", HARD, FOO, taints_policy="Honor"),
                                              spread(1, "node", HARD, FOO)]),
     [zn("node-a", "zone1", foo=""), mk_node("node-b", {"zone": "zone1", "node": "node-b"}, TAINTS),
      zn("node-x", "zone2", foo="")],
     [foo_on("node-b"), foo_on("node-b"), foo_on("node-x")],
     ([("zone", 1, 1, 1), ("node", 1, 1, 1)], {**zones(0, 1), **nodes_num(a=0, b=2, x=1)}, {"zone": 2, "node": 3})),
    ("two node inclusion Constraints, zone: honor/ignore, node: honor/ignore",
     mk_pod(labels={"foo": ""}, node_selector={"foo": ""},
            constraints=[spread(1, "zone", HARD, FOO), spread(1, "node", HARD, FOO)]),
     [zn("node-a", "zone1"), mk_node("node-b", {"zone": "zone1", "node": "node-b", "foo": ""}, TAINTS),
      zn("node-x", "zone2", foo=""), zn("node-y", "zone2")],
     [foo_on("node-a"), foo_on("node-a"), foo_on("node-x"), foo_on("node-y")],
     ([("zone", 1, 1, 1), ("node", 1, 1, 1)], {**zones(0, 1), **nodes_num(b=0, x=1)}, {"zone": 2, "node": 2})),
    ("two node inclusion Constraints, zone: ignore/ignore, node: honor/honor",
     mk_pod(labels={"foo": ""}, node_selector={"foo": ""},
            constraints=[spread(1, "zone", HARD, FOO, affinity_policy="Ignore"),
                         spread(1, "node", HARD, FOO, taints_policy="Honor")]),
     [zn("node-a", "zone1"), mk_node("node-b", {"zone": "zone1", "node": "node-b", "foo": ""}, TAINTS),
      zn("node-x", "zone2", foo=""), zn("node-y", "zone2", foo="")],
     [foo_on("node-a"), foo_on("node-a"), foo_on("node-x"), foo_on("node-x"), foo_on("node-y")],
     ([("zone", 1, 1, 1), ("node", 1, 1, 1)], {**zones(2, 3), **nodes_num(x=2, y=1)}, {"zone": 2, "node": 2})),
    ("matchLabelKeys ANDed with LabelSelector when LabelSelector isn't empty",
     mk_pod(labels={"foo": "", "bar": "a"}, constraints=[spread(1, "zone", HARD, FOO, match_label_keys=["bar"])]),
     ABXY, [foo_on("node-a"), mk_pod(labels={"foo": "", "bar": "a"}, node="node-a"), foo_on("node-b"),
            mk_pod(labels={"foo": "", "bar": "a"}, node="node-y"), on("node-y", {"bar": ""})],
     ([("zone", 1, 1, 1)], zones(1, 1), {"zone": 2})),
    ("matchLabelKeys ANDed with LabelSelector when LabelSelector is empty",
     mk_pod(labels={"foo": "a"}, constraints=[spread(1, "zone", HARD, {}, match_label_keys=["foo"])]),
     ABXY, FOO_A_PODS, ([("zone", 1, 1, 1)], zones(3, 2), {"zone": 2})),
    ("key in matchLabelKeys is ignored when LabelSelector is nil when feature gate enabled",
     mk_pod(labels={"foo": ""}, constraints=[spread(1, "zone", HARD, None, match_label_keys=["bar"])]),
     ABXY, FOO_A_PODS, ([("zone", 1, 1, 0)], zones(0, 0), {"zone": 2})),
    ("key in matchLabelKeys is ignored when it isn't exist in pod.labels",
     mk_pod(labels={"foo": ""}, constraints=[spread(1, "zone", HARD, FOO, match_label_keys=["bar"])]),
     ABXY, FOO_A_PODS, ([("zone", 1, 1, 1)], zones(3, 2), {"zone": 2})),
]


@pytest.mark.parametrize(("name", "incoming", "nodes", "pods", "want"), PRE_FILTER_STATE,
                         ids=[c[0][:90] for c in PRE_FILTER_STATE])
def test_pre_filter_state_as_filter_verdicts(name: str, incoming: Obj, nodes: list[Obj], pods: list[Obj],
                                             want: Want) -> None:
    state, plugin = cluster(nodes, pods)
    assert filter_reasons(state, plugin, incoming, names_of(nodes)) == (Code.SUCCESS, upstream_verdicts(nodes, want))


def svc(selector: Mapping[str, str], name: str = "svc", namespace: str = "") -> tuple[WorkloadKind, Obj]:
    return "services", {"metadata": {"name": name, "namespace": namespace}, "spec": {"selector": dict(selector)}}


def rs(name: str, selector: Obj, namespace: str = "default") -> tuple[WorkloadKind, Obj]:
    return "replicasets", {"metadata": {"name": name, "namespace": namespace}, "spec": {"selector": selector}}


def test_pre_filter_state_default_constraints() -> None:
    """TestPreFilterState's default-constraint cases (ListDefaulting): which constraints PreFilter keeps."""
    defaults = PodTopologySpread.Args(defaulting_type="List", default_constraints=(
        DefaultConstraint(3, "node", HARD), DefaultConstraint(2, "node", SOFT), DefaultConstraint(5, "rack", HARD)))
    foo_bar = LabelSelector.from_set({"foo": "bar"})
    # "default constraints and a service": the hard ones, with the Service's selector
    _, plugin = cluster([], [], defaults, [svc({"foo": "bar"})])
    pod = parse_pod(mk_pod(labels={"foo": "bar", "baz": "kar"}))
    assert plugin.pre_filter(CycleState(), pod).code == Code.SUCCESS
    assert [(c.topology_key, c.max_skew, c.selector) for c in plugin.constraints(pod, HARD)] == [
        ("node", 3, foo_bar), ("rack", 5, foo_bar)]
    # "default constraints and a service that doesn't match"
    _, plugin = cluster([], [], PodTopologySpread.Args(defaulting_type="List", default_constraints=(
        DefaultConstraint(3, "node", HARD),)), [svc({"baz": "kep"})])
    assert plugin.pre_filter(CycleState(), parse_pod(mk_pod(labels={"foo": "bar"}))).code == Code.SKIP
    # "default constraints and a service, but pod has constraints": only the pod's own hard one
    _, plugin = cluster([], [], PodTopologySpread.Args(defaulting_type="List", default_constraints=(
        DefaultConstraint(2, "node", HARD),)), [svc({"foo": "bar"})])
    own = parse_pod(mk_pod(labels={"foo": "bar", "baz": "tar"}, constraints=[
        spread(1, "zone", HARD, {"matchLabels": {"baz": "tar"}}),
        spread(2, "planet", SOFT, {"matchLabels": {"fot": "rok"}})]))
    assert plugin.pre_filter(CycleState(), own).code == Code.SUCCESS
    assert [(c.topology_key, c.selector) for c in plugin.constraints(own, HARD)] == [
        ("zone", LabelSelector.from_set({"baz": "tar"}))]
    # "default soft constraints and a service": nothing to filter
    _, plugin = cluster([], [], PodTopologySpread.Args(defaulting_type="List", default_constraints=(
        DefaultConstraint(2, "node", SOFT),)), [svc({"foo": "bar"})])
    assert plugin.pre_filter(CycleState(), parse_pod(mk_pod(labels={"foo": "bar"}))).code == Code.SKIP
    # "skip if not specified"
    _, plugin = cluster([zn("node-a", "zone1")], [])
    assert plugin.pre_filter(CycleState(), parse_pod(mk_pod(labels={"foo": ""}))).code == Code.SKIP


# -- scoring_test.go TestPreScoreSkip ------------------------------------------------------------------------
def test_pre_score_skip() -> None:
    nodes = [mk_node("node-a", {HOSTNAME: "node-a"}), mk_node("node-b", {HOSTNAME: "node-b"})]
    state, plugin = cluster(nodes, [])
    assert normalized_scores(state, plugin, mk_pod(ns="default"), ["node-a", "node-b"]) == (Code.SKIP, None)
    args = PodTopologySpread.Args(defaulting_type="List", default_constraints=(DefaultConstraint(2, "planet", SOFT),))
    state, plugin = cluster([mk_node("node-a", {"planet": "mars"})], [], args,
                            [rs("rs1", {"matchExpressions": [{"key": "tar", "operator": "Exists"}]})])
    incoming = mk_pod(ns="default", labels={"foo": "bar", "baz": "sup"}, owner=("apps/v1", "ReplicaSet", "rs2"))
    assert normalized_scores(state, plugin, incoming, ["node-a"]) == (Code.SKIP, None)


# -- scoring_test.go TestPodTopologySpreadScore --------------------------------------------------------------
def hn(name: str, **extra: str) -> Obj:
    return mk_node(name, {HOSTNAME: name, **extra})


def hz(name: str, zone: str) -> Obj:
    return mk_node(name, {"zone": zone, HOSTNAME: name})


def host_pod(*constraints: Obj, labels: Mapping[str, str] | None = None, **kw: Any) -> Obj:
    return mk_pod(labels=labels or {"foo": ""}, constraints=constraints, **kw)


def pods_on(**counts: int) -> list[Obj]:
    """counts of foo pods per node suffix: pods_on(a=2, b=1) puts 2 on node-a and 1 on node-b."""
    return [foo_on(f"node-{k}") for k, v in counts.items() for _ in range(v)]


HOST1 = spread(1, HOSTNAME, SOFT, FOO)
NODE_INCL = [zn("node-a", foo=""), zn("node-b", foo=""), zn("node-c")]
NODE_INCL_TAINTED = [zn("node-a"), zn("node-b"), mk_node("node-c", {"node": "node-c"}, TAINTS)]
FOOBAR_PODS = [on("node-a", {"foo": ""}), on("node-b", {"foo": "", "bar": ""}), on("node-c", {"foo": ""}),
               on("node-c", {"bar": ""})]
ABCD_ZONES = [hz("node-a", "zone1"), hz("node-b", "zone1"), hz("node-c", "zone2"), hz("node-d", "zone2")]

SCORE: list[tuple[str, Obj, list[Obj], list[Obj], list[Obj], list[tuple[WorkloadKind, Obj]], list[int]]] = [
    # (name, pod, existing pods, candidate nodes, failed nodes, workload objects, normalised scores)
    ("one constraint on node, no existing pods", host_pod(HOST1), [], [hn("node-a"), hn("node-b")], [], [],
     [100, 100]),
    ("one constraint on node, only one node is candidate", host_pod(HOST1), pods_on(a=2, b=1), [hn("node-a")],
     [hn("node-b")], [], [100]),
    ("one constraint on node, all nodes have the same number of matching pods", host_pod(HOST1), pods_on(a=1, b=1),
     [hn("node-a"), hn("node-b")], [], [], [100, 100]),
    ("one constraint on node, all 4 nodes are candidates", host_pod(HOST1), pods_on(a=2, b=1, d=3),
     [hn(f"node-{c}") for c in "abcd"], [], [], [20, 60, 100, 0]),
    ("one constraint on node, null selector", host_pod(spread(1, HOSTNAME, SOFT, None)), pods_on(a=2, b=1, d=3),
     [hn(f"node-{c}") for c in "abcd"], [], [], [100, 100, 100, 100]),
    ("one constraint on node, all 4 nodes are candidates, maxSkew=2", host_pod(spread(2, HOSTNAME, SOFT, FOO)),
     pods_on(a=2, b=1, d=3), [hn(f"node-{c}") for c in "abcd"], [], [], [33, 66, 100, 16]),
    ("one constraint on node, all 4 nodes are candidates, maxSkew=3", host_pod(spread(3, HOSTNAME, SOFT, FOO)),
     pods_on(a=4, b=3, c=2, d=1), [hn(f"node-{c}") for c in "abcd"], [], [], [44, 66, 77, 100]),
    ("system defaulting, nodes don't have zone, pods match service", mk_pod(labels={"foo": ""}),
     pods_on(a=4, b=3, c=2, d=1), [hn(f"node-{c}") for c in "abcd"], [], [svc({"foo": ""})], [44, 66, 77, 100]),
    ("one constraint on node, 3 out of 4 nodes are candidates", host_pod(HOST1), pods_on(a=4, b=2, x=1, y=3),
     [hn("node-a"), hn("node-b"), hn("node-x")], [hn("node-y")], [], [33, 83, 100]),
    ("one constraint on node, 3 out of 4 nodes are candidates, one node doesn't match topology key", host_pod(HOST1),
     pods_on(a=4, b=2, x=1, y=3), [hn("node-a"), mk_node("node-b", {"n": "node-b"}), hn("node-x")], [hn("node-y")],
     [], [16, 0, 100]),
    ("one constraint on zone, 3 out of 4 nodes are candidates", host_pod(spread(1, "zone", SOFT, FOO)),
     pods_on(a=4, b=2, x=1, y=3), [hz("node-a", "zone1"), hz("node-b", "zone1"), hz("node-x", "zone2")],
     [hz("node-y", "zone2")], [], [75, 75, 100]),
    ("two Constraints on zone and node, 2 out of 4 nodes are candidates",
     host_pod(spread(1, "zone", SOFT, FOO), HOST1), pods_on(a=2, b=1, x=2, y=4),
     [hz("node-a", "zone1"), hz("node-x", "zone2")], [hz("node-b", "zone1"), hz("node-y", "zone2")], [], [100, 63]),
    ("two Constraints on zone and node, with different labelSelectors",
     host_pod(spread(1, "zone", SOFT, FOO), spread(1, HOSTNAME, SOFT, BAR), labels={"foo": "", "bar": ""}),
     [on("node-a", {"foo": ""}), on("node-b", {"foo": "", "bar": ""}), on("node-y", {"foo": ""}),
      on("node-y", {"bar": ""})],
     [hz("node-a", "zone1"), hz("node-b", "zone1"), hz("node-x", "zone2"), hz("node-y", "zone2")], [], [],
     [60, 20, 100, 60]),
    ("two Constraints on zone and node, with different labelSelectors, some nodes have 0 pods",
     host_pod(spread(1, "zone", SOFT, FOO), spread(1, HOSTNAME, SOFT, BAR), labels={"foo": "", "bar": ""}),
     [on("node-b", {"bar": ""}), on("node-x", {"foo": ""}), on("node-y", {"foo": "", "bar": ""})],
     [hz("node-a", "zone1"), hz("node-b", "zone1"), hz("node-x", "zone2"), hz("node-y", "zone2")], [], [],
     [100, 60, 40, 0]),
    ("two Constraints on zone and node, with different labelSelectors, 3 out of 4 nodes are candidates",
     host_pod(spread(1, "zone", SOFT, FOO), spread(1, HOSTNAME, SOFT, BAR), labels={"foo": "", "bar": ""}),
     [on("node-a", {"foo": ""}), on("node-b", {"foo": "", "bar": ""}), on("node-y", {"foo": ""}),
      on("node-y", {"bar": ""})],
     [hz("node-a", "zone1"), hz("node-b", "zone1"), hz("node-x", "zone2")], [hz("node-y", "zone2")], [],
     [50, 25, 100]),
    ("existing pods in a different namespace do not count", host_pod(HOST1),
     [mk_pod(labels={"foo": ""}, ns="ns1", node="node-a"), *pods_on(a=1, b=2)], [hn("node-a"), hn("node-b")], [], [],
     [100, 33]),
    ("terminating Pods should be excluded", host_pod(HOST1),
     [mk_pod(labels={"foo": ""}, node="node-a", terminating=True), foo_on("node-b")], [hn("node-a"), hn("node-b")],
     [], [], [100, 0]),
    ("minDomains has no effect when ScheduleAnyway", host_pod(spread(2, "node", SOFT, FOO, min_domains=10)),
     pods_on(a=2, b=2, c=1), [zn("node-a"), zn("node-b"), zn("node-c")], [], [], [75, 75, 100]),
    ("NodeAffinityPolicy honoed with labelSelectors",
     host_pod(spread(1, "node", SOFT, FOO), node_selector={"foo": ""}), pods_on(a=2, b=1, c=1), NODE_INCL, [], [],
     [0, 33, 100]),
    ("NodeAffinityPolicy ignored with labelSelectors",
     host_pod(spread(1, "node", SOFT, FOO, affinity_policy="Ignore"), node_selector={"foo": ""}),
     pods_on(a=2, b=1, c=1), NODE_INCL, [], [], [66, 100, 100]),
    ("NodeAffinityPolicy honoed with nodeAffinity",
     host_pod(spread(1, "node", SOFT, FOO), node_affinity=("foo", "In", [""])), pods_on(a=2, b=1, c=1), NODE_INCL,
     [], [], [0, 33, 100]),
    ("NodeAffinityPolicy ignored with nodeAffinity",
     host_pod(spread(1, "node", SOFT, FOO, affinity_policy="Ignore"), node_affinity=("foo", "In", [""])),
     pods_on(a=2, b=1, c=1), NODE_INCL, [], [], [66, 100, 100]),
    ("NodeTaintsPolicy honored", host_pod(spread(1, "node", SOFT, FOO, taints_policy="Honor")),
     pods_on(a=2, b=1, c=1), NODE_INCL_TAINTED, [], [], [0, 33, 100]),
    ("NodeTaintsPolicy ignored", host_pod(spread(1, "node", SOFT, FOO)), pods_on(a=2, b=1, c=1), NODE_INCL_TAINTED,
     [], [], [66, 100, 100]),
    # upstream expects [60, 20, 60, 100] with the gate off; with it on (1.36) baz="" is ANDed into both selectors,
    # nothing matches, every node scores 0 raw and normalises to 100 (computed by hand, not upstream's number)
    ("matchLabelKeys (upstream: ignored when feature gate disabled; here gate on)",
     host_pod(spread(1, "zone", SOFT, FOO, match_label_keys=["baz"]),
              spread(1, HOSTNAME, SOFT, BAR, match_label_keys=["baz"]), labels={"foo": "", "bar": "", "baz": ""}),
     FOOBAR_PODS, ABCD_ZONES, [], [], [100, 100, 100, 100]),
    ("matchLabelKeys ANDed with LabelSelector when LabelSelector is empty",
     host_pod(spread(1, "zone", SOFT, {}, match_label_keys=["foo"]),
              spread(1, HOSTNAME, SOFT, {}, match_label_keys=["bar"]), labels={"foo": "", "bar": ""}),
     FOOBAR_PODS, ABCD_ZONES, [], [], [60, 20, 60, 100]),
    ("matchLabelKeys ANDed with LabelSelector when LabelSelector isn't empty",
     host_pod(spread(1, "zone", SOFT, FOO), spread(1, HOSTNAME, SOFT, BAR, match_label_keys=["baz"]),
              labels={"foo": "", "bar": "", "baz": ""}),
     [on("node-a", {"foo": ""}), on("node-b", {"foo": "", "bar": "", "baz": ""}), on("node-c", {"foo": ""}),
      on("node-c", {"bar": ""}), on("node-c", {"bar": "", "baz": ""})],
     ABCD_ZONES, [], [], [60, 20, 60, 100]),
]


@pytest.mark.parametrize(("name", "incoming", "pods", "nodes", "failed", "objs", "want"), SCORE,
                         ids=[c[0][:90] for c in SCORE])
def test_pod_topology_spread_score(name: str, incoming: Obj, pods: list[Obj], nodes: list[Obj], failed: list[Obj],
                                   objs: list[tuple[WorkloadKind, Obj]], want: list[int]) -> None:
    state, plugin = cluster([*nodes, *failed], pods, SYSTEM, objs)
    assert normalized_scores(state, plugin, incoming, names_of(nodes)) == (Code.SUCCESS, want)


# -- system defaults (not upstream tables: derived by hand from scoring.go) -----------------------------------
def test_system_defaults_weigh_hostname_and_zone_and_keep_zoneless_nodes() -> None:
    # a ReplicaSet selects the pod: hostname (maxSkew 3) and zone (maxSkew 5) spreading. Nodes c and d have no zone:
    # they are not ignored (hostname spreading still applies), they earn no zone credit, and the zone weight
    # counts them as one more ("") domain: log(2+2). Matching pods: a 2, b 0, c 1, d 0.
    objs = [rs("rs1", FOO)]
    nodes = [mk_node("node-a", {HOSTNAME: "node-a", ZONE: "mars"}),
             mk_node("node-b", {HOSTNAME: "node-b", ZONE: "mars"}),
             mk_node("node-c", {HOSTNAME: "node-c"}), mk_node("node-d", {HOSTNAME: "node-d"})]
    pods = [mk_pod(labels={"foo": "tar"}, ns="default", node=n) for n in ("node-a", "node-a", "node-c")]
    state, plugin = cluster(nodes, pods, SYSTEM, objs)
    incoming = mk_pod(ns="default", labels={"foo": "tar", "baz": "sup"}, owner=("apps/v1", "ReplicaSet", "rs1"))
    host_w, zone_w = float(np.log(4 + 2)), float(np.log(2 + 2))
    raw = [round(2 * host_w + 2 + 2 * zone_w + 4), round(0 * host_w + 2 + 2 * zone_w + 4), round(1 * host_w + 2), 2]
    high, low = max(raw), min(raw)
    assert normalized_scores(state, plugin, incoming, names_of(nodes)) == (Code.SUCCESS,
                                                                [100 * (high + low - s) // high for s in raw])
    # the same pod in another namespace: the ReplicaSet is not its owner there, nothing to spread by
    other = mk_pod(ns="other", labels={"foo": "tar"}, owner=("apps/v1", "ReplicaSet", "rs1"))
    assert normalized_scores(state, plugin, other, names_of(nodes)) == (Code.SKIP, None)


def test_list_defaulting_requires_every_key() -> None:
    # with defaultingType List, nodes lacking a default constraint's key are ignored (score 0), as for the pod's own
    args = PodTopologySpread.Args(defaulting_type="List", default_constraints=(DefaultConstraint(1, ZONE, SOFT),))
    nodes = [mk_node("node-a", {ZONE: "z1"}), mk_node("node-b", {ZONE: "z2"}), mk_node("node-c", {})]
    pods = [mk_pod(labels={"app": "web"}, node="node-a")]
    state, plugin = cluster(nodes, pods, args, [svc({"app": "web"})])
    got = normalized_scores(state, plugin, mk_pod(labels={"app": "web"}), names_of(nodes))
    assert got == (Code.SUCCESS, [0, 100, 0])


# -- the incremental counts ----------------------------------------------------------------------------------
HOST_HARD = mk_pod("incoming", labels={"foo": ""}, constraints=[spread(1, "node", HARD, FOO)])


def test_counts_follow_relabel_termination_removal_assume_and_forget() -> None:
    nodes = [zn("node-a"), zn("node-b")]
    state, plugin = cluster(nodes, [])
    names = names_of(nodes)
    assert filter_reasons(state, plugin, HOST_HARD, names)[1] == [OK, OK]
    first = foo_on("node-a", "first")
    assert state.observe_bound_pod(parse_pod(first)) == "added"
    assert filter_reasons(state, plugin, HOST_HARD, names)[1] == [U, OK]
    relabelled = {**first, "metadata": {**first["metadata"], "labels": {"other": ""}}}
    assert state.observe_bound_pod(parse_pod(relabelled)) == "relabelled"
    assert filter_reasons(state, plugin, HOST_HARD, names)[1] == [OK, OK]
    assert state.observe_bound_pod(parse_pod(first)) == "relabelled"
    assert filter_reasons(state, plugin, HOST_HARD, names)[1] == [U, OK]
    deleting = {**first, "metadata": {**first["metadata"], "deletionTimestamp": "2026-11-30T12:00:00Z"}}
    assert state.observe_bound_pod(parse_pod(deleting)) == "relabelled"  # being deleted: no longer counted
    assert filter_reasons(state, plugin, HOST_HARD, names)[1] == [OK, OK]
    assert state.remove_pod(first["metadata"]["uid"]) is not None
    assert filter_reasons(state, plugin, HOST_HARD, names)[1] == [OK, OK]
    assumed = parse_pod(mk_pod("assumed", labels={"foo": ""}))
    state.assume(assumed, "node-b")
    assert filter_reasons(state, plugin, HOST_HARD, names)[1] == [OK, U]
    state.forget(assumed.uid)
    assert filter_reasons(state, plugin, HOST_HARD, names)[1] == [OK, OK]


def test_a_node_removed_and_added_back_recounts_its_pods() -> None:
    state, plugin = cluster([zn("node-a", "z1"), zn("node-b", "z2")], pods_on(b=2))
    incoming = mk_pod(labels={"foo": ""}, constraints=[spread(1, "zone", HARD, FOO)])
    assert filter_reasons(state, plugin, incoming, ["node-a", "node-b"])[1] == [OK, U]
    state.remove_node("node-b")
    assert filter_reasons(state, plugin, incoming, ["node-a"])[1] == [OK]
    state.upsert_node(zn("node-c", "z2"))  # reuses node-b's row, where nothing is counted now
    assert filter_reasons(state, plugin, incoming, ["node-a", "node-c"])[1] == [OK, OK]
    state.upsert_node(zn("node-b", "z2"))  # its two pods were kept aside and count again
    assert filter_reasons(state, plugin, incoming, ["node-a", "node-b", "node-c"])[1] == [OK, U, U]
    # a relabelled node moves its pods to the new domain
    state.upsert_node(zn("node-b", "z1"))
    assert filter_reasons(state, plugin, incoming, ["node-a", "node-b", "node-c"])[1] == [U, U, OK]


def test_table_growth_beyond_64_rows_keeps_counts() -> None:
    nodes = [mk_node(f"n{i:03d}", {"zone": f"z{i % 3}", "node": f"n{i:03d}"}) for i in range(30)]
    state, plugin = cluster(nodes, [foo_on("n000"), foo_on("n001"), foo_on("n001")])
    incoming = mk_pod(labels={"foo": ""}, constraints=[spread(1, "zone", HARD, FOO), spread(2, "node", HARD, FOO)])
    # zones z0 1, z1 2, z2 0 (the minimum): only z2 passes the zone constraint
    assert filter_reasons(state, plugin, incoming, ["n000", "n001", "n002", "n004"])[1] == [U, U, OK, U]
    capacity = state.table.capacity
    for i in range(30, 140):
        state.upsert_node(mk_node(f"n{i:03d}", {"zone": f"z{i % 3}", "node": f"n{i:03d}"}))
    assert state.table.capacity > capacity
    for n in ("n137", "n137", "n137", "n138"):  # rows past the first 64: n137 in z2, n138 in z0
        state.observe_bound_pod(parse_pod(foo_on(n)))
    names = ["n000", "n001", "n002", "n137", "n138", "n139", "n120"]
    # zones z0 2, z1 2 (the minimum), z2 3: z2 is out; n001 (2 pods) still fails the node constraint
    assert filter_reasons(state, plugin, incoming, names)[1] == [OK, U, U, U, OK, OK, OK]


def test_scheduler_spreads_a_burst_over_zones() -> None:
    scheduler, api = make()
    for i, zone in enumerate(("a", "a", "b", "b", "c", "c")):
        scheduler.handlers.on_node_event("ADDED", fake_node(f"n{i}", labels={ZONE: zone}))
    for i in range(6):
        body = fake_pod(f"web{i}")
        body["metadata"]["labels"] = {"app": "web"}
        body["spec"]["topologySpreadConstraints"] = [
            {"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": HARD,
             "labelSelector": {"matchLabels": {"app": "web"}}}]
        api.add_pod(body)
    drain(scheduler, api)
    bound = dict(api.binds)
    assert len(bound) == 6
    per_zone: dict[str, int] = {}
    for node_name in bound.values():
        zone = "abc"[int(node_name[1:]) // 2]
        per_zone[zone] = per_zone.get(zone, 0) + 1
    assert per_zone == {"a": 2, "b": 2, "c": 2}


def test_reason_follows_constraint_order_when_a_later_key_is_missing() -> None:
    # Not an upstream table case; derived from filtering.go Filter, which checks the constraints in order and
    # returns at the first that fails: node-x fails the zone skew (constraint 0) before its missing "node" label
    # (constraint 1) is looked at, so upstream says Unschedulable / ErrReasonConstraintsNotMatch there.
    nodes = [zn("node-a", "zone1"), zn("node-b", "zone2"), mk_node("node-x", {"zone": "zone2"})]
    state, plugin = cluster(nodes, [foo_on("node-b")])
    incoming = mk_pod(labels={"foo": ""}, constraints=[spread(1, "zone", HARD, FOO), spread(1, "node", HARD, FOO)])
    assert filter_reasons(state, plugin, incoming, names_of(nodes)) == (Code.SUCCESS, [OK, U, U])
