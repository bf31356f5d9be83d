"""CustomMetricsSource: node metrics from custom.metrics.k8s.io, cluster-wide ones from external.metrics.k8s.io.

One GET per configured metric per refresh (`nodes/*/<metric>` lists every node's value at once), through the
API server's aggregation layer to whatever serves the API (prometheus-adapter, KEDA, the Datadog cluster
agent). Values are Kubernetes quantities ("1500m", "2k") parsed exactly, then scaled; each sample is stamped
with its item's own `timestamp`. An external value goes to every node, or to the nodes a label selector
matches (one metadata-only LIST of nodes per refresh for each such metric).

One metric's failure (the adapter does not know it: 404) is that metric's error; the others still count.
Per metric, `sources` shows how many items matched a node and a few that did not (`series_matching`: node
metrics match by `describedObject`, an external value by `all_nodes` or `nodeSelector`).

The source type `custom-metrics` (entry point in pyproject.toml); health and backoff are PolledSource's.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from adapters.custom_metrics.config import CustomMetricsConfig, ExternalMetric, NodeMetric, parse_config
from adapters.http_common import (
    SourceError,
    counted_quantity,
    counted_timestamp,
    get_json,
    kube_api_client,
)
from metrics_sched.ports import FetchResult, NodeDirectory, Sample, SeriesMatching
from metrics_sched.telemetry import PolledSource, SourceContext

TYPE = "custom-metrics"
CUSTOM_GROUP = "custom.metrics.k8s.io"
EXTERNAL_PATH = "/apis/external.metrics.k8s.io/v1beta1"
UNMATCHED_SHOWN = 10  # unmatched items shown per metric: enough to spot a naming mismatch
# Only names are needed: ask for object metadata, not whole Node objects (kubectl's own trick).
_METADATA_ONLY = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"


@dataclass
class Coverage:
    """What one metric's refresh matched, built up item by item; becomes its SeriesMatching."""

    rule: str
    matched: int = 0
    unmatched: int = 0
    examples: list[dict[str, str]] = field(default_factory=list)

    def miss(self, labels: dict[str, str]) -> None:
        self.unmatched += 1
        if len(self.examples) < UNMATCHED_SHOWN:
            self.examples.append(labels)

    def report(self) -> SeriesMatching:
        return SeriesMatching(matched={self.rule: self.matched} if self.matched else {},
                              unmatched=self.unmatched, unmatched_examples=tuple(self.examples))


