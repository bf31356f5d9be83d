"""NodeVolumeLimits, table-driven from kube-scheduler 1.36.3's own tests (pkg/scheduler/framework/plugins/
nodevolumelimits/csi_test.go: TestCSILimits, TestVolumeLimitScalingGate (gate off), TestCSILimitsQHint,
TestCSILimitsAddedPVCQHint, TestCSILimitsDeletedVolumeAttachmentQHint), then the cached per-row counts behind the
Filter (pods placed and removed, attachments, CSINode limits changing, the table growing, several nodes at once).

Upstream's fixtures, rebuilt as JSON: for each driver D, PVs and claims `csi-D-0..3` (a CSI volume of D with the PV's
name as handle; for D = kubernetes.io/aws-ebs an in-tree EBS volume of that id, for kubernetes.io/hostpath a
hostPath); claim `csi-4` unbound of class `csi-sc` (provisioner: the first driver), `csi-5` unbound without a
class, `csi-6` of class csi-sc bound to a PV that does not exist; `vaCount` VolumeAttachments per driver for
`csi-D-0..`; the node's CSINode lists the drivers with (limitSource "csinode") or without ("csinode-with-no-limit")
allocatable.count = maxVols, or is absent. Every pod and claim is in namespace "test".

Differences, on purpose:
- A Filter failure that does not depend on the node (upstream: UnschedulableAndUnresolvable, or Error, from
  Filter) rejects every node with that reason; the code is not carried per node here. Not-found messages are
  the informer's singular ones.
- TestCSILimitsAfterCSINodeUpdatedQHint is not ported: the event carries only the new CSINode, so every
  CSINode change queues (upstream skips an update that raises no count). "a deleted pod is not scheduled" is
  not ported either: the cluster state only releases pods it had placed.
- TestVolumeLimitScalingGate: only the gate-off case (the VolumeLimitScaling gate is alpha, off in 1.36).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

from metrics_sched.framework import ClusterIndexes, Code, CycleState, Handle, QueueingHint
from metrics_sched.model.podinfo import parse_pod
from metrics_sched.model.volumes import parse_attachment, parse_claim
from metrics_sched.plugins.node_volume_limits.plugin import ERR_REASON_MAX_VOLUME_COUNT, NodeVolumeLimits, ebs_volume_id
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
NS = "test"
NODE = "node-for-max-pd-test-1"
EBS, GCE = "ebs.csi.aws.com", "pd.csi.storage.gke.io"
AWS_IN_TREE, HOSTPATH = "kubernetes.io/aws-ebs", "kubernetes.io/hostpath"
MAX = ERR_REASON_MAX_VOLUME_COUNT
MISSING_EPHEMERAL = 'looking up PVC test/abc-xyz: persistentvolumeclaim "abc-xyz" not found'


# -- fixtures (getFakeCSIPVLister, getFakeCSIPVCLister, buildFakeClientWithVALister, getNodeWithPodAndVolumeLimits) --
def pv(name: str, driver: str) -> Obj:
    if driver == AWS_IN_TREE:
        source: Obj = {"awsElasticBlockStore": {"volumeID": name}}
    elif driver == HOSTPATH:
        source = {"hostPath": {"path": "/tmp"}}
    else:
        source = {"csi": {"driver": driver, "volumeHandle": name}}
    return {"metadata": {"name": name}, "spec": source}


def pvc(name: str, volume: str = "", storage_class: str | None = None, owner: str | None = None) -> Obj:
    spec: Obj = {"volumeName": volume} if volume else {}
    if storage_class is not None:
        spec["storageClassName"] = storage_class
    meta: Obj = {"name": name, "namespace": NS}
    if owner is not None:
        meta["ownerReferences"] = [{"kind": "Pod", "name": "abc", "uid": owner, "controller": True}]
    return {"metadata": meta, "spec": spec}


def attachment(name: str, driver: str, volume: str | None, node: str = NODE) -> Obj:
    source = {"persistentVolumeName": volume} if volume else {}
    return {"metadata": {"name": name}, "spec": {"nodeName": node, "attacher": driver, "source": source}}


def csi_node(name: str, drivers: Sequence[str], limit: int | None) -> Obj:
    entries = []
    for driver in drivers:
        entry: Obj = {"name": driver, "nodeID": name}
        if limit is not None:
            entry["allocatable"] = {"count": limit}
        entries.append(entry)
    return {"metadata": {"name": name}, "spec": {"drivers": entries}}


def pod_with(*volumes: Obj, name: str = "p", uid: str | None = None) -> Obj:
    body = fake_pod(name, namespace=NS, volumes=[{"name": f"v{i}", **v} if "name" not in v else v
                                                 for i, v in enumerate(volumes)])
    if uid is not None:
        body["metadata"]["uid"] = uid
    return body


def claims(*names: str) -> list[Obj]:
    return [{"persistentVolumeClaim": {"claimName": n}} for n in names]


def ephemeral(name: str) -> Obj:
    return {"name": name, "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}


def aws_inline(volume: str) -> Obj:
    return {"awsElasticBlockStore": {"volumeID": volume}}


def running() -> Obj:
    return pod_with(*claims("csi-ebs.csi.aws.com-3"))


def pending() -> Obj:
    return pod_with(*claims("csi-4"))


def csi_ebs_one() -> Obj:
    return pod_with(*claims("csi-ebs.csi.aws.com-0"))


def csi_ebs_two() -> Obj:
    return pod_with(*claims("csi-ebs.csi.aws.com-1", "csi-ebs.csi.aws.com-2"))


def gce_two() -> Obj:
    return pod_with(*claims("csi-pd.csi.storage.gke.io-1", "csi-pd.csi.storage.gke.io-2"))


def in_tree_one() -> Obj:
    return pod_with(*claims("csi-kubernetes.io/aws-ebs-0"))


def in_tree_two() -> Obj:
    return pod_with(*claims("csi-kubernetes.io/aws-ebs-1", "csi-kubernetes.io/aws-ebs-2"))


def ephemeral_pod() -> Obj:
    return pod_with(ephemeral("xyz"), name="abc", uid="12345")


def ephemeral_two() -> Obj:
    return pod_with(ephemeral("x"), ephemeral("y"), name="abc", uid="12345II")


CONFIG_AND_SECRET = [{"configMap": {"name": "cm"}}, {"secret": {"secretName": "s"}}]
OWNED_EPHEMERAL = pvc("abc-xyz", storage_class="csi-sc", owner="12345")
NOT_OWNED_EPHEMERAL = pvc("abc-xyz", storage_class="csi-sc")
OWNED_X, OWNED_Y = pvc("abc-x", storage_class="csi-sc", owner="12345II"), pvc("abc-y", storage_class="csi-sc",
                                                                             owner="12345II")


@dataclass
class Case:
    test: str
    new: Callable[[], Obj]
    existing: list[Callable[[], Obj]] = field(default_factory=list)
    max_vols: int = 0
    drivers: tuple[str, ...] = (EBS,)
    va_count: int = 0
    limit_source: str = ""  # "csinode" | "csinode-with-no-limit" | "" (no CSINode)
    extra_claims: list[Obj] = field(default_factory=list)
    want_pre_filter: Code = Code.SUCCESS
    want: str | None = None  # the Filter's reason (None: fits)


def build(case: Case) -> tuple[ClusterState, NodeVolumeLimits]:
    state = ClusterState()
    state.upsert_node(fake_node(NODE))
    indexes = ClusterIndexes()
    volumes = indexes.declare(VolumeStore)
    for driver in case.drivers:
        for j in range(4):
            name = f"csi-{driver}-{j}"
            volumes.upsert_volume(pv(name, driver))
            volumes.upsert_claim(pvc(name, volume=name))
        for j in range(case.va_count):
            volumes.upsert_attachment(attachment(f"va-{driver}-{j}", driver, f"csi-{driver}-{j}"))
    volumes.upsert_claim(pvc("csi-4", storage_class="csi-sc"))
    volumes.upsert_claim(pvc("csi-5"))
    volumes.upsert_claim(pvc("csi-6", volume="missing-in-action", storage_class="csi-sc"))
    volumes.upsert_class({"metadata": {"name": "csi-sc"}, "provisioner": case.drivers[0]})
    for body in case.extra_claims:
        volumes.upsert_claim(body)
    if case.limit_source:
        volumes.upsert_csi_node(csi_node(NODE, case.drivers,
                                         case.max_vols if case.limit_source == "csinode" else None))
    for make in case.existing:
        body = make()
        body["spec"]["nodeName"] = NODE
        state.observe_bound_pod(parse_pod(body))
    return state, NodeVolumeLimits({}, Handle(state, MetricCache(), InFlightLedgerStore(), FakeAPI(), indexes=indexes))


def verdicts(state: ClusterState, plugin: NodeVolumeLimits, incoming: Obj,
             nodes: Sequence[str] = (NODE,)) -> tuple[Code, list[str | None]]:
    info = parse_pod(incoming)
    cycle = CycleState()
    code = plugin.pre_filter(cycle, info).code
    if code == Code.SKIP:
        return code, []
    verdict = plugin.filter(cycle, info, state.table)
    out = []
    for name in nodes:
        row = state.table.index[name]
        out.append(None if verdict.feasible[row] else next(r for r, rows in verdict.reasons.items() if rows[row]))
    return code, out


IN_TREE = (AWS_IN_TREE, EBS)
CASES = [
    Case("should count VolumeAttachments towards volume limit when no pods exist", csi_ebs_one, [], 2, va_count=2,
         limit_source="csinode", want=MAX),
    Case("should schedule pod when VolumeAttachments count does not exceed limit", csi_ebs_one, [], 2, va_count=1,
         limit_source="csinode"),
    Case("fits when node volume limit >= new pods CSI volume", csi_ebs_one, [running, csi_ebs_two], 4,
         limit_source="csinode"),
    Case("doesn't when node volume limit <= pods CSI volume", csi_ebs_one, [running, csi_ebs_two], 2,
         limit_source="csinode", want=MAX),
    Case("should when driver does not support volume limits", csi_ebs_one, [running, csi_ebs_two], 2,
         limit_source="csinode-with-no-limit"),
    Case("count pending PVCs towards volume limit <= pods CSI volume", csi_ebs_one, [pending, csi_ebs_two], 2,
         limit_source="csinode", want=MAX),
    Case("count multiple pending pvcs towards volume limit >= pods CSI volume", csi_ebs_one,
         [pending, pending, csi_ebs_two], 4, limit_source="csinode"),
    Case("should count PVCs with invalid PV name but valid SC", csi_ebs_one,
         [lambda: pod_with(*claims("csi-6")), csi_ebs_two], 2, limit_source="csinode", want=MAX),
    Case("don't count pvcs with missing SC towards volume limit", csi_ebs_one,
         [running, lambda: pod_with(*claims("csi-5"))], 2, limit_source="csinode"),
    Case("count pvcs with the same type towards volume limit", csi_ebs_one, [gce_two, csi_ebs_two], 2,
         drivers=(EBS, GCE), limit_source="csinode", want=MAX),
    Case("don't count pvcs with different type towards volume limit", gce_two, [csi_ebs_two, running], 2,
         drivers=(EBS, GCE), limit_source="csinode"),
    # in-tree volume migration
    Case("should count in-tree volumes if migration is enabled", in_tree_one, [in_tree_two], 2, drivers=IN_TREE,
         limit_source="csinode", want=MAX),
    Case("nil csi node", lambda: pod_with(aws_inline("aws-inline1")), [in_tree_two], drivers=IN_TREE),
    Case("should count unbound in-tree volumes if migration is enabled", pending, [in_tree_two], 2, drivers=IN_TREE,
         limit_source="csinode", want=MAX),
    Case("should not limit pod if volume used does not report limits", in_tree_one, [in_tree_two], 2,
         drivers=IN_TREE, limit_source="csinode-with-no-limit"),
    Case("should not count non-migratable in-tree volumes", lambda: pod_with(*claims("csi-kubernetes.io/hostpath-0")),
         [csi_ebs_two], 2, drivers=(HOSTPATH, EBS), limit_source="csinode"),
    Case("should count in-tree inline volumes if migration is enabled", lambda: pod_with(aws_inline("aws-inline1")),
         [in_tree_two], 2, drivers=IN_TREE, limit_source="csinode", want=MAX),
    Case("should count in-tree and csi volumes if migration is enabled (when scheduling in-tree volumes)",
         in_tree_one, [csi_ebs_two], 2, drivers=IN_TREE, limit_source="csinode", want=MAX),
    Case("should count in-tree, inline and csi volumes if migration is enabled (when scheduling in-tree volumes)",
         lambda: pod_with(aws_inline("aws-inline1")), [csi_ebs_two, in_tree_one], 3, drivers=IN_TREE,
         limit_source="csinode", want=MAX),
    Case("should not count in-tree, inline and csi volumes if migration is enabled (when scheduling in-tree volumes)",
         lambda: pod_with(aws_inline("csi-ebs.csi.aws.com-1")), [csi_ebs_two, in_tree_one], 3, drivers=IN_TREE,
         limit_source="csinode"),
    Case("should count in-tree and csi volumes if migration is enabled (when scheduling csi volumes)", csi_ebs_one,
         [in_tree_two], 2, drivers=IN_TREE, limit_source="csinode", want=MAX),
    # ephemeral volumes
    Case("ephemeral volume missing", ephemeral_pod, limit_source="csinode-with-no-limit", want=MISSING_EPHEMERAL),
    Case("ephemeral volume not owned", ephemeral_pod, extra_claims=[NOT_OWNED_EPHEMERAL],
         limit_source="csinode-with-no-limit",
         want="PVC test/abc-xyz was not created for pod test/abc (pod is not owner)"),
    Case("ephemeral volume unbound", ephemeral_pod, extra_claims=[OWNED_EPHEMERAL],
         limit_source="csinode-with-no-limit"),
    Case("ephemeral doesn't when node volume limit <= pods CSI volume", ephemeral_pod, [running, csi_ebs_two], 2,
         extra_claims=[OWNED_EPHEMERAL], limit_source="csinode", want=MAX),
    Case("ephemeral doesn't when node volume limit <= pods ephemeral CSI volume", csi_ebs_one,
         [running, ephemeral_two], 2, extra_claims=[OWNED_X, OWNED_Y], limit_source="csinode", want=MAX),
    Case("persistent doesn't when node volume limit <= pods ephemeral CSI volume + persistent volume", csi_ebs_one,
         [running, ephemeral_pod, csi_ebs_two], 3, extra_claims=[OWNED_EPHEMERAL], limit_source="csinode", want=MAX),
    Case("persistent okay when node volume limit > pods ephemeral CSI volume + persistent volume", csi_ebs_one,
         [running, ephemeral_pod, csi_ebs_two], 5, extra_claims=[OWNED_EPHEMERAL], limit_source="csinode"),
    Case("skip Filter when the pod only uses secrets and configmaps", lambda: pod_with(*CONFIG_AND_SECRET), [], 2,
         limit_source="csinode", want_pre_filter=Code.SKIP),
    Case("don't skip Filter when the pod has pvcs",
         lambda: pod_with(*CONFIG_AND_SECRET, *claims("csi-ebs.csi.aws.com-0")), [], 2, limit_source="csinode"),
    Case("don't skip Filter when the pod has ephemeral volumes",
         lambda: pod_with(*CONFIG_AND_SECRET, ephemeral("xyz"), name="abc", uid="12345"),
         limit_source="csinode-with-no-limit", want=MISSING_EPHEMERAL),
    Case("don't skip Filter when the pod has inline migratable volumes",
         lambda: pod_with(*CONFIG_AND_SECRET, aws_inline("aws-inline1")), [in_tree_two], 2, drivers=IN_TREE,
         limit_source="csinode", want=MAX),
    # TestVolumeLimitScalingGate, gate disabled: a CSINode without the driver does not matter
    Case("gate disabled - skip driver presence check", csi_ebs_one, limit_source=""),
]


@pytest.mark.parametrize("case", CASES, ids=[c.test for c in CASES])
def test_csi_limits(case: Case) -> None:
    state, plugin = build(case)
    code, reasons = verdicts(state, plugin, case.new())
    assert code == case.want_pre_filter
    if code != Code.SKIP:
        assert reasons == [case.want]


def test_ebs_volume_id_translation() -> None:
    assert ebs_volume_id("vol-123") == "vol-123"
    assert ebs_volume_id("aws://us-east-1a/vol-123") == "vol-123"
    assert ebs_volume_id("aws:///vol-123") == "vol-123"


def test_in_tree_inline_and_csi_handles_dedupe_across_forms() -> None:
    # an in-line EBS volume given as aws://zone/id and a CSI PV with that id are one attachment
    case = Case("dedupe", lambda: pod_with(aws_inline("aws://us-east-1a/csi-ebs.csi.aws.com-1")), [csi_ebs_two], 2,
                limit_source="csinode")
    state, plugin = build(case)
    assert verdicts(state, plugin, case.new()) == (Code.SUCCESS, [None])


# -- the cached per-row counts ---------------------------------------------------------------------------------
def test_counts_follow_pods_attachments_and_limits_over_many_nodes() -> None:
    case = Case("multi", csi_ebs_one, [], limit_source="")
    state, plugin = build(case)
    nodes = [f"n{i:03d}" for i in range(70)]  # past the table's first 64 rows: the counts grow with it
    for name in nodes:
        state.upsert_node(fake_node(name))
    for name in nodes[:69]:
        plugin.handle.index(VolumeStore).upsert_csi_node(csi_node(name, [EBS], 1))
    ebs1 = parse_pod(pod_with(*claims("csi-ebs.csi.aws.com-1"), name="holder"))
    state.observe_bound_pod(parse_pod({**ebs1.raw, "spec": {**ebs1.raw["spec"], "nodeName": "n000"}}))
    plugin.handle.index(VolumeStore).upsert_attachment(attachment("va-1", EBS, "csi-ebs.csi.aws.com-2", node="n001"))
    # the new pod's own volume attached to n002 but used by no pod there: counted twice (upstream's quirk)
    plugin.handle.index(VolumeStore).upsert_attachment(attachment("va-2", EBS, "csi-ebs.csi.aws.com-0", node="n002"))
    # an attachment of a volume a pod on that node uses counts once
    plugin.handle.index(VolumeStore).upsert_attachment(attachment("va-3", EBS, "csi-ebs.csi.aws.com-1", node="n000"))
    # attachments that are not counted: no PV name, a PV that is not CSI, a missing PV, no attacher
    plugin.handle.index(VolumeStore).upsert_volume(pv("in-tree", AWS_IN_TREE))
    plugin.handle.index(VolumeStore).upsert_attachment(attachment("va-4", EBS, None, node="n003"))
    plugin.handle.index(VolumeStore).upsert_attachment(attachment("va-5", EBS, "in-tree", node="n003"))
    plugin.handle.index(VolumeStore).upsert_attachment(attachment("va-6", EBS, "nope", node="n003"))
    plugin.handle.index(VolumeStore).upsert_attachment(attachment("va-7", "", "csi-ebs.csi.aws.com-3", node="n003"))
    _, reasons = verdicts(state, plugin, csi_ebs_one(), nodes)
    rejected = {n for n, r in zip(nodes, reasons, strict=True) if r is not None}
    assert rejected == {"n000", "n001", "n002"}
    assert all(r == MAX for r in reasons if r is not None)
    # a pod using the new pod's volume on n003 makes it already attached there: it adds nothing
    sharer = parse_pod(pod_with(*claims("csi-ebs.csi.aws.com-0"), name="sharer"))
    state.observe_bound_pod(parse_pod({**sharer.raw, "spec": {**sharer.raw["spec"], "nodeName": "n003"}}))
    _, reasons = verdicts(state, plugin, csi_ebs_one(), ["n003", "n004"])
    assert reasons == [None, None]
    # the holder leaves, but its volume stays attached (va-3) until it is detached; n001's limit is raised
    state.remove_pod(ebs1.uid)
    plugin.handle.index(VolumeStore).upsert_csi_node(csi_node("n001", [EBS], 2))
    _, reasons = verdicts(state, plugin, csi_ebs_one(), ["n000", "n001", "n002"])
    assert reasons == [MAX, None, MAX]
    plugin.handle.index(VolumeStore).remove_attachment("va-3")
    _, reasons = verdicts(state, plugin, csi_ebs_one(), ["n000"])
    assert reasons == [None]
    # n069 has no CSINode: never limited
    _, reasons = verdicts(state, plugin, csi_ebs_one(), ["n069"])
    assert reasons == [None]


def test_counts_are_cached_until_something_changes() -> None:
    case = Case("cache", csi_ebs_one, [running], 1, limit_source="csinode")
    state, plugin = build(case)
    info = parse_pod(csi_ebs_one())
    first = plugin._attached_now(state.table)
    assert plugin._attached_now(state.table) is first
    plugin.filter(CycleState(), info, state.table)
    assert plugin._attached_now(state.table) is first
    plugin.handle.index(VolumeStore).upsert_class({"metadata": {"name": "other"}, "provisioner": "x"})
    assert plugin._attached_now(state.table) is not first
    assert np.array_equal(plugin._attached_now(state.table).per_driver[EBS], first.per_driver[EBS])


def test_assumed_pods_count_and_forget_releases() -> None:
    case = Case("assumed", csi_ebs_one, [], 1, limit_source="csinode")
    state, plugin = build(case)
    other = parse_pod(pod_with(*claims("csi-ebs.csi.aws.com-1"), name="other"))
    state.assume(other, NODE)
    assert verdicts(state, plugin, csi_ebs_one())[1] == [MAX]
    state.forget(other.uid)
    assert verdicts(state, plugin, csi_ebs_one())[1] == [None]


# -- queueing hints --------------------------------------------------------------------------------------------
def hint(which: str, incoming: Obj, event_object: Any) -> QueueingHint:
    _, plugin = build(Case("hints", csi_ebs_one))
    fn = {e.event.name: e.hint for e in plugin.events_to_register()}[which]
    return QueueingHint.QUEUE if fn is None else fn(parse_pod(incoming), event_object)


def released(body: Obj) -> PodRecord:
    state = ClusterState()
    info = parse_pod({**body, "spec": {**body["spec"], "nodeName": NODE}})
    state.observe_bound_pod(info)
    record = state.remove_pod(info.uid)
    assert record is not None
    return record


# TestCSILimitsQHint
POD_DELETED = [
    ("return a Queue when a deleted pod has a PVC", pod_with(*claims("placeholder")), QueueingHint.QUEUE),
    ("return a Queue when a deleted pod has a inline migratable volume", pod_with(aws_inline("")), QueueingHint.QUEUE),
    ("return a QueueSkip when a deleted pod doesn't have any volume", pod_with(), QueueingHint.SKIP),
    ("(derived) a deleted pod with only configMaps and secrets", pod_with(*CONFIG_AND_SECRET), QueueingHint.SKIP),
]


@pytest.mark.parametrize(("name", "deleted", "expected"), POD_DELETED, ids=[c[0] for c in POD_DELETED])
def test_hint_after_pod_deleted(name: str, deleted: Obj, expected: QueueingHint) -> None:
    assert hint("POD_DELETED", pod_with(*claims("csi-ebs.csi.aws.com-2")), released(deleted)) == expected
    assert hint("POD_DELETED", pod_with(*claims("csi-ebs.csi.aws.com-2")), None) == QueueingHint.QUEUE


# TestCSILimitsAddedPVCQHint: (name, the pod, the added claim's namespace and name, hint)
CLAIM_ADDED = [
    ("a pod isn't in the same namespace as an added PVC", pod_with(*claims("pvc1")), "other", "pvc1",
     QueueingHint.SKIP),
    ("a pod is in the same namespace as an added PVC", pod_with(*claims("pvc1")), NS, "pvc1", QueueingHint.QUEUE),
    ("a pod has an ephemeral volume related to an added PVC", pod_with(ephemeral("xyz"), name="abc"), NS, "abc-xyz",
     QueueingHint.QUEUE),
    ("a pod doesn't have the same PVC as an added PVC", pod_with(*claims("pvc1")), NS, "pvc2", QueueingHint.SKIP),
    ("a pod doesn't have any PVC attached", pod_with(), NS, "pvc1", QueueingHint.SKIP),
]


@pytest.mark.parametrize(("name", "incoming", "namespace", "added", "expected"), CLAIM_ADDED,
                         ids=[c[0] for c in CLAIM_ADDED])
def test_hint_after_claim_added(name: str, incoming: Obj, namespace: str, added: str, expected: QueueingHint) -> None:
    claim = parse_claim({"metadata": {"name": added, "namespace": namespace}, "spec": {}})
    assert hint("PVC_CHANGED", incoming, claim) == expected


# TestCSILimitsDeletedVolumeAttachmentQHint: (name, the pod, the attachment's attacher, hint)
DETACHED = [
    ("a pod has PVC when VolumeAttachment is deleting", pod_with(*claims("pvc1")), "test.storage.gke.io",
     QueueingHint.QUEUE),
    ("a pod has an Inline Migratable volume (AWSEBSDriver) when VolumeAttachment (AWSEBSDriver) is deleting (match)",
     pod_with(aws_inline("test")), EBS, QueueingHint.QUEUE),
    ("a pod has an Inline Migratable volume (GCEPDDriver) when VolumeAttachment (AWSEBSDriver) is deleting "
     "(no match)", pod_with({"gcePersistentDisk": {"pdName": "test"}}), EBS, QueueingHint.SKIP),
    ("a pod has an Inline Migratable volume (AWSEBSDriver) and PVC when VolumeAttachment (AWSEBSDriver) is deleting",
     pod_with(aws_inline("test"), *claims("pvc1")), EBS, QueueingHint.QUEUE),
    ("a pod has PVC and an Inline Migratable volume when VolumeAttachment (GCEPDDriver) is deleting",
     pod_with(*claims("pvc1"), aws_inline("test")), GCE, QueueingHint.QUEUE),
    ("a pod has no PVC when VolumeAttachment is deleting", pod_with(), EBS, QueueingHint.SKIP),
    ("(derived) an ephemeral volume alone does not match", pod_with(ephemeral("e")), EBS, QueueingHint.SKIP),
]


@pytest.mark.parametrize(("name", "incoming", "attacher", "expected"), DETACHED, ids=[c[0] for c in DETACHED])
def test_hint_after_volume_detached(name: str, incoming: Obj, attacher: str, expected: QueueingHint) -> None:
    detached = parse_attachment(attachment("volumeattachment1", attacher, "pv1", node="fake-node"))
    assert hint("VOLUME_DETACHED", incoming, detached) == expected


def test_registered_events() -> None:
    _, plugin = build(Case("events", csi_ebs_one))
    events = {e.event.name: e.hint for e in plugin.events_to_register()}
    assert set(events) == {"CSI_NODE_CHANGED", "POD_DELETED", "PVC_CHANGED", "VOLUME_DETACHED"}
    assert events["CSI_NODE_CHANGED"] is None  # no node event: a new node comes with its CSINode


def test_a_pod_that_only_shares_attached_volumes_passes_a_node_over_its_limit() -> None:
    """csi.go drops the attached volumes from the new pod's before comparing: with nothing new for a driver,
    that driver's limit is not checked (the differential test's seed 1, case 88: a limit of 0, already over)."""
    case = Case("share", csi_ebs_one, [], limit_source="")
    state, plugin = build(case)
    state.upsert_node(fake_node("n0"))
    plugin.handle.index(VolumeStore).upsert_csi_node(csi_node("n0", [EBS], 0))
    holder = parse_pod(pod_with(*claims("csi-ebs.csi.aws.com-0", "csi-ebs.csi.aws.com-1"), name="holder"))
    state.observe_bound_pod(parse_pod({**holder.raw, "spec": {**holder.raw["spec"], "nodeName": "n0"}}))
    assert verdicts(state, plugin, csi_ebs_one(), ["n0"]) == (Code.SUCCESS, [None])
    # One volume more of that driver: 2 attached + 1 > 0.
    two = pod_with(*claims("csi-ebs.csi.aws.com-0", "csi-ebs.csi.aws.com-2"))
    assert verdicts(state, plugin, two, ["n0"]) == (Code.SUCCESS, [MAX])


@pytest.mark.parametrize(("kind", "source", "driver"), [
    ("azureDisk", {"diskName": "d", "diskURI": "/subscriptions/s/disks/"}, "disk.csi.azure.com"),
    ("cinder", {"volumeID": "vol-"}, "cinder.csi.openstack.org"),
    ("portworxVolume", {"volumeID": "px-"}, "pxd.portworx.com"),
])
def test_in_line_azure_cinder_and_portworx_volumes_count_under_their_csi_driver(
        kind: str, source: Obj, driver: str) -> None:
    """IsInlineMigratable: with a CSINode, an in-line in-tree volume counts against its CSI driver's limit (the
    pod's volume spec is read, not ignored)."""
    key = "diskURI" if kind == "azureDisk" else "volumeID"
    case = Case("inline", lambda: pod_with({kind: {**source, key: source[key] + "new"}}), [], limit_source="")
    state, plugin = build(case)
    plugin.handle.index(VolumeStore).upsert_csi_node(csi_node(NODE, [driver], 1))
    held = parse_pod(pod_with({kind: {**source, key: source[key] + "held"}}, name="holder"))
    state.observe_bound_pod(parse_pod({**held.raw, "spec": {**held.raw["spec"], "nodeName": NODE}}))
    assert verdicts(state, plugin, case.new()) == (Code.SUCCESS, [MAX])
    # The same volume in-line again adds nothing.
    assert verdicts(state, plugin, pod_with({kind: {**source, key: source[key] + "held"}})) == (Code.SUCCESS, [None])
