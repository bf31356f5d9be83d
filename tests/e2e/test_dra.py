"""GPUs through DRA, end to end: metrics-sched against the dev cluster's fake NVIDIA DRA driver (one ResourceSlice
per GPU node, each GPU's UUID that of its DCGM series), with each GPU's own temperature from Prometheus
(`deviceLabels`). It places claims on the coolest fitting GPUs, never gives one device to two pods, frees a device
when its pod goes, and serves `nvidia.com/gpu` through DRA on a node without a device plugin.

Nodes (one pool, tainted, for this module): `six-hot` has 8 GPUs of which 6 are hot (88-95 °C) and 2 cool; `four-cool`
has 4 cool GPUs and 4 hot; `single` has one GPU; `dra-only` has two GPUs and no nvidia.com/gpu in its allocatable.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Any

import pytest

from devcluster import DevCluster, NodeSpec
from devcluster.dra import DRIVER, GPU_CLASS
from devcluster.kubeapi import KubeAPI
from devcluster.nodes import node_ip
from tests.e2e import kube
from tests.e2e.pools import POOL_LABEL, in_pool
from tests.e2e.scheduler_proc import SchedulerProcess, schedulers
from tests.e2e.telemetry_setup import decisions, telemetry_config, values
from tests.e2e.test_telemetry_devices import uuids_of

pytestmark = pytest.mark.e2e

RESOURCE_API = "/apis/resource.k8s.io/v1"
HOSTNAME = "kubernetes.io/hostname"
SIX_HOT = [91.0, 35.0, 93.0, 90.0, 36.0, 95.0, 88.0, 92.0]  # GPUs 1 and 4 are the cool ones
FOUR_COOL = [89.0, 50.0, 90.0, 51.0, 91.0, 52.0, 92.0, 53.0]  # GPUs 1, 3, 5, 7


@pytest.fixture(scope="module")
def pool(cluster: DevCluster) -> Iterator[tuple[str, dict[str, NodeSpec]]]:
    name = f"dra{secrets.token_hex(3)}"
    base = 210000 + secrets.randbelow(4000) * 8

    def spec(suffix: str, offset: int, gpus: int, device_plugin: bool = True) -> NodeSpec:
        return NodeSpec(name=f"{name}-{suffix}", internal_ip=node_ip(base + offset), cpu="64", memory="512Gi",
                        gpus=gpus, gpu_device_plugin=device_plugin, labels={POOL_LABEL: name},
                        taints=({"key": POOL_LABEL, "value": name, "effect": "NoSchedule"},))

    nodes = {"six-hot": spec("six-hot", 0, 8), "four-cool": spec("four-cool", 1, 8), "single": spec("single", 2, 1),
             "dra-only": spec("dra-only", 3, 2, device_plugin=False)}
    cluster.add_nodes(list(nodes.values()))
    try:
        yield name, nodes
    finally:
        cluster.remove_nodes([s.name for s in nodes.values()])


@pytest.fixture(scope="module")
def scheduler(cluster: DevCluster, pool: tuple[str, dict[str, NodeSpec]]) -> Iterator[tuple[str, SchedulerProcess]]:
    """metrics-sched with per-GPU temperatures, the nodes' GPUs set and held fresh in its cache before any test."""
    _, nodes = pool
    config = telemetry_config(cluster, cmdb=False, metrics_server=False)
    [prometheus] = config["sources"]
    prometheus["metrics"] = [{"name": "gpu_temperature", "preset": "dcgm_gpu_temp", "deviceLabels": ["UUID", "gpu"]}]
    temps = {nodes["six-hot"].name: SIX_HOT, nodes["four-cool"].name: FOUR_COOL,
             nodes["single"].name: [40.0], nodes["dra-only"].name: [45.0, 46.0]}
    with cluster.emulator() as emulator:
        emulator.set_many({node: {"gpu_temp": t} for node, t in temps.items()})
        try:
            uuids = {node: uuids_of(cluster, node, len(t)) for node, t in temps.items()}
            with schedulers(cluster, extra=config, leader_elect=False) as (name, [proc]):

                def held() -> bool:
                    for node, t in temps.items():
                        devices = values(proc, node).get("gpu_temperature", {}).get("devices", {})
                        if {u: d.get("value") for u, d in devices.items() if d.get("fresh")} != dict(
                                zip(uuids[node], t, strict=True)):
                            return False
                    return True

                kube.poll(held, 40, "every GPU's temperature held fresh by the scheduler", interval=0.2)
                yield name, proc
        finally:
            for node in temps:
                emulator.clear_values(node)


