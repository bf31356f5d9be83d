"""Serves metrics.k8s.io/v1beta1 NodeMetrics through the real apiserver with a test-only CRD.

KWOK nodes have no kubelet for metrics-server to scrape, so the emulator writes NodeMetrics objects
and the apiserver serves them at the real path, /apis/metrics.k8s.io/v1beta1/nodes, in the real
NodeMetricsList shape. Differences from metrics-server: values come from the emulator, not cAdvisor;
list/get support label and field selectors like any CRD (metrics-server supports labels only); and
there is no PodMetrics.
"""

from __future__ import annotations

from typing import Any

from devcluster.kubeapi import KubeAPI, install_crd

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
    install_crd(api, NODE_METRICS_CRD, "/apis/metrics.k8s.io/v1beta1/nodes", timeout)
