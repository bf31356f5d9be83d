"""MetricsServerSource: node CPU and memory utilisation from metrics.k8s.io NodeMetrics.

One LIST per refresh. At 5,000 nodes the list is megabytes, most of it what the source never reads (an API
server's managedFields, labels, annotations): msgspec decodes a well-formed list straight into the few
typed fields below and skips the rest without building it; a list with anything unexpected in those fields
is decoded as plain JSON (orjson) and checked item by item, a bad item dropped and counted. Usage quantities are
parsed exactly ("287982098n", "1156520Ki"; the plain integer-and-suffix form without Fraction arithmetic)
and divided by the node's allocatable from the NodeDirectory; each sample is stamped with its item's own `timestamp`
(the end of Metrics Server's window), not with when we asked.

The source type `metrics-server` (entry point in pyproject.toml); health and backoff are PolledSource's.
"""

from __future__ import annotations

import math
import re
import time
from collections import Counter
from collections.abc import Callable, Mapping
from fractions import Fraction
from typing import Any

import httpx
import msgspec

from adapters.http_common import (
    counted_quantity,
    counted_timestamp,
    get_body,
    kube_api_client,
    loads_body,
)
from adapters.metrics_server.config import MetricsServerConfig, parse_config
from metrics_sched.ports import FetchResult, NodeDirectory, Sample
from metrics_sched.telemetry import PolledSource, SourceContext
from metrics_sched.telemetry.batch import BatchedFetchResult, MetricBatch

TYPE = "metrics-server"


class _Metadata(msgspec.Struct):
    name: str


class _NodeMetrics(msgspec.Struct):
    """The fields of a NodeMetrics the source reads; everything else in the item is skipped unbuilt."""

    metadata: _Metadata
    usage: dict[str, str]
    timestamp: str | None = None


class _NodeMetricsList(msgspec.Struct):
    items: list[_NodeMetrics]


_LIST = msgspec.json.Decoder(_NodeMetricsList)


class MetricsServerSource(PolledSource):
    """`client` is an httpx.Client already pointed at the API server (base_url, auth, verify). The source
    closes it only when `close_client` is set (from_config does: the client came from its factory)."""

    def __init__(self, name: str, client: httpx.Client, config: MetricsServerConfig | None = None, *,
                 close_client: bool = False, clock: Callable[[], float] = time.time) -> None:
        config = config or MetricsServerConfig()
        super().__init__(name, config.interval, [config.cpu_metric, config.memory_metric], clock=clock)
        self._client = client
        self.config = config
        self._close_client = close_client
        self.health.extra["path"] = config.path

    def fetch(self, nodes: NodeDirectory) -> FetchResult:
        content = self._list()  # SourceError propagates: the whole source is down this round
        result = FetchResult(samples=[], dropped={}, errors={}, queries=1)
        try:
            typed = _LIST.decode(content).items
        except msgspec.DecodeError:  # ValidationError too: JSON with something unexpected in it, or not JSON
            typed = None  # the checks item by item below, after loads_body (which says when it is not JSON)
        if typed is not None:
            return self._typed(typed, nodes, result)
        body = loads_body(self.config.path, content)
        items = body.get("items") if isinstance(body, Mapping) else None
        if not isinstance(items, list):
            message = "malformed NodeMetricsList: no items list"
            result.errors = dict.fromkeys(self.metrics(), message)
            result.dropped = {"malformed": 1}
            return result
        dropped: Counter[str] = Counter()
        stamps: dict[str, float] = {}  # an item's timestamp text -> its time: items share a few
        for item in items:
            self._item(item, nodes, result, dropped, stamps)
        result.dropped = dict(dropped)
        return result

    def _list(self) -> bytes:
        return get_body(self._client, self.config.path, timeout=self.config.timeout,
                        max_bytes=self.config.max_response_bytes)

    def _typed(self, items: list[_NodeMetrics], nodes: NodeDirectory, result: FetchResult) -> BatchedFetchResult:
        """The values of a well-formed list, one batch per metric: the same outcomes as `_item`, without its
        type checks."""
        dropped: Counter[str] = Counter()
        stamps: dict[str, float] = {}  # an item's timestamp text -> its time: items share a few
        names = nodes.names
        cpu_nodes: list[str] = []
        cpu_values: list[float] = []
        cpu_stamps: list[float] = []
        memory_nodes: list[str] = []
        memory_values: list[float] = []
        memory_stamps: list[float] = []
        cpu_metric, memory_metric = self.config.cpu_metric, self.config.memory_metric
        cpu_allocatable, memory_allocatable = nodes.cpu_allocatable, nodes.memory_allocatable
        for item in items:
            node = item.metadata.name
            if node not in names:
                result.unmatched_series += 1
                dropped["unknown_node"] += 1
                continue
            stamp = item.timestamp
            observed_at = stamps.get(stamp) if stamp is not None else None
            if observed_at is None:
                observed_at = counted_timestamp({"timestamp": stamp}, dropped)
                if observed_at is None:
                    continue
                if stamp is not None:
                    stamps[stamp] = observed_at
            usage = item.usage
            value = _utilisation(usage.get("cpu"), cpu_allocatable.get(node), dropped)
            if value is not None:
                cpu_nodes.append(node)
                cpu_values.append(value)
                cpu_stamps.append(observed_at)
            value = _utilisation(usage.get("memory"), memory_allocatable.get(node), dropped)
            if value is not None:
                memory_nodes.append(node)
                memory_values.append(value)
                memory_stamps.append(observed_at)
        # A node listed twice (not what the API does) is stored as Samples are: its last value counts.
        batched = BatchedFetchResult(samples=[], dropped=dict(dropped), errors=result.errors, queries=result.queries,
                                     unmatched_series=result.unmatched_series)
        batched.batches = [MetricBatch.of(cpu_metric, cpu_nodes, cpu_values, cpu_stamps),
                           MetricBatch.of(memory_metric, memory_nodes, memory_values, memory_stamps)]
        return batched

    def _item(self, item: object, nodes: NodeDirectory, result: FetchResult, dropped: Counter[str],
              stamps: dict[str, float]) -> None:
        if not isinstance(item, Mapping):
            dropped["malformed"] += 1
            return
        metadata, usage = item.get("metadata"), item.get("usage")
        node = metadata.get("name") if isinstance(metadata, Mapping) else None
        if not isinstance(node, str) or not isinstance(usage, Mapping):
            dropped["malformed"] += 1
            return
        if node not in nodes.names:
            result.unmatched_series += 1
            dropped["unknown_node"] += 1
            return
        stamp = item.get("timestamp")
        observed_at = stamps.get(stamp) if type(stamp) is str else None
        if observed_at is None:
            observed_at = counted_timestamp(item, dropped)
            if observed_at is None:
                return
            if type(stamp) is str:
                stamps[stamp] = observed_at
        for metric, resource, allocatable in (
            (self.config.cpu_metric, "cpu", nodes.cpu_allocatable),
            (self.config.memory_metric, "memory", nodes.memory_allocatable),
        ):
            value = _utilisation(usage.get(resource), allocatable.get(node), dropped)
            if value is not None:
                result.samples.append(Sample(metric=metric, node=node, value=value, observed_at=observed_at))

    def close(self) -> None:
        if self._close_client:
            self._client.close()

    def __repr__(self) -> str:
        return f"MetricsServerSource(name={self.name!r}, path={self.config.path!r})"


