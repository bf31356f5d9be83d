"""VolumeZone, table-driven from kube-scheduler 1.36.3's own tests (pkg/scheduler/framework/plugins/volumezone/
volume_zone_test.go: TestSingleZone, TestMultiZone, TestWithBinding, TestIsSchedulableAfterPersistentVolumeClaimAdded,
TestIsSchedulableAfterStorageClassAdded, TestIsSchedulableAfterPersistentVolumeChange), then the vectorised Filter
over several nodes at once.

Upstream's objects are rebuilt as JSON. Differences, on purpose:
- "unbound volume immediate binding mode": upstream's class has no volumeBindingMode at all and expects
  `VolumeBindingMode not set for StorageClass "Class_Immediate"`. The API server defaults the field to
  Immediate, so no watched class lacks it; with Immediate the reason is `PersistentVolume had no name`.
- Not-found messages are the informer's singular ones (`storageclass.storage.k8s.io "Class_0" not found`), not
  the fake listers' plural ones.
- PV update hints: the event carries only the new PV, so an update that keeps the topology labels queues too
  (upstream skips it); "error-wrong-*-object" cases queue, as upstream does on a conversion error.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pytest

from metrics_sched.framework import ClusterIndexes, Code, CycleState, Handle, QueueingHint
from metrics_sched.model.podinfo import parse_pod
from metrics_sched.model.volumes import parse_claim, parse_storage_class, parse_volume
from metrics_sched.plugins.volume_zone.plugin import ERR_REASON_CONFLICT, VolumeZone
from metrics_sched.plugins.volumes import VolumeStore
from metrics_sched.state.cluster_state import ClusterState
from metrics_sched.telemetry.cache import MetricCache
from metrics_sched.telemetry.ledger import InFlightLedgerStore
from tests.unit.fakes import FakeAPI
from tests.unit.fakes import node as fake_node
from tests.unit.fakes import pod as fake_pod

pytestmark = pytest.mark.unit

Obj = dict[str, Any]
BETA_ZONE = "failure-domain.beta.kubernetes.io/zone"
BETA_REGION = "failure-domain.beta.kubernetes.io/region"
ZONE = "topology.kubernetes.io/zone"
REGION = "topology.kubernetes.io/region"
UU, SKIP, OK = Code.UNRESOLVABLE, Code.SKIP, Code.SUCCESS


def pv(name: str, labels: Mapping[str, str] | None = None) -> Obj:
    return {"metadata": {"name": name, "labels": dict(labels or {})}, "spec": {}}


def pvc(name: str, volume: str = "", storage_class: str | None = None, namespace: str = "default") -> Obj:
    spec: Obj = {"volumeName": volume} if volume else {}
    if storage_class is not None:
        spec["storageClassName"] = storage_class
    return {"metadata": {"name": name, "namespace": namespace}, "spec": spec}


def storage_class(name: str, mode: str | None = None) -> Obj:
    body: Obj = {"metadata": {"name": name}, "provisioner": "p"}
    if mode:
        body["volumeBindingMode"] = mode
    return body


def pod_with(claim: str | None, namespace: str = "default") -> Obj:
    volumes = [{"name": "v", "persistentVolumeClaim": {"claimName": claim}}] if claim is not None else []
    return fake_pod("pod_1", namespace=namespace, volumes=volumes)


def mk_node(name: str, labels: Mapping[str, str] | None = None) -> Obj:
    body = fake_node(name)
    body["metadata"]["labels"] = dict(labels or {})  # upstream's nodes carry only the labels the case gives
    return body


def cluster(pvs: Sequence[Obj], pvcs: Sequence[Obj], classes: Sequence[Obj] = (),
            nodes: Sequence[Obj] = ()) -> tuple[ClusterState, VolumeZone]:
    state = ClusterState()
    indexes = ClusterIndexes()
    volumes = indexes.declare(VolumeStore)
    for body in pvs:
        volumes.upsert_volume(body)
    for body in pvcs:
        volumes.upsert_claim(body)
    for body in classes:
        volumes.upsert_class(body)
    for body in nodes:
        state.upsert_node(body)
    return state, VolumeZone({}, Handle(state, MetricCache(), InFlightLedgerStore(), FakeAPI(), indexes=indexes))


def run(state: ClusterState, plugin: VolumeZone, incoming: Obj, node: str) -> tuple[Code, str, Code, str]:
    """PreFilter (code, reason), then the Filter on `node` (SUCCESS or UU with its reason), as upstream's tests
    call Filter even after a PreFilter failure or skip (it then recomputes or has nothing to check)."""
    info = parse_pod(incoming)
    cycle = CycleState()
    status = plugin.pre_filter(cycle, info)
    verdict = plugin.filter(cycle, info, state.table)
    row = state.table.index[node]
    if verdict.feasible[row]:
        return status.code, status.reason, OK, ""
    return status.code, status.reason, UU, next(r for r, rows in verdict.reasons.items() if rows[row])


# -- TestSingleZone ------------------------------------------------------------------------------------------
SINGLE_PVS = [
    pv("Vol_1", {BETA_ZONE: "us-west1-a"}),
    pv("Vol_2", {BETA_REGION: "us-west1", "uselessLabel": "none"}),
    pv("Vol_3", {BETA_REGION: "us-west1"}),
    pv("Vol_Stable_1", {ZONE: "us-west1-a"}),
    pv("Vol_Stable_2", {REGION: "us-west1", "uselessLabel": "none"}),
    pv("Vol_Stable_3", {ZONE: "us-west1-a", REGION: "us-west1-a"}),
]
SINGLE_PVCS = [pvc("PVC_1", "Vol_1"), pvc("PVC_2", "Vol_2"), pvc("PVC_3", "Vol_3"), pvc("PVC_4", "Vol_not_exist"),
               pvc("PVC_Stable_1", "Vol_Stable_1"), pvc("PVC_Stable_2", "Vol_Stable_2"),
               pvc("PVC_Stable_3", "Vol_Stable_3")]
# (name, claim, node labels, PreFilter code, Filter code)
SINGLE = [
    ("pod without volume", None, {BETA_ZONE: "us-west1-a"}, SKIP, OK),
    ("node without labels", "PVC_1", {}, OK, OK),
    ("beta zone label matched", "PVC_1", {BETA_ZONE: "us-west1-a", "uselessLabel": "none"}, OK, OK),
    ("beta region label matched", "PVC_2", {BETA_REGION: "us-west1", "uselessLabel": "none"}, OK, OK),
    ("beta region label doesn't match", "PVC_2", {BETA_REGION: "no_us-west1", "uselessLabel": "none"}, OK, UU),
    ("beta zone label doesn't match", "PVC_1", {BETA_ZONE: "no_us-west1-a", "uselessLabel": "none"}, OK, UU),
    ("zone label matched", "PVC_Stable_1", {ZONE: "us-west1-a", "uselessLabel": "none"}, OK, OK),
    ("region label matched", "PVC_Stable_2", {REGION: "us-west1", "uselessLabel": "none"}, OK, OK),
    ("region label doesn't match", "PVC_Stable_2", {REGION: "no_us-west1", "uselessLabel": "none"}, OK, UU),
    ("zone label doesn't match", "PVC_Stable_1", {ZONE: "no_us-west1-a", "uselessLabel": "none"}, OK, UU),
    ("pv with zone and region, node with only zone", "PVC_Stable_3", {ZONE: "us-west1-a"}, OK, UU),
    ("pv with zone,node with beta zone", "PVC_Stable_1", {BETA_ZONE: "us-west1-a"}, OK, UU),
    ("pv with beta label,node with ga label, matched", "PVC_1", {ZONE: "us-west1-a"}, OK, OK),
    ("pv with beta label,node with ga label, don't match", "PVC_1", {ZONE: "us-west1-b"}, OK, UU),
]


@pytest.mark.parametrize(("name", "claim", "labels", "pre", "verdict"), SINGLE, ids=[c[0] for c in SINGLE])
def test_single_zone(name: str, claim: str | None, labels: dict[str, str], pre: Code, verdict: Code) -> None:
    state, plugin = cluster(SINGLE_PVS, SINGLE_PVCS, nodes=[mk_node("host1", labels)])
    pre_code, _, code, reason = run(state, plugin, pod_with(claim), "host1")
    assert (pre_code, code) == (pre, verdict)
    if code == UU:
        assert reason == ERR_REASON_CONFLICT


# -- TestMultiZone -------------------------------------------------------------------------------------------
MULTI_PVS = [
    pv("Vol_1", {BETA_ZONE: "us-west1-a"}),
    pv("Vol_2", {BETA_ZONE: "us-west1-b", "uselessLabel": "none"}),
    pv("Vol_3", {BETA_ZONE: "us-west1-c__us-west1-a"}),
    pv("Vol_Stable_1", {ZONE: "us-west1-a"}),
    pv("Vol_Stable_2", {ZONE: "us-west1-c__us-west1-a"}),
]
MULTI_PVCS = [pvc("PVC_1", "Vol_1"), pvc("PVC_2", "Vol_2"), pvc("PVC_3", "Vol_3"), pvc("PVC_4", "Vol_not_exist"),
              pvc("PVC_Stable_1", "Vol_Stable_1"), pvc("PVC_Stable_2", "Vol_Stable_2")]
MULTI = [
    ("node without labels", "PVC_3", {}, OK),
    ("beta zone label matched", "PVC_3", {BETA_ZONE: "us-west1-a", "uselessLabel": "none"}, OK),
    ("beta zone label doesn't match", "PVC_1", {BETA_ZONE: "us-west1-b", "uselessLabel": "none"}, UU),
    ("zone label matched", "PVC_Stable_2", {ZONE: "us-west1-a", "uselessLabel": "none"}, OK),
    ("zone label doesn't match", "PVC_Stable_1", {ZONE: "us-west1-b", "uselessLabel": "none"}, UU),
]


@pytest.mark.parametrize(("name", "claim", "labels", "verdict"), MULTI, ids=[c[0] for c in MULTI])
def test_multi_zone(name: str, claim: str, labels: dict[str, str], verdict: Code) -> None:
    state, plugin = cluster(MULTI_PVS, MULTI_PVCS, nodes=[mk_node("host1", labels)])
    pre_code, _, code, reason = run(state, plugin, pod_with(claim), "host1")
    assert (pre_code, code) == (OK, verdict)
    if code == UU:
        assert reason == ERR_REASON_CONFLICT


# -- TestWithBinding -----------------------------------------------------------------------------------------
BINDING_CLASSES = [storage_class("Class_Immediate", "Immediate"), storage_class("Class_Wait", "WaitForFirstConsumer")]
BINDING_PVCS = [pvc("PVC_1", "Vol_1"), pvc("PVC_NoSC", storage_class="Class_0"), pvc("PVC_EmptySC"),
                pvc("PVC_WaitSC", storage_class="Class_Wait"), pvc("PVC_ImmediateSC", storage_class="Class_Immediate")]
# (name, claim, PreFilter code, its reason, Filter code, its reason)
BINDING = [
    ("label zone failure domain matched", "PVC_1", OK, "", OK, ""),
    ("unbound volume empty storage class", "PVC_EmptySC",
     UU, "PersistentVolumeClaim had no pv name and storageClass name",
     UU, "PersistentVolumeClaim had no pv name and storageClass name"),
    ("unbound volume no storage class", "PVC_NoSC",
     UU, 'storageclass.storage.k8s.io "Class_0" not found', UU, 'storageclass.storage.k8s.io "Class_0" not found'),
    # see the module docstring: the class is Immediate, as the API server defaults it
    ("unbound volume immediate binding mode", "PVC_ImmediateSC",
     UU, "PersistentVolume had no name", UU, "PersistentVolume had no name"),
    ("unbound volume wait binding mode", "PVC_WaitSC", SKIP, "", OK, ""),
    # not in upstream's tables: a claim bound to a PV that does not exist, and a claim that does not exist
    ("bound to a missing pv", "PVC_4", UU, 'persistentvolume "Vol_not_exist" not found',
     UU, 'persistentvolume "Vol_not_exist" not found'),
    ("missing claim", "PVC_gone", UU, 'persistentvolumeclaim "PVC_gone" not found',
     UU, 'persistentvolumeclaim "PVC_gone" not found'),
    ("claim without a name", "", UU, "PersistentVolumeClaim had no name", UU, "PersistentVolumeClaim had no name"),
]


@pytest.mark.parametrize(("name", "claim", "pre", "pre_reason", "verdict", "reason"), BINDING,
                         ids=[c[0] for c in BINDING])
def test_with_binding(name: str, claim: str, pre: Code, pre_reason: str, verdict: Code, reason: str) -> None:
    state, plugin = cluster([pv("Vol_1", {BETA_ZONE: "us-west1-a"})], [*BINDING_PVCS, pvc("PVC_4", "Vol_not_exist")],
                            BINDING_CLASSES, [mk_node("host1", {BETA_ZONE: "us-west1-a", "uselessLabel": "none"})])
    assert run(state, plugin, pod_with(claim), "host1") == (pre, pre_reason, verdict, reason)


def test_ephemeral_volumes_are_not_looked_at() -> None:
    state, plugin = cluster([], [], nodes=[mk_node("host1", {ZONE: "a"})])
    body = fake_pod("p", volumes=[{"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}])
    assert run(state, plugin, body, "host1") == (SKIP, "", OK, "")


def test_empty_part_of_a_multi_zone_label_ignores_it() -> None:
    # LabelZonesToSet rejects "us-west1-a__": the label is ignored, so nothing constrains the pod
    state, plugin = cluster([pv("Vol", {ZONE: "us-west1-a__"})], [pvc("PVC", "Vol")], nodes=[mk_node("h", {ZONE: "x"})])
    assert run(state, plugin, pod_with("PVC"), "h") == (SKIP, "", OK, "")


def test_filter_is_vectorised_over_every_node() -> None:
    nodes = [mk_node("a1", {ZONE: "a", REGION: "r"}), mk_node("b1", {ZONE: "b", REGION: "r"}),
             mk_node("beta-a", {BETA_ZONE: "a"}), mk_node("bare"), mk_node("other-label", {"x": "y"}),
             mk_node("a-other-region", {ZONE: "a", REGION: "q"})]
    state, plugin = cluster([pv("Vol", {BETA_ZONE: "a__c", REGION: "r"})], [pvc("PVC", "Vol")], nodes=nodes)
    info = parse_pod(pod_with("PVC"))
    cycle = CycleState()
    assert plugin.pre_filter(cycle, info).code == OK
    verdict = plugin.filter(cycle, info, state.table)
    feasible = {n: bool(verdict.feasible[state.table.index[n]]) for n in state.table.index}
    # beta zone label falls back to the node's GA zone; the GA region label has no beta fallback
    assert feasible == {"a1": True, "b1": False, "beta-a": False, "bare": True, "other-label": True,
                        "a-other-region": False}
    assert np.array_equal(verdict.reasons[ERR_REASON_CONFLICT], ~verdict.feasible)


# -- queueing hints ------------------------------------------------------------------------------------------
def hint(event_object: Any, incoming: Obj, which: str) -> QueueingHint:
    _, plugin = cluster([], [])
    fn = {e.event.name: e.hint for e in plugin.events_to_register()}[which]
    return QueueingHint.QUEUE if fn is None else fn(parse_pod(incoming), event_object)


# TestIsSchedulableAfterPersistentVolumeClaimAdded: (name, pod's claim, the PVC, hint)
CLAIM_HINTS = [
    ("error-wrong-new-object", "PVC_1", "not-a-pvc", QueueingHint.QUEUE),
    ("pvc-was-added-but-pod-refers-no-pvc", None, parse_claim(pvc("PVC_1", "Vol_1")), QueueingHint.SKIP),
    ("pvc-was-added-and-pod-was-bound-to-different-pvc", "PVC_2", parse_claim(pvc("PVC_1", "Vol_1")),
     QueueingHint.SKIP),
    ("pvc-was-added-and-pod-was-bound-to-pvc-but-different-ns", "PVC_1",
     parse_claim(pvc("PVC_1", "Vol_1", namespace="ns1")), QueueingHint.SKIP),
    ("pvc-was-added-and-pod-was-bound-to-the-pvc", "PVC_1", parse_claim(pvc("PVC_1", "Vol_1")), QueueingHint.QUEUE),
    ("pvc-was-updated-and-pod-was-bound-to-the-pvc", "PVC_1", parse_claim(pvc("PVC_1", "Vol_1")), QueueingHint.QUEUE),
    ("pvc-was-updated-but-pod-refers-no-pvc", None, parse_claim(pvc("PVC_1", "Vol_1")), QueueingHint.SKIP),
]


@pytest.mark.parametrize(("name", "claim", "obj", "expected"), CLAIM_HINTS, ids=[c[0] for c in CLAIM_HINTS])
def test_hint_after_claim_change(name: str, claim: str | None, obj: Any, expected: QueueingHint) -> None:
    assert hint(obj, pod_with(claim), "PVC_CHANGED") == expected


# TestIsSchedulableAfterStorageClassAdded
CLASS_HINTS = [
    ("error-wrong-new-object", "not-a-storageclass", QueueingHint.QUEUE),
    ("sc-doesn't-have-volume-binding-mode (Immediate)", parse_storage_class(storage_class("SC_1")), QueueingHint.SKIP),
    ("new-sc-is-wait-for-first-consumer-mode", parse_storage_class(storage_class("SC_1", "WaitForFirstConsumer")),
     QueueingHint.QUEUE),
]


@pytest.mark.parametrize(("name", "obj", "expected"), CLASS_HINTS, ids=[c[0] for c in CLASS_HINTS])
def test_hint_after_class_added(name: str, obj: Any, expected: QueueingHint) -> None:
    assert hint(obj, pod_with("PVC_1"), "STORAGE_CLASS_CHANGED") == expected


def test_hint_after_pv_change_queues() -> None:
    # TestIsSchedulableAfterPersistentVolumeChange "new-pv-was-added" (and, without the old PV, every update)
    assert hint(parse_volume(pv("Vol_1", {BETA_ZONE: "us-west1-b"})), pod_with("PVC_1"), "PV_CHANGED") == \
        QueueingHint.QUEUE


def test_registered_events() -> None:
    _, plugin = cluster([], [])
    assert {e.event.name for e in plugin.events_to_register()} == {
        "STORAGE_CLASS_CHANGED", "NODE_ADDED", "NODE_LABELS", "PVC_CHANGED", "PV_CHANGED"}
