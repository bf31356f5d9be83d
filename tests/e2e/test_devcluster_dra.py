"""The dev cluster's DRA: the API server serves resource.k8s.io/v1 with 1.36's default DRA features, the fake driver's
DeviceClasses and ResourceSlices are there as built, the real kube-scheduler allocates from them (a claim made from a
template by the controller manager's resourceclaim controller, a MIG partition through shared counters, and the
extended resource nvidia.com/gpu on a node without device-plugin capacity), and Prometheus holds one DCGM
temperature series per GPU, under the UUID its device publishes, that a per-GPU override moves alone.

One pool of two tainted nodes for the module: a DRA-only node with two H100s and a MIG node with two A100s.
"""

from __future__ import annotations

import json
import secrets
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import pytest

from adapters.prometheus.presets import PRESETS
from devcluster import DevCluster, NodeSpec
from devcluster.dra import (
    DEVICE_CLASSES,
    DRIVER,
    EXTENDED_RESOURCE_CLASS,
    GPU_CLASS,
    MIG_CLASS,
    node_gpus,
    resource_slices,
)
from devcluster.dra.driver import DEVICE_CLASSES_PATH, RESOURCE_SLICES_PATH
from devcluster.kubeapi import KubeAPI
from devcluster.nodes import node_ip
from tests.e2e import kube, prom
from tests.e2e.kube_scheduler import kube_scheduler
from tests.e2e.pools import POOL_LABEL, in_pool

pytestmark = pytest.mark.e2e

RESOURCE_API = "/apis/resource.k8s.io/v1"
HOSTNAME = "kubernetes.io/hostname"
GPU_RESOURCE = "nvidia.com/gpu"
DCGM_NODE_LABEL = "hostname"  # the emulator's default (--dcgm-hostname-label)


@pytest.fixture(scope="module")
def pool(cluster: DevCluster) -> Iterator[tuple[str, NodeSpec, NodeSpec]]:
    """(pool, DRA-only H100 node, MIG A100 node); neither advertises nvidia.com/gpu."""
    name = f"dra{secrets.token_hex(3)}"
    base = 200000 + secrets.randbelow(4000) * 4

    def spec(suffix: str, offset: int, instance: str, mig: bool) -> NodeSpec:
        return NodeSpec(name=f"{name}-{suffix}", internal_ip=node_ip(base + offset), cpu="8", memory="32Gi", gpus=2,
                        gpu_device_plugin=False, mig=mig,
                        labels={POOL_LABEL: name, "node.kubernetes.io/instance-type": instance},
                        taints=({"key": POOL_LABEL, "value": name, "effect": "NoSchedule"},))

    plain, mig = spec("h100", 0, "gpu-h100-2", False), spec("a100", 1, "gpu-a100-2", True)
    cluster.add_nodes([plain, mig])
    try:
        yield name, plain, mig
    finally:
        cluster.remove_nodes([plain.name, mig.name])


@pytest.fixture(scope="module")
def scheduler(cluster: DevCluster) -> Iterator[str]:
    """The real kube-scheduler with its default profile (default-scheduler) and default feature gates."""
    with kube_scheduler(cluster) as name:
        yield name


def _spec_key(spec: dict[str, Any]) -> str:
    return json.dumps(spec, sort_keys=True)


def _pools(api: KubeAPI) -> dict[str, list[dict[str, Any]]]:
    by_pool: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for item in api.get(RESOURCE_SLICES_PATH, fieldSelector=f"spec.driver={DRIVER}")["items"]:
        by_pool[item["spec"]["pool"]["name"]].append(item)
    return by_pool


def test_the_api_server_serves_resource_v1(api: KubeAPI) -> None:
    group = api.get("/apis/resource.k8s.io")
    assert group["preferredVersion"]["groupVersion"] == "resource.k8s.io/v1"
    served = {r["name"] for r in api.get(RESOURCE_API)["resources"]}
    assert {"deviceclasses", "resourceclaims", "resourceclaims/status", "resourceclaimtemplates",
            "resourceslices"} <= served


