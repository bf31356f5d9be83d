"""The dev cluster's test provisioner against a fake API server (httpx MockTransport, no processes)."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from devcluster.certs import generate_pki
from devcluster.kubeapi import Credentials, KubeAPI
from devcluster.provisioner import (
    CLAIMS,
    PROVISIONED_BY,
    PROVISIONER,
    SELECTED_NODE,
    STORAGE_PROVISIONER,
    Provisioner,
    list_and_watch,
    released_by_us,
    topology_refusal,
    volume_for,
    wants_volume,
)

pytestmark = pytest.mark.unit

Handler = Callable[[httpx.Request], httpx.Response]


@pytest.fixture(scope="module")
def ca_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return generate_pki(tmp_path_factory.mktemp("pki")).ca_cert


@pytest.fixture
def fake_api(ca_file: Path) -> Iterator[Callable[[Handler], KubeAPI]]:
    made: list[KubeAPI] = []

    def make(handler: Handler) -> KubeAPI:
        api = KubeAPI(Credentials(server="https://127.0.0.1:1", ca_file=ca_file, token="t"))
        api.client.close()
        api.client = httpx.Client(base_url="https://127.0.0.1:1", transport=httpx.MockTransport(handler))
        made.append(api)
        return api

    yield make
    for api in made:
        api.close()


def claim(*, selected: str | None = "node-1", handed: bool = True, volume: str = "") -> dict[str, Any]:
    annotations = {}
    if selected:
        annotations[SELECTED_NODE] = selected
    if handed:
        annotations[STORAGE_PROVISIONER[0]] = PROVISIONER
    return {"metadata": {"name": "data", "namespace": "ns", "uid": "u-1", "annotations": annotations},
            "spec": {"accessModes": ["ReadWriteOncePod"], "storageClassName": "local",
                     "resources": {"requests": {"storage": "5Gi"}}, "volumeName": volume}}


CLASS = {"metadata": {"name": "local"}, "provisioner": PROVISIONER, "volumeBindingMode": "WaitForFirstConsumer"}
NODE = {"kind": "Node", "metadata": {"name": "node-1", "labels": {"kubernetes.io/hostname": "host-1",
                                                                   "topology.kubernetes.io/zone": "zone-a"}}}


def test_only_an_unbound_claim_with_a_selected_node_handed_to_us_wants_a_volume() -> None:
    assert wants_volume(claim())
    assert not wants_volume(claim(selected=None))
    assert not wants_volume(claim(handed=False))  # the PV controller has not handed it over (yet)
    assert not wants_volume(claim(volume="pv-1"))
    other = claim()
    other["metadata"]["annotations"][STORAGE_PROVISIONER[0]] = "ebs.csi.aws.com"
    assert not wants_volume(other)
    beta = claim(handed=False)
    beta["metadata"]["annotations"][STORAGE_PROVISIONER[1]] = PROVISIONER
    assert wants_volume(beta)


def test_the_volume_is_local_to_the_nodes_hostname_and_pre_bound_to_the_claim() -> None:
    volume = volume_for(claim(), CLASS, NODE)
    assert volume["metadata"] == {"name": "pvc-u-1", "annotations": {PROVISIONED_BY: PROVISIONER}}
    spec = volume["spec"]
    assert spec["capacity"] == {"storage": "5Gi"} and spec["accessModes"] == ["ReadWriteOncePod"]
    assert spec["storageClassName"] == "local" and spec["persistentVolumeReclaimPolicy"] == "Delete"
    assert spec["local"] == {"path": "/mnt/dev/pvc-u-1"}
    assert spec["nodeAffinity"]["required"]["nodeSelectorTerms"] == [
        {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["host-1"]}]}]
    assert spec["claimRef"] == {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "namespace": "ns",
                                "name": "data", "uid": "u-1"}
    unlabelled = {"metadata": {"name": "node-2"}}
    assert volume_for(claim(), {**CLASS, "reclaimPolicy": "Retain"}, unlabelled)["spec"]["nodeAffinity"][
        "required"]["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == ["node-2"]
    assert volume_for(claim(), {**CLASS, "reclaimPolicy": "Retain"}, NODE)["spec"][
        "persistentVolumeReclaimPolicy"] == "Retain"


def test_allowed_topologies_terms_are_ored_and_their_expressions_anded() -> None:
    assert topology_refusal(CLASS, NODE) is None
    zone_b = {**CLASS, "allowedTopologies": [
        {"matchLabelExpressions": [{"key": "topology.kubernetes.io/zone", "values": ["zone-b"]}]}]}
    assert topology_refusal(zone_b, NODE) == "node node-1 is outside the allowedTopologies of class local"
    either = {**CLASS, "allowedTopologies": [*zone_b["allowedTopologies"], {"matchLabelExpressions": [
        {"key": "topology.kubernetes.io/zone", "values": ["zone-a"]},
        {"key": "kubernetes.io/hostname", "values": ["host-1", "host-2"]}]}]}
    assert topology_refusal(either, NODE) is None
    both = {**CLASS, "allowedTopologies": [{"matchLabelExpressions": [
        {"key": "topology.kubernetes.io/zone", "values": ["zone-a"]},
        {"key": "kubernetes.io/hostname", "values": ["host-2"]}]}]}
    assert topology_refusal(both, NODE) is not None


def test_only_released_volumes_of_ours_with_policy_delete_are_deleted() -> None:
    ours = {"metadata": {"annotations": {PROVISIONED_BY: PROVISIONER}},
            "spec": {"persistentVolumeReclaimPolicy": "Delete"}, "status": {"phase": "Released"}}
    assert released_by_us(ours)
    assert not released_by_us({**ours, "status": {"phase": "Bound"}})
    assert not released_by_us({**ours, "spec": {"persistentVolumeReclaimPolicy": "Retain"}})
    assert not released_by_us({**ours, "metadata": {"annotations": {PROVISIONED_BY: "someone-else"}}})


def test_a_claim_gets_its_volume_created_once_and_a_refusal_is_one_event(
        fake_api: Callable[[Handler], KubeAPI]) -> None:
    calls: list[tuple[str, str, Any]] = []
    existing: set[str] = set()
    zone_b = {**CLASS, "allowedTopologies": [
        {"matchLabelExpressions": [{"key": "topology.kubernetes.io/zone", "values": ["zone-b"]}]}]}
    classes = {"local": CLASS, "zoned": zone_b}

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else None
        calls.append((request.method, request.url.path, body))
        path = request.url.path
        if path.startswith("/apis/storage.k8s.io/v1/storageclasses/"):
            return httpx.Response(200, json=classes[path.rsplit("/", 1)[1]])
        if path == "/api/v1/nodes/node-1":
            return httpx.Response(200, json=NODE)
        if path == "/api/v1/persistentvolumes" and request.method == "POST":
            if body["metadata"]["name"] in existing:
                return httpx.Response(409, json={"kind": "Status", "code": 409})
            existing.add(body["metadata"]["name"])
            return httpx.Response(201, json=body)
        if path == "/api/v1/namespaces/ns/events":
            return httpx.Response(201, json=body)
        return httpx.Response(404, json={"kind": "Status", "code": 404})

    provisioner = Provisioner(fake_api(handler))
    provisioner.on_claim(claim())
    provisioner.on_claim(claim())  # the PV controller's next update: the PV exists already (409)
    posts = [c for c in calls if c[0] == "POST"]
    assert [(p[1], p[2]["spec"]["claimRef"]["uid"]) for p in posts] == [("/api/v1/persistentvolumes", "u-1")] * 2
    assert existing == {"pvc-u-1"}

    calls.clear()
    zoned = claim()
    zoned["spec"]["storageClassName"] = "zoned"
    provisioner.on_claim(zoned)
    provisioner.on_claim(zoned)
    events = [c[2] for c in calls if c[1] == "/api/v1/namespaces/ns/events"]
    assert len(events) == 1 and events[0]["reason"] == "ProvisioningFailed" and events[0]["type"] == "Warning"
    assert events[0]["involvedObject"]["uid"] == "u-1" and "allowedTopologies" in events[0]["message"]
    assert not [c for c in calls if c[1] == "/api/v1/persistentvolumes"]

    calls.clear()
    missing_node = claim(selected="node-9")
    provisioner.on_claim(missing_node)
    assert [c[2]["message"] for c in calls if c[0] == "POST"] == ["selected node node-9 does not exist"]


def test_a_released_volume_is_deleted_with_its_uid_as_precondition(fake_api: Callable[[Handler], KubeAPI]) -> None:
    calls: list[tuple[str, str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append((request.method, request.url.path, json.loads(request.content) if request.content else None))
        return httpx.Response(200, json={"kind": "PersistentVolume"})

    provisioner = Provisioner(fake_api(handler))
    volume = {"metadata": {"name": "pvc-u-1", "uid": "v-1", "annotations": {PROVISIONED_BY: PROVISIONER}},
              "spec": {"persistentVolumeReclaimPolicy": "Delete"}, "status": {"phase": "Bound"}}
    provisioner.on_volume(volume)
    assert calls == []
    provisioner.on_volume({**volume, "status": {"phase": "Released"}})
    assert calls == [("DELETE", "/api/v1/persistentvolumes/pvc-u-1",
                      {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": "v-1"}})]


def test_list_and_watch_relists_after_410_gone(fake_api: Callable[[Handler], KubeAPI]) -> None:
    stop = threading.Event()
    lists: list[str] = []
    seen: list[str] = []

    def item(name: str, version: str) -> dict[str, Any]:
        return {"metadata": {"name": name, "resourceVersion": version}}

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.params.get("watch") != "1":
            lists.append(request.url.path)
            if len(lists) == 2:
                stop.set()  # the relist happened: this is the last round
            return httpx.Response(200, json={"metadata": {"resourceVersion": "10"}, "items": [item("a", "9")]})
        assert request.url.params["resourceVersion"] == "10"
        lines = [{"type": "ADDED", "object": item("b", "11")},
                 {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "12"}}},
                 {"type": "ERROR", "object": {"kind": "Status", "code": 410, "message": "too old"}}]
        return httpx.Response(200, content="\n".join(json.dumps(line) for line in lines).encode())

    list_and_watch(fake_api(handler), CLAIMS, lambda obj: seen.append(obj["metadata"]["name"]), stop)
    assert lists == [CLAIMS, CLAIMS]
    assert seen == ["a", "b", "a"]  # the bookmark is not an object to handle
