"""VolumeRestrictions, table-driven from kube-scheduler 1.36.3's own tests (pkg/scheduler/framework/plugins/
volumerestrictions/volume_restrictions_test.go: TestGCEDiskConflicts, TestAWSDiskConflicts, TestRBDDiskConflicts,
TestISCSIDiskConflicts, TestAccessModeConflicts, Test_isSchedulableAfterPodDeleted,
Test_isSchedulableAfterPersistentVolumeClaimChange), then the per-row disk holders behind the Filter (pods placed,
assumed, forgotten and removed; several nodes at once).

Upstream's NodeInfo holding the existing pods is one node, "node-1"; a pod "on" it is placed through the cluster
state. The not-found message is the informer's singular one. Not ported: AddPod/RemovePod (PreFilterExtensions):
this framework has no preemption what-if runs that add or remove pods.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from metrics_sched.framework import ClusterIndexes, Code, CycleState, Handle, QueueingHint
from metrics_sched.model.podinfo import parse_pod
from metrics_sched.model.volumes import parse_claim
from metrics_sched.plugins.volume_restrictions.plugin import (
    ERR_REASON_DISK_CONFLICT,
    ERR_REASON_RWOP_CONFLICT,
    VolumeRestrictions,
)
from metrics_sched.plugins.volumes import VolumeStore
from metrics_sched.state.cluster_state import ClusterState
from metrics_sched.state.pod_record import PodRecord
from metrics_sched.telemetry.cache import MetricCache
from metrics_sched.telemetry.ledger import InFlightLedgerStore
from tests.unit.fakes import FakeAPI
from tests.unit.fakes import node as fake_node
from tests.unit.fakes import pod as fake_pod

pytestmark = pytest.mark.unit

Obj = dict[str, Any]
OK, SKIP, U, UU = Code.SUCCESS, Code.SKIP, Code.UNSCHEDULABLE, Code.UNRESOLVABLE
NODE = "node-1"


def with_volumes(name: str, *volumes: Obj, node: str | None = None, namespace: str = "default") -> Obj:
    return fake_pod(name, namespace=namespace, node_name=node,
                    volumes=[{"name": f"v{i}", **v} for i, v in enumerate(volumes)])


def claim_volume(name: str) -> Obj:
    return {"persistentVolumeClaim": {"claimName": name}}


def pvc(name: str, *modes: str) -> Obj:
    return {"metadata": {"name": name, "namespace": "default"}, "spec": {"accessModes": list(modes)}}


def gce(pd: str, read_only: bool = False) -> Obj:
    return {"gcePersistentDisk": {"pdName": pd, "readOnly": read_only}}


def aws(volume: str, read_only: bool = False) -> Obj:
    return {"awsElasticBlockStore": {"volumeID": volume, "readOnly": read_only}}


def rbd(*monitors: str, read_only: bool = False) -> Obj:
    return {"rbd": {"monitors": list(monitors), "pool": "foo", "image": "bar", "fsType": "ext4", "readOnly": read_only}}


def iscsi(iqn: str, read_only: bool = False) -> Obj:
    return {"iscsi": {"targetPortal": "127.0.0.1:3260", "iqn": iqn, "fsType": "ext4", "lun": 0, "readOnly": read_only}}


def cluster(placed: Sequence[Obj] = (), claims: Sequence[Obj] = (),
            nodes: Sequence[str] = (NODE,)) -> tuple[ClusterState, VolumeRestrictions]:
    state = ClusterState()
    indexes = ClusterIndexes()
    volumes = indexes.declare(VolumeStore)
    for name in nodes:
        state.upsert_node(fake_node(name))
    for body in claims:
        volumes.upsert_claim(body)
    for body in placed:
        state.observe_bound_pod(parse_pod(body))
    handle = Handle(state, MetricCache(), InFlightLedgerStore(), FakeAPI(), indexes=indexes)
    return state, VolumeRestrictions({}, handle)


def run(state: ClusterState, plugin: VolumeRestrictions, incoming: Obj,
        node: str = NODE) -> tuple[Code, str, str | None]:
    """PreFilter (code, reason), then the Filter's reason for `node` (None: it fits; not run after a PreFilter
    that did not succeed, as in upstream's tests)."""
    info = parse_pod(incoming)
    cycle = CycleState()
    status = plugin.pre_filter(cycle, info)
    if status.code != OK:
        return status.code, status.reason, None
    verdict = plugin.filter(cycle, info, state.table)
    row = state.table.index[node]
    reason = None if verdict.feasible[row] else next(r for r, rows in verdict.reasons.items() if rows[row])
    return status.code, status.reason, reason


