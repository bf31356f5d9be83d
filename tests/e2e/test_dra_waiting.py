"""A pod's device claims as kube-scheduler treats them, before any driver publishes devices: a pod whose claim does
not exist waits without being bound; once the claim exists and no node has a device, it is reported with
kube-scheduler's reason. (The allocation itself, against the fake DRA driver: test_dra.py and
test_differential_dra.py.)"""

from __future__ import annotations

from typing import Any

from devcluster import DevCluster
from devcluster.kubeapi import KubeAPI
from tests.e2e import kube
from tests.e2e.pools import in_pool, node_pool
from tests.e2e.scheduler_proc import schedulers

CLASS = "e2e-waiting.example.com"


def test_a_pod_waits_for_its_claim_then_reports_that_no_node_has_a_device(cluster: DevCluster, api: KubeAPI,
                                                                        namespace: str) -> None:
    with node_pool(cluster, 2) as (pool, _), schedulers(cluster) as (name, _):
        spec = in_pool(pool)
        manifest = kube.pod_manifest("claim", scheduler=name, **spec)
        manifest["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "gpu-claim"}]
        api.post(f"/api/v1/namespaces/{namespace}/pods", manifest)
        # A plain pod in the same pool binds: the scheduler runs, the claim pod is only waiting.
        api.post(f"/api/v1/namespaces/{namespace}/pods", kube.pod_manifest("plain", scheduler=name, **spec))
        kube.poll(lambda: api.get(f"/api/v1/namespaces/{namespace}/pods/plain")["spec"].get("nodeName"), 15,
                  "the plain pod bound")
        assert not api.get(f"/api/v1/namespaces/{namespace}/pods/claim")["spec"].get("nodeName")

        api.post("/apis/resource.k8s.io/v1/deviceclasses", {
            "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": CLASS},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{CLASS}"'}}]}})
        try:
            api.post(f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims", {
                "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "gpu-claim"},
                "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": CLASS}}]}}})

            def reported() -> dict[str, Any] | None:
                pod = api.get(f"/api/v1/namespaces/{namespace}/pods/claim")
                cond = next((c for c in pod["status"].get("conditions", []) if c["type"] == "PodScheduled"), None)
                return cond if cond and "cannot allocate all claims" in cond.get("message", "") else None

            cond = kube.poll(reported, 20, "PodScheduled=False naming the claims")
            assert cond["status"] == "False" and cond["reason"] == "Unschedulable"
            assert not api.get(f"/api/v1/namespaces/{namespace}/pods/claim")["spec"].get("nodeName")
        finally:
            api.delete(f"/apis/resource.k8s.io/v1/deviceclasses/{CLASS}")
