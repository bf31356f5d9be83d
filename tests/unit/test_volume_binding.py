"""VolumeBinding, table-driven from kube-scheduler 1.36.3's own tests (pkg/scheduler/framework/plugins/volumebinding:
volume_binding_test.go TestVolumeBinding, Test_PreBindPreFlight, TestIsSchedulableAfterPersistentVolumeClaimChange;
binder_test.go TestFindPodVolumesWithoutProvisioning, TestFindPodVolumesWithProvisioning, TestCapacity,
TestAssumePodVolumes, TestRevertAssumedPodVolumes, TestCheckBindings, TestBindAPIUpdate, TestBindPodVolumes), then one
run through the whole Scheduler.

Upstream's objects are rebuilt as JSON with upstream's names (node1 carries nodeKey=node1, the PVs' affinity reads
that label). Bindings and provisions are read where Reserve leaves them: the PVs and claims assumed in the
VolumeStore. PreBind writes through a fake VolumeWriter that plays the API server (conditional on the
resourceVersion: 409 on a stale one), the watch (delivering the written object, or holding it back) and, where a case
needs it, the PV controller or the provisioner.

Differences, on purpose:
- checkBindings is not a separate function: each case runs PreBind with bindTimeoutSeconds 0, which looks once after
  the writes. Upstream's "(false, nil)" is our time-out, "(true, nil)" success, an error an error.
- bindTimeoutSeconds 0 still looks once (upstream's poll context has expired before its first look, so it always
  fails): a claim the PV controller bound before the look is bound.
- A PV already bound to the claim (claimRef with its uid) is not rewritten (upstream sends a no-op update).
- Not-found texts are the informer's singular ones (`persistentvolumeclaim "x" not found`).
- Left out: scores (StorageCapacityScoring is alpha and off), in-tree CSI migration (TestFindPodVolumesWithCSIMigration,
  TestCheckBindingsWithCSIMigration), PreBindPreFlight (no such extension point: its "no pod volume found for node"
  error is Reserve's here), a class without volumeBindingMode (the API server defaults it).
"""

from __future__ import annotations

import copy
import itertools
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pytest

from metrics_sched.framework import ClusterEvent, ClusterIndexes, Code, CycleState, Handle, QueueingHint, Status
from metrics_sched.model.podinfo import PodInfo, parse_pod
from metrics_sched.model.volumes import ANN_BIND_COMPLETED, ANN_BOUND_BY_CONTROLLER, ANN_SELECTED_NODE, parse_claim
from metrics_sched.plugins.volume_binding.plugin import (
    ERR_BIND_CONFLICT,
    ERR_NODE_CONFLICT,
    ERR_NOT_ENOUGH_SPACE,
    ERR_PV_NOT_EXIST,
    ERR_UNBOUND_IMMEDIATE,
    VolumeBinding,
)
from metrics_sched.plugins.volumes import STORAGE_KINDS, VolumeStore
from metrics_sched.ports import ApiError, ApiKind, EventType, KubeObject
from metrics_sched.state.cluster_state import ClusterState
from metrics_sched.telemetry.cache import MetricCache
from metrics_sched.telemetry.ledger import InFlightLedgerStore
from tests.schedulers import make_scheduler
from tests.unit.fakes import FakeAPI
from tests.unit.fakes import node as fake_node
from tests.unit.fakes import pod as fake_pod
from tests.unit.test_scheduler import drain

pytestmark = pytest.mark.unit

Obj = dict[str, Any]
UU, SKIP, OK, ERROR = Code.UNRESOLVABLE, Code.SKIP, Code.SUCCESS, Code.ERROR
NODE, BIND, SPACE, NO_PV = ERR_NODE_CONFLICT, ERR_BIND_CONFLICT, ERR_NOT_ENOUGH_SPACE, ERR_PV_NOT_EXIST

KEY = "nodeKey"
WAIT = "waitClass"  # WaitForFirstConsumer, kubernetes.io/no-provisioner
IMMEDIATE = "immediateClass"
PROVISIONING = "waitClassWithProvisioner"  # WaitForFirstConsumer, provisions in nodeKey in [node1, reference-value]
TOPO_MISMATCH = "topoMismatchClass"  # provisions in nodeKey in [reference-value] only
PROVISIONER = "test-provisioner"
HOSTNAME = "kubernetes.io/hostname"


# -- builders (upstream's makeTestPV / makeTestPVC / storage classes, as JSON) --------------------------------------
def mk_node(name: str, labels: Mapping[str, str] | None = None) -> Obj:
    body = fake_node(name)
    body["metadata"]["labels"] = dict(labels or {})
    return body


def uid(claim: str) -> str:
    return f"uid-{claim}"


def pv(name: str, *, node: str | None = None, size: str = "1G", sc: str = WAIT, claim: str | None = None,
       claim_uid: str | None = None, phase: str = "Available", key: str = KEY, rv: str = "1") -> Obj:
    spec: Obj = {"capacity": {"storage": size}, "storageClassName": sc, "volumeMode": "Filesystem",
                 "accessModes": ["ReadWriteOnce"], "local": {"path": f"/mnt/{name}"}}
    if node is not None:
        spec["nodeAffinity"] = {"required": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": key, "operator": "In", "values": [node]}]}]}}
    if claim is not None:
        spec["claimRef"] = {"kind": "PersistentVolumeClaim", "apiVersion": "v1", "namespace": "default",
                            "name": claim, "uid": uid(claim) if claim_uid is None else claim_uid}
    return {"kind": "PersistentVolume", "metadata": {"name": name, "resourceVersion": rv}, "spec": spec,
            "status": {"phase": phase}}


def pvc(name: str, *, size: str = "1G", sc: str | None = WAIT, volume: str = "", bound: bool = False,
        selected_node: str | None = None, phase: str | None = None, owner: str | None = None,
        namespace: str = "default", rv: str = "1") -> Obj:
    """Unbound; `volume` alone pre-binds it (volumeName without bind-completed); bound=True completes that."""
    annotations: Obj = {}
    if bound:
        annotations[ANN_BIND_COMPLETED] = "yes"
    if selected_node is not None:
        annotations[ANN_SELECTED_NODE] = selected_node
    meta: Obj = {"name": name, "namespace": namespace, "uid": uid(name), "resourceVersion": rv,
                 "annotations": annotations}
    if owner is not None:
        meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": "test-pod", "uid": owner,
                                    "controller": True}]
    spec: Obj = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": size}},
                 "volumeMode": "Filesystem"}
    if sc is not None:
        spec["storageClassName"] = sc
    if volume:
        spec["volumeName"] = volume
    body: Obj = {"kind": "PersistentVolumeClaim", "metadata": meta, "spec": spec, "status": {}}
    if phase is not None:
        body["status"]["phase"] = phase
    return body


def storage_class(name: str, *, mode: str = "WaitForFirstConsumer", provisioner: str = PROVISIONER,
                  topology: Sequence[str] | None = None) -> Obj:
    body: Obj = {"kind": "StorageClass", "metadata": {"name": name, "resourceVersion": "1"},
                 "provisioner": provisioner, "volumeBindingMode": mode}
    if topology is not None:
        body["allowedTopologies"] = [{"matchLabelExpressions": [{"key": KEY, "values": list(topology)}]}]
    return body


CLASSES = (
    storage_class(WAIT, provisioner="kubernetes.io/no-provisioner"),
    storage_class(IMMEDIATE, mode="Immediate"),
    storage_class(PROVISIONING, topology=["node1", "reference-value"]),
    storage_class(TOPO_MISMATCH, topology=["reference-value"]),
)


def csi_driver(name: str, capacity: bool | None) -> Obj:
    spec: Obj = {} if capacity is None else {"storageCapacity": capacity}
    return {"kind": "CSIDriver", "metadata": {"name": name, "resourceVersion": "1"}, "spec": spec}


def capacity(name: str, sc: str, *, topology: Obj | None, size: str | None = None,
             max_size: str | None = None) -> Obj:
    body: Obj = {"kind": "CSIStorageCapacity",
                 "metadata": {"name": name, "namespace": "kube-system", "resourceVersion": "1"},
                 "storageClassName": sc}
    if topology is not None:
        body["nodeTopology"] = topology
    if size is not None:
        body["capacity"] = size
    if max_size is not None:
        body["maximumVolumeSize"] = max_size
    return body


POD_UID = "uid-test-pod"


