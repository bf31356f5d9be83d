"""Serves metrics.k8s.io/v1beta1 NodeMetrics through the real apiserver with a test-only CRD.

KWOK nodes have no kubelet for metrics-server to scrape, so the emulator writes NodeMetrics objects
and the apiserver serves them at the real path, /apis/metrics.k8s.io/v1beta1/nodes, in the real
NodeMetricsList shape. Differences from metrics-server: values come from the emulator, not cAdvisor;
list/get support label and field selectors like any CRD (metrics-server supports labels only); and
there is no PodMetrics.
"""

from __future__ import annotations

import time
from typing import Any

from devcluster.kubeapi import KubeAPI, KubeAPIError

CRD_NAME = "nodes.metrics.k8s.io"

NODE_METRICS_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {
        "name": CRD_NAME,
        # *.k8s.io groups are protected; this annotation is how a test-only CRD may use one.
        "annotations": {"api-approved.kubernetes.io": "unapproved, test only"},
    },
    "spec": {
        "group": "metrics.k8s.io",
        "scope": "Cluster",
        "names": {"plural": "nodes", "singular": "node", "kind": "NodeMetrics", "listKind": "NodeMetricsList"},
        "versions": [{
            "name": "v1beta1",
            "served": True,
            "storage": True,
            "schema": {"openAPIV3Schema": {
                "type": "object",
                "properties": {
                    "timestamp": {"type": "string", "format": "date-time"},
                    "window": {"type": "string"},
                    "usage": {"type": "object", "additionalProperties": {"type": "string"}},
                },
            }},
        }],
    },
}


def install(api: KubeAPI, timeout: float = 30.0) -> None:
    api.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", NODE_METRICS_CRD, ok=(409,))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        crd = api.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{CRD_NAME}")
        conditions = {c["type"]: c["status"] for c in (crd.get("status") or {}).get("conditions") or []}
        if conditions.get("Established") == "True":
            # Established can precede discovery/serving by a moment.
            try:
                api.get("/apis/metrics.k8s.io/v1beta1/nodes")
                return
            except KubeAPIError:  # served a moment after Established; retried until the deadline
                pass
        time.sleep(0.1)
    raise TimeoutError(f"CRD {CRD_NAME} not established after {timeout:.0f}s")
