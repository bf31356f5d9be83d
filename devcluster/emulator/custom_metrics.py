"""The Custom Metrics APIs as prometheus-adapter serves them: custom.metrics.k8s.io (v1beta1, v1beta2) for
nodes and external.metrics.k8s.io/v1beta1, with values tests set through /control/custom-metrics.

The dev cluster registers these groups as APIServices, so the apiserver's aggregation layer proxies
`/apis/custom.metrics.k8s.io/...` here (over this emulator's HTTPS listener); the routes also answer on the
plain HTTP port, which is how unit tests call them. Items are stamped with the time of the request (as
prometheus-adapter stamps them with its query time) unless a test set an explicit `timestamp`.
"""

from __future__ import annotations

import datetime as dt
import math
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from devcluster.emulator import metrics_api
from devcluster.emulator.discovery import api_group, group_entry, not_found, resource_list
from devcluster.emulator.errors import RequestError
from devcluster.emulator.routing import Request, Response, route

if TYPE_CHECKING:
    from devcluster.emulator.state import Emulator

CUSTOM = "custom.metrics.k8s.io"
EXTERNAL = "external.metrics.k8s.io"
CUSTOM_VERSIONS = ("v1beta2", "v1beta1")
WINDOW_SECONDS = 60

Served = str  # a quantity as served: "1500m", "42", or any string a test wants served verbatim


@dataclass(frozen=True)
class Value:
    value: Served
    timestamp: float | None = None  # None: the time of the request
    labels: Mapping[str, str] = field(default_factory=dict)  # external series only