def claim_pod(*claims: str, ephemeral: Sequence[str] = (), name: str = "test-pod", pod_uid: str = POD_UID,
              namespace: str = "default") -> Obj:
    volumes: list[Obj] = [{"name": f"vol-{c}", "persistentVolumeClaim": {"claimName": c}} for c in claims]
    volumes += [{"name": v, "ephemeral": {"volumeClaimTemplate": {"spec": {}}}} for v in ephemeral]
    body = fake_pod(name, namespace=namespace, volumes=volumes)
    body["metadata"]["uid"] = pod_uid
    return body


# -- the cluster: the API's objects, the watch into the store, the PV controller -------------------------------------
_BY_RESOURCE = {kind.resource: kind for kind in STORAGE_KINDS}
_RESOURCES: dict[str, ApiKind] = {
    "PersistentVolume": _BY_RESOURCE["persistentvolumes"],
    "PersistentVolumeClaim": _BY_RESOURCE["persistentvolumeclaims"],
    "StorageClass": _BY_RESOURCE["storageclasses"], "CSIDriver": _BY_RESOURCE["csidrivers"],
    "CSIStorageCapacity": _BY_RESOURCE["csistoragecapacities"]}


def _key(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = obj["metadata"]
    name = f"{meta['namespace']}/{meta['name']}" if "namespace" in meta else meta["name"]
    return obj["kind"], name


class Cluster:
    """The API server's copy of the storage objects (`raw`) and the watch that delivers them into the store."""

    def __init__(self, state: ClusterState, store: VolumeStore,
                 sink: Callable[[ApiKind, EventType, KubeObject], None] | None = None) -> None:
        self.state = state
        self.store = store
        self.raw: dict[tuple[str, str], Obj] = {}
        self.held: list[Obj] = []  # written, not yet delivered by the watch
        self._rv = itertools.count(100)
        self._sink = sink

    def put(self, obj: Obj, *, bump: bool = True, deliver: bool = True) -> str:
        body = copy.deepcopy(obj)
        if bump:
            body["metadata"]["resourceVersion"] = str(next(self._rv))
        self.raw[_key(body)] = body
        if deliver:
            self._deliver(body)
        else:
            self.held.append(body)
        return str(body["metadata"]["resourceVersion"])

    def _deliver(self, body: Obj) -> None:
        if self._sink is not None:
            self._sink(_RESOURCES[body["kind"]], "MODIFIED", copy.deepcopy(body))
            return
        upsert: dict[str, Callable[[Obj], object]] = {
            "PersistentVolume": self.store.upsert_volume, "PersistentVolumeClaim": self.store.upsert_claim,
            "StorageClass": self.store.upsert_class, "CSIDriver": self.store.upsert_csi_driver,
            "CSIStorageCapacity": self.store.upsert_capacity}
        upsert[body["kind"]](copy.deepcopy(body))

    def deliver_held(self) -> None:
        while self.held:
            self._deliver(self.held.pop(0))

    def get(self, kind: str, name: str) -> Obj:
        return copy.deepcopy(self.raw[(kind, name)])

    def delete_claim(self, name: str) -> None:
        del self.raw[("PersistentVolumeClaim", f"default/{name}")]
        self.store.remove_claim(f"default/{name}")

    def delete_volume(self, name: str) -> None:
        del self.raw[("PersistentVolume", name)]
        self.store.remove_volume(name)

    def edit_claim(self, name: str, change: Callable[[Obj], None]) -> None:
        body = self.get("PersistentVolumeClaim", f"default/{name}")
        change(body)
        self.put(body)

    def edit_volume(self, name: str, change: Callable[[Obj], None]) -> None:
        body = self.get("PersistentVolume", name)
        change(body)
        self.put(body)

    # the PV controller and the provisioner
    def complete_binding(self, claim: str, volume: str) -> None:
        """The PV controller finishes a bind: the claim gets the volume and bind-completed, the PV goes Bound."""
        self.edit_volume(volume, lambda b: b["status"].update(phase="Bound"))

        def bind(body: Obj) -> None:
            body["spec"]["volumeName"] = volume
            body["metadata"]["annotations"][ANN_BIND_COMPLETED] = "yes"
            body["status"]["phase"] = "Bound"
        self.edit_claim(claim, bind)

    def provision(self, claim: str, node: str, volume: str = "dynamic-pv") -> None:
        """The provisioner creates a PV for the claim on `node`, the PV controller binds them."""
        self.put(pv(volume, node=node, sc=PROVISIONING, claim=claim, phase="Bound"))
        self.complete_binding(claim, volume)


class FakeVolumeWriter:
    """The VolumeWriter port as the API server answers it: conditional on the resourceVersion. Each write is
    delivered by the watch at once unless `deliver` is off; `after_write` then plays the controllers."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.calls: list[tuple[str, str, str, str, str]] = []
        self.errors: list[ApiError] = []  # raised by the next writes, in order
        self.deliver = True
        self.after_write: Callable[[Obj], None] | None = None  # called with the object written
        self.written = threading.Event()
        self.gate: threading.Event | None = None  # when set up, a write waits for it (a PreBind held in flight)

    def bind_volume(self, name: str, resource_version: str, namespace: str, claim: str, claim_uid: str, *,
                    bound_by_controller: bool = True) -> str:
        self.calls.append(("bind_volume", name, resource_version, f"{namespace}/{claim}", claim_uid))
        body = self._current("PersistentVolume", name, resource_version)
        body["spec"]["claimRef"] = {"kind": "PersistentVolumeClaim", "apiVersion": "v1", "namespace": namespace,
                                    "name": claim, "uid": claim_uid}
        if bound_by_controller:
            body["metadata"].setdefault("annotations", {})[ANN_BOUND_BY_CONTROLLER] = "yes"
        return self._write(body)

    def select_node(self, namespace: str, claim: str, resource_version: str, node: str) -> str:
        self.calls.append(("select_node", f"{namespace}/{claim}", resource_version, node, ""))
        body = self._current("PersistentVolumeClaim", f"{namespace}/{claim}", resource_version)
        body["metadata"].setdefault("annotations", {})[ANN_SELECTED_NODE] = node
        return self._write(body)

    def _current(self, kind: str, name: str, resource_version: str) -> Obj:
        if self.gate is not None:
            assert self.gate.wait(10)
        if self.errors:
            raise self.errors.pop(0)
        body = self.cluster.raw.get((kind, name))
        if body is None:
            raise ApiError(404, f"{kind} {name!r} not found")
        if body["metadata"]["resourceVersion"] != resource_version:
            raise ApiError(409, "the object has been modified; please apply your changes to the latest version "
                                "and try again")
        return copy.deepcopy(body)

    def _write(self, body: Obj) -> str:
        version = self.cluster.put(body, deliver=self.deliver)
        self.written.set()
        if self.after_write is not None:
            self.after_write(body)
        return version


class Harness:
    def __init__(self, objects: Sequence[Obj] = (), *, nodes: Sequence[Obj] | None = None,
                 classes: Sequence[Obj] = CLASSES, timeout: int = 600) -> None:
        self.state = ClusterState()
        for body in nodes if nodes is not None else (mk_node("node1", {KEY: "node1"}),
                                                     mk_node("node2", {KEY: "node2"})):
            self.state.upsert_node(body)
        indexes = ClusterIndexes()
        self.store = indexes.declare(VolumeStore)
        self.cluster = Cluster(self.state, self.store)
        for body in (*classes, *objects):
            self.cluster.put(body, bump=False)
        self.writer = FakeVolumeWriter(self.cluster)
        handle = Handle(self.state, MetricCache(), InFlightLedgerStore(), FakeAPI(), volume_writer=self.writer,
                        indexes=indexes)
        self.plugin = VolumeBinding(VolumeBinding.Args(bind_timeout_seconds=timeout), handle)

    def filter(self, incoming: Obj) -> tuple[Status, dict[str, list[str]], CycleState, PodInfo]:
        """PreFilter's status, then (unless it rejected) every reason Filter gives per node, in order."""
        info = parse_pod(incoming)
        cycle = CycleState()
        status = self.plugin.pre_filter(cycle, info)
        verdicts: dict[str, list[str]] = {}
        if status.ok:
            filtered = self.plugin.filter(cycle, info, self.state.table)
            for name, row in self.state.table.index.items():
                reasons = [reason for reason, mask in filtered.reasons.items() if mask[row]]
                assert bool(filtered.feasible[row]) == (not reasons), name
                verdicts[name] = reasons
        return status, verdicts, cycle, info

    def reserve(self, incoming: Obj, node: str = "node1") -> tuple[CycleState, PodInfo]:
        status, verdicts, cycle, info = self.filter(incoming)
        assert status.ok and verdicts[node] == [], (status, verdicts)
        assert self.plugin.reserve(cycle, info, node) == Status()
        self.state.assume(info, node)  # PreBind checks the pod is still there
        return cycle, info

    def assumed(self) -> tuple[dict[str, str], list[str]]:
        """What Reserve left assumed: {claim: PV it is bound to}, and the claims given a selected node."""
        volumes, claims = self.store.assumed()
        bindings: dict[str, str] = {}
        for name in volumes:
            found = self.store.volume(name)
            assert found is not None and found.claim_ref is not None
            bindings[found.claim_ref.name] = name
        return bindings, [k.split("/", 1)[1] for k in claims]


# -- TestVolumeBinding (volume_binding_test.go), node-a --------------------------------------------------------------
NODE_A = [mk_node("node-a")]
WAIT_SC = storage_class("wait-sc", provisioner="")
IMMEDIATE_SC = storage_class("immediate-sc", mode="Immediate", provisioner="")
AFFINITY_FOO_BAR = {"required": {"nodeSelectorTerms": [
    {"matchExpressions": [{"key": "foo", "operator": "In", "values": ["bar"]}]}]}}


def _plugin_pv(name: str, *, affinity: Obj | None = None) -> Obj:
    body = pv(name, sc="wait-sc")
    if affinity is not None:
        body["spec"]["nodeAffinity"] = affinity
    return body


@pytest.mark.parametrize(("incoming", "node_labels", "objects", "pre_filter", "reasons"), [
    pytest.param(claim_pod(), {}, [], (SKIP, ""), [], id="pod has not pvcs"),
    pytest.param(claim_pod("pvc-a"), {}, [pvc("pvc-a", sc="wait-sc", volume="pv-a", bound=True),
                                          _plugin_pv("pv-a")], (OK, ""), [], id="all bound"),
    pytest.param(claim_pod("pvc-a"), {}, [], (UU, 'persistentvolumeclaim "pvc-a" not found'), None,
                 id="PVC does not exist"),
    pytest.param(claim_pod("pvc-a", "pvc-b"), {}, [pvc("pvc-a", sc="wait-sc", volume="pv-a", bound=True),
                                                   _plugin_pv("pv-a")],
                 (UU, 'persistentvolumeclaim "pvc-b" not found'), None, id="Part of PVCs do not exist"),
    pytest.param(claim_pod("pvc-a"), {}, [pvc("pvc-a", sc="immediate-sc")], (UU, ERR_UNBOUND_IMMEDIATE), None,
                 id="immediate claims not bound"),
    pytest.param(claim_pod("pvc-a"), {}, [pvc("pvc-a", sc="wait-sc")], (OK, ""), [BIND],
                 id="unbound claims no matches"),
    pytest.param(claim_pod("pvc-a", "pvc-b"), {"foo": "barbar"},
                 [pvc("pvc-a", sc="wait-sc", volume="pv-a", bound=True), pvc("pvc-b", sc="wait-sc"),
                  _plugin_pv("pv-a", affinity=AFFINITY_FOO_BAR)], (OK, ""), [NODE, BIND],
                 id="bound and unbound unsatisfied"),
    pytest.param(claim_pod("pvc-a"), {}, [pvc("pvc-a", sc="wait-sc", volume="pv-a", bound=True)], (OK, ""),
                 [NO_PV], id="pv not found"),
    pytest.param(claim_pod("pvc-a"), {}, [pvc("pvc-a", sc="wait-sc", volume="pv-a", bound=True, phase="Lost")],
                 (UU, 'persistentvolumeclaim "pvc-a" bound to non-existent persistentvolume "pv-a"'), None,
                 id="pv not found claim lost"),
])
def test_volume_binding(incoming: Obj, node_labels: Mapping[str, str], objects: Sequence[Obj],
                        pre_filter: tuple[Code, str], reasons: list[str] | None) -> None:
    h = Harness(objects, nodes=[mk_node("node-a", node_labels)], classes=(WAIT_SC, IMMEDIATE_SC))
    status, verdicts, _, _ = h.filter(incoming)
    assert (status.code, status.reason) == pre_filter
    assert (verdicts["node-a"] if status.ok else None) == reasons


def test_local_volumes_with_close_capacity() -> None:
    """"local volumes with close capacity are preferred": node-c has none; node-a's smaller PV... is any of its
    200Gi ones (the first by name), node-b's a 100Gi one."""
    h = Harness([pvc("pvc-a", size="50Gi", sc="wait-sc"),
                 *(pv(f"pv-a-{i}", node="node-a", key=HOSTNAME, size="200Gi", sc="wait-sc") for i in range(2)),
                 *(pv(f"pv-b-{i}", node="node-b", key=HOSTNAME, size="100Gi", sc="wait-sc") for i in range(2))],
                nodes=[fake_node("node-a"), fake_node("node-b"), fake_node("node-c")], classes=(WAIT_SC,))
    _, verdicts, _, _ = h.filter(claim_pod("pvc-a"))
    assert verdicts == {"node-a": [], "node-b": [], "node-c": [BIND]}
    h.reserve(claim_pod("pvc-a"), "node-b")
    assert h.assumed() == ({"pvc-a": "pv-b-0"}, [])


def test_zonal_volumes_with_close_capacity() -> None:
    zone = "topology.kubernetes.io/zone"
    nodes = [fake_node(f"zone-{z}-node-{i}", labels={zone: f"zone-{z}"}) for z in "abc" for i in "ab"]
    h = Harness([pvc("pvc-a", size="50Gi", sc="wait-sc"),
                 *(pv(f"pv-a-{i}", node="zone-a", key=zone, size="200Gi", sc="wait-sc") for i in range(2)),
                 *(pv(f"pv-b-{i}", node="zone-b", key=zone, size="100Gi", sc="wait-sc") for i in range(2))],
                nodes=nodes, classes=(WAIT_SC,))
    _, verdicts, _, _ = h.filter(claim_pod("pvc-a"))
    assert verdicts == {n["metadata"]["name"]: [BIND] if "zone-c" in n["metadata"]["name"] else [] for n in nodes}


def test_storage_capacity_objects_admit_every_node_they_cover() -> None:
    """"storage capacity score" without the gate: 100/50/10Gi on three nodes, a 10Gi claim fits them all."""
    names = ("node-a", "node-b", "node-c")
    h = Harness([pvc("pvc-dynamic", size="10Gi", sc="wait-sc-dynamic"), csi_driver(PROVISIONER, True),
                 *(capacity(f"cap-{n}", "wait-sc-dynamic", topology={"matchLabels": {HOSTNAME: n}}, size=size)
                   for n, size in zip(names, ("100Gi", "50Gi", "10Gi"), strict=True))],
                nodes=[fake_node(n) for n in names], classes=(storage_class("wait-sc-dynamic"),))
    _, verdicts, _, _ = h.filter(claim_pod("pvc-dynamic"))
    assert verdicts == {n: [] for n in names}


def test_reserve_needs_the_filter_verdict_of_its_node() -> None:
    """Test_PreBindPreFlight's "node missing in the map": Reserve on a node Filter has no answer for."""
    h = Harness([pvc("unbound-pvc"), pv("pv-node1a", node="node1", size="5G")])
    _, _, cycle, info = h.filter(claim_pod("unbound-pvc"))
    assert h.plugin.reserve(cycle, info, "node-x") == Status.error('no pod volume found for node "node-x"')
    assert h.store.assumed() == ([], [])


# -- TestFindPodVolumesWithoutProvisioning / WithProvisioning (binder_test.go), node1 --------------------------------
def pv_node1a() -> Obj:
    return pv("pv-node1a", node="node1", size="5G")


def pv_node1b() -> Obj:
    return pv("pv-node1b", node="node1", size="10G")


def pv_node2() -> Obj:
    return pv("pv-node2", node="node2", size="1G")


def pv_bound() -> Obj:
    return pv("pv-bound", node="node1", claim="bound-pvc")


def bound_pvc() -> Obj:
    return pvc("bound-pvc", volume="pv-bound", bound=True)


def immediate_bound_pvc() -> Obj:
    return pvc("immediate-bound-pvc", sc=IMMEDIATE, volume="pv-bound-immediate", bound=True)


def pv_bound_immediate(node: str = "node1") -> Obj:
    return pv("pv-bound-immediate", node=node, sc=IMMEDIATE, claim="immediate-bound-pvc")


NOT_OWNED = "PVC default/test-pod-ephemeral was not created for pod default/test-pod (pod is not owner)"
NO_EPHEMERAL = 'waiting for ephemeral volume controller to create the persistentvolumeclaim "test-pod-ephemeral"'


@pytest.mark.parametrize(("claims", "objects", "expected"), [
    # (error text of PreFilter) | (node1's reasons, {claim: PV} bound by Reserve, claims provisioned)
    pytest.param((), [], ([], {}, []), id="no-volumes"),
    pytest.param(("bound-pvc",), [], 'persistentvolumeclaim "bound-pvc" not found', id="pvc-not-found"),
    pytest.param(("bound-pvc",), [bound_pvc(), pv_bound()], ([], {}, []), id="bound-pvc"),
    pytest.param(("bound-pvc",), [bound_pvc()], ([NO_PV], None, None), id="bound-pvc,pv-not-exists"),
    pytest.param(("prebound-pvc",), [pvc("prebound-pvc", volume="pv-node1a"), pv_node1a()],
                 ERR_UNBOUND_IMMEDIATE, id="prebound-pvc"),
    pytest.param(("unbound-pvc",), [pvc("unbound-pvc"), pv_node2(), pv_node1a(), pv_node1b()],
                 ([], {"unbound-pvc": "pv-node1a"}, []), id="unbound-pvc,pv-same-node"),
    pytest.param(("unbound-pvc",), [pvc("unbound-pvc"), pv_node2()], ([BIND], None, None),
                 id="unbound-pvc,pv-different-node"),
    pytest.param(("unbound-pvc", "unbound-pvc2"),
                 [pvc("unbound-pvc"), pvc("unbound-pvc2", size="5G"), pv_node1a(), pv_node1b()],
                 ([], {"unbound-pvc": "pv-node1a", "unbound-pvc2": "pv-node1b"}, []), id="two-unbound-pvcs"),
    pytest.param(("unbound-pvc2", "unbound-pvc"),
                 [pvc("unbound-pvc"), pvc("unbound-pvc2", size="5G"), pv_node1a(), pv_node1b()],
                 ([], {"unbound-pvc": "pv-node1a", "unbound-pvc2": "pv-node1b"}, []),
                 id="two-unbound-pvcs,order-by-size"),
    pytest.param(("unbound-pvc", "unbound-pvc2"), [pvc("unbound-pvc"), pvc("unbound-pvc2", size="5G"), pv_node1a()],
                 ([BIND], None, None), id="two-unbound-pvcs,partial-match"),
    pytest.param(("unbound-pvc", "bound-pvc"), [pvc("unbound-pvc"), bound_pvc(), pv_bound(), pv_node1a()],
                 ([], {"unbound-pvc": "pv-node1a"}, []), id="one-bound,one-unbound"),
    pytest.param(("unbound-pvc", "bound-pvc"), [pvc("unbound-pvc"), bound_pvc(), pv_bound(), pv_node2()],
                 ([BIND], None, None), id="one-bound,one-unbound,no-match"),
    pytest.param(("unbound-pvc", "prebound-pvc"),
                 [pvc("unbound-pvc"), pvc("prebound-pvc", volume="pv-node1a"), pv_node1a()],
                 ERR_UNBOUND_IMMEDIATE, id="one-prebound,one-unbound"),
    pytest.param(("immediate-bound-pvc",), [immediate_bound_pvc(), pv_bound_immediate()], ([], {}, []),
                 id="immediate-bound-pvc"),
    pytest.param(("immediate-bound-pvc",), [immediate_bound_pvc(), pv_bound_immediate("node2")],
                 ([NODE], None, None), id="immediate-bound-pvc-wrong-node"),
    pytest.param(("immediate-unbound-pvc",), [pvc("immediate-unbound-pvc", sc=IMMEDIATE)], ERR_UNBOUND_IMMEDIATE,
                 id="immediate-unbound-pvc"),
    pytest.param(("immediate-unbound-pvc", "bound-pvc"),
                 [pvc("immediate-unbound-pvc", sc=IMMEDIATE), bound_pvc(), pv_bound()], ERR_UNBOUND_IMMEDIATE,
                 id="immediate-unbound-pvc,delayed-mode-bound"),
    pytest.param(("immediate-unbound-pvc", "unbound-pvc"),
                 [pvc("immediate-unbound-pvc", sc=IMMEDIATE), pvc("unbound-pvc"), pv_node1a()],
                 ERR_UNBOUND_IMMEDIATE, id="immediate-unbound-pvc,delayed-mode-unbound"),
    pytest.param(("no-class-pvc",), [pvc("no-class-pvc", sc=None)], ERR_UNBOUND_IMMEDIATE,
                 id="unbound-pvc-without-class-is-immediate"),
    pytest.param(("missing-class-pvc",), [pvc("missing-class-pvc", sc="nope")], ERR_UNBOUND_IMMEDIATE,
                 id="unbound-pvc-of-a-missing-class-is-immediate"),
    pytest.param(("deleting-pvc",),
                 [{**pvc("deleting-pvc"), "metadata": {**pvc("deleting-pvc")["metadata"],
                                                       "deletionTimestamp": "2026-11-30T12:00:00Z"}}],
                 'persistentvolumeclaim "deleting-pvc" is being deleted', id="pvc-being-deleted"),
    # With provisioning (waitClassWithProvisioner)
    pytest.param(("provisioned-pvc",), [pvc("provisioned-pvc", size="1Gi", sc=PROVISIONING)],
                 ([], {}, ["provisioned-pvc"]), id="one-provisioned"),
    pytest.param(("unbound-pvc", "provisioned-pvc"),
                 [pvc("unbound-pvc"), pvc("provisioned-pvc", size="1Gi", sc=PROVISIONING), pv_node1a()],
                 ([], {"unbound-pvc": "pv-node1a"}, ["provisioned-pvc"]),
                 id="two-unbound-pvcs,one-matched,one-provisioned"),
    pytest.param(("bound-pvc", "provisioned-pvc"),
                 [bound_pvc(), pv_bound(), pvc("provisioned-pvc", size="1Gi", sc=PROVISIONING)],
                 ([], {}, ["provisioned-pvc"]), id="one-bound,one-provisioned"),
    pytest.param(("bound-pvc", "provisioned-pvc"),
                 [bound_pvc(), pv_bound(), pvc("provisioned-pvc", size="1Gi", sc=PROVISIONING, selected_node="node1")],
                 ([], {}, ["provisioned-pvc"]), id="one-binding,one-selected-node"),
    pytest.param(("immediate-bound-pvc", "provisioned-pvc"),
                 [immediate_bound_pvc(), pv_bound_immediate(), pvc("provisioned-pvc", size="1Gi", sc=PROVISIONING)],
                 ([], {}, ["provisioned-pvc"]), id="one-immediate-bound,one-provisioned"),
    pytest.param(("no-provisioner-pvc",), [pvc("no-provisioner-pvc", size="1Gi")], ([BIND], None, None),
                 id="invalid-provisioner"),
    pytest.param(("topo-mismatch-pvc",), [pvc("topo-mismatch-pvc", size="1Gi", sc=TOPO_MISMATCH)],
                 ([BIND], None, None), id="volume-topology-unsatisfied"),
    # selected-node names another node: the fast path, whatever else is true (a bound conflict is still listed)
    pytest.param(("provisioned-pvc",), [pvc("provisioned-pvc", size="1Gi", sc=PROVISIONING, selected_node="node2")],
                 ([BIND], None, None), id="selected-node-elsewhere"),
    pytest.param(("immediate-bound-pvc", "provisioned-pvc"),
                 [immediate_bound_pvc(), pv_bound_immediate("node2"),
                  pvc("provisioned-pvc", size="1Gi", sc=PROVISIONING, selected_node="node2")],
                 ([NODE, BIND], None, None), id="bound-conflict-and-selected-node-elsewhere"),
    # No static match, but the class provisions: satisfied by provisioning (checkVolumeProvisions overwrites).
    pytest.param(("provisioned-pvc",),
                 [pvc("provisioned-pvc", size="1Gi", sc=PROVISIONING),
                  pv("pv-prov-node2", node="node2", sc=PROVISIONING, size="5G")],
                 ([], {}, ["provisioned-pvc"]), id="no-match-then-provisioned"),
])
def test_find_pod_volumes(claims: Sequence[str], objects: Sequence[Obj],
                          expected: str | tuple[list[str], dict[str, str] | None, list[str] | None]) -> None:
    h = Harness(objects)
    incoming = claim_pod(*claims)
    status, verdicts, cycle, info = h.filter(incoming)
    if isinstance(expected, str):
        assert (status.code, status.reason) == (UU, expected)
        return
    reasons, bindings, provisions = expected
    assert status.code == (SKIP if not claims else OK)
    assert verdicts["node1"] == reasons
    if bindings is None or provisions is None:
        return
    assert h.plugin.reserve(cycle, info, "node1") == Status()
    assert h.assumed() == (bindings, provisions)
    for claim, volume in bindings.items():  # GetBindVolumeToClaim: claimRef with the uid, bound-by-controller
        found = h.store.volume(volume)
        assert found is not None and found.claim_ref is not None
        assert (found.claim_ref.namespace, found.claim_ref.uid) == ("default", uid(claim))
        assert found.annotations[ANN_BOUND_BY_CONTROLLER] == "yes"
    for claim in provisions:
        assumed = h.store.claim(f"default/{claim}")
        assert assumed is not None and assumed.selected_node == "node1"
    h.plugin.unreserve(cycle, info, "node1")
    h.plugin.unreserve(cycle, info, "node1")  # idempotent
    assert h.store.assumed() == ([], [])


def test_two_unbound_claims_never_take_the_same_pv_on_any_node() -> None:
    """findMatchingVolumes' chosen set, per row: node2 has one fitting PV, so only one of the two claims fits."""
    h = Harness([pvc("unbound-pvc"), pvc("unbound-pvc2"), pv("pv-node2", node="node2", size="5G"),
                 pv("pv-node1a", node="node1", size="5G"), pv("pv-node1c", node="node1", size="5G")])
    _, verdicts, _, _ = h.filter(claim_pod("unbound-pvc", "unbound-pvc2"))
    assert verdicts == {"node1": [], "node2": [BIND]}


def _with(body: Obj, change: Callable[[Obj], None]) -> Obj:
    change(body)
    return body


@pytest.mark.parametrize("candidate", [
    pytest.param(pv("pv-small", node="node1", size="500M"), id="too-small"),
    pytest.param(_with(pv("pv-block", node="node1"), lambda b: b["spec"].update(volumeMode="Block")),
                 id="volume-mode-mismatch"),
    pytest.param(_with(pv("pv-deleting", node="node1"),
                       lambda b: b["metadata"].update(deletionTimestamp="2026-11-30T12:00:00Z")), id="deleting"),
    pytest.param(pv("pv-released", node="node1", phase="Released"), id="not-available"),
    pytest.param(pv("pv-other-class", node="node1", sc=PROVISIONING), id="other-class"),
    pytest.param(_with(pv("pv-rox", node="node1"), lambda b: b["spec"].update(accessModes=["ReadOnlyMany"])),
                 id="access-modes"),
    pytest.param(pv("pv-taken", node="node1", claim="someone-else"), id="claimed-by-another"),
    pytest.param(pv("pv-stale-ref", node="node1", claim="unbound-pvc", claim_uid="uid-old"),
                 id="claimref-to-an-older-claim-of-that-name"),
    pytest.param(pv("pv-node2", node="node2"), id="other-node"),
    pytest.param(_with(pv("pv-vac", node="node1"), lambda b: b["spec"].update(volumeAttributesClassName="gold")),
                 id="volume-attributes-class-mismatch"),
])
def test_find_matching_volume_skips(candidate: Obj) -> None:
    """FindMatchingVolume's rules, one failing PV at a time; an unclaimed fitting PV on node1 is then taken."""
    h = Harness([pvc("unbound-pvc"), candidate])
    assert h.filter(claim_pod("unbound-pvc"))[1]["node1"] == [BIND]
    h.cluster.put(pv("pv-fits", node="node1", size="20G"))
    h.reserve(claim_pod("unbound-pvc"))
    assert h.assumed() == ({"unbound-pvc": "pv-fits"}, [])


def test_find_matching_volume_selector_and_ties() -> None:
    """The claim's selector picks among PVs; on equal capacity the first (by name) wins."""
    claim = _with(pvc("unbound-pvc"), lambda b: b["spec"].update(selector={"matchLabels": {"tier": "fast"}}))
    fast = [_with(pv(n, node="node1", size="5G"), lambda b: b["metadata"].update(labels={"tier": "fast"}))
            for n in ("pv-fast-b", "pv-fast-a")]
    h = Harness([claim, pv("pv-slow", node="node1", size="2G"), *fast])
    h.reserve(claim_pod("unbound-pvc"))
    assert h.assumed() == ({"unbound-pvc": "pv-fast-a"}, [])


def test_a_pv_pre_bound_to_the_claim_alone_decides() -> None:
    """A PV whose claimRef names the claim is returned at once where it is reachable, and nothing is
    returned where it is not, even if an unclaimed PV fits there."""
    h = Harness([pvc("unbound-pvc"), pv("pv-node1a", node="node1", size="5G"),
                 pv("pv-prebound", node="node2", size="10G", claim="unbound-pvc")])
    _, verdicts, _, _ = h.filter(claim_pod("unbound-pvc"))
    assert verdicts == {"node1": [BIND], "node2": []}


@pytest.mark.parametrize(("claims", "ephemeral_claim", "expected"), [
    pytest.param((), None, NO_EPHEMERAL, id="generic-ephemeral,no-pvc"),
    pytest.param(("pv-bound",), POD_UID, None, id="generic-ephemeral,with-pvc"),
    pytest.param(("pv-bound",), "uid-someone-else", NOT_OWNED, id="generic-ephemeral,wrong-pvc"),
    pytest.param(("pv-bound",), "", NOT_OWNED, id="generic-ephemeral,no-owner"),
])
def test_generic_ephemeral_volumes(claims: Sequence[str], ephemeral_claim: str | None, expected: str | None) -> None:
    objects: list[Obj] = []
    if ephemeral_claim is not None:
        objects += [pvc("test-pod-ephemeral", sc=IMMEDIATE, volume="pv-bound", bound=True,
                        owner=ephemeral_claim or None),
                    pv("pv-bound", node="node1", sc=IMMEDIATE, claim="test-pod-ephemeral")]
    h = Harness(objects)
    status, verdicts, _, _ = h.filter(claim_pod(ephemeral=["ephemeral"]))
    if expected is None:
        assert status.code == OK and verdicts["node1"] == []
    else:
        assert (status.code, status.reason) == (UU, expected)


# -- TestCapacity (binder_test.go) -----------------------------------------------------------------------------------
NODE1_TOPOLOGY = {"matchLabels": {KEY: "node1"}}


@pytest.mark.parametrize("opt_in", [True, False], ids=["driver-publishes-capacity", "driver-does-not"])
@pytest.mark.parametrize(("capacities", "fits"), [
    pytest.param([capacity("net", PROVISIONING, topology={}, size="1Gi")], True, id="network-attached"),
    pytest.param([capacity("local", PROVISIONING, topology=NODE1_TOPOLOGY, size="1Gi")], True, id="local-storage"),
    pytest.param([], False, id="no-storage"),
    pytest.param([capacity("node2", PROVISIONING, topology={"matchLabels": {KEY: "node2"}}, size="1Gi")], False,
                 id="wrong-node"),
    pytest.param([capacity("other", WAIT, topology={}, size="1Gi")], False, id="wrong-storage-class"),
    pytest.param([capacity("small", PROVISIONING, topology={}, size="1Mi")], False, id="insufficient-storage"),
    pytest.param([capacity("small", PROVISIONING, topology={}, size="1Gi", max_size="1Mi")], False,
                 id="insufficient-volume-size"),
    pytest.param([capacity("zero", PROVISIONING, topology={}, size="0Mi")], False, id="zero-storage"),
    pytest.param([capacity("zero", PROVISIONING, topology={}, size="1Gi", max_size="0Mi")], False,
                 id="zero-volume-size"),
    pytest.param([capacity("nil", PROVISIONING, topology={})], False, id="nil-storage"),
    pytest.param([capacity("no-topology", PROVISIONING, topology=None, size="1Gi")], False, id="nil-topology"),
    pytest.param([capacity("small", PROVISIONING, topology={}, size="1Mi"),
                  capacity("zzz", PROVISIONING, topology=NODE1_TOPOLOGY, size="2Gi")], True,
                 id="any-fitting-object"),
])
def test_capacity(capacities: Sequence[Obj], fits: bool, opt_in: bool) -> None:
    h = Harness([pvc("provisioned-pvc", size="1Gi", sc=PROVISIONING), csi_driver(PROVISIONER, opt_in), *capacities])
    _, verdicts, cycle, info = h.filter(claim_pod("provisioned-pvc"))
    assert verdicts["node1"] == ([] if fits or not opt_in else [SPACE])
    if not verdicts["node1"]:
        assert h.plugin.reserve(cycle, info, "node1") == Status()
        assert h.assumed() == ({}, ["provisioned-pvc"])


def test_capacity_is_not_checked_without_a_csi_driver_object() -> None:
    h = Harness([pvc("provisioned-pvc", size="1Gi", sc=PROVISIONING)])
    assert h.filter(claim_pod("provisioned-pvc"))[1]["node1"] == []


# -- TestAssumePodVolumes / TestRevertAssumedPodVolumes --------------------------------------------------------------
def test_assume_all_bound_assumes_nothing_and_pre_bind_writes_nothing() -> None:
    h = Harness([bound_pvc(), pv_bound()])
    cycle, info = h.reserve(claim_pod("bound-pvc"))
    assert h.store.assumed() == ([], [])
    assert h.plugin.pre_bind(cycle, info, "node1") == Status()
    assert h.writer.calls == []


def test_assume_a_pv_already_bound_to_the_claim_is_not_dirty() -> None:
    """"pv-already-bound": a PV pre-bound to the claim (claimRef with its uid) is chosen, not assumed, not
    rewritten; PreBind waits for the PV controller."""
    h = Harness([pvc("unbound-pvc"), pv("pv-node1a", node="node1", size="5G", claim="unbound-pvc")], timeout=0)
    cycle, info = h.reserve(claim_pod("unbound-pvc"))
    assert h.store.assumed() == ([], [])
    h.cluster.complete_binding("unbound-pvc", "pv-node1a")
    assert h.plugin.pre_bind(cycle, info, "node1") == Status()
    assert h.writer.calls == []


def test_assume_a_pv_pre_bound_without_uid_gets_the_uid_but_not_bound_by_controller() -> None:
    """GetBindVolumeToClaim: a claimRef without uid is already "bound to the claim", so the uid is filled in and
    the bound-by-controller annotation is not added (the user pre-bound it)."""
    h = Harness([pvc("unbound-pvc"), pv("pv-node1a", node="node1", size="5G", claim="unbound-pvc", claim_uid="")])
    h.reserve(claim_pod("unbound-pvc"))
    assumed = h.store.volume("pv-node1a")
    assert assumed is not None and assumed.claim_ref is not None
    assert assumed.claim_ref.uid == uid("unbound-pvc")
    assert ANN_BOUND_BY_CONTROLLER not in assumed.annotations


def test_assume_out_of_sync_fails_and_reverts_what_it_assumed() -> None:
    """"tmpupdate-failed": the second PV changed after Filter chose it; the first one's assumption is undone."""
    h = Harness([pvc("unbound-pvc"), pvc("unbound-pvc2", size="5G"), pv_node1a(), pv_node1b(),
                 pvc("provisioned-pvc", size="1Gi", sc=PROVISIONING)])
    incoming = claim_pod("unbound-pvc", "unbound-pvc2", "provisioned-pvc")
    status, verdicts, cycle, info = h.filter(incoming)
    assert status.ok and verdicts["node1"] == []
    h.cluster.put(pv("pv-node1b", node="node1", size="10G", rv="2"), bump=False)
    assert h.plugin.reserve(cycle, info, "node1") == Status.error(
        '"pv-node1b" is out of sync (stored: 2, assume: 1)')
    assert h.store.assumed() == ([], [])
    h.plugin.unreserve(cycle, info, "node1")
    assert h.store.assumed() == ([], [])


def test_assumed_pv_is_taken_for_the_next_pod_until_restored() -> None:
    h = Harness([pvc("unbound-pvc"), pvc("unbound-pvc2"), pv_node1a()])
    cycle, info = h.reserve(claim_pod("unbound-pvc"))
    # The next pod's claim sees pv-node1a bound to unbound-pvc: nothing left on node1.
    assert h.filter(claim_pod("unbound-pvc2", name="other"))[1]["node1"] == [BIND]
    h.plugin.unreserve(cycle, info, "node1")
    assert h.filter(claim_pod("unbound-pvc2", name="other"))[1]["node1"] == []


def test_the_watch_delivering_another_version_drops_the_assumption() -> None:
    h = Harness([pvc("unbound-pvc"), pv_node1a(), pvc("provisioned-pvc", size="1Gi", sc=PROVISIONING)])
    h.reserve(claim_pod("unbound-pvc", "provisioned-pvc"))
    assert h.assumed() == ({"unbound-pvc": "pv-node1a"}, ["provisioned-pvc"])
    h.cluster.edit_volume("pv-node1a", lambda b: b["metadata"].update(labels={"x": "y"}))
    h.cluster.edit_claim("provisioned-pvc", lambda b: b["metadata"].update(labels={"x": "y"}))
    assert h.store.assumed() == ([], [])


# -- TestBindAPIUpdate / TestCheckBindings / TestBindPodVolumes ------------------------------------------------------
def _static(h: Harness) -> None:
    """unbound-pvc → pv-node1a on node1."""


def _bind(h: Harness) -> None:
    h.cluster.complete_binding("unbound-pvc", "pv-node1a")


def _bind_claim_only(h: Harness) -> None:
    """The PV controller bound the claim, but the watch has not delivered our PV write yet."""
    def bind(body: Obj) -> None:
        body["spec"]["volumeName"] = "pv-node1a"
        body["metadata"]["annotations"][ANN_BIND_COMPLETED] = "yes"
    h.cluster.edit_claim("unbound-pvc", bind)


def _set_volume_name(h: Harness) -> None:
    h.cluster.edit_claim("unbound-pvc", lambda b: b["spec"].update(volumeName="pv-node1a"))


def _claim_ref(ref: Obj | None) -> Callable[[Harness], None]:
    def change(h: Harness) -> None:
        def edit(body: Obj) -> None:
            if ref is None:
                del body["spec"]["claimRef"]
            else:
                body["spec"]["claimRef"] = ref
        h.cluster.edit_volume("pv-node1a", edit)
        _bind(h)
    return change


def _relabel_node1(h: Harness) -> None:
    h.state.upsert_node(mk_node("node1", {KEY: "node1-relabelled"}))
    _bind(h)


def _annotations(annotations: Obj | None) -> Callable[[Harness], None]:
    def change(h: Harness) -> None:
        def edit(body: Obj) -> None:
            if annotations is None:
                del body["metadata"]["annotations"]
            else:
                body["metadata"]["annotations"] = annotations
        h.cluster.edit_claim("provisioned-pvc", edit)
    return change


def _provision_on(node: str) -> Callable[[Harness], None]:
    return lambda h: h.cluster.provision("provisioned-pvc", node)


def _bound_to_missing_pv(h: Harness) -> None:
    def edit(body: Obj) -> None:
        body["spec"]["volumeName"] = "dynamic-pv"
        body["metadata"]["annotations"][ANN_BIND_COMPLETED] = "yes"
    h.cluster.edit_claim("provisioned-pvc", edit)


PENDING = "pending"
RESET = 'binding volumes: ClaimRef got reset for pv "pv-node1a"'


@pytest.mark.parametrize(("claim", "after_write", "deliver", "expected"), [
    pytest.param("unbound-pvc", _bind, True, None, id="binding-bound"),
    pytest.param("unbound-pvc", _set_volume_name, True, PENDING, id="binding-prebound"),
    pytest.param("unbound-pvc", _static, True, PENDING, id="binding-unbound"),
    pytest.param("unbound-pvc", lambda h: h.cluster.delete_claim("unbound-pvc"), True,
                 "binding volumes: failed to check binding", id="binding-pvc-not-exists"),
    pytest.param("unbound-pvc", lambda h: h.cluster.delete_volume("pv-node1a"), True,
                 "binding volumes: failed to check binding", id="binding-pv-not-exists"),
    pytest.param("unbound-pvc", _claim_ref(None), True, RESET, id="binding-claimref-nil"),
    pytest.param("unbound-pvc", _claim_ref({"namespace": "default", "name": "unbound-pvc", "uid": ""}), True,
                 RESET, id="binding-claimref-uid-empty"),
    pytest.param("unbound-pvc", _bind_claim_only, False, PENDING, id="binding-pv-api-version-older"),
    pytest.param("unbound-pvc", _relabel_node1, True,
                 'binding volumes: pv "pv-node1a" node affinity doesn\'t match node "node1": '
                 "no matching NodeSelectorTerms", id="node-affinity-fails"),
    pytest.param("provisioned-pvc", _provision_on("node1"), True, None, id="provisioning-pvc-bound"),
    pytest.param("provisioned-pvc", _static, True, PENDING, id="provisioning-pvc-unbound"),
    pytest.param("provisioned-pvc", lambda h: h.cluster.delete_claim("provisioned-pvc"), True,
                 "binding volumes: failed to check provisioning pvc", id="provisioning-pvc-not-exists"),
    pytest.param("provisioned-pvc", _annotations(None), True,
                 'binding volumes: selectedNode annotation reset for PVC "provisioned-pvc"',
                 id="provisioning-pvc-annotations-nil"),
    pytest.param("provisioned-pvc", _annotations({"volume.kubernetes.io/storage-provisioner": PROVISIONER}), True,
                 'binding volumes: provisioning failed for PVC "provisioned-pvc"',
                 id="provisioning-pvc-selected-node-dropped"),
    pytest.param("provisioned-pvc", _annotations({ANN_SELECTED_NODE: "node2"}), True,
                 'binding volumes: provisioning failed for PVC "provisioned-pvc"',
                 id="provisioning-pvc-selected-node-wrong-node"),
    pytest.param("provisioned-pvc", _bound_to_missing_pv, True, PENDING,
                 id="tolerate-provisioning-pvc-bound-pv-not-found"),
    pytest.param("provisioned-pvc", _provision_on("node2"), True,
                 'binding volumes: pv "dynamic-pv" node affinity doesn\'t match node "node1": '
                 "no matching NodeSelectorTerms", id="node-affinity-fails-dynamic-provisioning"),
])
def test_check_bindings(claim: str, after_write: Callable[[Harness], None], deliver: bool,
                        expected: str | None) -> None:
    """PreBind writes, the controllers (after_write) answer, then PreBind looks once (bindTimeoutSeconds 0)."""
    h = Harness([pvc("unbound-pvc"), pv_node1a(), pvc("provisioned-pvc", size="1Gi", sc=PROVISIONING)], timeout=0)
    cycle, info = h.reserve(claim_pod(claim))
    h.writer.deliver = deliver
    h.writer.after_write = lambda _: after_write(h)
    status = h.plugin.pre_bind(cycle, info, "node1")
    if claim == "unbound-pvc":
        assert h.writer.calls == [("bind_volume", "pv-node1a", "1", "default/unbound-pvc", uid("unbound-pvc"))]
    else:
        assert h.writer.calls == [("select_node", "default/provisioned-pvc", "1", "node1", "")]
    if expected is None:
        assert status == Status()
    elif expected == PENDING:
        assert status.code == ERROR and "timed out" in status.reason
    else:
        assert status.code == ERROR and status.reason.startswith(expected), status.reason


def test_bind_api_update_writes_bindings_then_provisions_in_order() -> None:
    """TestBindAPIUpdate "one-binding, one-provision" (plus a second binding): each write is conditional on the
    version Filter decided on; the PV controller and provisioner then finish."""
    h = Harness([pvc("unbound-pvc"), pvc("unbound-pvc2", size="5G"), pv_node1a(), pv_node1b(),
                 pvc("provisioned-pvc", size="1Gi", sc=PROVISIONING)], timeout=0)
    cycle, info = h.reserve(claim_pod("provisioned-pvc", "unbound-pvc2", "unbound-pvc"))

    def controllers(_: Obj) -> None:
        if len(h.writer.calls) == 3:
            h.cluster.complete_binding("unbound-pvc", "pv-node1a")
            h.cluster.complete_binding("unbound-pvc2", "pv-node1b")
            h.cluster.provision("provisioned-pvc", "node1")
    h.writer.after_write = controllers
    assert h.plugin.pre_bind(cycle, info, "node1") == Status()
    assert h.writer.calls == [
        ("bind_volume", "pv-node1a", "1", "default/unbound-pvc", uid("unbound-pvc")),
        ("bind_volume", "pv-node1b", "1", "default/unbound-pvc2", uid("unbound-pvc2")),
        ("select_node", "default/provisioned-pvc", "1", "node1", ""),
    ]
    watched = h.store.watched_volume("pv-node1a")
    assert watched is not None and watched.annotations[ANN_BOUND_BY_CONTROLLER] == "yes"
    # Retried (a bind whose outcome was unknown): nothing is written again.
    assert h.plugin.pre_bind(cycle, info, "node1") == Status()
    assert len(h.writer.calls) == 3


def test_bind_pod_volumes_already_bound() -> None:
    h = Harness([bound_pvc(), pv_bound()], timeout=0)
    cycle, info = h.reserve(claim_pod("bound-pvc"))
    assert h.plugin.pre_bind(cycle, info, "node1") == Status()
    assert h.writer.calls == []


def _in_background(h: Harness, action: Callable[[], None]) -> threading.Thread:
    """Runs `action` once PreBind's write has happened (PreBind is then waiting, or about to)."""
    def run() -> None:
        assert h.writer.written.wait(10)
        action()
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_bind_pod_volumes_static_binding_completes_when_the_claim_is_bound_later() -> None:
    h = Harness([pvc("unbound-pvc"), pv_node1a()])
    cycle, info = h.reserve(claim_pod("unbound-pvc"))
    thread = _in_background(h, lambda: h.cluster.complete_binding("unbound-pvc", "pv-node1a"))
    assert h.plugin.pre_bind(cycle, info, "node1") == Status()
    thread.join(10)
    claim = h.store.watched_claim("default/unbound-pvc")
    assert claim is not None and claim.volume_name == "pv-node1a"


def test_bind_pod_volumes_dynamic_provisioning_completes() -> None:
    h = Harness([pvc("provisioned-pvc", size="1Gi", sc=PROVISIONING)])
    cycle, info = h.reserve(claim_pod("provisioned-pvc"))
    thread = _in_background(h, lambda: h.cluster.provision("provisioned-pvc", "node1"))
    assert h.plugin.pre_bind(cycle, info, "node1") == Status()
    thread.join(10)
    assert h.writer.calls == [("select_node", "default/provisioned-pvc", "1", "node1", "")]


def test_bind_pod_volumes_conflict_on_write() -> None:
    """"bound-by-pv-controller-before-bind": the PV changed in the API after Filter chose it (the watch has not
    delivered it yet), so the write conditional on the old version answers 409."""
    h = Harness([pvc("unbound-pvc"), pv_node1a()])
    cycle, info = h.reserve(claim_pod("unbound-pvc"))
    h.cluster.put(pv("pv-node1a", node="node1", size="5G", claim="someone-else"), deliver=False)
    status = h.plugin.pre_bind(cycle, info, "node1")
    assert status.code == ERROR and "modified" in status.reason, status
    h.plugin.unreserve(cycle, info, "node1")
    assert h.store.assumed() == ([], [])


def test_bind_pod_volumes_error_from_the_writer_stops_the_writes() -> None:
    h = Harness([pvc("unbound-pvc"), pv_node1a(), pvc("provisioned-pvc", size="1Gi", sc=PROVISIONING)])
    cycle, info = h.reserve(claim_pod("unbound-pvc", "provisioned-pvc"))
    h.writer.errors.append(ApiError(409, "the object has been modified"))
    status = h.plugin.pre_bind(cycle, info, "node1")
    assert status.code == ERROR and status.reason.startswith("binding volumes:")
    assert [c[0] for c in h.writer.calls] == ["bind_volume"]


def test_bind_pod_volumes_pod_deleted_meanwhile() -> None:
    h = Harness([pvc("unbound-pvc"), pv_node1a()])
    cycle, info = h.reserve(claim_pod("unbound-pvc"))
    h.writer.deliver = False

    def delete_pod() -> None:
        h.state.remove_pod(info.uid)
        h.cluster.deliver_held()  # the PV's update wakes the wait
    thread = _in_background(h, delete_pod)
    status = h.plugin.pre_bind(cycle, info, "node1")
    thread.join(10)
    assert status.code == ERROR and "pod does not exist any more" in status.reason


def test_bind_pod_volumes_times_out() -> None:
    h = Harness([pvc("unbound-pvc"), pv_node1a()], timeout=0)
    cycle, info = h.reserve(claim_pod("unbound-pvc"))
    status = h.plugin.pre_bind(cycle, info, "node1")
    assert status.code == ERROR and status.reason.startswith("binding volumes:") and "timed out" in status.reason


def test_bind_pod_volumes_selected_node_dropped_while_waiting() -> None:
    """The provisioner gives up and removes selected-node while PreBind waits: provisioning failed."""
    h = Harness([pvc("provisioned-pvc", size="1Gi", sc=PROVISIONING)])
    cycle, info = h.reserve(claim_pod("provisioned-pvc"))

    def give_up(body: Obj) -> None:
        body["metadata"]["annotations"] = {"volume.kubernetes.io/storage-provisioner": PROVISIONER}
    thread = _in_background(h, lambda: h.cluster.edit_claim("provisioned-pvc", give_up))
    status = h.plugin.pre_bind(cycle, info, "node1")
    thread.join(10)
    assert status == Status.error('binding volumes: provisioning failed for PVC "provisioned-pvc"')


def test_pre_bind_without_a_volume_writer_is_an_error() -> None:
    h = Harness([pvc("unbound-pvc"), pv_node1a()])
    h.plugin.handle.volume_writer = None
    cycle, info = h.reserve(claim_pod("unbound-pvc"))
    assert h.plugin.pre_bind(cycle, info, "node1").code == ERROR


def test_bind_timeout_must_not_be_negative() -> None:
    assert VolumeBinding.parse_args({"bindTimeoutSeconds": 600}).bind_timeout_seconds == 600
    with pytest.raises(Exception, match="bindTimeoutSeconds"):
        VolumeBinding.parse_args({"bindTimeoutSeconds": -1})


# -- TestIsSchedulableAfterPersistentVolumeClaimChange --------------------------------------------------------------
def _pvc_hint() -> Callable[[PodInfo, Any], QueueingHint]:
    h = Harness()
    [hint] = [e.hint for e in h.plugin.events_to_register() if e.event == ClusterEvent.PVC_CHANGED]
    assert hint is not None
    return hint


@pytest.mark.parametrize(("incoming", "claim", "expected"), [
    pytest.param(fake_pod("p", volumes=[{"name": "tmp", "emptyDir": {}}]), pvc("pvc1"), QueueingHint.SKIP,
                 id="pod-has-no-pvc"),
    pytest.param(claim_pod("pvc1"), pvc("pvc1", namespace="other"), QueueingHint.SKIP, id="pvc-in-another-namespace"),
    pytest.param(claim_pod("pvc1"), pvc("pvc2"), QueueingHint.SKIP, id="pvc-with-another-name"),
    pytest.param(claim_pod("pvc1"), pvc("pvc1"), QueueingHint.QUEUE, id="the-pods-pvc"),
    pytest.param(claim_pod("pvc1", "pvc2"), pvc("pvc2"), QueueingHint.QUEUE, id="one-of-the-pods-pvcs"),
    pytest.param(claim_pod(ephemeral=["eph"]), pvc("test-pod-eph"), QueueingHint.QUEUE, id="the-pods-ephemeral-pvc"),
    pytest.param(claim_pod(ephemeral=["eph"]), pvc("eph"), QueueingHint.SKIP, id="ephemeral-volume-name-only"),
])
def test_pvc_queueing_hint(incoming: Obj, claim: Obj, expected: QueueingHint) -> None:
    assert _pvc_hint()(parse_pod(incoming), parse_claim(claim)) == expected


def test_registered_events() -> None:
    events = {e.event: e.hint for e in Harness().plugin.events_to_register()}
    assert set(events) == {ClusterEvent.NODE_ADDED, ClusterEvent.NODE_LABELS, ClusterEvent.PVC_CHANGED,
                           ClusterEvent.PV_CHANGED, ClusterEvent.STORAGE_CLASS_CHANGED,
                           ClusterEvent.CSI_NODE_CHANGED, ClusterEvent.CSI_CAPACITY_CHANGED,
                           ClusterEvent.CSI_DRIVER_CHANGED}
    assert ClusterEvent.POD_DELETED not in events  # no Pod event upstream


# -- the whole Scheduler ---------------------------------------------------------------------------------------------
def test_scheduler_binds_two_claims_to_the_two_static_pvs() -> None:
    """A WaitForFirstConsumer class with a local PV on each of nodes a and b (none on c). The first pod's PV is
    assumed at Reserve and its write held back; the second pod, scheduled meanwhile, must take the other PV."""
    api = FakeAPI()
    writer_box: list[FakeVolumeWriter] = []
    scheduler = make_scheduler(api=api, volume_writer=_LateWriter(writer_box))
    cluster = Cluster(scheduler.state, scheduler.indexes.get(VolumeStore), scheduler.handlers.on_object_event)
    writer = FakeVolumeWriter(cluster)
    writer_box.append(writer)
    for name in ("a", "b", "c"):
        scheduler.handlers.on_node_event("ADDED", fake_node(name))
    for body in (storage_class("local", provisioner="kubernetes.io/no-provisioner"),
                 pv("pv-a", node="a", key=HOSTNAME, sc="local", size="10Gi"),
                 pv("pv-b", node="b", key=HOSTNAME, sc="local", size="10Gi"),
                 pvc("data-0", sc="local", size="1Gi"), pvc("data-1", sc="local", size="1Gi")):
        cluster.put(body)

    def controller(written: Obj) -> None:  # the PV controller finishes each bind the scheduler writes
        cluster.complete_binding(written["spec"]["claimRef"]["name"], written["metadata"]["name"])
    writer.after_write = controller
    writer.gate = threading.Event()  # hold the first pod's write until the second pod is scheduled

    api.add_pod(claim_pod("data-0", name="web-0", pod_uid="uid-web-0"))
    first = scheduler.schedule_one(timeout=1)
    assert first is not None and first.node in ("a", "b")
    taken = f"pv-{first.node}"
    assert scheduler.indexes.get(VolumeStore).assumed() == ([taken], [])
    api.add_pod(claim_pod("data-1", name="web-1", pod_uid="uid-web-1"))
    second = scheduler.schedule_one(timeout=1)
    assert second is not None and second.node in ("a", "b") and second.node != first.node
    writer.gate.set()
    drain(scheduler, api)
    assert sorted(api.binds) == sorted([("default/web-0", first.node), ("default/web-1", second.node)])
    assert sorted((c[1], c[3]) for c in writer.calls) == sorted(
        [(taken, "default/data-0"), (f"pv-{second.node}", "default/data-1")])
    assert scheduler.indexes.get(VolumeStore).assumed() == ([], [])


class _LateWriter:
    """Forwards to the FakeVolumeWriter built once the scheduler (whose state it writes into) exists."""

    def __init__(self, box: list[FakeVolumeWriter]) -> None:
        self._box = box

    def bind_volume(self, name: str, resource_version: str, namespace: str, claim: str, claim_uid: str, *,
                    bound_by_controller: bool = True) -> str:
        return self._box[0].bind_volume(name, resource_version, namespace, claim, claim_uid,
                                        bound_by_controller=bound_by_controller)

    def select_node(self, namespace: str, claim: str, resource_version: str, node: str) -> str:
        return self._box[0].select_node(namespace, claim, resource_version, node)


def test_assume_of_an_object_deleted_meanwhile_reverts_what_it_assumed() -> None:
    """The version check and the assumption are one step: a claim the watch removed after Filter is an error,
    and the PV already assumed for the pod's other claim is restored (no PV left claimed by nobody)."""
    h = Harness([pvc("unbound-pvc"), pv_node1a(), pvc("provisioned-pvc", size="1Gi", sc=PROVISIONING)])
    incoming = claim_pod("unbound-pvc", "provisioned-pvc")
    status, verdicts, cycle, info = h.filter(incoming)
    assert status.ok and verdicts["node1"] == []
    h.store.remove_claim("default/provisioned-pvc")
    assert h.plugin.reserve(cycle, info, "node1") == Status.error('"default/provisioned-pvc" is gone')
    assert h.store.assumed() == ([], [])


def test_a_pv_the_user_pre_bound_is_written_without_the_bound_by_controller_annotation() -> None:
    """The PV controller unbinds a controller-bound PV by clearing its whole claimRef: a user's pre-binding must
    not be turned into one (upstream's GetBindVolumeToClaim sets the annotation only when it binds)."""
    h = Harness([pvc("unbound-pvc"), pv("pv-node1a", node="node1", size="5G", claim="unbound-pvc", claim_uid="")],
                timeout=0)
    cycle, info = h.reserve(claim_pod("unbound-pvc"))
    h.writer.deliver = False
    h.plugin.pre_bind(cycle, info, "node1")  # looks once (timeout 0): only the write matters
    written = h.cluster.raw[("PersistentVolume", "pv-node1a")]
    assert h.writer.calls[0][0] == "bind_volume"
    assert ANN_BOUND_BY_CONTROLLER not in (written["metadata"].get("annotations") or {})


def test_a_pre_bind_failing_half_way_keeps_what_it_wrote_assumed() -> None:
    """The PV's claimRef was written, the claim's selected-node answered 409: Unreserve restores only the claim;
    the PV stays assumed until the watch delivers the written version, so no other pod takes it meanwhile."""
    h = Harness([pvc("unbound-pvc"), pv_node1a(), pvc("provisioned-pvc", size="1Gi", sc=PROVISIONING)], timeout=0)
    cycle, info = h.reserve(claim_pod("unbound-pvc", "provisioned-pvc"))
    h.writer.deliver = False
    h.cluster.put(pvc("provisioned-pvc", size="1Gi", sc=PROVISIONING, rv="7"), deliver=False)
    status = h.plugin.pre_bind(cycle, info, "node1")
    assert status.code == ERROR and [c[0] for c in h.writer.calls] == ["bind_volume", "select_node"]
    h.plugin.unreserve(cycle, info, "node1")
    assert h.store.assumed() == (["pv-node1a"], [])