# The quantities Metrics Server writes: an integer with an optional suffix ("287982098n", "1156520Ki", "2").
_PLAIN_QUANTITY = re.compile(r"([0-9]+)(n|u|m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?")
_SUFFIX: dict[str | None, tuple[int, int]] = {  # suffix -> (numerator, denominator) of its factor
    None: (1, 1), "n": (1, 10**9), "u": (1, 10**6), "m": (1, 10**3),
    "k": (10**3, 1), "M": (10**6, 1), "G": (10**9, 1), "T": (10**12, 1), "P": (10**15, 1), "E": (10**18, 1),
    "Ki": (2**10, 1), "Mi": (2**20, 1), "Gi": (2**30, 1), "Ti": (2**40, 1), "Pi": (2**50, 1), "Ei": (2**60, 1),
}


def _utilisation(raw: object, allocatable: float | None, dropped: Counter[str]) -> float | None:
    if type(raw) is str and allocatable is not None and math.isfinite(allocatable) and allocatable > 0:
        plain = _PLAIN_QUANTITY.fullmatch(raw)
        if plain is not None:
            # Exact without Fraction: usage = digits * num / den and allocatable = p / q exactly, and Python's
            # int / int is correctly rounded, so this equals float(Fraction(usage) / Fraction(allocatable)).
            num, den = _SUFFIX[plain[2]]
            p, q = allocatable.as_integer_ratio()
            return (int(plain[1]) * num * q) / (den * p)
    usage = counted_quantity(raw, dropped)
    if usage is None:
        return None
    if usage < 0:
        dropped["negative"] += 1
        return None
    if allocatable is None or not (math.isfinite(allocatable) and allocatable > 0):
        dropped["no_allocatable"] += 1
        return None
    return float(usage / Fraction(allocatable))


def from_config(name: str, spec: Mapping[str, Any], ctx: SourceContext) -> MetricsServerSource:
    """Validates `spec` (see adapters.metrics_server.config), then takes a client from the context's
    Kubernetes client factory (nothing here is a file: ctx.base_dir is not used)."""
    return MetricsServerSource(name, kube_api_client(ctx.kube_client_factory), parse_config(spec), close_client=True)
