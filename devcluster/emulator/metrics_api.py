"""metrics.k8s.io/v1beta1 as metrics-server serves it: a NodeMetrics for every node the emulator knows.

The dev cluster registers the group as an APIService (v1beta1.metrics.k8s.io, as metrics-server's manifest
does), so the apiserver's aggregation layer proxies `/apis/metrics.k8s.io/v1beta1/...` to this emulator's HTTPS
listener, and a list is answered from memory, as metrics-server answers it; the routes also answer on the plain
HTTP port, which is how unit tests call them.

Why not a CRD: the emulator used to write one NodeMetrics object per node per interval through a test CRD.
At 5,000 nodes that was thousands of PATCHes per interval through the apiserver and etcd (more than the nodes'
Lease renewals), a load no real cluster carries, and every list was the apiserver converting 5,000 stored
objects. Differences from metrics-server that remain: values come from the emulator's scenario, not kubelets;
there is no PodMetrics; a labelSelector is refused (the emulator does not know node labels), not ignored.

Faults (`PUT /control/faults/metrics-api`): status, delay, malformed, missing_nodes and frozen (items keep the
freeze time's values and timestamp). Items carry the time the values describe: the request's, or the freeze's.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from devcluster.emulator.discovery import api_group, not_found, resource_list
from devcluster.emulator.errors import RequestError
from devcluster.emulator.responses import injected, json_response
from devcluster.emulator.routing import Request, Response, route

if TYPE_CHECKING:
    from devcluster.emulator.state import Emulator

GROUP = "metrics.k8s.io"
VERSION = "v1beta1"
API_VERSION = f"{GROUP}/{VERSION}"
WINDOW = "30s"
ENDPOINT = "metrics-api"  # its fault and request-counter name


def rfc3339(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


@dataclass(frozen=True)
class NodeUsage:
    name: str
    timestamp: float
    cpu_nanocores: int
    memory_ki: int

    def item(self) -> dict[str, Any]:
        """As metrics-server lists it (a list's items carry no kind)."""
        stamp = rfc3339(self.timestamp)
        return {"metadata": {"name": self.name, "creationTimestamp": stamp}, "timestamp": stamp, "window": WINDOW,
                "usage": {"cpu": f"{self.cpu_nanocores}n", "memory": f"{self.memory_ki}Ki"}}


def _refuse_selectors(request: Request) -> None:
    for name in ("labelSelector", "fieldSelector"):
        if any(request.query.get(name, [])):
            raise RequestError(f"{name}: not emulated (the emulator does not know node labels)")


def group(emulator: Emulator, request: Request) -> Response:
    return Response.json(api_group(GROUP, (VERSION,)))


def resources(emulator: Emulator, request: Request) -> Response:
    return Response.json(resource_list(API_VERSION, ["nodes"], False, "NodeMetrics", ["get", "list"]))


def list_nodes(emulator: Emulator, request: Request) -> Response:
    fault, early = injected(emulator, ENDPOINT, as_json=True)
    if early is not None:
        return early
    _refuse_selectors(request)
    items = [usage.item() for usage in emulator.metrics_usages()]
    return json_response({"kind": "NodeMetricsList", "apiVersion": API_VERSION, "metadata": {}, "items": items},
                         fault)


def get_node(emulator: Emulator, request: Request) -> Response:
    fault, early = injected(emulator, ENDPOINT, as_json=True)
    if early is not None:
        return early
    name = request.params["name"]
    usage = next(iter(emulator.metrics_usages([name])), None)
    if usage is None:
        return not_found(f'nodemetrics.metrics.k8s.io "{name}" not found')
    return json_response({"kind": "NodeMetrics", "apiVersion": API_VERSION, **usage.item()}, fault)


ROUTES = [
    route("GET", f"/apis/{GROUP}", "metrics-api-discovery", group),
    route("GET", f"/apis/{API_VERSION}", "metrics-api-discovery", resources),
    route("GET", f"/apis/{API_VERSION}/nodes", ENDPOINT, list_nodes),
    route("GET", f"/apis/{API_VERSION}/nodes/{{name}}", ENDPOINT, get_node),
]
