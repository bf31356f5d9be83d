"""The dev cluster's kube-controller-manager and test provisioner do their part.

No scheduler runs here: each test asserts only what the controllers (or the provisioner) do.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Any

import pytest

from devcluster import DevCluster
from devcluster.kubeapi import KubeAPI
from devcluster.provisioner import MOUNT_ROOT, PROVISIONED_BY, PROVISIONER, SELECTED_NODE
from tests.e2e import kube

pytestmark = pytest.mark.e2e

CLASSES = "/apis/storage.k8s.io/v1/storageclasses"
VOLUMES = "/api/v1/persistentvolumes"
HOSTNAME = "kubernetes.io/hostname"


@pytest.fixture
def storage_class(api: KubeAPI, request: pytest.FixtureRequest) -> Iterator[str]:
    """A class of this test's own; `request.param` = (provisioner, volumeBindingMode)."""
    provisioner, mode = request.param
    name = f"sc-{secrets.token_hex(4)}"
    api.post(CLASSES, {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": name},
                       "provisioner": provisioner, "volumeBindingMode": mode, "reclaimPolicy": "Delete"})
    yield name
    api.delete(f"{CLASSES}/{name}")


def claim(name: str, storage_class: str, size: str = "1Gi", **annotations: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "annotations": annotations},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": storage_class,
                     "resources": {"requests": {"storage": size}}}}


def local_volume(name: str, storage_class: str, node: str, size: str = "1Gi") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": name},
            "spec": {"capacity": {"storage": size}, "accessModes": ["ReadWriteOnce"],
                     "storageClassName": storage_class, "persistentVolumeReclaimPolicy": "Retain",
                     "local": {"path": f"/mnt/test/{name}"},
                     "nodeAffinity": {"required": {"nodeSelectorTerms": [
                         {"matchExpressions": [{"key": HOSTNAME, "operator": "In", "values": [node]}]}]}}}}


def bound_claim(api: KubeAPI, namespace: str, name: str) -> dict[str, Any] | None:
    got: dict[str, Any] = api.get(f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/{name}")
    return got if got.get("status", {}).get("phase") == "Bound" else None


def gone(api: KubeAPI, path: str) -> bool:
    return api.request("GET", path, ok=(404,)).get("kind") == "Status"


@pytest.mark.parametrize("storage_class", [("kubernetes.io/no-provisioner", "Immediate")], indirect=True)
def test_an_immediate_claim_binds_to_a_matching_volume_whichever_comes_first(
        cluster: DevCluster, api: KubeAPI, namespace: str, storage_class: str) -> None:
    node = cluster.nodes[0].name
    first, later = f"pv-{secrets.token_hex(4)}", f"pv-{secrets.token_hex(4)}"
    try:
        # The volume first: the claim binds as the PV controller syncs it.
        api.post(VOLUMES, local_volume(first, storage_class, node))
        api.post(f"/api/v1/namespaces/{namespace}/persistentvolumeclaims", claim("early", storage_class))
        bound = kube.poll(lambda: bound_claim(api, namespace, "early"), 15, "claim early bound")
        assert bound["spec"]["volumeName"] == first
        kube.poll(lambda: api.get(f"{VOLUMES}/{first}")["status"]["phase"] == "Bound", 15, f"{first} Bound")
        # The claim first: it finds the volume at the claim resync (1 s here), not upstream's 15 s.
        api.post(f"/api/v1/namespaces/{namespace}/persistentvolumeclaims", claim("waiting", storage_class, "2Gi"))
        api.post(VOLUMES, local_volume(later, storage_class, node, size="2Gi"))
        bound = kube.poll(lambda: bound_claim(api, namespace, "waiting"), 10, "claim waiting bound")
        assert bound["spec"]["volumeName"] == later
    finally:
        for name in (first, later):
            api.delete(f"{VOLUMES}/{name}")


def test_a_deleted_namespace_is_finalized_by_the_namespace_controller(api: KubeAPI) -> None:
    name = f"t-finalize-{secrets.token_hex(3)}"
    api.post("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    api.post(f"/api/v1/namespaces/{name}/configmaps",
             {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "left"}, "data": {"a": "b"}})
    api.delete(f"/api/v1/namespaces/{name}")
    kube.poll(lambda: gone(api, f"/api/v1/namespaces/{name}"), 30, f"namespace {name} gone")


def test_a_deployment_gets_its_replica_set_and_pods_and_they_go_with_it(api: KubeAPI, namespace: str) -> None:
    labels = {"app": "web"}
    api.post(f"/apis/apps/v1/namespaces/{namespace}/deployments", {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"replicas": 2, "selector": {"matchLabels": labels},
                 "template": {"metadata": {"labels": labels},
                              # No scheduler of this name runs: the pods stay Pending, which is all we need.
                              "spec": {"schedulerName": "nobody", "containers": [
                                  {"name": "c", "image": "registry.local/pause:3.10"}]}}}})

    def replica_set_and_pods() -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
        sets = api.get(f"/apis/apps/v1/namespaces/{namespace}/replicasets")["items"]
        pods = kube.list_pods(api, namespace)
        return (sets[0], pods) if len(sets) == 1 and len(pods) == 2 else None

    rs, pods = kube.poll(replica_set_and_pods, 20, "a ReplicaSet and 2 pods")
    assert [o["kind"] for o in rs["metadata"]["ownerReferences"]] == ["Deployment"]
    assert {p["metadata"]["ownerReferences"][0]["uid"] for p in pods} == {rs["metadata"]["uid"]}
    # The garbage collector: deleting the Deployment takes its ReplicaSet and pods.
    api.request("DELETE", f"/apis/apps/v1/namespaces/{namespace}/deployments/web",
                {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"})
    kube.poll(lambda: not api.get(f"/apis/apps/v1/namespaces/{namespace}/replicasets")["items"]
              and not [p for p in kube.list_pods(api, namespace) if not p["metadata"].get("deletionTimestamp")],
              20, "ReplicaSet and pods collected")


@pytest.mark.parametrize("storage_class", [(PROVISIONER, "WaitForFirstConsumer")], indirect=True)
def test_the_provisioner_makes_a_volume_on_the_selected_node_and_deletes_it_after_the_claim(
        cluster: DevCluster, api: KubeAPI, namespace: str, storage_class: str) -> None:
    node = cluster.nodes[1].name
    claims = f"/api/v1/namespaces/{namespace}/persistentvolumeclaims"
    # A scheduler's PreBind would set selected-node; here the test does.
    created = api.post(claims, claim("data", storage_class, "3Gi", **{SELECTED_NODE: node}))
    bound = kube.poll(lambda: bound_claim(api, namespace, "data"), 15, "claim data bound")
    volume_name = f"pvc-{created['metadata']['uid']}"
    assert bound["spec"]["volumeName"] == volume_name
    volume = api.get(f"{VOLUMES}/{volume_name}")
    assert volume["metadata"]["annotations"][PROVISIONED_BY] == PROVISIONER
    assert volume["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"] == [
        {"matchExpressions": [{"key": HOSTNAME, "operator": "In", "values": [node]}]}]
    assert volume["spec"]["capacity"]["storage"] == "3Gi"
    assert volume["spec"]["local"]["path"] == f"{MOUNT_ROOT}/{volume_name}"
    assert volume["spec"]["claimRef"]["uid"] == created["metadata"]["uid"]
    assert volume["spec"]["storageClassName"] == storage_class

    api.delete(f"{claims}/data")
    kube.poll(lambda: gone(api, f"{VOLUMES}/{volume_name}"), 20, f"{volume_name} deleted after its claim")