def _template(api: KubeAPI, namespace: str, name: str, count: int) -> None:
    api.post(f"{RESOURCE_API}/namespaces/{namespace}/resourceclaimtemplates", {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": name},
        "spec": {"spec": {"devices": {"requests": [
            {"name": "gpu", "exactly": {"deviceClassName": GPU_CLASS, "count": count}}]}}}})


def _pod(name: str, scheduler: str, pool: str, template: str, node: str | None = None) -> dict[str, Any]:
    pod = kube.pod_manifest(name, scheduler=scheduler, **in_pool(pool))
    pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": template}]
    pod["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpu"}]
    if node is not None:
        pod["spec"]["nodeSelector"][HOSTNAME] = node
    return pod


def _bound(api: KubeAPI, namespace: str, name: str) -> dict[str, Any]:
    def bound() -> dict[str, Any] | None:
        pod: dict[str, Any] = api.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
        return pod if pod["spec"].get("nodeName") else None
    return kube.poll(bound, 60, f"pod {name} bound")


def _gpus(api: KubeAPI, namespace: str, pod: dict[str, Any]) -> list[int]:
    """The GPU indexes the pod's claim was allocated, checking the claim is the pod's and on its node."""
    [status] = pod["status"]["resourceClaimStatuses"]
    claim = api.get(f"{RESOURCE_API}/namespaces/{namespace}/resourceclaims/{status['resourceClaimName']}")
    assert [r["uid"] for r in claim["status"]["reservedFor"]] == [pod["metadata"]["uid"]]
    node = pod["spec"]["nodeName"]
    devices = {d["name"]: d for s in api.get(f"{RESOURCE_API}/resourceslices",
                                              fieldSelector=f"spec.nodeName={node}")["items"]
               for d in s["spec"].get("devices", [])}
    found = []
    for result in claim["status"]["allocation"]["devices"]["results"]:
        assert (result["driver"], result["pool"]) == (DRIVER, node)
        found.append(int(devices[result["device"]]["attributes"]["index"]["int"]))
    return sorted(found)


def _scheduled_condition(api: KubeAPI, namespace: str, name: str, text: str) -> dict[str, Any]:
    def reported() -> dict[str, Any] | None:
        pod = api.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
        cond = next((c for c in pod["status"].get("conditions", []) if c["type"] == "PodScheduled"), None)
        return cond if cond and text in cond.get("message", "") else None
    return kube.poll(reported, 30, f"{name}: PodScheduled=False with {text!r}")


def test_one_gpu_claims_get_the_cool_gpus_of_a_node_whose_others_are_hot(
        api: KubeAPI, namespace: str, pool: tuple[str, dict[str, NodeSpec]],
        scheduler: tuple[str, SchedulerProcess]) -> None:
    name, nodes = pool
    node = nodes["six-hot"].name
    _template(api, namespace, "one-gpu", 1)
    taken = []
    for i in range(2):  # the coolest first, then the other cool one (the first is taken)
        api.post(f"/api/v1/namespaces/{namespace}/pods", _pod(f"cool-{i}", scheduler[0], name, "one-gpu", node))
        taken += _gpus(api, namespace, _bound(api, namespace, f"cool-{i}"))
    assert taken == [1, 4]
    # The third finds only hot GPUs on that node: kept off it by the GPU heat filter, judged by the GPU it would get.
    api.post(f"/api/v1/namespaces/{namespace}/pods", _pod("hot", scheduler[0], name, "one-gpu", node))
    cond = _scheduled_condition(api, namespace, "hot", "had a GPU above 85")
    assert cond["reason"] == "Unschedulable"