def test_the_driver_publishes_its_classes_and_every_gpu_node_s_pool(
        cluster: DevCluster, api: KubeAPI, pool: tuple[str, NodeSpec, NodeSpec]) -> None:
    for device_class in DEVICE_CLASSES:
        served = api.get(f"{DEVICE_CLASSES_PATH}/{device_class['metadata']['name']}")
        assert served["spec"] == device_class["spec"]
    pools = _pools(api)
    gpu_nodes = [s for s in cluster.nodes if s.gpus]
    assert any(s.mig for s in gpu_nodes) and any(not s.mig for s in gpu_nodes)
    uuids: list[str] = []
    for spec in gpu_nodes:
        node = api.get(f"/api/v1/nodes/{spec.name}")
        served = pools[spec.name]
        assert served, f"no ResourceSlice for {spec.name}"
        generation = served[0]["spec"]["pool"]["generation"]
        gpus = node_gpus(spec, cluster.seed, node["metadata"]["uid"])
        assert gpus is not None
        built = resource_slices(gpus, generation)
        # What the API validated and stores is what the driver built: no field dropped (a feature gate off drops
        # sharedCounters or consumesCounters silently), quantities already canonical.
        assert sorted(map(_spec_key, (s["spec"] for s in served))) == sorted(map(_spec_key, (s["spec"] for s in built)))
        for item in served:
            assert item["metadata"]["ownerReferences"] == [{"apiVersion": "v1", "kind": "Node", "name": spec.name,
                                                            "uid": node["metadata"]["uid"], "controller": True}]
        assert (GPU_RESOURCE in node["status"]["allocatable"]) == spec.gpu_device_plugin
        devices = [d for s in served for d in s["spec"].get("devices", [])]
        gpu_uuids = [d["attributes"]["uuid"]["string"] for d in devices if d["attributes"]["type"]["string"] == "gpu"]
        assert len(gpu_uuids) == spec.gpus
        uuids += gpu_uuids
        if spec.mig:
            assert len(served) == served[0]["spec"]["pool"]["resourceSliceCount"] > 1
            assert any("sharedCounters" in s["spec"] for s in served)
    assert len(set(uuids)) == len(uuids), "a GPU UUID is published twice"



def _template(name: str, device_class: str, selector: str | None = None) -> dict[str, Any]:
    request: dict[str, Any] = {"deviceClassName": device_class, "count": 1}
    if selector:
        request["selectors"] = [{"cel": {"expression": selector}}]
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": name},
            "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": request}]}}}}


def _claim_pod(name: str, template: str, pool: str, node: str | None = None) -> dict[str, Any]:
    pod = kube.pod_manifest(name, **in_pool(pool))
    pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": template}]
    pod["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpu"}]
    if node:
        pod["spec"]["nodeSelector"][HOSTNAME] = node
    return pod


def _bound(api: KubeAPI, namespace: str, name: str) -> dict[str, Any] | None:
    pod: dict[str, Any] = api.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
    return pod if pod["spec"].get("nodeName") else None


def _wait_bound(api: KubeAPI, namespace: str, name: str) -> dict[str, Any]:
    return kube.poll(lambda: _bound(api, namespace, name), 60, f"pod {name} bound")


def _devices_of(api: KubeAPI, node: str) -> dict[str, dict[str, Any]]:
    slices = api.get(RESOURCE_SLICES_PATH, fieldSelector=f"spec.nodeName={node}")["items"]
    return {d["name"]: d for s in slices for d in s["spec"].get("devices", [])}


