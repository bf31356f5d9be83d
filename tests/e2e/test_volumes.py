"""Pods with volumes on the dev cluster, with its kube-controller-manager (PV binder) and test provisioner.

Each test has its own StorageClass (and so its own PVs: a claim only matches PVs of its class), its own node
pool and namespace. What is asserted is what the API shows: where the pod is bound, the claim's phase and
selected-node annotation, the PV's claimRef; and from the scheduler, its FailedScheduling reasons, the
decision record's notes, and that nothing stays assumed.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx

from devcluster import DevCluster
from devcluster.kubeapi import KubeAPI
from devcluster.provisioner import PROVISIONER
from metrics_sched.model.volumes import ANN_SELECTED_NODE, NO_PROVISIONER
from tests.e2e import kube
from tests.e2e.pools import in_pool, node_pool
from tests.e2e.scheduler_proc import SchedulerProcess, schedulers
from tests.e2e.telemetry_setup import decisions

HOSTNAME = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
CSI_DRIVER = "csi.dev.metrics-sched.io"


# -- objects ------------------------------------------------------------------------------------------
def storage_class(name: str, provisioner: str = NO_PROVISIONER, *, wffc: bool = True) -> dict[str, Any]:
    return {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": name},
            "provisioner": provisioner, "reclaimPolicy": "Delete",
            "volumeBindingMode": "WaitForFirstConsumer" if wffc else "Immediate"}


def volume(name: str, storage_class_name: str, *, size: str = "10Gi", node: str | None = None,
           zone: str | None = None, modes: tuple[str, ...] = ("ReadWriteOnce",),
           csi_handle: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"capacity": {"storage": size}, "accessModes": list(modes),
                            "storageClassName": storage_class_name, "persistentVolumeReclaimPolicy": "Retain"}
    metadata: dict[str, Any] = {"name": name}
    if csi_handle:
        spec["csi"] = {"driver": CSI_DRIVER, "volumeHandle": csi_handle}
    else:
        spec["local"] = {"path": f"/mnt/{name}"}
    key, value = (HOSTNAME, node) if node else (ZONE, zone)
    if value:
        spec["nodeAffinity"] = {"required": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": key, "operator": "In", "values": [value]}]}]}}
    elif not csi_handle:
        raise ValueError("a local PV needs a node or a zone")
    if zone:
        metadata["labels"] = {ZONE: zone}
    return {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": metadata, "spec": spec}


def claim(name: str, storage_class_name: str, *, size: str = "1Gi",
          modes: tuple[str, ...] = ("ReadWriteOnce",)) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name},
            "spec": {"accessModes": list(modes), "storageClassName": storage_class_name,
                     "resources": {"requests": {"storage": size}}}}


def pod_with_claims(name: str, scheduler: str, pool: str, *claims: str) -> dict[str, Any]:
    volumes = [{"name": f"v{i}", "persistentVolumeClaim": {"claimName": c}} for i, c in enumerate(claims)]
    return kube.pod_manifest(name, scheduler=scheduler, volumes=volumes, **in_pool(pool))


class Storage:
    """Cluster-scoped objects of one test (a class and its PVs), deleted afterwards."""

    def __init__(self, api: KubeAPI, namespace: str) -> None:
        self.api = api
        self.namespace = namespace
        self.prefix = f"s{secrets.token_hex(3)}"
        self.classes: list[str] = []
        self.volumes: list[str] = []

    def add_class(self, provisioner: str = NO_PROVISIONER, *, wffc: bool = True) -> str:
        name = f"{self.prefix}-{len(self.classes)}"
        self.api.post("/apis/storage.k8s.io/v1/storageclasses", storage_class(name, provisioner, wffc=wffc))
        self.classes.append(name)
        return name

    def add_volume(self, name: str, storage_class_name: str, **kwargs: Any) -> str:
        name = f"{self.prefix}-{name}"
        self.api.post("/api/v1/persistentvolumes", volume(name, storage_class_name, **kwargs))
        self.volumes.append(name)
        return name

    def add_claim(self, name: str, storage_class_name: str, **kwargs: Any) -> None:
        self.api.post(f"/api/v1/namespaces/{self.namespace}/persistentvolumeclaims",
                      claim(name, storage_class_name, **kwargs))

    def add_pod(self, body: dict[str, Any]) -> None:
        self.api.post(f"/api/v1/namespaces/{self.namespace}/pods", body)

    def get_claim(self, name: str) -> dict[str, Any]:
        found: dict[str, Any] = self.api.get(f"/api/v1/namespaces/{self.namespace}/persistentvolumeclaims/{name}")
        return found

    def get_volume(self, name: str) -> dict[str, Any]:
        found: dict[str, Any] = self.api.get(f"/api/v1/persistentvolumes/{name}")
        return found

    def node_of(self, pod: str) -> str | None:
        node: str | None = self.api.get(f"/api/v1/namespaces/{self.namespace}/pods/{pod}")["spec"].get("nodeName")
        return node

    def wait_bound(self, pod: str, timeout: float = 30) -> str:
        node: str = kube.poll(lambda: self.node_of(pod), timeout, f"pod {pod} bound")
        return node

    def wait_claim_bound(self, name: str, timeout: float = 30) -> dict[str, Any]:
        found: dict[str, Any] = kube.poll(
            lambda: (c := self.get_claim(name))["status"].get("phase") == "Bound" and c, timeout,
            f"claim {name} Bound")
        return found

    def scheduled_condition(self, pod: str) -> dict[str, Any] | None:
        status = self.api.get(f"/api/v1/namespaces/{self.namespace}/pods/{pod}")["status"]
        return next((c for c in status.get("conditions") or () if c["type"] == "PodScheduled"), None)

    def wait_unschedulable(self, pod: str, reason: str, timeout: float = 30) -> str:
        def refused() -> str | None:
            cond = self.scheduled_condition(pod)
            if cond and cond["status"] == "False" and reason in cond.get("message", ""):
                return str(cond["message"])
            return None
        message: str = kube.poll(refused, timeout, f"pod {pod} unschedulable with {reason!r}")
        return message

    def clean_up(self) -> None:
        kube.delete_namespace(self.api, self.namespace)
        for name in self.volumes:
            self.api.request("DELETE", f"/api/v1/persistentvolumes/{name}", ok=(404,))
        for name in self.classes:
            self.api.request("DELETE", f"/apis/storage.k8s.io/v1/storageclasses/{name}", ok=(404,))


@contextmanager
def storage(api: KubeAPI, namespace: str) -> Iterator[Storage]:
    objects = Storage(api, namespace)
    try:
        yield objects
    finally:
        objects.clean_up()


def metric(proc: SchedulerProcess, name: str) -> float:
    text = httpx.get(f"{proc.url}/metrics", timeout=5).text
    match = re.search(rf"^{name} ([0-9.e+-]+)$", text, re.M)
    assert match, f"{name} not in /metrics"
    return float(match.group(1))


# -- tests --------------------------------------------------------------------------------------------
def test_static_local_volumes_bring_the_pod_to_their_node(cluster: DevCluster, api: KubeAPI,
                                                          namespace: str) -> None:
    with node_pool(cluster, 3) as (pool, specs), schedulers(cluster) as (name, [proc]), \
            storage(api, namespace) as s:
        local = s.add_class()
        target = specs[1].name
        pv = s.add_volume("a", local, node=target)
        s.add_claim("data", local)
        s.add_pod(pod_with_claims("first", name, pool, "data"))
        assert s.wait_bound("first") == target
        # Pre-bound by the scheduler (claimRef), bound by the PV controller.
        bound = s.wait_claim_bound("data")
        assert bound["spec"]["volumeName"] == pv
        assert s.get_volume(pv)["spec"]["claimRef"]["name"] == "data"
        # A second pod on the same ReadWriteOnce claim goes where the volume is, as does a pod with a second
        # claim whose only PV is on that node too.
        s.add_volume("b", local, node=target)
        s.add_claim("more", local)
        s.add_pod(pod_with_claims("second", name, pool, "data"))
        s.add_pod(pod_with_claims("third", name, pool, "more"))
        assert s.wait_bound("second") == target
        assert s.wait_bound("third") == target
        notes = [n for d in decisions(proc, f"{namespace}/third") for n in d.get("notes", ())]
        assert any(f"binds PV {s.prefix}-b on {target}" in n for n in notes), notes
        assert metric(proc, "metrics_sched_assumed_volume_bindings") == 0


def test_wait_for_first_consumer_provisioning_follows_the_scheduler(cluster: DevCluster, api: KubeAPI,
                                                                   namespace: str) -> None:
    with node_pool(cluster, 3) as (pool, _), schedulers(cluster) as (name, [proc]), storage(api, namespace) as s:
        dynamic = s.add_class(PROVISIONER)
        s.add_claim("data", dynamic, size="5Gi")
        s.add_pod(pod_with_claims("trainer", name, pool, "data"))
        node = s.wait_bound("trainer")
        bound = s.wait_claim_bound("data")
        assert bound["metadata"]["annotations"][ANN_SELECTED_NODE] == node
        pv = s.get_volume(bound["spec"]["volumeName"])
        terms = pv["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"]
        assert terms[0]["matchExpressions"][0]["values"] == [node]
        notes = [n for d in decisions(proc, f"{namespace}/trainer") for n in d.get("notes", ())]
        assert any(f"provisioned by {dynamic}'s provisioner on {node}" in n for n in notes), notes


def test_a_zonal_volume_keeps_the_pod_in_its_zone(cluster: DevCluster, api: KubeAPI, namespace: str) -> None:
    with node_pool(cluster, 6, own_zones=3) as (pool, specs), schedulers(cluster) as (name, [proc]), \
            storage(api, namespace) as s:
        zone = specs[1].labels[ZONE]
        immediate = s.add_class(wffc=False)
        pv = s.add_volume("z", immediate, zone=zone)
        s.add_claim("data", immediate)
        s.wait_claim_bound("data")  # Immediate: the PV controller binds it before any pod
        s.add_pod(pod_with_claims("zonal", name, pool, "data"))
        node = s.wait_bound("zonal")
        assert node in {spec.name for spec in specs if spec.labels[ZONE] == zone}
        [record] = [d for d in decisions(proc, f"{namespace}/zonal") if d["result"] == "scheduled"]
        assert record["feasible"] == 2
        assert f"pvc data: PV {pv} is in {zone}" in record["notes"]
        assert "node(s) didn't match PersistentVolume's node affinity" in record["rejections"]


def test_an_unbound_immediate_claim_waits_until_it_binds(cluster: DevCluster, api: KubeAPI,
                                                         namespace: str) -> None:
    with node_pool(cluster, 2) as (pool, specs), schedulers(cluster) as (name, _), storage(api, namespace) as s:
        immediate = s.add_class(wffc=False)
        s.add_claim("data", immediate)
        s.add_pod(pod_with_claims("waiting", name, pool, "data"))
        s.wait_unschedulable("waiting", "pod has unbound immediate PersistentVolumeClaims")
        assert s.node_of("waiting") is None
        # A PV appears; the PV controller binds the claim; the claim's update moves the pod.
        s.add_volume("late", immediate, node=specs[0].name)
        s.wait_claim_bound("data")
        assert s.wait_bound("waiting") == specs[0].name


def test_a_read_write_once_pod_claim_admits_one_pod(cluster: DevCluster, api: KubeAPI, namespace: str) -> None:
    with node_pool(cluster, 2) as (pool, specs), schedulers(cluster) as (name, _), storage(api, namespace) as s:
        immediate = s.add_class(wffc=False)
        s.add_volume("solo", immediate, node=specs[0].name, modes=("ReadWriteOncePod",))
        s.add_claim("solo", immediate, modes=("ReadWriteOncePod",))
        s.wait_claim_bound("solo")
        s.add_pod(pod_with_claims("owner", name, pool, "solo"))
        assert s.wait_bound("owner") == specs[0].name
        s.add_pod(pod_with_claims("intruder", name, pool, "solo"))
        s.wait_unschedulable("intruder", "ReadWriteOncePod access mode already in-use by another pod")
        api.request("DELETE", f"/api/v1/namespaces/{namespace}/pods/owner", params={"gracePeriodSeconds": "0"})
        assert s.wait_bound("intruder") == specs[0].name


def test_a_csi_node_limit_of_two_volumes(cluster: DevCluster, api: KubeAPI, namespace: str) -> None:
    with node_pool(cluster, 1) as (pool, specs), schedulers(cluster) as (name, _), storage(api, namespace) as s:
        node = specs[0].name
        api.post("/apis/storage.k8s.io/v1/csinodes", {
            "apiVersion": "storage.k8s.io/v1", "kind": "CSINode", "metadata": {"name": node},
            "spec": {"drivers": [{"name": CSI_DRIVER, "nodeID": node, "allocatable": {"count": 2}}]}})
        try:
            immediate = s.add_class(wffc=False)
            for i in range(3):
                s.add_volume(f"csi-{i}", immediate, csi_handle=f"{s.prefix}-handle-{i}")
                s.add_claim(f"c{i}", immediate)
            for i in range(3):
                s.wait_claim_bound(f"c{i}")
            for i in range(2):
                s.add_pod(pod_with_claims(f"p{i}", name, pool, f"c{i}"))
                assert s.wait_bound(f"p{i}") == node
            s.add_pod(pod_with_claims("p2", name, pool, "c2"))
            s.wait_unschedulable("p2", "node(s) exceed max volume count")
            # A pod sharing an attached volume adds nothing to the count.
            s.add_pod(pod_with_claims("sharer", name, pool, "c0"))
            assert s.wait_bound("sharer") == node
            api.request("DELETE", f"/api/v1/namespaces/{namespace}/pods/p1", params={"gracePeriodSeconds": "0"})
            assert s.wait_bound("p2") == node
        finally:
            api.request("DELETE", f"/apis/storage.k8s.io/v1/csinodes/{node}", ok=(404,))


def test_a_pre_bind_that_times_out_is_requeued_and_placed_later(cluster: DevCluster, api: KubeAPI,
                                                                namespace: str) -> None:
    """A class whose provisioner is slow (here: absent until the test plays it): PreBind gives up after its
    timeout, the pod is unreserved and retried; once the volume exists, the retry binds it. Nothing stays
    assumed in between."""
    profile = {"pluginConfig": [{"name": "VolumeBinding", "args": {"bindTimeoutSeconds": 2}}]}
    with node_pool(cluster, 2) as (pool, _), schedulers(cluster, extra={"profile": profile}) as (name, [proc]), \
            storage(api, namespace) as s:
        slow = s.add_class("dev.metrics-sched.io/nobody-serves-this")
        s.add_claim("data", slow)
        s.add_pod(pod_with_claims("patient", name, pool, "data"))
        selected = kube.poll(lambda: s.get_claim("data")["metadata"].get("annotations", {}).get(ANN_SELECTED_NODE),
                             15, "selected-node written by PreBind")

        def timed_out() -> dict[str, Any] | None:
            return next((d for d in decisions(proc, f"{namespace}/patient")
                         if d.get("bind") and d["bind"] != "bound"), None)
        record = kube.poll(timed_out, 20, "a binding cycle that timed out")
        assert record["node"] == selected
        assert s.node_of("patient") is None
        kube.poll(lambda: metric(proc, "metrics_sched_assumed_pods") == 0
                  and metric(proc, "metrics_sched_assumed_volume_bindings") == 0, 10, "nothing left assumed")
        # The provisioner, late: a PV on the selected node, pre-bound to the claim.
        claim_obj = s.get_claim("data")
        pv = volume(f"{s.prefix}-late", slow, node=selected)
        pv["spec"]["claimRef"] = {"namespace": namespace, "name": "data", "uid": claim_obj["metadata"]["uid"]}
        api.post("/api/v1/persistentvolumes", pv)
        s.volumes.append(pv["metadata"]["name"])
        assert s.wait_bound("patient", timeout=40) == selected
        s.wait_claim_bound("data")
        kube.poll(lambda: metric(proc, "metrics_sched_assumed_pods") == 0
                  and metric(proc, "metrics_sched_assumed_volume_bindings") == 0, 10, "nothing left assumed")


def test_volume_waits_do_not_hold_the_bind_workers(cluster: DevCluster, api: KubeAPI, namespace: str) -> None:
    """Issue 44, defect 3: with 2 bind workers and a provisioner that never answers, two pods wait in PreBind for
    their volumes (bindTimeoutSeconds 60); a pod without volumes still binds at once, not after their timeout."""
    profile = {"pluginConfig": [{"name": "VolumeBinding", "args": {"bindTimeoutSeconds": 60}}]}
    with node_pool(cluster, 2) as (pool, _), \
            schedulers(cluster, extra={"profile": profile, "bindWorkers": 2}) as (name, [proc]), \
            storage(api, namespace) as s:
        never = s.add_class("dev.metrics-sched.io/nobody-serves-this")
        for i in range(2):
            s.add_claim(f"data-{i}", never)
            s.add_pod(pod_with_claims(f"db-{i}", name, pool, f"data-{i}"))
        def selected(claim: str) -> str | None:
            found: str | None = s.get_claim(claim)["metadata"].get("annotations", {}).get(ANN_SELECTED_NODE)
            return found

        # PreBind wrote each claim's node: both binding cycles now wait for a provisioner.
        kube.poll(lambda: selected("data-0") and selected("data-1"), 15, "selected-node written by both PreBinds")
        s.add_pod(kube.pod_manifest("web", scheduler=name, **in_pool(pool)))
        s.wait_bound("web", timeout=10)
        assert s.node_of("db-0") is None and s.node_of("db-1") is None  # still waiting, well within their timeout
        assert proc.status()["binds_in_flight"] == 2