# -- TestGCE/AWS/RBD/ISCSIDiskConflicts ----------------------------------------------------------------------
# (kind, the volume, a different one); plus derived read-only cases below
DISKS = {
    "gce": (gce("foo"), gce("bar")),
    "aws": (aws("foo"), aws("bar")),
    "rbd": (rbd("a", "b"), rbd("c", "d")),
    "iscsi": (iscsi("iqn.2016-12.server:storage.target01"), iscsi("iqn.2017-12.server:storage.target01")),
}
# (name, the new pod's volumes, the node's pod's volumes, PreFilter code, Filter reason)
CONFLICT_CASES = [
    ("nothing", 0, None, SKIP, None),
    ("one state", 0, 0, SKIP, None),
    ("same state", 0, 0, OK, ERR_REASON_DISK_CONFLICT),
    ("different state", 1, 0, OK, None),
]


@pytest.mark.parametrize("kind", list(DISKS))
@pytest.mark.parametrize(("name", "new", "held", "pre", "reason"), CONFLICT_CASES, ids=[c[0] for c in CONFLICT_CASES])
def test_disk_conflicts(kind: str, name: str, new: int, held: int | None, pre: Code, reason: str | None) -> None:
    volumes = DISKS[kind]
    existing = [with_volumes("existing", volumes[held], node=NODE)] if held is not None else []
    incoming = with_volumes("new", volumes[new]) if name != "nothing" and name != "one state" else with_volumes("new")
    state, plugin = cluster(existing)
    assert run(state, plugin, incoming) == (pre, "", reason)


def test_pod_with_a_volume_that_does_not_have_restrictions() -> None:
    state, plugin = cluster()
    assert run(state, plugin, with_volumes("new", {"emptyDir": {}})) == (SKIP, "", None)


# Derived from isVolumeConflict (not in upstream's tables): read-only mounts and RBD monitor overlap.
READ_ONLY = [
    ("gce both read-only", gce("foo", True), gce("foo", True), None),
    ("gce one read-only", gce("foo", True), gce("foo"), ERR_REASON_DISK_CONFLICT),
    ("aws both read-only still conflict", aws("foo", True), aws("foo", True), ERR_REASON_DISK_CONFLICT),
    ("iscsi both read-only", iscsi("q", True), iscsi("q", True), None),
    ("iscsi other portal same iqn", iscsi("q"), {"iscsi": {"targetPortal": "10.0.0.1:3260", "iqn": "q", "lun": 3}},
     ERR_REASON_DISK_CONFLICT),
    ("rbd one monitor in common", rbd("a", "b"), rbd("b", "c"), ERR_REASON_DISK_CONFLICT),
    ("rbd both read-only", rbd("a", read_only=True), rbd("a", read_only=True), None),
    ("rbd other image", rbd("a"), {"rbd": {"monitors": ["a"], "pool": "foo", "image": "baz"}}, None),
    ("gce vs aws of the same name", gce("foo"), aws("foo"), None),
]


@pytest.mark.parametrize(("name", "new", "held", "reason"), READ_ONLY, ids=[c[0] for c in READ_ONLY])
def test_read_only_and_overlap_rules(name: str, new: Obj, held: Obj, reason: str | None) -> None:
    state, plugin = cluster([with_volumes("existing", held, node=NODE)])
    assert run(state, plugin, with_volumes("new", new)) == (OK, "", reason)


# -- TestAccessModeConflicts ---------------------------------------------------------------------------------
RWOP_1, RWOP_2, RWX = pvc("claim-with-rwop-1", "ReadWriteOncePod"), pvc("claim-with-rwop-2", "ReadWriteOncePod"), \
    pvc("claim-with-rwx", "ReadWriteMany")


def pod_with_one_pvc(name: str = "pod-with-one-pvc") -> Obj:
    return with_volumes(name, claim_volume("claim-with-rwop-1"), node=NODE)


def pod_with_two_pvcs(name: str = "pod-with-two-pvcs") -> Obj:
    return with_volumes(name, claim_volume("claim-with-rwop-1"), claim_volume("claim-with-rwop-2"), node=NODE)


def pod_with_rwx() -> Obj:
    return with_volumes("pod-with-rwx", claim_volume("claim-with-rwx"), node=NODE)


