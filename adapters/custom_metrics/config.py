"""The Custom Metrics source's configuration, validated.

Fields (paths relative to the source spec; `name` and `type` belong to the caller and are ignored). The
API server address, credentials and TLS come from the injected Kubernetes client, not from here: the
metrics APIs are aggregated APIs served through the API server (prometheus-adapter, KEDA, Datadog).

- `interval` (default `15s`): seconds between refreshes.
- `timeout` (default `5s`, at most 30 s): per request (one per configured metric), the whole answer (connect to
  last byte).
- `maxResponseBytes` (default 67108864, 64 MiB; 4096..1073741824): the largest answer read, counted after
  decompression; a larger one is cut off while it streams in and the refresh fails ("answer larger than
  maxResponseBytes"), so one bad answer cannot exhaust the scheduler's memory.
- `apiVersion` (default `v1beta2`; or `v1beta1`): the `custom.metrics.k8s.io` version to read.
- `nodeMetrics`: per-node metrics, each read as `/apis/custom.metrics.k8s.io/<apiVersion>/nodes/*/<metric>`:
  - `name` (required): the metric's name in the telemetry cache (what plugins read, e.g. a `CustomMetric`
    plugin's `metric`).
  - `metric` (default: `name`): the metric's name in the Custom Metrics API.
  - `selector` (optional): a label selector on the metric's series (`metricLabelSelector`).
  - `scale` (default 1): the value is multiplied by it (e.g. 0.001 for milliwatts to watts).
- `externalMetrics`: cluster-wide values from `external.metrics.k8s.io/v1beta1`
  (`/apis/external.metrics.k8s.io/v1beta1/namespaces/<namespace>/<metric>`), e.g. a spot price:
  - `name`, `metric`, `selector`, `scale`: as above; the selector must leave exactly one series.
  - `namespace` (default `default`): the namespace the metric is asked for.
  - `nodeSelector` (optional): a label selector (`node.kubernetes.io/lifecycle=spot`); the value is given
    to the nodes it matches (one metadata-only LIST of nodes per refresh), or to every node without it.

At least one metric; every `name` unique.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from adapters.bounded_answer import DEFAULT_MAX_RESPONSE_BYTES, read_max_response_bytes
from adapters.http_common import CALLER_KEYS, check_keys, read_timeout
from metrics_sched.config import ConfigError
from metrics_sched.config.reader import (
    field_name,
    mapping,
    read_choice,
    read_duration,
    read_float,
    read_str,
    sequence,
)

ApiVersion = Literal["v1beta2", "v1beta1"]
API_VERSIONS: tuple[ApiVersion, ...] = ("v1beta2", "v1beta1")
_KEYS = {"interval", "timeout", "maxResponseBytes", "apiVersion", "nodeMetrics", "externalMetrics", *CALLER_KEYS}
_NODE_KEYS = {"name", "metric", "selector", "scale"}
_EXTERNAL_KEYS = {*_NODE_KEYS, "namespace", "nodeSelector"}


@dataclass(frozen=True)
class NodeMetric:
    name: str  # in the telemetry cache
    metric: str  # in the API
    selector: str | None = None
    scale: float = 1.0


@dataclass(frozen=True)
class ExternalMetric:
    name: str
    metric: str
    namespace: str = "default"
    selector: str | None = None
    scale: float = 1.0
    node_selector: str | None = None  # None: every node


@dataclass(frozen=True)
class CustomMetricsConfig:
    node_metrics: tuple[NodeMetric, ...] = ()
    external_metrics: tuple[ExternalMetric, ...] = ()
    interval: float = 15.0
    timeout: float = 5.0
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES
    api_version: ApiVersion = "v1beta2"

    @property
    def names(self) -> list[str]:
        return [m.name for m in self.node_metrics] + [m.name for m in self.external_metrics]


def parse_config(spec: Mapping[str, Any]) -> CustomMetricsConfig:
    spec = mapping(spec, "")
    check_keys(spec, _KEYS, "")
    defaults = CustomMetricsConfig()
    node_metrics = tuple(_node_metric(entry, field_name("nodeMetrics", i))
                         for i, entry in enumerate(sequence(spec.get("nodeMetrics"), "nodeMetrics", optional=True)))
    external = tuple(_external_metric(entry, field_name("externalMetrics", i))
                     for i, entry in enumerate(sequence(spec.get("externalMetrics"), "externalMetrics",
                                                        optional=True)))
    config = CustomMetricsConfig(
        node_metrics=node_metrics,
        external_metrics=external,
        interval=read_duration(spec, "interval", "", defaults.interval),
        timeout=read_timeout(spec, "", defaults.timeout, maximum=30.0),
        max_response_bytes=read_max_response_bytes(spec),
        api_version=read_choice(spec, "apiVersion", "", API_VERSIONS, defaults.api_version),
    )
    if not config.names:
        raise ConfigError("nodeMetrics", "configure at least one of nodeMetrics or externalMetrics")
    seen: set[str] = set()
    for index, name in enumerate(config.names):
        if name in seen:
            where = (field_name("nodeMetrics", index) if index < len(node_metrics)
                     else field_name("externalMetrics", index - len(node_metrics)))
            raise ConfigError(field_name(where, "name"), f"duplicate metric name {name!r}")
        seen.add(name)
    return config


def _common(entry: object, where: str, keys: set[str]) -> tuple[Mapping[str, Any], str, str, str | None, float]:
    spec = mapping(entry, where)
    check_keys(spec, keys, where)
    name = read_str(spec, "name", where, non_empty=True)
    metric = read_str(spec, "metric", where, name, non_empty=True)
    if "/" in metric:
        # It becomes one path segment of the request.
        raise ConfigError(field_name(where, "metric"), f"must not contain '/', got {metric!r}")
    selector = _optional_str(spec, "selector", where)
    scale = read_float(spec, "scale", where, 1.0)
    if scale == 0:
        raise ConfigError(field_name(where, "scale"), "must not be 0")
    return spec, name, metric, selector, scale


def _node_metric(entry: object, where: str) -> NodeMetric:
    _, name, metric, selector, scale = _common(entry, where, _NODE_KEYS)
    return NodeMetric(name=name, metric=metric, selector=selector, scale=scale)


def _external_metric(entry: object, where: str) -> ExternalMetric:
    spec, name, metric, selector, scale = _common(entry, where, _EXTERNAL_KEYS)
    namespace = read_str(spec, "namespace", where, "default", non_empty=True)
    if "/" in namespace:
        raise ConfigError(field_name(where, "namespace"), f"must not contain '/', got {namespace!r}")
    return ExternalMetric(name=name, metric=metric, namespace=namespace, selector=selector, scale=scale,
                          node_selector=_optional_str(spec, "nodeSelector", where))


def _optional_str(spec: Mapping[str, Any], key: str, where: str) -> str | None:
    return read_str(spec, key, where, non_empty=True) if spec.get(key) is not None else None