class CustomMetricsSource(PolledSource):
    """`client` is an httpx.Client already pointed at the API server (base_url, auth, verify). The source
    closes it only when `close_client` is set (from_config does: the client came from its factory)."""

    def __init__(self, name: str, client: httpx.Client, config: CustomMetricsConfig, *,
                 close_client: bool = False, clock: Callable[[], float] = time.time) -> None:
        super().__init__(name, config.interval, config.names, clock=clock)
        self._client = client
        self.config = config
        self._close_client = close_client
        self.health.extra["apiVersion"] = config.api_version

    def fetch(self, nodes: NodeDirectory) -> FetchResult:
        result = FetchResult(samples=[], dropped={}, errors={})
        dropped: Counter[str] = Counter()
        for node_metric in self.config.node_metrics:
            coverage = Coverage("describedObject")
            try:
                body = self._get(self._node_path(node_metric), node_metric.selector, result)
                self._node_items(node_metric, body, nodes, result, dropped, coverage)
            except SourceError as exc:
                result.errors[node_metric.name] = str(exc)
                continue
            result.series_matching[node_metric.name] = coverage.report()
        for external in self.config.external_metrics:
            coverage = Coverage("all_nodes" if external.node_selector is None else "nodeSelector")
            try:
                self._external(external, nodes, result, dropped, coverage)
            except SourceError as exc:
                result.errors[external.name] = str(exc)
                continue
            result.series_matching[external.name] = coverage.report()
        result.dropped = dict(dropped)
        return result

    # -- custom.metrics.k8s.io -------------------------------------------------------------------------
    def _node_path(self, metric: NodeMetric) -> str:
        return f"/apis/{CUSTOM_GROUP}/{self.config.api_version}/nodes/*/{metric.metric}"

    def _node_items(self, metric: NodeMetric, body: object, nodes: NodeDirectory, result: FetchResult,
                    dropped: Counter[str], coverage: Coverage) -> None:
        items = _items(body, "MetricValueList")
        seen: set[str] = set()
        for item in items:
            if not isinstance(item, Mapping):
                dropped["malformed"] += 1
                continue
            described = item.get("describedObject")
            kind = described.get("kind") if isinstance(described, Mapping) else None
            node = described.get("name") if isinstance(described, Mapping) else None
            if kind != "Node" or not isinstance(node, str) or not node:
                dropped["malformed"] += 1
                continue
            if node not in nodes.names:
                result.unmatched_series += 1
                dropped["unknown_node"] += 1
                coverage.miss({"kind": kind, "name": node})
                continue
            if node in seen:
                # Several series for one node: the selector is too wide; the first usable one stands.
                dropped["duplicate"] += 1
                continue
            stamped = _value_and_time(item, metric.scale, dropped)
            if stamped is not None:
                seen.add(node)
                coverage.matched += 1
                result.samples.append(Sample(metric=metric.name, node=node, value=stamped[0],
                                             observed_at=stamped[1]))

    # -- external.metrics.k8s.io -----------------------------------------------------------------------
    def _external(self, metric: ExternalMetric, nodes: NodeDirectory, result: FetchResult,
                  dropped: Counter[str], coverage: Coverage) -> None:
        body = self._get(f"{EXTERNAL_PATH}/namespaces/{metric.namespace}/{metric.metric}", metric.selector,
                         result)
        items = _items(body, "ExternalMetricValueList")
        if len(items) != 1:
            # Which series is meant cannot be guessed: a selector must leave exactly one.
            dropped["ambiguous" if items else "missing"] += 1
            raise SourceError(f"{len(items)} series for {metric.metric} (a selector must leave exactly one)")
        if not isinstance(items[0], Mapping):
            dropped["malformed"] += 1
            raise SourceError(f"malformed ExternalMetricValueList for {metric.metric}")
        stamped = _value_and_time(items[0], metric.scale, dropped)
        if stamped is None:
            return
        targets = nodes.names if metric.node_selector is None else self._selected_nodes(metric.node_selector,
                                                                                        nodes, result)
        if targets:
            coverage.matched = 1
        else:
            coverage.miss({"metricName": metric.metric, "nodeSelector": metric.node_selector or ""})
        result.samples.extend(Sample(metric=metric.name, node=node, value=stamped[0], observed_at=stamped[1])
                              for node in sorted(targets))

    def _selected_nodes(self, selector: str, nodes: NodeDirectory, result: FetchResult) -> frozenset[str]:
        body = self._get("/api/v1/nodes", None, result, params={"labelSelector": selector},
                         accept=_METADATA_ONLY)
        names = set()
        for item in _items(body, "node list"):
            metadata = item.get("metadata") if isinstance(item, Mapping) else None
            name = metadata.get("name") if isinstance(metadata, Mapping) else None
            if isinstance(name, str):
                names.add(name)
        return nodes.names & names

    # -- HTTP -----------------------------------------------------------------------------------------
    def _get(self, path: str, selector: str | None, result: FetchResult, *,
             params: Mapping[str, str] | None = None, accept: str = "application/json") -> object:
        query = dict(params or {})
        if selector is not None:
            query["metricLabelSelector"] = selector
        result.queries += 1
        return get_json(self._client, path, timeout=self.config.timeout, max_bytes=self.config.max_response_bytes,
                        params=query, accept=accept)

    def close(self) -> None:
        if self._close_client:
            self._client.close()

    def __repr__(self) -> str:
        return f"CustomMetricsSource(name={self.name!r}, metrics={self.metrics()!r})"


def _items(body: object, what: str) -> list[object]:
    items = body.get("items") if isinstance(body, Mapping) else None
    if not isinstance(items, list):
        raise SourceError(f"malformed {what}: no items list")
    return items


def _value_and_time(item: Mapping[str, Any], scale: float, dropped: Counter[str]) -> tuple[float, float] | None:
    """(scaled value, measured-at) of one MetricValue / ExternalMetricValue, or None (counted in dropped)."""
    value = counted_quantity(item.get("value"), dropped)
    if value is None:
        return None
    observed_at = counted_timestamp(item, dropped)
    if observed_at is None:
        return None
    return float(value) * scale, observed_at


def from_config(name: str, spec: Mapping[str, Any], ctx: SourceContext) -> CustomMetricsSource:
    """Validates `spec` (see adapters.custom_metrics.config), then takes a client from the context's
    Kubernetes client factory (nothing here is a file: ctx.base_dir is not used)."""
    return CustomMetricsSource(name, kube_api_client(ctx.kube_client_factory), parse_config(spec), close_client=True)