# (name, new pod, placed pods, claims, PreFilter code, PreFilter reason, Filter reason)
ACCESS_MODES = [
    ("nothing", lambda: with_volumes("empty"), lambda: [], [], SKIP, "", None),
    ("failed to get PVC", pod_with_one_pvc, lambda: [], [], UU,
     'persistentvolumeclaim "claim-with-rwop-1" not found', None),
    ("no access mode conflict", pod_with_one_pvc, lambda: [pod_with_rwx()], [RWOP_1, RWX], SKIP, "", None),
    ("access mode conflict, unschedulable", lambda: pod_with_one_pvc("pod-with-one-conflict"),
     lambda: [pod_with_one_pvc(), pod_with_rwx()], [RWOP_1, RWX], OK, "", ERR_REASON_RWOP_CONFLICT),
    ("two conflicts, unschedulable", lambda: pod_with_two_pvcs("pod-with-two-conflicts"),
     lambda: [pod_with_two_pvcs(), pod_with_rwx()], [RWOP_1, RWOP_2, RWX], OK, "", ERR_REASON_RWOP_CONFLICT),
]


@pytest.mark.parametrize(("name", "new", "placed", "claims", "pre", "pre_reason", "reason"), ACCESS_MODES,
                         ids=[c[0] for c in ACCESS_MODES])
def test_access_mode_conflicts(name: str, new: Any, placed: Any, claims: list[Obj], pre: Code, pre_reason: str,
                               reason: str | None) -> None:
    state, plugin = cluster(placed(), claims)
    assert run(state, plugin, new()) == (pre, pre_reason, reason)


def test_rwop_conflict_is_node_independent_and_disk_reason_comes_first() -> None:
    holder = with_volumes("holder", claim_volume("claim-with-rwop-1"), node="n1")
    disk_holder = with_volumes("disk", gce("foo"), node="n2")
    state, plugin = cluster([holder, disk_holder], [RWOP_1], nodes=("n1", "n2", "n3"))
    incoming = with_volumes("new", claim_volume("claim-with-rwop-1"), gce("foo"))
    assert [run(state, plugin, incoming, n)[2] for n in ("n1", "n2", "n3")] == [
        ERR_REASON_RWOP_CONFLICT, ERR_REASON_DISK_CONFLICT, ERR_REASON_RWOP_CONFLICT]
    # the holder leaves: the claim is free again on every node, the disk still blocks n2
    state.remove_pod(parse_pod(holder).uid)
    assert [run(state, plugin, incoming, n)[2] for n in ("n1", "n2", "n3")] == [None, ERR_REASON_DISK_CONFLICT, None]


def test_ephemeral_and_other_namespace_uses_do_not_count_as_rwop_users() -> None:
    # kube-scheduler's usedPVCSet holds persistentVolumeClaim volumes only, keyed by namespace/name
    ephemeral_user = fake_pod("p", node_name=NODE, volumes=[{"name": "rwop-1", "ephemeral": {}}])
    other_namespace = with_volumes("q", claim_volume("claim-with-rwop-1"), node=NODE, namespace="other")
    state, plugin = cluster([ephemeral_user, other_namespace], [pvc("claim-with-rwop-1", "ReadWriteOncePod")])
    plugin.handle.index(VolumeStore).upsert_claim({"metadata": {"name": "p-rwop-1", "namespace": "default"},
                                "spec": {"accessModes": ["ReadWriteOncePod"]}})
    assert run(state, plugin, with_volumes("new", claim_volume("claim-with-rwop-1")))[0] == SKIP
    assert run(state, plugin, with_volumes("new", claim_volume("p-rwop-1")))[0] == SKIP


def test_assumed_pods_hold_their_disks_until_forgotten() -> None:
    state, plugin = cluster(nodes=("n1", "n2"))
    first = parse_pod(with_volumes("first", aws("vol-1")))
    state.assume(first, "n1")
    incoming = with_volumes("second", aws("vol-1"))
    assert [run(state, plugin, incoming, n)[2] for n in ("n1", "n2")] == [ERR_REASON_DISK_CONFLICT, None]
    state.forget(first.uid)
    assert [run(state, plugin, incoming, n)[2] for n in ("n1", "n2")] == [None, None]
    assert len(state.volume_usage) == 0