def test_a_four_gpu_claim_lands_where_four_cool_gpus_are(
        api: KubeAPI, namespace: str, pool: tuple[str, dict[str, NodeSpec]],
        scheduler: tuple[str, SchedulerProcess]) -> None:
    name, nodes = pool
    _template(api, namespace, "four-gpus", 4)
    api.post(f"/api/v1/namespaces/{namespace}/pods", _pod("four", scheduler[0], name, "four-gpus"))
    pod = _bound(api, namespace, "four")
    assert pod["spec"]["nodeName"] == nodes["four-cool"].name
    assert _gpus(api, namespace, pod) == [1, 3, 5, 7]
    # /decisions says which devices, with each one's own temperature (the record may reach the ring after the bind
    # the API shows: wait for exactly the note asserted on).
    def devices_note() -> str | None:
        found = [n for d in decisions(scheduler[1], f"{namespace}/four") if d.get("node")
                 for n in d.get("notes") or () if "devices" in n]
        return found[0] if len(found) == 1 else None

    note = kube.poll(devices_note, 20, "the placement's decision record with its devices")
    assert all(f"(gpu_temperature {t:g})" in note for t in (50.0, 51.0, 52.0, 53.0)), note


def test_two_pods_race_for_the_last_device_and_a_deleted_pod_frees_it(
        api: KubeAPI, namespace: str, pool: tuple[str, dict[str, NodeSpec]],
        scheduler: tuple[str, SchedulerProcess]) -> None:
    name, nodes = pool
    node = nodes["single"].name
    _template(api, namespace, "last-gpu", 1)
    for pod_name in ("racer-a", "racer-b"):
        api.post(f"/api/v1/namespaces/{namespace}/pods", _pod(pod_name, scheduler[0], name, "last-gpu", node))

    def one_bound() -> str | None:
        bound = [n for n in ("racer-a", "racer-b")
                 if api.get(f"/api/v1/namespaces/{namespace}/pods/{n}")["spec"].get("nodeName")]
        return bound[0] if len(bound) == 1 else None

    winner = kube.poll(one_bound, 60, "one of the two pods bound")
    loser = "racer-b" if winner == "racer-a" else "racer-a"
    _scheduled_condition(api, namespace, loser, "cannot allocate all claims")
    assert not api.get(f"/api/v1/namespaces/{namespace}/pods/{loser}")["spec"].get("nodeName")
    # The winner goes: the resourceclaim controller deletes its claim, the device is free, the waiting pod binds.
    api.delete(f"/api/v1/namespaces/{namespace}/pods/{winner}?gracePeriodSeconds=0")
    pod = _bound(api, namespace, loser)
    assert _gpus(api, namespace, pod) == [0]


def test_the_gpu_extended_resource_on_a_dra_only_node_binds(
        api: KubeAPI, namespace: str, pool: tuple[str, dict[str, NodeSpec]],
        scheduler: tuple[str, SchedulerProcess]) -> None:
    name, nodes = pool
    node = nodes["dra-only"].name
    assert "nvidia.com/gpu" not in api.get(f"/api/v1/nodes/{node}")["status"]["allocatable"]
    manifest = kube.pod_manifest("legacy", scheduler=scheduler[0], gpus=1, **in_pool(name))
    manifest["spec"]["nodeSelector"][HOSTNAME] = node
    api.post(f"/api/v1/namespaces/{namespace}/pods", manifest)
    pod = _bound(api, namespace, "legacy")
    assert pod["spec"]["nodeName"] == node

    def claim_status() -> dict[str, Any] | None:
        found = api.get(f"/api/v1/namespaces/{namespace}/pods/legacy")["status"].get("extendedResourceClaimStatus")
        return found if found else None

    status = kube.poll(claim_status, 20, "the pod's extendedResourceClaimStatus")
    claim = api.get(f"{RESOURCE_API}/namespaces/{namespace}/resourceclaims/{status['resourceClaimName']}")
    assert claim["metadata"]["annotations"]["resource.kubernetes.io/extended-resource-claim"] == "true"
    assert [r["uid"] for r in claim["status"]["reservedFor"]] == [pod["metadata"]["uid"]]
    [result] = claim["status"]["allocation"]["devices"]["results"]
    assert (result["driver"], result["pool"]) == (DRIVER, node)
    # The cooler of its two GPUs (45 °C, index 0).
    assert [m["resourceName"] for m in status["requestMappings"]] == ["nvidia.com/gpu"]
    assert _index_of(api, node, result["device"]) == 0


def _index_of(api: KubeAPI, node: str, device: str) -> int:
    for s in api.get(f"{RESOURCE_API}/resourceslices", fieldSelector=f"spec.nodeName={node}")["items"]:
        for d in s["spec"].get("devices", []):
            if d["name"] == device:
                return int(d["attributes"]["index"]["int"])
    raise AssertionError(f"{device} not published on {node}")
