"""Refuse, never ignore: a pod using a field metrics-sched does not honour yet is reported and left pending."""

from __future__ import annotations

from typing import Any

from devcluster import DevCluster
from devcluster.kubeapi import KubeAPI
from tests.e2e import kube
from tests.e2e.pools import in_pool, node_pool
from tests.e2e.scheduler_proc import schedulers

FIELD_MESSAGE = "pod uses spec.resourceClaims, which metrics-sched does not support yet"


def test_a_pod_with_a_device_claim_is_reported_and_not_bound(cluster: DevCluster, api: KubeAPI,
                                                             namespace: str) -> None:
    with node_pool(cluster, 2) as (pool, _), schedulers(cluster) as (name, _):
        spec = in_pool(pool)
        manifest = kube.pod_manifest("claim", scheduler=name, **spec)
        manifest["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "gpu-claim"}]
        api.post(f"/api/v1/namespaces/{namespace}/pods", manifest)

        def refused() -> tuple[dict[str, Any], dict[str, Any]] | None:
            pod = api.get(f"/api/v1/namespaces/{namespace}/pods/claim")
            cond = next((c for c in pod["status"].get("conditions", []) if c["type"] == "PodScheduled"), None)
            events = api.get(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")["items"]
            event = next((e for e in events if e["reason"] == "FailedScheduling"
                          and e["regarding"]["name"] == "claim"), None)
            return (cond, event) if cond and event else None

        cond, event = kube.poll(refused, 15, "PodScheduled=False and a FailedScheduling event")
        assert cond["status"] == "False" and cond["reason"] == "Unschedulable"
        assert FIELD_MESSAGE in cond["message"]
        assert FIELD_MESSAGE in event["note"]
        assert event["reportingController"] == name and event["type"] == "Warning"
        assert not api.get(f"/api/v1/namespaces/{namespace}/pods/claim")["spec"].get("nodeName")
        # A supported pod in the same pool is bound: the nodes are fine, only the field is refused.
        api.post(f"/api/v1/namespaces/{namespace}/pods", kube.pod_manifest("plain", scheduler=name, **spec))
        kube.poll(lambda: api.get(f"/api/v1/namespaces/{namespace}/pods/plain")["spec"].get("nodeName"), 15,
                  "the plain pod bound")
        assert not api.get(f"/api/v1/namespaces/{namespace}/pods/claim")["spec"].get("nodeName")