class CustomMetricsStore:
    """Node values by metric and node; external series by (namespace, metric). Its own lock: small."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._nodes: dict[str, dict[str, Value]] = {}
        self._external: dict[tuple[str, str], list[Value]] = {}

    def set_nodes(self, metric: str, body: Any) -> dict[str, Any]:
        nodes = body.get("nodes") if isinstance(body, Mapping) else None
        if not isinstance(nodes, Mapping):
            raise RequestError('body must be {"nodes": {name: value | {value, timestamp} | null}}')
        parsed = {str(name): None if raw is None else _value(raw, f"nodes.{name}") for name, raw in nodes.items()}
        with self._lock:
            values = self._nodes.setdefault(metric, {})
            for name, value in parsed.items():
                if value is None:
                    values.pop(name, None)
                else:
                    values[name] = value
            if not values:
                del self._nodes[metric]
        return self.describe()

    def set_external(self, namespace: str, metric: str, body: Any) -> dict[str, Any]:
        items = body.get("items") if isinstance(body, Mapping) else None
        if not isinstance(items, list):
            raise RequestError('body must be {"items": [{value, labels?, timestamp?}, ...]} ([] clears)')
        parsed = [_value(item, f"items[{i}]") for i, item in enumerate(items)]
        with self._lock:
            if parsed:
                self._external[(namespace, metric)] = parsed
            else:
                self._external.pop((namespace, metric), None)
        return self.describe()

    def describe(self) -> dict[str, Any]:
        with self._lock:
            return {
                "nodes": {metric: {n: _show(v) for n, v in values.items()} for metric, values in self._nodes.items()},
                "external": {f"{ns}/{metric}": [_show(v) for v in values]
                             for (ns, metric), values in self._external.items()},
            }

    def node_metrics(self) -> list[str]:
        with self._lock:
            return sorted(self._nodes)

    def external_metrics(self) -> list[str]:
        with self._lock:
            return sorted({metric for _, metric in self._external})

    def node_values(self, metric: str, name: str) -> list[tuple[str, Value]]:
        with self._lock:
            values = dict(self._nodes.get(metric, {}))
        if name == "*":
            return sorted(values.items())
        return [(name, values[name])] if name in values else []

    def external_values(self, namespace: str, metric: str, selector: dict[str, str]) -> list[Value]:
        with self._lock:
            values = list(self._external.get((namespace, metric), []))
        return [v for v in values if all(v.labels.get(k) == want for k, want in selector.items())]


def _value(raw: object, where: str) -> Value:
    spec = raw if isinstance(raw, Mapping) else {"value": raw}
    value, stamp, labels = spec.get("value"), spec.get("timestamp"), spec.get("labels") or {}
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise RequestError(f"{where}: value must be a number or a quantity string, got {value!r}")
    if isinstance(value, float) and not math.isfinite(value):
        raise RequestError(f"{where}: value must be finite (serve a bad quantity as a string instead)")
    if stamp is not None and (isinstance(stamp, bool) or not isinstance(stamp, int | float)):
        raise RequestError(f"{where}: timestamp must be unix seconds, got {stamp!r}")
    if not isinstance(labels, Mapping) or not all(isinstance(v, str) for v in labels.values()):
        raise RequestError(f"{where}: labels must map names to strings")
    served = value if isinstance(value, str) else quantity(value)
    return Value(served, None if stamp is None else float(stamp), {str(k): v for k, v in labels.items()})


def quantity(number: float) -> str:
    """A number as the canonical quantity prometheus-adapter would serve: integral, else milli-units."""
    if float(number).is_integer():
        return str(int(number))
    return f"{round(number * 1000)}m"


def _show(value: Value) -> dict[str, Any]:
    return {"value": value.value, "timestamp": value.timestamp, "labels": dict(value.labels)}


def _rfc3339(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _selector(request: Request) -> dict[str, str]:
    """`metricLabelSelector` equality terms (`a=b,c==d`); anything else is refused, not ignored."""
    text = (request.query.get("metricLabelSelector") or [""])[-1]
    out: dict[str, str] = {}
    for term in filter(None, (t.strip() for t in text.split(","))):
        key, sep, want = term.replace("==", "=").partition("=")
        if not sep or "!" in key:
            raise RequestError(f"metricLabelSelector: only equality terms are emulated, got {term!r}")
        out[key.strip()] = want.strip()
    return out


# -- discovery -----------------------------------------------------------------------------------------
def api_groups(emulator: Emulator, request: Request) -> Response:
    """Every group the emulator serves behind the aggregation layer (metrics_api's too)."""
    groups = [group_entry(CUSTOM, CUSTOM_VERSIONS), group_entry(EXTERNAL, ("v1beta1",)),
              group_entry(metrics_api.GROUP, (metrics_api.VERSION,))]
    return Response.json({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})


def custom_group(emulator: Emulator, request: Request) -> Response:
    return Response.json(api_group(CUSTOM, CUSTOM_VERSIONS))


def external_group(emulator: Emulator, request: Request) -> Response:
    return Response.json(api_group(EXTERNAL, ("v1beta1",)))


def _resources(group_version: str, names: list[str], namespaced: bool, kind: str) -> Response:
    return Response.json(resource_list(group_version, names, namespaced, kind, ["get"]))


def custom_resources(emulator: Emulator, request: Request) -> Response:
    version = _custom_version(request)
    names = [f"nodes/{m}" for m in emulator.custom_metrics.node_metrics()]
    return _resources(f"{CUSTOM}/{version}", names, False, "MetricValueList")


def external_resources(emulator: Emulator, request: Request) -> Response:
    return _resources(f"{EXTERNAL}/v1beta1", emulator.custom_metrics.external_metrics(), True,
                      "ExternalMetricValueList")


def _custom_version(request: Request) -> str:
    version = request.params["version"]
    if version not in CUSTOM_VERSIONS:
        raise RequestError(f"{CUSTOM} has no version {version!r}", status=404)
    return version


def openapi_v2(emulator: Emulator, request: Request) -> Response:
    # The aggregator downloads every backend's OpenAPI and retries (logging an error) while it cannot.
    return Response.json({"swagger": "2.0", "info": {"title": "metrics-sched emulator", "version": "v1"},
                          "paths": {}})


def openapi_v3(emulator: Emulator, request: Request) -> Response:
    return Response.json({"paths": {}})


# -- values --------------------------------------------------------------------------------------------
def node_metric(emulator: Emulator, request: Request) -> Response:
    version = _custom_version(request)
    store = emulator.custom_metrics
    metric, name = request.params["metric"], request.params["name"]
    _selector(request)  # validated; node series carry no labels here
    values = store.node_values(metric, name)
    if not values and metric not in store.node_metrics():
        return not_found(f"the server could not find the metric {metric} for nodes")
    if not values:
        return not_found(f"the server could not find the metric {metric} for nodes {name}")
    now = store.clock()
    items = []
    for node, value in values:
        item: dict[str, Any] = {
            "describedObject": {"kind": "Node", "name": node, "apiVersion": "/v1"},
            "timestamp": _rfc3339(value.timestamp if value.timestamp is not None else now),
            "windowSeconds": WINDOW_SECONDS, "value": value.value,
        }
        if version == "v1beta2":
            item["metric"] = {"name": metric}
        else:
            item["metricName"] = metric
        items.append(item)
    return Response.json({"kind": "MetricValueList", "apiVersion": f"{CUSTOM}/{version}", "metadata": {},
                          "items": items})


def external_metric(emulator: Emulator, request: Request) -> Response:
    store = emulator.custom_metrics
    namespace, metric = request.params["namespace"], request.params["metric"]
    values = store.external_values(namespace, metric, _selector(request))
    now = store.clock()
    items = [{"metricName": metric, "metricLabels": dict(v.labels), "value": v.value,
              "timestamp": _rfc3339(v.timestamp if v.timestamp is not None else now),
              "windowSeconds": WINDOW_SECONDS} for v in values]
    return Response.json({"kind": "ExternalMetricValueList", "apiVersion": f"{EXTERNAL}/v1beta1", "metadata": {},
                          "items": items})


# -- control -------------------------------------------------------------------------------------------
def control_get(emulator: Emulator, request: Request) -> Response:
    return Response.json(emulator.custom_metrics.describe())


def control_nodes(emulator: Emulator, request: Request) -> Response:
    return Response.json(emulator.custom_metrics.set_nodes(request.params["metric"], request.json()))


def control_external(emulator: Emulator, request: Request) -> Response:
    return Response.json(emulator.custom_metrics.set_external(request.params["namespace"],
                                                              request.params["metric"], request.json()))


ROUTES = [
    route("GET", "/apis", "custom-metrics-discovery", api_groups),
    route("GET", "/openapi/v2", "custom-metrics-discovery", openapi_v2),
    route("GET", "/openapi/v3", "custom-metrics-discovery", openapi_v3),
    route("GET", f"/apis/{CUSTOM}", "custom-metrics-discovery", custom_group),
    route("GET", f"/apis/{CUSTOM}/{{version}}", "custom-metrics-discovery", custom_resources),
    route("GET", f"/apis/{CUSTOM}/{{version}}/nodes/{{name}}/{{metric}}", "custom-metrics", node_metric),
    route("GET", f"/apis/{EXTERNAL}", "custom-metrics-discovery", external_group),
    route("GET", f"/apis/{EXTERNAL}/v1beta1", "custom-metrics-discovery", external_resources),
    route("GET", f"/apis/{EXTERNAL}/v1beta1/namespaces/{{namespace}}/{{metric}}", "external-metrics",
          external_metric),
    route("GET", "/control/custom-metrics", "control", control_get),
    route("PUT", "/control/custom-metrics/nodes/{metric}", "control", control_nodes),
    route("PUT", "/control/custom-metrics/external/{namespace}/{metric}", "control", control_external),
]
