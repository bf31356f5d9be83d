"""InterPodAffinity, table-driven from kube-scheduler's own tests (pkg/scheduler/framework/plugins/interpodaffinity:
filtering_test.go TestRequiredAffinitySingleNode / TestRequiredAffinityMultipleNodes, scoring_test.go
TestPreferredAffinity / TestPreferredAffinityWithHardPodAffinitySymmetricWeight), then the incremental
per-row counts behind it (pods added, removed, relabelled, assumed and forgotten; nodes leaving and coming
back; the table growing past its first 64 rows) and one run through the whole Scheduler.

Upstream's objects are rebuilt as JSON: a node has only the labels upstream gives it (no automatic hostname
label) and a pod without a namespace is in "" (upstream's defaultNamespace). Filter verdicts compare the reason
our Filtered reports first for a row with the status message upstream returns for that node; scores compare
our normalised scores with upstream's NodeScoreList after NormalizeScore.

Left out, on purpose:
- "PodAffinity/PodAntiAffinity fails PreFilter with an invalid ... label syntax" and "invalid (Anti)Affinity
  fails PreScore": the value "{{.bad-value.}}" is rejected by the API server's pod validation
  (ValidatePodAffinityTermSelector), so no such pod reaches a scheduler; our selector parser does not
  validate label values.
- TestPreFilterDisabled: upstream's Filter errors without PreFilter state; ours re-runs PreFilter (what-if runs).
- TestGetTPMapMatchingIncomingAffinityAntiAffinity, TestPreFilterStateClone, TestPreFilterStateAddRemovePod:
  they inspect upstream's private maps; the add/remove one is covered below as filter outcomes
  (test_counts_follow_pods_added_removed_relabelled).
- matchLabelKeys / mismatchLabelKeys: upstream has no scheduler-level cases: since 1.31 (GA in 1.33) the API
  server merges them into labelSelector when the pod is created and the scheduler never looks at them. The
  two tests at the end check our parser is idempotent on a merged pod and merges an unmerged one.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from metrics_sched.framework import Code, Handle
from metrics_sched.model.podinfo import parse_pod
from metrics_sched.plugins.inter_pod_affinity.plugin import (
    ERR_AFFINITY,
    ERR_ANTI_AFFINITY,
    ERR_EXISTING_ANTI_AFFINITY,
    InterPodAffinity,
)
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
AFF, ANTI, EXIST = ERR_AFFINITY, ERR_ANTI_AFFINITY, ERR_EXISTING_ANTI_AFFINITY
SKIP = Code.SKIP


# -- builders (st.MakePod / st.MakeNode, as JSON) ------------------------------------------------------------
def mk_node(name: str, labels: Mapping[str, str] | None = None) -> Obj:
    body = fake_node(name)
    body["metadata"]["labels"] = dict(labels or {})  # upstream's nodes carry only the labels the case gives
    return body


def req(key: str, op: str, *values: str) -> Obj:
    expr: Obj = {"key": key, "operator": op}
    if values:
        expr["values"] = list(values)
    return expr


def term(*exprs: Obj, topo: str = "", namespaces: Sequence[str] | None = None,
         ns_selector: Obj | None = None) -> Obj:
    body: Obj = {"labelSelector": {"matchExpressions": list(exprs)}}
    if topo:
        body["topologyKey"] = topo
    if namespaces is not None:
        body["namespaces"] = list(namespaces)
    if ns_selector is not None:
        body["namespaceSelector"] = ns_selector
    return body


def weighted(weight: int, t: Obj) -> Obj:
    return {"weight": weight, "podAffinityTerm": t}


def affinity(*, req_aff: Sequence[Obj] = (), req_anti: Sequence[Obj] = (), pref_aff: Sequence[Obj] = (),
             pref_anti: Sequence[Obj] = ()) -> Obj:
    out: Obj = {}
    if req_aff or pref_aff:
        out["podAffinity"] = {}
        if req_aff:
            out["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] = list(req_aff)
        if pref_aff:
            out["podAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"] = list(pref_aff)
    if req_anti or pref_anti:
        out["podAntiAffinity"] = {}
        if req_anti:
            out["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] = list(req_anti)
        if pref_anti:
            out["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"] = list(pref_anti)
    return out


def mk_pod(name: str = "", *, ns: str = "", labels: Mapping[str, str] | None = None, node: str | None = None,
           aff: Obj | None = None) -> Obj:
    body = fake_pod(name or f"p-{uuid.uuid4().hex[:8]}", namespace=ns, node_name=node)
    if labels:
        body["metadata"]["labels"] = dict(labels)
    if aff:
        body["spec"]["affinity"] = aff
    return body


def ns_obj(name: str, labels: Mapping[str, str] | None = None) -> Obj:
    return {"metadata": {"name": name, "labels": dict(labels or {})}}


# scoring_test.go's `namespaces`, which TestRequiredAffinitySingleNode uses too
TEAM1, TEAM2 = {"team": "team1"}, {"team": "team2"}
NAMESPACES = [ns_obj("subteam1.team1", TEAM1), ns_obj("subteam2.team1", TEAM1), ns_obj("subteam1.team2", TEAM2),
              ns_obj("subteam2.team2", TEAM2)]
TEAM1_SELECTOR = {"matchExpressions": [req("team", "In", "team1")]}


def cluster(nodes: Sequence[Obj], pods: Sequence[Obj], namespaces: Sequence[Obj] = (),
            args: Mapping[str, Any] | None = None) -> tuple[ClusterState, InterPodAffinity]:
    state = ClusterState()
    for n in nodes:
        state.upsert_node(n)
    for ns in namespaces:
        state.namespaces.upsert(ns)
    for p in pods:
        state.observe_bound_pod(parse_pod(p))
    handle = Handle(state, MetricCache(), InFlightLedgerStore(), FakeAPI())
    return state, InterPodAffinity(dict(args or {}), handle)


# -- filtering_test.go TestRequiredAffinitySingleNode --------------------------------------------------------
POD_LABEL = {"service": "securityscan"}
POD_LABEL2 = {"security": "S1"}
NODE1 = mk_node("node1", {"region": "r1", "zone": "z11"})


def ex(key: str, topo: str) -> Obj:
    return term(req(key, "Exists"), topo=topo)


def existing(**kw: Any) -> Obj:
    return mk_pod(labels=POD_LABEL, node="node1", **kw)


IN_SECURITYSCAN = req("service", "In", "securityscan", "value2")
IN_ANTIVIRUS = req("service", "In", "antivirusscan", "value2")

SINGLE: list[tuple[str, Obj, list[Obj], Code | None, str | None]] = [
    ("A pod that has no required pod affinity scheduling rules can schedule onto a node with no existing pods",
     mk_pod(), [], SKIP, None),
    ("satisfies with requiredDuringSchedulingIgnoredDuringExecution in PodAffinity using In operator that matches "
     "the existing pod",
     mk_pod(labels=POD_LABEL2, aff=affinity(req_aff=[term(IN_SECURITYSCAN, topo="region")])), [existing()],
     None, None),
    ("satisfies the pod with requiredDuringSchedulingIgnoredDuringExecution in PodAffinity using not in operator "
     "in labelSelector that matches the existing pod",
     mk_pod(labels=POD_LABEL2, aff=affinity(req_aff=[term(req("service", "NotIn", "securityscan3", "value3"),
                                                        topo="region")])),
     [existing()], None, None),
    ("Does not satisfy the PodAffinity with labelSelector because of diff Namespace",
     mk_pod(labels=POD_LABEL2, aff=affinity(req_aff=[term(IN_SECURITYSCAN, namespaces=["DiffNameSpace"])])),
     [mk_pod(ns="ns", labels=POD_LABEL, node="node1")], None, AFF),
    ("Doesn't satisfy the PodAffinity because of unmatching labelSelector with the existing pod",
     mk_pod(labels=POD_LABEL, aff=affinity(req_aff=[term(IN_ANTIVIRUS)])), [existing()], None, AFF),
    ("satisfies the PodAffinity with different label Operators in multiple RequiredDuringSchedulingIgnoredDuring"
     "Execution",
     mk_pod(labels=POD_LABEL2, aff=affinity(req_aff=[
         term(req("service", "Exists"), req("wrongkey", "DoesNotExist"), topo="region"),
         term(req("service", "In", "securityscan"), req("service", "NotIn", "WrongValue"), topo="region")])),
     [existing()], None, None),
    ("The labelSelector requirements(items of matchExpressions) are ANDed, the pod cannot schedule onto the node "
     "because one of the matchExpression item don't match.",
     mk_pod(labels=POD_LABEL2, aff=affinity(req_aff=[
         term(req("service", "Exists"), req("wrongkey", "DoesNotExist"), topo="region"),
         term(req("service", "In", "securityscan2"), req("service", "NotIn", "WrongValue"), topo="region")])),
     [existing()], None, AFF),
    ("satisfies the PodAffinity and PodAntiAffinity with the existing pod",
     mk_pod(labels=POD_LABEL2, aff=affinity(req_aff=[term(IN_SECURITYSCAN, topo="region")],
                                            req_anti=[term(IN_ANTIVIRUS, topo="node")])),
     [existing()], None, None),
    ("satisfies the PodAffinity and PodAntiAffinity and PodAntiAffinity symmetry with the existing pod",
     mk_pod(labels=POD_LABEL2, aff=affinity(req_aff=[term(IN_SECURITYSCAN, topo="region")],
                                            req_anti=[term(IN_ANTIVIRUS, topo="node")])),
     [existing(aff=affinity(req_anti=[term(IN_ANTIVIRUS, topo="node")]))], None, None),
    ("satisfies the PodAffinity but doesn't satisfy the PodAntiAffinity with the existing pod",
     mk_pod(labels=POD_LABEL2, aff=affinity(req_aff=[term(IN_SECURITYSCAN, topo="region")],
                                            req_anti=[term(IN_SECURITYSCAN, topo="zone")])),
     [existing()], None, ANTI),
    ("satisfies the PodAffinity and PodAntiAffinity but doesn't satisfy PodAntiAffinity symmetry with the existing "
     "pod",
     mk_pod(labels=POD_LABEL, aff=affinity(req_aff=[term(IN_SECURITYSCAN, topo="region")],
                                           req_anti=[term(IN_ANTIVIRUS, topo="node")])),
     [existing(aff=affinity(req_anti=[term(IN_SECURITYSCAN, topo="zone")]))], None, EXIST),
    ("pod matches its own Label in PodAffinity and that matches the existing pod Labels",
     mk_pod(labels=POD_LABEL, aff=affinity(req_aff=[term(req("service", "NotIn", "securityscan", "value2"),
                                                       topo="region")])),
     [mk_pod(labels=POD_LABEL, node="node2")], None, AFF),
    ("verify that PodAntiAffinity from existing pod is respected when pod has no AntiAffinity constraints. doesn't "
     "satisfy PodAntiAffinity symmetry with the existing pod",
     mk_pod(labels=POD_LABEL), [existing(aff=affinity(req_anti=[term(IN_SECURITYSCAN, topo="zone")]))], None, EXIST),
    ("verify that PodAntiAffinity from existing pod is respected when pod has no AntiAffinity constraints. satisfy "
     "PodAntiAffinity symmetry with the existing pod",
     mk_pod(labels=POD_LABEL),
     [existing(aff=affinity(req_anti=[term(req("service", "NotIn", "securityscan", "value2"), topo="zone")]))],
     SKIP, None),
    ("satisfies the PodAntiAffinity with existing pod but doesn't satisfy PodAntiAffinity symmetry with incoming pod",
     mk_pod(labels=POD_LABEL, aff=affinity(req_anti=[term(req("service", "Exists"), topo="region"),
                                                     term(req("security", "Exists"), topo="region")])),
     [mk_pod(labels=POD_LABEL2, node="node1", aff=affinity(req_anti=[term(req("security", "Exists"), topo="zone")]))],
     None, ANTI),
    ("PodAntiAffinity symmetry check a1: incoming pod and existing pod partially match each other on AffinityTerms",
     mk_pod(labels=POD_LABEL, aff=affinity(req_anti=[term(req("service", "Exists"), topo="zone"),
                                                     term(req("security", "Exists"), topo="zone")])),
     [mk_pod(labels=POD_LABEL2, node="node1", aff=affinity(req_anti=[term(req("security", "Exists"), topo="zone")]))],
     None, ANTI),
    ("PodAntiAffinity symmetry check a2: incoming pod and existing pod partially match each other on AffinityTerms",
     mk_pod(labels=POD_LABEL2, aff=affinity(req_anti=[term(req("security", "Exists"), topo="zone")])),
     [mk_pod(labels=POD_LABEL, node="node1", aff=affinity(req_anti=[term(req("service", "Exists"), topo="zone"),
                                                                   term(req("security", "Exists"), topo="zone")]))],
     None, EXIST),
    ("PodAntiAffinity symmetry check b1: incoming pod and existing pod partially match each other on AffinityTerms",
     mk_pod(labels={"abc": "", "xyz": ""}, aff=affinity(req_anti=[term(req("abc", "Exists"), topo="zone"),
                                                                  term(req("def", "Exists"), topo="zone")])),
     [mk_pod(labels={"def": "", "xyz": ""}, node="node1",
             aff=affinity(req_anti=[ex("abc", "zone"), ex("def", "zone")]))],
     None, ANTI),
    ("PodAntiAffinity symmetry check b2: incoming pod and existing pod partially match each other on AffinityTerms",
     mk_pod(labels={"def": "", "xyz": ""}, aff=affinity(req_anti=[term(req("abc", "Exists"), topo="zone"),
                                                                  term(req("def", "Exists"), topo="zone")])),
     [mk_pod(labels={"abc": "", "xyz": ""}, node="node1",
             aff=affinity(req_anti=[ex("abc", "zone"), ex("def", "zone")]))],
     None, ANTI),
    ("affinity with NamespaceSelector",
     mk_pod(labels=POD_LABEL2, aff=affinity(req_aff=[term(IN_SECURITYSCAN, topo="region",
                                                          ns_selector=TEAM1_SELECTOR)])),
     [mk_pod(ns="subteam1.team1", labels=POD_LABEL, node="node1")], None, None),
    ("affinity with non-matching NamespaceSelector",
     mk_pod(labels=POD_LABEL2, aff=affinity(req_aff=[term(IN_SECURITYSCAN, topo="region",
                                                          ns_selector=TEAM1_SELECTOR)])),
     [mk_pod(ns="subteam1.team2", labels=POD_LABEL, node="node1")], None, AFF),
    ("anti-affinity with matching NamespaceSelector",
     mk_pod(ns="subteam1.team1", labels=POD_LABEL2,
            aff=affinity(req_anti=[term(IN_SECURITYSCAN, topo="zone", ns_selector=TEAM1_SELECTOR)])),
     [mk_pod(ns="subteam2.team1", labels=POD_LABEL, node="node1")], None, ANTI),
    ("anti-affinity with matching all NamespaceSelector",
     mk_pod(ns="subteam1.team1", labels=POD_LABEL2,
            aff=affinity(req_anti=[term(IN_SECURITYSCAN, topo="zone", ns_selector={})])),
     [mk_pod(ns="subteam2.team1", labels=POD_LABEL, node="node1")], None, ANTI),
    ("anti-affinity with non-matching NamespaceSelector",
     mk_pod(ns="subteam1.team1", labels=POD_LABEL2,
            aff=affinity(req_anti=[term(IN_SECURITYSCAN, topo="zone", ns_selector=TEAM1_SELECTOR)])),
     [mk_pod(ns="subteam1.team2", labels=POD_LABEL, node="node1")], None, None),
]


@pytest.mark.parametrize(("name", "incoming", "pods", "pre_code", "reason"), SINGLE, ids=[c[0][:90] for c in SINGLE])
def test_required_affinity_single_node(name: str, incoming: Obj, pods: list[Obj], pre_code: Code | None,
                                       reason: str | None) -> None:
    state, plugin = cluster([NODE1], pods, NAMESPACES)
    code, got = filter_reasons(state, plugin, incoming, ["node1"])
    assert code == (pre_code or Code.SUCCESS)
    assert got == [reason]


# -- filtering_test.go TestRequiredAffinityMultipleNodes -----------------------------------------------------
RG_CHINA = {"region": "China"}
RG_CHINA_AZ1 = {"region": "China", "az": "az1"}
RG_INDIA = {"region": "India"}


def n3(a: str, b: str, c: str) -> list[Obj]:
    return [mk_node(a, RG_CHINA), mk_node(b, RG_CHINA_AZ1), mk_node(c, RG_INDIA)]


def rz(name: str, zone: str, region: str = "r1") -> Obj:
    return mk_node(name, {"region": region, "zone": zone, "hostname": name})


MULTI: list[tuple[str, Obj, list[Obj], list[Obj], Code | None, list[str | None]]] = [
    ("A pod can be scheduled onto all the nodes that have the same topology key & label value with one of them has "
     "an existing pod that matches the affinity rules",
     mk_pod(aff=affinity(req_aff=[term(req("foo", "In", "bar"), topo="region")])),
     [mk_pod("p1", labels={"foo": "bar"}, node="node1")], n3("node1", "node2", "node3"), None, [None, None, AFF]),
    ("The affinity rule is to schedule all of the pods of this collection to the same zone. The first pod of the "
     "collection should not be blocked from being scheduled onto any node, even there's no existing pod that "
     "matches the rule anywhere.",
     mk_pod(labels={"foo": "bar", "service": "securityscan"},
            aff=affinity(req_aff=[term(req("foo", "In", "bar"), topo="zone"),
                                  term(req("service", "In", "securityscan"), topo="zone")])),
     [mk_pod("p1", labels={"foo": "bar"}, node="nodeA")],
     [mk_node("nodeA", {"zone": "az1", "hostname": "h1"}), mk_node("nodeB", {"zone": "az2", "hostname": "h2"})],
     None, [None, None]),
    ("The first pod of the collection can only be scheduled on nodes labelled with the requested topology keys",
     mk_pod(labels={"foo": "bar", "service": "securityscan"},
            aff=affinity(req_aff=[term(req("foo", "In", "bar"), topo="zone"),
                                  term(req("service", "In", "securityscan"), topo="zone")])),
     [mk_pod("p1", labels={"foo": "bar"}, node="nodeA")],
     [mk_node("nodeA", {"zoneLabel": "az1", "hostname": "h1"}),
      mk_node("nodeB", {"zoneLabel": "az2", "hostname": "h2"})],
     None, [AFF, AFF]),
    ("NodeA and nodeB have same topologyKey and label value. NodeA has an existing pod that matches the inter pod "
     "affinity rule. The pod can not be scheduled onto nodeA and nodeB.",
     mk_pod(aff=affinity(req_anti=[term(req("foo", "In", "abc"), topo="region")])),
     [mk_pod(labels={"foo": "abc"}, node="nodeA")],
     [mk_node("nodeA", {"region": "r1", "hostname": "nodeA"}), mk_node("nodeB", {"region": "r1", "hostname": "nodeB"})],
     None, [ANTI, ANTI]),
    ("This test ensures that anti-affinity matches a pod when any term of the anti-affinity rule matches a pod.",
     mk_pod(aff=affinity(req_anti=[term(req("foo", "In", "abc"), topo="region"),
                                   term(req("service", "In", "securityscan"), topo="zone")])),
     [mk_pod(labels={"foo": "abc", "service": "securityscan"}, node="nodeA")],
     [rz("nodeA", "z1"), rz("nodeB", "z2")], None, [ANTI, ANTI]),
    ("NodeA and nodeB have same topologyKey and label value. NodeA has an existing pod that matches the inter pod "
     "affinity rule. The pod can not be scheduled onto nodeA and nodeB but can be scheduled onto nodeC",
     mk_pod(aff=affinity(req_anti=[term(req("foo", "In", "abc"), topo="region")])),
     [mk_pod(labels={"foo": "abc"}, node="nodeA")], n3("nodeA", "nodeB", "nodeC"), None, [ANTI, ANTI, None]),
    ("NodeA and nodeB have same topologyKey and label value. NodeA has an existing pod that matches the inter pod "
     "affinity rule. The pod can not be scheduled onto nodeA, nodeB, but can be scheduled onto nodeC (NodeC has an "
     "existing pod that match the inter pod affinity rule but in different namespace)",
     mk_pod(ns="NS1", labels={"foo": "123"}, aff=affinity(req_anti=[term(req("foo", "In", "bar"), topo="region")])),
     [mk_pod(ns="NS1", labels={"foo": "bar"}, node="nodeA"),
      mk_pod(ns="NS2", node="nodeC", aff=affinity(req_anti=[term(req("foo", "In", "123"), topo="region")]))],
     n3("nodeA", "nodeB", "nodeC"), None, [ANTI, ANTI, None]),
    ("Test existing pod's anti-affinity: if an existing pod has a term with invalid topologyKey, labelSelector of "
     "the term is firstly checked, and then topologyKey of the term is also checked",
     mk_pod(labels={"foo": ""}),
     [mk_pod(node="nodeA", aff=affinity(req_anti=[ex("foo", "invalid-node-label")]))],
     [rz("nodeA", "z1"), rz("nodeB", "z1")], SKIP, [None, None]),
    ("Test incoming pod's anti-affinity: even if labelSelector matches, we still check if topologyKey matches",
     mk_pod(node="nodeA", aff=affinity(req_anti=[ex("foo", "invalid-node-label")])),
     [mk_pod(labels={"foo": ""}, node="nodeA")],
     [rz("nodeA", "z1"), rz("nodeB", "z1")], None, [None, None]),
    ("Test existing pod's anti-affinity: incoming pod wouldn't considered as a fit as it violates each existingPod's "
     "terms on all nodes",
     mk_pod(labels={"foo": "", "bar": ""}),
     [mk_pod(node="nodeA", aff=affinity(req_anti=[ex("foo", "zone")])),
      mk_pod(node="nodeA", aff=affinity(req_anti=[ex("bar", "region")]))],
     [rz("nodeA", "z1"), rz("nodeB", "z2")], None, [EXIST, EXIST]),
    ("Test incoming pod's anti-affinity: incoming pod wouldn't considered as a fit as it at least violates one "
     "anti-affinity rule of existingPod",
     mk_pod(aff=affinity(req_anti=[ex("foo", "zone"), ex("bar", "region")])),
     [mk_pod(labels={"foo": ""}, node="nodeA"), mk_pod(labels={"bar": ""}, node="nodeB")],
     [rz("nodeA", "z1"), rz("nodeB", "z2")], None, [ANTI, ANTI]),
    ("Test existing pod's anti-affinity: only when labelSelector and topologyKey both match, it's counted as a single "
     "term match - case when one term has invalid topologyKey",
     mk_pod(labels={"foo": "", "bar": ""}),
     [mk_pod(node="nodeA", aff=affinity(req_anti=[ex("foo", "invalid-node-label"), ex("bar", "zone")]))],
     [rz("nodeA", "z1"), rz("nodeB", "z2")], None, [EXIST, None]),
    ("Test incoming pod's anti-affinity: only when labelSelector and topologyKey both match, it's counted as a single "
     "term match - case when one term has invalid topologyKey",
     mk_pod(aff=affinity(req_anti=[ex("foo", "invalid-node-label"), ex("bar", "zone")])),
     [mk_pod("podA", labels={"foo": "", "bar": ""}, node="nodeA")],
     [rz("nodeA", "z1"), rz("nodeB", "z2")], None, [ANTI, None]),
    ("Test existing pod's anti-affinity: only when labelSelector and topologyKey both match, it's counted as a single "
     "term match - case when all terms have valid topologyKey",
     mk_pod(labels={"foo": "", "bar": ""}),
     [mk_pod(node="nodeA", aff=affinity(req_anti=[ex("foo", "region"), ex("bar", "zone")]))],
     [rz("nodeA", "z1"), rz("nodeB", "z2")], None, [EXIST, EXIST]),
    ("Test incoming pod's anti-affinity: only when labelSelector and topologyKey both match, it's counted as a single "
     "term match - case when all terms have valid topologyKey",
     mk_pod(aff=affinity(req_anti=[ex("foo", "region"), ex("bar", "zone")])),
     [mk_pod(labels={"foo": "", "bar": ""}, node="nodeA")],
     [rz("nodeA", "z1"), rz("nodeB", "z2")], None, [ANTI, ANTI]),
    ("Test existing pod's anti-affinity: existingPod on nodeA and nodeB has at least one anti-affinity term matches "
     "incoming pod, so incoming pod can only be scheduled to nodeC",
     mk_pod(labels={"foo": "", "bar": ""}),
     [mk_pod(node="nodeA", aff=affinity(req_anti=[ex("foo", "zone"), ex("labelA", "zone")])),
      mk_pod(node="nodeB", aff=affinity(req_anti=[ex("bar", "zone"), ex("labelB", "zone")]))],
     [rz("nodeA", "z1"), rz("nodeB", "z2"), rz("nodeC", "z3")], None, [EXIST, EXIST, None]),
    ("Test incoming pod's affinity: firstly check if all affinityTerms match, and then check if all topologyKeys "
     "match",
     mk_pod(aff=affinity(req_aff=[ex("foo", "region"), ex("bar", "zone")])),
     [mk_pod("pod1", labels={"foo": "", "bar": ""}, node="nodeA")],
     [rz("nodeA", "z1"), rz("nodeB", "z1")], None, [None, None]),
    ("Test incoming pod's affinity: firstly check if all affinityTerms match, and then check if all topologyKeys "
     "match, and the match logic should be satisfied on the same pod",
     mk_pod(aff=affinity(req_aff=[ex("foo", "region"), ex("bar", "zone")])),
     [mk_pod("pod1", labels={"foo": ""}, node="nodeA"), mk_pod("pod2", labels={"bar": ""}, node="nodeB")],
     [rz("nodeA", "z1"), rz("nodeB", "z2")], None, [AFF, AFF]),
]


@pytest.mark.parametrize(("name", "incoming", "pods", "nodes", "pre_code", "reasons"), MULTI,
                         ids=[c[0][:90] for c in MULTI])
def test_required_affinity_multiple_nodes(name: str, incoming: Obj, pods: list[Obj], nodes: list[Obj],
                                          pre_code: Code | None, reasons: list[str | None]) -> None:
    state, plugin = cluster(nodes, pods, [ns_obj("NS1")])
    code, got = filter_reasons(state, plugin, incoming, [n["metadata"]["name"] for n in nodes])
    assert got == reasons
    assert code == (pre_code or Code.SUCCESS)


# -- scoring_test.go TestPreferredAffinity -------------------------------------------------------------------
AZ1, AZ2 = {"az": "az1"}, {"az": "az2"}
S1, S2 = {"security": "S1"}, {"security": "S2"}


def sec_in(value: str) -> Obj:
    return req("security", "In", value)


STAY_S1_REGION = affinity(pref_aff=[weighted(5, term(sec_in("S1"), topo="region"))])
STAY_S2_REGION = affinity(pref_aff=[weighted(6, term(sec_in("S2"), topo="region"))])
AFFINITY3 = affinity(pref_aff=[
    weighted(8, term(req("security", "NotIn", "S1"), sec_in("S2"), topo="region")),
    weighted(2, term(req("security", "Exists"), req("wrongkey", "DoesNotExist"), topo="region"))])
HARD_AFFINITY = affinity(req_aff=[term(req("security", "In", "S1", "value2"), topo="region"),
                                  term(req("security", "Exists"), req("wrongkey", "DoesNotExist"), topo="region")])
AWAY_S1_AZ = affinity(pref_anti=[weighted(5, term(sec_in("S1"), topo="az"))])
AWAY_S2_AZ = affinity(pref_anti=[weighted(5, term(sec_in("S2"), topo="az"))])
STAY_S1_REGION_AWAY_S2_AZ = affinity(pref_aff=[weighted(8, term(sec_in("S1"), topo="region"))],
                                     pref_anti=[weighted(5, term(sec_in("S2"), topo="az"))])
AFFINITY_NS_SELECTOR = affinity(pref_aff=[weighted(5, term(sec_in("S1"), topo="region", namespaces=["subteam2.team2"],
                                                           ns_selector=TEAM1_SELECTOR))])
ANTI_AFFINITY_NS_SELECTOR = affinity(pref_anti=[weighted(5, term(sec_in("S1"), topo="region",
                                                                 namespaces=["subteam2.team2"],
                                                                 ns_selector=TEAM1_SELECTOR))])


def on(node: str, labels: Mapping[str, str] | None = None, aff: Obj | None = None, ns: str = "") -> Obj:
    return mk_pod(ns=ns, labels=labels, node=node, aff=aff)


def nodes_of(*labels: Mapping[str, str]) -> list[Obj]:
    return [mk_node(f"node{i + 1}", lab) for i, lab in enumerate(labels)]


M = 100
PREFERRED: list[tuple[str, Obj, list[Obj], list[Obj], bool, list[int] | None]] = [
    ("all nodes are same priority as Affinity is nil", mk_pod(labels=S1), [],
     nodes_of(RG_CHINA, RG_INDIA, AZ1), False, None),
    ("Affinity: pod that matches topology key & pods in nodes will get high score comparing to otherswhich doesn't "
     "match either pods in nodes or in topology key",
     mk_pod(labels=S1, aff=STAY_S1_REGION), [on("node1", S1), on("node2", S2), on("node3", S1)],
     nodes_of(RG_CHINA, RG_INDIA, AZ1), False, [M, 0, 0]),
    ("All the nodes that have the same topology key & label value with one of them has an existing pod that match "
     "the affinity rules, have the same score",
     mk_pod(aff=STAY_S1_REGION), [on("node1", S1)], nodes_of(RG_CHINA, RG_CHINA_AZ1, RG_INDIA), False, [M, M, 0]),
    ("Affinity: nodes in one region has more matching pods comparing to other region, so the region which has more "
     "matches will get high score",
     mk_pod(labels=S1, aff=STAY_S2_REGION),
     [on("node1", S2), on("node1", S2), on("node2", S2), on("node3", S2), on("node4", S2), on("node5", S2)],
     nodes_of(RG_CHINA, RG_INDIA, RG_CHINA, RG_CHINA, RG_INDIA), False, [M, 0, M, M, 0]),
    ("Affinity: different Label operators and values for pod affinity scheduling preference, including some match "
     "failures",
     mk_pod(labels=S1, aff=AFFINITY3), [on("node1", S1), on("node2", S2), on("node3", S1)],
     nodes_of(RG_CHINA, RG_INDIA, AZ1), False, [20, M, 0]),
    ("Affinity symmetry: considered only the preferredDuringSchedulingIgnoredDuringExecution in pod affinity "
     "symmetry",
     mk_pod(labels=S2), [on("node1", S1, STAY_S1_REGION), on("node2", S2, STAY_S2_REGION)],
     nodes_of(RG_CHINA, RG_INDIA, AZ1), False, [0, M, 0]),
    ("Affinity symmetry with namespace selector",
     mk_pod(ns="subteam1.team1", labels=S1), [on("node1", S1, AFFINITY_NS_SELECTOR), on("node2", S2, STAY_S2_REGION)],
     nodes_of(RG_CHINA, RG_INDIA, AZ1), False, [M, 0, 0]),
    ("AntiAffinity symmetry with namespace selector",
     mk_pod(ns="subteam1.team1", labels=S1),
     [on("node1", S1, ANTI_AFFINITY_NS_SELECTOR), on("node2", S2, STAY_S2_REGION)],
     nodes_of(RG_CHINA, RG_INDIA, AZ1), False, [0, M, M]),
    ("Affinity symmetry: considered RequiredDuringSchedulingIgnoredDuringExecution in pod affinity symmetry",
     mk_pod(labels=S1), [on("node1", S1, HARD_AFFINITY), on("node2", S2, HARD_AFFINITY)],
     nodes_of(RG_CHINA, RG_INDIA, AZ1), False, [M, M, 0]),
    ("Anti Affinity: pod that does not match existing pods in node will get high score",
     mk_pod(labels=S1, aff=AWAY_S1_AZ), [on("node1", S1), on("node2", S2)], nodes_of(AZ1, RG_CHINA), False, [0, M]),
    ("Anti Affinity: pod that does not match topology key & match the pods in nodes will get higher score comparing "
     "to others",
     mk_pod(labels=S1, aff=AWAY_S1_AZ), [on("node1", S1), on("node2", S1)], nodes_of(AZ1, RG_CHINA), False, [0, M]),
    ("Anti Affinity: one node has more matching pods comparing to other node, so the node which has more unmatches "
     "will get high score",
     mk_pod(labels=S1, aff=AWAY_S1_AZ), [on("node1", S1), on("node1", S1), on("node2", S2)],
     nodes_of(AZ1, RG_INDIA), False, [0, M]),
    ("Anti Affinity symmetry: the existing pods in node which has anti affinity match will get high score",
     mk_pod(labels=S2), [on("node1", S1, AWAY_S2_AZ), on("node2", S2, AWAY_S1_AZ)], nodes_of(AZ1, AZ2), False, [0, M]),
    ("Affinity and Anti Affinity: considered only preferredDuringSchedulingIgnoredDuringExecution in both pod "
     "affinity & anti affinity",
     mk_pod(labels=S1, aff=STAY_S1_REGION_AWAY_S2_AZ), [on("node1", S1), on("node2", S1)],
     nodes_of(RG_CHINA, AZ1), False, [M, 0]),
    ("Affinity and Anti Affinity: considering both affinity and anti-affinity, the pod to schedule and existing pods "
     "have the same labels",
     mk_pod(labels=S1, aff=STAY_S1_REGION_AWAY_S2_AZ),
     [on("node1", S1), on("node1", S1), on("node2", S1), on("node3", S1), on("node3", S1), on("node4", S1),
      on("node5", S1)],
     nodes_of(RG_CHINA_AZ1, RG_INDIA, RG_CHINA, RG_CHINA, RG_INDIA), False, [M, 0, M, M, 0]),
    ("Affinity and Anti Affinity and symmetry: considered only preferredDuringSchedulingIgnoredDuringExecution in "
     "both pod affinity & anti affinity & symmetry",
     mk_pod(labels=S1, aff=STAY_S1_REGION_AWAY_S2_AZ),
     [on("node1", S1), on("node2", S2), on("node3", aff=STAY_S1_REGION_AWAY_S2_AZ), on("node4", aff=AWAY_S1_AZ)],
     nodes_of(RG_CHINA, AZ1, RG_INDIA, AZ2), False, [M, 0, M, 0]),
    ("Avoid panic when partial nodes in a topology don't have pods with affinity",
     mk_pod(labels=S1), [on("node1", S1), on("node2", aff=STAY_S1_REGION_AWAY_S2_AZ)],
     nodes_of(RG_CHINA, RG_CHINA), False, [0, 0]),
    ("Affinity with pods matching NamespaceSelector",
     mk_pod(ns="subteam1.team1", labels=S1, aff=AFFINITY_NS_SELECTOR),
     [on("node1", S1, ns="subteam1.team1"), on("node1", S1, ns="subteam1.team1"), on("node1", S1, ns="subteam1.team2"),
      on("node2", S1, ns="subteam2.team1")],
     nodes_of(RG_CHINA, RG_INDIA), False, [M, 0]),
    ("Affinity with pods matching both NamespaceSelector and Namespaces fields",
     mk_pod(ns="subteam1.team1", labels=S1, aff=AFFINITY_NS_SELECTOR),
     [on("node1", S1, ns="subteam1.team1"), on("node1", S1, ns="subteam1.team1"), on("node1", S1, ns="subteam2.team2"),
      on("node2", S1, ns="subteam2.team1")],
     nodes_of(RG_CHINA, RG_INDIA), False, [M, 0]),
    ("Affinity with pods matching NamespaceSelector (anti-affinity)",
     mk_pod(ns="subteam1.team1", labels=S1, aff=ANTI_AFFINITY_NS_SELECTOR),
     [on("node1", S1, ns="subteam1.team1"), on("node1", S1, ns="subteam1.team1"), on("node1", S1, ns="subteam1.team2"),
      on("node2", S1, ns="subteam2.team1")],
     nodes_of(RG_CHINA, RG_INDIA), False, [0, M]),
    ("Affinity with pods matching both NamespaceSelector and Namespaces fields (anti-affinity)",
     mk_pod(ns="subteam1.team1", labels=S1, aff=ANTI_AFFINITY_NS_SELECTOR),
     [on("node1", S1, ns="subteam1.team1"), on("node1", S1, ns="subteam1.team1"), on("node1", S1, ns="subteam2.team2"),
      on("node2", S1, ns="subteam2.team1")],
     nodes_of(RG_CHINA, RG_INDIA), False, [0, M]),
    ("Ignore preferred terms of existing pods",
     mk_pod(labels=S2), [on("node1", S1, STAY_S1_REGION_AWAY_S2_AZ), on("node2", S2, STAY_S2_REGION)],
     nodes_of(RG_CHINA, RG_INDIA), True, None),
    ("Do not ignore preferred terms of existing pods",
     mk_pod(labels=S2), [on("node1", S1, STAY_S1_REGION_AWAY_S2_AZ), on("node2", S2, STAY_S2_REGION)],
     nodes_of(RG_CHINA, RG_INDIA), False, [0, M]),
    ("No nodes to score", mk_pod(labels=S2), [], [], False, None),
]


@pytest.mark.parametrize(("name", "incoming", "pods", "nodes", "ignore_existing", "want"), PREFERRED,
                         ids=[c[0][:90] for c in PREFERRED])
def test_preferred_affinity(name: str, incoming: Obj, pods: list[Obj], nodes: list[Obj], ignore_existing: bool,
                            want: list[int] | None) -> None:
    state, plugin = cluster(nodes, pods, NAMESPACES, {"hardPodAffinityWeight": 1,
                                                     "ignorePreferredTermsOfExistingPods": ignore_existing})
    code, got = normalized_scores(state, plugin, incoming, [n["metadata"]["name"] for n in nodes])
    assert code == (Code.SKIP if want is None else Code.SUCCESS)
    assert got == want


# -- scoring_test.go TestPreferredAffinityWithHardPodAffinitySymmetricWeight ---------------------------------
HARD_POD_AFFINITY = affinity(req_aff=[term(req("service", "In", "S1"), topo="region", namespaces=["", "subteam2.team2"],
                                           ns_selector=TEAM1_SELECTOR)])
SERVICE_S1 = {"service": "S1"}
HARD: list[tuple[str, str, int, list[int] | None]] = [
    ("with default weight", "", 1, [M, M, 0]),
    ("with zero weight", "", 0, None),
    ("with no matching namespace", "subteam1.team2", 1, None),
    ("with matching NamespaceSelector", "subteam1.team1", 1, [M, M, 0]),
    ("with matching Namespaces", "subteam2.team2", 1, [M, M, 0]),
]


@pytest.mark.parametrize(("name", "namespace", "weight", "want"), HARD, ids=[c[0] for c in HARD])
def test_preferred_affinity_with_hard_pod_affinity_symmetric_weight(name: str, namespace: str, weight: int,
                                                                    want: list[int] | None) -> None:
    nodes = nodes_of(RG_CHINA, RG_INDIA, AZ1)
    pods = [on("node1", aff=HARD_POD_AFFINITY), on("node2", aff=HARD_POD_AFFINITY)]
    state, plugin = cluster(nodes, pods, NAMESPACES, {"hardPodAffinityWeight": weight})
    code, got = normalized_scores(state, plugin, mk_pod(ns=namespace, labels=SERVICE_S1), ["node1", "node2", "node3"])
    assert code == (Code.SKIP if want is None else Code.SUCCESS)
    assert got == want


# -- scoring over the feasible rows only (upstream scores only the nodes passed to PreScore) -----------------
def test_scores_cover_only_the_feasible_rows_but_count_pods_everywhere() -> None:
    # TestPreferredAffinity "nodes in one region has more matching pods", with node1 and node4 filtered out:
    # the pods there still count for their regions (upstream counts over all nodes), the normalisation is
    # over the rows scored.
    nodes = nodes_of(RG_CHINA, RG_INDIA, RG_CHINA, RG_CHINA, RG_INDIA)
    pods = [on("node1", S2), on("node1", S2), on("node2", S2), on("node3", S2), on("node4", S2), on("node5", S2)]
    state, plugin = cluster(nodes, pods)
    assert normalized_scores(state, plugin, mk_pod(labels=S1, aff=STAY_S2_REGION), ["node2", "node3", "node5"]) == (
        Code.SUCCESS, [0, M, 0])


# -- matchLabelKeys / mismatchLabelKeys (not upstream: see the module docstring) ------------------------------
def test_match_label_keys_merged_by_the_api_server_are_not_merged_twice() -> None:
    nodes = [rz("nodeA", "z1"), rz("nodeB", "z2")]
    pods = [mk_pod(labels={"app": "web", "rev": "1"}, node="nodeA"), mk_pod(labels={"app": "web", "rev": "2"},
                                                                              node="nodeB")]
    state, plugin = cluster(nodes, pods)
    as_created = term(req("app", "In", "web"), req("rev", "In", "2"), topo="zone")  # rev merged by the API server
    as_created["matchLabelKeys"] = ["rev"]
    incoming = mk_pod(labels={"app": "web", "rev": "2"}, aff=affinity(req_anti=[as_created]))
    assert filter_reasons(state, plugin, incoming, ["nodeA", "nodeB"])[1] == [None, ANTI]
    unmerged = term(req("app", "In", "web"), topo="zone")  # an API server that does not merge
    unmerged["matchLabelKeys"] = ["rev"]
    incoming = mk_pod(labels={"app": "web", "rev": "2"}, aff=affinity(req_anti=[unmerged]))
    assert filter_reasons(state, plugin, incoming, ["nodeA", "nodeB"])[1] == [None, ANTI]
    mismatch = term(req("app", "In", "web"), topo="zone")
    mismatch["mismatchLabelKeys"] = ["rev"]  # rev NotIn (2): only the other revision repels
    incoming = mk_pod(labels={"app": "web", "rev": "2"}, aff=affinity(req_anti=[mismatch]))
    assert filter_reasons(state, plugin, incoming, ["nodeA", "nodeB"])[1] == [ANTI, None]


# -- the incremental counts ----------------------------------------------------------------------------------
def anti_zone(key: str = "app", value: str = "web") -> Obj:
    return affinity(req_anti=[term(req(key, "In", value), topo="zone")])


def test_counts_follow_pods_added_removed_relabelled() -> None:
    # TestPreFilterStateAddRemovePod's situation as filter outcomes: adding a matching pod blocks its domain,
    # removing it (or relabelling it so it no longer matches) frees it again.
    nodes = [mk_node("nodeA", {"region": "r1", "zone": "z11"}), mk_node("nodeB", {"region": "r1", "zone": "z12"}),
             mk_node("nodeC", {"region": "r2", "zone": "z21"})]
    state, plugin = cluster(nodes, [])
    names = ["nodeA", "nodeB", "nodeC"]
    anti_region = mk_pod("pending", labels={"foo": "bar"},
                         aff=affinity(req_anti=[term(req("foo", "In", "bar"), topo="region")]))
    assert filter_reasons(state, plugin, anti_region, names) == (Code.SUCCESS, [None, None, None])

    added = mk_pod("added", labels={"foo": "bar"}, node="nodeB")
    assert state.observe_bound_pod(parse_pod(added)) == "added"
    assert filter_reasons(state, plugin, anti_region, names)[1] == [ANTI, ANTI, None]

    relabelled = {**added, "metadata": {**added["metadata"], "labels": {"foo": "baz"}}}
    assert state.observe_bound_pod(parse_pod(relabelled)) == "relabelled"
    assert filter_reasons(state, plugin, anti_region, names)[1] == [None, None, None]
    assert state.observe_bound_pod(parse_pod(added)) == "relabelled"
    assert filter_reasons(state, plugin, anti_region, names)[1] == [ANTI, ANTI, None]

    assert state.remove_pod(added["metadata"]["uid"]) is not None
    assert filter_reasons(state, plugin, anti_region, names)[1] == [None, None, None]

    # the existing pod's own required anti-affinity (symmetry) is counted and uncounted with it
    guard = mk_pod("guard", labels={"x": "y"}, node="nodeC", aff=affinity(req_anti=[
        term(req("foo", "In", "bar"), topo="zone")]))
    state.observe_bound_pod(parse_pod(guard))
    plain = mk_pod("plain", labels={"foo": "bar"})
    assert filter_reasons(state, plugin, plain, names) == (Code.SUCCESS, [None, None, EXIST])
    state.remove_pod(guard["metadata"]["uid"])
    assert filter_reasons(state, plugin, plain, names) == (Code.SKIP, [None, None, None])


def test_assumed_pods_count_at_once_and_forget_undoes_them() -> None:
    state, plugin = cluster([rz("nodeA", "z1"), rz("nodeB", "z2")], [])
    replica = mk_pod("r0", labels={"app": "web"}, aff=anti_zone())
    info = parse_pod(replica)
    state.assume(info, "nodeA")
    second = mk_pod("r1", labels={"app": "web"}, aff=anti_zone())
    assert filter_reasons(state, plugin, second, ["nodeA", "nodeB"])[1] == [ANTI, None]
    state.forget(info.uid)
    assert filter_reasons(state, plugin, second, ["nodeA", "nodeB"])[1] == [None, None]
    # the assumed pod's own term is carried too (symmetry), and goes with forget
    state.assume(info, "nodeB")
    plain = mk_pod("plain", labels={"app": "web"})
    assert filter_reasons(state, plugin, plain, ["nodeA", "nodeB"]) == (Code.SUCCESS, [None, EXIST])
    state.forget(info.uid)
    assert filter_reasons(state, plugin, plain, ["nodeA", "nodeB"]) == (Code.SKIP, [None, None])


def test_a_node_removed_and_added_back_recounts_its_pods() -> None:
    state, plugin = cluster([rz("nodeA", "z1"), rz("nodeB", "z2")], [])
    incoming = mk_pod("p", labels={"app": "web"}, aff=anti_zone())
    assert filter_reasons(state, plugin, incoming, ["nodeA", "nodeB"])[1] == [None, None]  # the query is registered
    bound = mk_pod("b", labels={"app": "web"}, node="nodeB",
                   aff=affinity(pref_aff=[weighted(7, term(req("app", "In", "web"), topo="zone"))]))
    state.observe_bound_pod(parse_pod(bound))
    assert filter_reasons(state, plugin, incoming, ["nodeA", "nodeB"])[1] == [None, ANTI]
    state.remove_node("nodeB")
    state.upsert_node(rz("nodeC", "z2"))  # takes nodeB's row: nothing is counted there
    assert filter_reasons(state, plugin, incoming, ["nodeA", "nodeC"])[1] == [None, None]
    # nothing left to score by (upstream: Skip; all-zero scores are the same to the cycle)
    assert normalized_scores(state, plugin, mk_pod(labels={"app": "web"}), ["nodeA", "nodeC"])[1] in (None, [0, 0])
    state.upsert_node(rz("nodeB", "z3"))  # the bound pod waited for its node and counts again
    assert filter_reasons(state, plugin, incoming, ["nodeA", "nodeB", "nodeC"])[1] == [None, ANTI, None]
    assert normalized_scores(state, plugin, mk_pod(labels={"app": "web"}), ["nodeA", "nodeB", "nodeC"]) == (
        Code.SUCCESS, [0, M, 0])


def test_table_growth_beyond_64_rows_keeps_counts() -> None:
    nodes = [mk_node(f"n{i:03d}", {"zone": f"z{i % 10}", "hostname": f"n{i:03d}"}) for i in range(40)]
    state, plugin = cluster(nodes, [mk_pod(labels={"app": "web"}, node="n001")])
    incoming = mk_pod("p", labels={"app": "web"}, aff=affinity(req_anti=[term(req("app", "In", "web"),
                                                                             topo="hostname")]))
    guard = mk_pod("guard", labels={"x": ""}, node="n002",
                   aff=affinity(req_anti=[term(req("app", "Exists"), topo="zone")]))
    state.observe_bound_pod(parse_pod(guard))
    assert filter_reasons(state, plugin, incoming, ["n001", "n002", "n012", "n003"])[1] == [ANTI, EXIST, EXIST, None]
    capacity = state.table.capacity
    for i in range(40, 150):  # the table grows (at least once) under the registered query and carried term
        state.upsert_node(mk_node(f"n{i:03d}", {"zone": f"z{i % 10}", "hostname": f"n{i:03d}"}))
    assert state.table.capacity > capacity
    state.observe_bound_pod(parse_pod(mk_pod(labels={"app": "web"}, node="n140")))
    state.observe_bound_pod(parse_pod(mk_pod(labels={"x": ""}, node="n133", aff=affinity(req_anti=[
        term(req("app", "Exists"), topo="hostname")]))))
    names = ["n001", "n002", "n012", "n003", "n140", "n133", "n149", "n142"]
    assert filter_reasons(state, plugin, incoming, names)[1] == [ANTI, EXIST, EXIST, None, ANTI, EXIST, None, EXIST]


def test_scheduler_keeps_anti_affine_replicas_apart_within_one_burst() -> None:
    scheduler, api = make()
    for name in ("n0", "n1", "n2"):
        scheduler.handlers.on_node_event("ADDED", fake_node(name))
    anti_host = affinity(req_anti=[term(req("app", "In", "web"), topo="kubernetes.io/hostname")])
    for i in range(4):
        body = fake_pod(f"web{i}")
        body["metadata"]["labels"] = {"app": "web"}
        body["spec"]["affinity"] = anti_host
        api.add_pod(body)
    drain(scheduler, api)
    bound = dict(api.binds)
    placed = [bound[f"default/web{i}"] for i in range(4) if f"default/web{i}" in bound]
    assert sorted(placed) == ["n0", "n1", "n2"]
    [left] = [f"default/web{i}" for i in range(4) if f"default/web{i}" not in bound]
    [event] = api.events_for(left, "FailedScheduling")
    assert ERR_ANTI_AFFINITY in event.note


def test_pre_score_skips_when_no_term_lands_on_a_node_with_its_key() -> None:
    # Not an upstream table case; derived from scoring.go PreScore: a term only adds to topologyScore when the
    # existing pod's node has the term's topologyKey, and `if index == -1 { return fwk.NewStatus(fwk.Skip) }`.
    # Here the only pod with a preferred term sits on a node without "zone": upstream skips.
    pods = [mk_pod(labels={"app": "web"}, node="nodeB",
                   aff=affinity(pref_aff=[weighted(7, term(req("app", "In", "web"), topo="zone"))]))]
    state, plugin = cluster([rz("nodeA", "z1"), mk_node("nodeB", {"hostname": "nodeB"})], pods)
    assert normalized_scores(state, plugin, mk_pod(labels={"app": "web"}), ["nodeA", "nodeB"]) == (Code.SKIP, None)