# -- queueing hints ------------------------------------------------------------------------------------------
def hint(which: str, incoming: Obj, event_object: Any) -> QueueingHint:
    _, plugin = cluster()
    fn = {e.event.name: e.hint for e in plugin.events_to_register()}[which]
    return QueueingHint.QUEUE if fn is None else fn(parse_pod(incoming), event_object)


def released(body: Obj) -> PodRecord:
    state, _ = cluster()
    state.observe_bound_pod(parse_pod({**body, "spec": {**body["spec"], "nodeName": NODE}}))
    record = state.remove_pod(body["metadata"]["uid"])
    assert record is not None
    return record


# Test_isSchedulableAfterPodDeleted: (name, the pod's volume, the deleted pod's volume, hint)
POD_DELETED = [
    ("queue-new-object-gcedisk-conflict", gce("foo"), gce("foo"), QueueingHint.QUEUE),
    ("skip-new-object-gcedisk-no-conflict", gce("foo"), gce("bar"), QueueingHint.SKIP),
    ("queue-new-object-awsdisk-conflict", aws("foo"), aws("foo"), QueueingHint.QUEUE),
    ("skip-new-object-awsdisk-no-conflict", aws("foo"), aws("bar"), QueueingHint.SKIP),
    ("queue-new-object-rbddisk-conflict", rbd("a", "b"), rbd("a", "b"), QueueingHint.QUEUE),
    ("skip-new-object-rbddisk-no-conflict", rbd("a", "b"), rbd("c", "d"), QueueingHint.SKIP),
    ("queue-new-object-iscsidisk-conflict", iscsi("iqn.2016-12.server:storage.target01"),
     iscsi("iqn.2016-12.server:storage.target01"), QueueingHint.QUEUE),
    ("skip-new-object-iscsidisk-no-conflict", iscsi("iqn.2016-12.server:storage.target01"),
     iscsi("iqn.2017-12.server:storage.target01"), QueueingHint.SKIP),
    ("queue-has-same-claim", claim_volume("claim-rwop"), claim_volume("claim-rwop"), QueueingHint.QUEUE),
    ("skip-no-same-claim", claim_volume("claim-1-rwop"), claim_volume("claim-2-rwop"), QueueingHint.SKIP),
]


@pytest.mark.parametrize(("name", "wanted", "held", "expected"), POD_DELETED, ids=[c[0] for c in POD_DELETED])
def test_hint_after_pod_deleted(name: str, wanted: Obj, held: Obj, expected: QueueingHint) -> None:
    assert hint("POD_DELETED", with_volumes("pod1", wanted), released(with_volumes("pod2", held))) == expected


def test_hint_after_pod_deleted_other_namespace_or_unknown() -> None:
    other = released(with_volumes("pod2", claim_volume("c"), namespace="other"))
    assert hint("POD_DELETED", with_volumes("pod1", claim_volume("c")), other) == QueueingHint.SKIP
    assert hint("POD_DELETED", with_volumes("pod1", claim_volume("c")), None) == QueueingHint.QUEUE


# Test_isSchedulableAfterPersistentVolumeClaimChange: (name, the pod's claims, its namespace, the PVC, hint)
CLAIM_ADDED = [
    ("queue-new-object-pvc-belong-pod", ["claim-with-rwx-1", "claim-with-rwx-2"], "default", "claim-with-rwx-1",
     QueueingHint.QUEUE),
    ("skip-new-object-unused", ["claim-with-rwx-1"], "default", "claim-with-rwx-2", QueueingHint.SKIP),
    ("skip-new-object-not-belong-pod", ["claim-with-rwx-1"], "default", "claim-with-rwx-2", QueueingHint.SKIP),
    ("skip-new-object-namespace-not-equal-pod", ["claim-with-rwx-1"], "kube-system", "claim-with-rwx-1",
     QueueingHint.SKIP),
]


@pytest.mark.parametrize(("name", "claims", "namespace", "added", "expected"), CLAIM_ADDED,
                         ids=[c[0] for c in CLAIM_ADDED])
def test_hint_after_claim_added(name: str, claims: list[str], namespace: str, added: str,
                                expected: QueueingHint) -> None:
    incoming = with_volumes("pod", *(claim_volume(c) for c in claims), namespace=namespace)
    assert hint("PVC_CHANGED", incoming, parse_claim(pvc(added, "ReadWriteMany"))) == expected


def test_registered_events() -> None:
    _, plugin = cluster()
    assert {e.event.name for e in plugin.events_to_register()} == {"POD_DELETED", "NODE_ADDED", "PVC_CHANGED"}
