"""Registers the emulator as the backend of metrics.k8s.io and the Custom Metrics APIs in the apiserver's
aggregation layer.

Four APIServices point at one Service: v1beta1.metrics.k8s.io, as metrics-server's manifest installs it, and
custom.metrics.k8s.io v1beta2 and v1beta1 and external.metrics.k8s.io v1beta1, as prometheus-adapter's chart
installs them. The apiserver refuses loopback addresses in
Endpoints and EndpointSlices ("may not be in the loopback range (127.0.0.0/8, ::1/128)"), and the emulator
listens on loopback only, so the Service is an ExternalName one naming 127.0.0.1: with
`--enable-aggregator-routing=true` the aggregator dials an ExternalName service's name at the APIService's
port, with no endpoints involved. TLS is verified as for any APIService: `caBundle` holds the dev cluster's
CA, and the emulator's certificate carries the name the aggregator expects, `<service>.<namespace>.svc`.
"""

from __future__ import annotations

import base64
import time
from pathlib import Path
from typing import Any

from devcluster.kubeapi import KubeAPI, KubeAPIError

NAMESPACE = "kube-system"
SERVICE = "custom-metrics-emulator"
SERVICE_HOST = f"{SERVICE}.{NAMESPACE}.svc"  # the serving certificate must carry it
GROUP_VERSIONS = (("metrics.k8s.io", "v1beta1", 100), ("custom.metrics.k8s.io", "v1beta2", 200),
                  ("custom.metrics.k8s.io", "v1beta1", 100), ("external.metrics.k8s.io", "v1beta1", 100))


def _api_service(group: str, version: str, priority: int, port: int, ca_bundle: str) -> dict[str, Any]:
    return {
        "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
        "metadata": {"name": f"{version}.{group}"},
        "spec": {"group": group, "version": version, "groupPriorityMinimum": 100, "versionPriority": priority,
                 "service": {"namespace": NAMESPACE, "name": SERVICE, "port": port}, "caBundle": ca_bundle},
    }


def install(api: KubeAPI, port: int, ca_file: Path, timeout: float = 60.0) -> None:
    """Creates the Service and APIServices, then waits until the aggregator reports each Available."""
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": SERVICE, "namespace": NAMESPACE},
               "spec": {"type": "ExternalName", "externalName": "127.0.0.1"}}
    api.post(f"/api/v1/namespaces/{NAMESPACE}/services", service, ok=(409,))
    ca_bundle = base64.b64encode(ca_file.read_bytes()).decode()
    names = []
    for group, version, priority in GROUP_VERSIONS:
        api.post("/apis/apiregistration.k8s.io/v1/apiservices",
                 _api_service(group, version, priority, port, ca_bundle), ok=(409,))
        names.append(f"{version}.{group}")
    deadline = time.monotonic() + timeout
    pending = list(names)
    message = ""
    while time.monotonic() < deadline:
        for name in list(pending):
            status = api.get(f"/apis/apiregistration.k8s.io/v1/apiservices/{name}").get("status") or {}
            available: dict[str, Any] = next(
                (c for c in status.get("conditions") or [] if c.get("type") == "Available"), {})
            if available.get("status") != "True":
                message = f"{name}: {available.get('reason')}: {available.get('message')}"
                continue
            # The proxy learns of Available from its own informer a moment later (503 until then).
            version, group = name.split(".", 1)
            try:
                api.get(f"/apis/{group}/{version}")
            except KubeAPIError as exc:
                message = f"{name}: {exc}"
                continue
            pending.remove(name)
        if not pending:
            return
        time.sleep(0.1)
    raise TimeoutError(f"APIServices not available after {timeout:.0f}s ({message})")