def _allocated(api: KubeAPI, namespace: str, claim: str, pod: dict[str, Any]) -> list[dict[str, Any]]:
    """The claim's allocation results, after checking it is allocated to, and reserved for, the pod."""
    got = api.get(f"{RESOURCE_API}/namespaces/{namespace}/resourceclaims/{claim}")
    reserved = [(r["resource"], r["name"], r["uid"]) for r in got["status"]["reservedFor"]]
    assert reserved == [("pods", pod["metadata"]["name"], pod["metadata"]["uid"])]
    owner = got["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["uid"]) == ("Pod", pod["metadata"]["uid"])
    node = pod["spec"]["nodeName"]
    terms = got["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"]
    assert {"key": "metadata.name", "operator": "In", "values": [node]} in [
        f for t in terms for f in t.get("matchFields", [])]
    results: list[dict[str, Any]] = got["status"]["allocation"]["devices"]["results"]
    return results


def test_kube_scheduler_allocates_claims_made_from_templates(
        api: KubeAPI, namespace: str, pool: tuple[str, NodeSpec, NodeSpec], scheduler: str) -> None:
    name, plain, mig = pool
    resources = f"{RESOURCE_API}/namespaces/{namespace}/resourceclaimtemplates"
    api.post(resources, _template("whole-gpu", GPU_CLASS))
    api.post(resources, _template("small-mig", MIG_CLASS, f"device.attributes['{DRIVER}'].profile == '1g.10gb'"))
    api.post(f"/api/v1/namespaces/{namespace}/pods", _claim_pod("whole", "whole-gpu", name, plain.name))
    api.post(f"/api/v1/namespaces/{namespace}/pods", _claim_pod("mig", "small-mig", name))

    for pod_name, node, device_type in (("whole", plain.name, "gpu"), ("mig", mig.name, "mig")):
        pod = _wait_bound(api, namespace, pod_name)
        assert pod["spec"]["nodeName"] == node
        # The resourceclaim controller made the claim from the template and recorded it in the pod's status.
        [status] = pod["status"]["resourceClaimStatuses"]
        assert status["name"] == "gpu" and status["resourceClaimName"].startswith(f"{pod_name}-gpu-")
        [result] = _allocated(api, namespace, status["resourceClaimName"], pod)
        assert (result["request"], result["driver"], result["pool"]) == ("gpu", DRIVER, node)
        device = _devices_of(api, node)[result["device"]]
        assert device["attributes"]["type"]["string"] == device_type
        if device_type == "mig":
            assert device["attributes"]["profile"]["string"] == "1g.10gb" and device["consumesCounters"]


def test_kube_scheduler_serves_the_gpu_extended_resource_through_dra(
        api: KubeAPI, namespace: str, pool: tuple[str, NodeSpec, NodeSpec], scheduler: str) -> None:
    name, plain, _ = pool
    pod = kube.pod_manifest("legacy", gpus=1, **in_pool(name))
    pod["spec"]["nodeSelector"][HOSTNAME] = plain.name  # no nvidia.com/gpu in its allocatable
    api.post(f"/api/v1/namespaces/{namespace}/pods", pod)
    bound = _wait_bound(api, namespace, "legacy")
    assert bound["spec"]["nodeName"] == plain.name
    status = kube.poll(lambda: (_bound(api, namespace, "legacy") or {}).get("status", {}).get(
        "extendedResourceClaimStatus"), 30, "the pod's extendedResourceClaimStatus")
    # Upstream names the request after the container's index and the resource's among its sorted request names.
    index = sorted(pod["spec"]["containers"][0]["resources"]["requests"]).index(GPU_RESOURCE)
    assert status["requestMappings"] == [{"containerName": "main", "resourceName": GPU_RESOURCE,
                                          "requestName": f"container-0-request-{index}"}]
    claim = api.get(f"{RESOURCE_API}/namespaces/{namespace}/resourceclaims/{status['resourceClaimName']}")
    assert claim["metadata"]["annotations"]["resource.kubernetes.io/extended-resource-claim"] == "true"
    [request] = claim["spec"]["devices"]["requests"]
    assert request["exactly"]["deviceClassName"] == EXTENDED_RESOURCE_CLASS
    [result] = _allocated(api, namespace, status["resourceClaimName"], bound)
    assert (result["driver"], result["pool"]) == (DRIVER, plain.name)
    assert _devices_of(api, plain.name)[result["device"]]["attributes"]["type"]["string"] == "gpu"


def test_prometheus_has_a_temperature_series_per_gpu_and_one_gpu_can_be_set(
        cluster: DevCluster, api: KubeAPI, pool: tuple[str, NodeSpec, NodeSpec]) -> None:
    _, plain, _ = pool
    assert cluster.endpoints is not None and cluster.endpoints.prometheus is not None
    prometheus = cluster.endpoints.prometheus
    devices = _devices_of(api, plain.name)
    uuids = {d["attributes"]["index"]["int"]: d["attributes"]["uuid"]["string"] for d in devices.values()}
    selector = f'DCGM_FI_DEV_GPU_TEMP{{{DCGM_NODE_LABEL}="{plain.name}"}}'

    def series() -> dict[str, tuple[str, float]] | None:
        found = {s["metric"]["UUID"]: (s["metric"]["gpu"], float(s["value"][1]))
                 for s in prom.query(prometheus, selector)}
        return found if len(found) == plain.gpus else None

    # One series per GPU, each under the UUID its ResourceSlice device publishes, gpu="<index>".
    assert {u: g for u, (g, _) in kube.poll(series, 30, "a series per GPU").items()} == {
        u: str(i) for i, u in uuids.items()}
    hot = 97.0
    with cluster.emulator() as emulator:
        emulator.set_gpu_values(plain.name, 1, gpu_temp=hot)
        try:
            served = kube.poll(lambda: (s := series()) and s[uuids[1]][1] == hot and s, 30, "GPU 1 at 97 °C")
            assert served[uuids[0]][1] != hot  # the node's other GPU keeps its own temperature
            # The scheduler's per-node query (the dcgm_gpu_temp preset) still gives one value per node: the hottest.
            query, _ = PRESETS["dcgm_gpu_temp"].render()
            per_node = [s for s in prom.query(prometheus, query) if s["metric"].get(DCGM_NODE_LABEL) == plain.name]
            assert [float(s["value"][1]) for s in per_node] == [hot]
        finally:
            emulator.set_gpu_values(plain.name, 1, gpu_temp=None)
