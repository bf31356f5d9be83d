"""MetricsServerSource over httpx.MockTransport: exact quantities, utilisation, item timestamps, failures."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path
from typing import Any

import httpx
import pytest

from adapters.http_common import SourceError
from adapters.metrics_server import MetricsServerSource, from_config
from adapters.metrics_server.source import _utilisation
from metrics_sched.config import ConfigError
from metrics_sched.model.quantity import QuantityError, parse_quantity
from metrics_sched.ports import NodeDirectory
from metrics_sched.telemetry import SourceContext
from metrics_sched.telemetry.batch import samples_of

pytestmark = pytest.mark.unit

GIB = 2**30
NODES = NodeDirectory(
    names=frozenset({"n1", "n2", "n3"}),
    by_internal_ip={},
    cpu_allocatable={"n1": 4.0, "n2": 0.5},
    memory_allocatable={"n1": 8.0 * GIB, "n2": 2.0 * GIB},
)
Handler = Callable[[httpx.Request], httpx.Response]


def item(name: str, cpu: object, memory: object, timestamp: object = "2024-05-01T10:00:00Z") -> dict[str, Any]:
    return {"metadata": {"name": name, "creationTimestamp": "2024-05-01T10:00:05Z"}, "timestamp": timestamp,
            "window": "30s", "usage": {"cpu": cpu, "memory": memory}}


def node_metrics(*items: object) -> dict[str, Any]:
    return {"kind": "NodeMetricsList", "apiVersion": "metrics.k8s.io/v1beta1", "metadata": {}, "items": list(items)}


def make(handler: Handler, **config: Any) -> MetricsServerSource:
    client = httpx.Client(base_url="https://kube.test", transport=httpx.MockTransport(handler))
    return from_config("metrics-server", config, SourceContext(Path("."), lambda: client))


def test_utilisation_from_exact_quantities_and_item_timestamps() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json=node_metrics(
            item("n1", "287982098n", "1156520Ki"),
            item("n2", "750m", "1Gi", "2024-05-01T10:00:07.250Z"),
        ))

    src = make(handler)
    result = src.poll(NODES)
    assert result is not None
    assert seen[0].url.path == "/apis/metrics.k8s.io/v1beta1/nodes" and result.queries == 1
    values = {(s.metric, s.node): s.value for s in samples_of(result)}
    assert values == {
        ("node_cpu_utilisation", "n1"): float(Fraction(287982098, 10**9) / 4),
        ("node_memory_utilisation", "n1"): float(Fraction(1156520 * 1024, 8 * GIB)),
        ("node_cpu_utilisation", "n2"): 1.5,  # over allocatable is possible and kept
        ("node_memory_utilisation", "n2"): 0.5,
    }
    stamps = {s.node: s.observed_at for s in samples_of(result)}
    assert stamps == {"n1": 1714557600.0, "n2": 1714557607.25}
    assert result.dropped == {} and result.errors == {} and result.unmatched_series == 0
    assert src.health.consecutive_failures == 0 and src.health.up and src.health.queries == 1


def test_unknown_nodes_and_bad_items_are_counted() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=node_metrics(
            item("gone", "1", "1Gi"),  # not in the directory
            item("n3", "1", "1Gi"),  # known, but no allocatable yet
            item("n1", "lots", None),  # malformed cpu, missing memory
            item("n2", "100m", "1Gi", "yesterday"),  # unusable timestamp
            {"metadata": {}, "usage": {}},
            "junk",
        ))

    result = make(handler).fetch(NODES)
    assert samples_of(result) == []
    assert result.unmatched_series == 1
    assert result.dropped == {"unknown_node": 1, "no_allocatable": 2, "malformed": 3, "missing": 1,
                              "no_timestamp": 1}


def test_metric_names_path_and_interval_are_configurable() -> None:
    paths: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        paths.append(request.url.path)
        return httpx.Response(200, json=node_metrics(item("n1", "2", "4Gi")))

    src = make(handler, cpuMetric="cpu_util", memoryMetric="mem_util", interval="30s",
               path="/apis/custom.metrics.example/v1/nodes")
    assert src.metrics() == ["cpu_util", "mem_util"] and src.interval == 30.0
    assert {(s.metric, s.value) for s in samples_of(src.fetch(NODES))} == {("cpu_util", 0.5), ("mem_util", 0.5)}
    assert paths == ["/apis/custom.metrics.example/v1/nodes"]


@pytest.mark.parametrize(("status", "body"), [
    (404, {"kind": "Status", "message": "the server could not find the requested resource"}),
    (503, {"kind": "Status", "message": "service unavailable"}),
])
def test_an_unavailable_metrics_api_is_a_source_failure(status: int, body: dict[str, Any]) -> None:
    src = make(lambda r: httpx.Response(status, json=body))
    with pytest.raises(SourceError, match=f"HTTP {status}: {body['message']}"):
        src.fetch(NODES)
    assert src.poll(NODES) is None
    assert src.health.consecutive_failures == 1 and f"HTTP {status}" in src.health.last_error


def test_transport_errors_and_non_json_are_source_failures() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    with pytest.raises(SourceError, match="ConnectError"):
        make(refuse).fetch(NODES)
    with pytest.raises(SourceError, match="not JSON"):
        make(lambda r: httpx.Response(200, text="<html>")).fetch(NODES)


def test_a_reply_without_items_fails_both_metrics() -> None:
    src = make(lambda r: httpx.Response(200, json={"kind": "Status"}))
    result = src.poll(NODES)
    assert result is not None and set(result.errors) == {"node_cpu_utilisation", "node_memory_utilisation"}
    assert result.dropped == {"malformed": 1}
    assert src.health.consecutive_failures == 1 and not src.health.up


def test_the_factory_client_is_closed_with_the_source_but_an_injected_one_is_not() -> None:
    made: list[httpx.Client] = []

    def factory() -> httpx.Client:
        made.append(httpx.Client(transport=httpx.MockTransport(lambda r: httpx.Response(200))))
        return made[-1]

    src = from_config("ms", {}, SourceContext(Path("."), factory))
    src.close()
    assert len(made) == 1 and made[0].is_closed
    injected = httpx.Client(transport=httpx.MockTransport(lambda r: httpx.Response(200)))
    MetricsServerSource("ms", injected).close()
    assert not injected.is_closed


@pytest.mark.parametrize(("spec", "field"), [
    ({"cpuMetric": "x", "memoryMetric": "x"}, "memoryMetric"),
    ({"cpuMetric": ""}, "cpuMetric"),
    ({"timeout": "1m"}, "timeout"),
    ({"interval": 0}, "interval"),
    ({"path": "apis/metrics.k8s.io/v1beta1/nodes"}, "path"),
    ({"cpu_metric": "x"}, "cpu_metric"),
])
def test_config_errors_name_the_field(spec: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as info:
        from_config("ms", spec, SourceContext(Path("."), httpx.Client))
    assert info.value.field == field


@pytest.mark.parametrize("raw", ["287982098n", "1156520Ki", "2", "0", "1500m", "3u", "7k", "5Mi", "4Gi", "1Ei",
                                 "99999999999999999999999n", "1.5", "2e3", "-5", "+7", "0.25Gi", " 5", "5 "])
@pytest.mark.parametrize("allocatable", [4.0, 0.1, 3.7, 256.0 * 2**30, 1e-9])
def test_the_plain_quantity_fast_path_equals_exact_fraction_arithmetic(raw: str, allocatable: float) -> None:
    dropped: Counter[str] = Counter()
    got = _utilisation(raw, allocatable, dropped)
    try:
        usage = parse_quantity(raw)
    except QuantityError:
        assert got is None and dropped == {"malformed": 1}
        return
    if usage < 0:
        assert got is None and dropped == {"negative": 1}
    else:
        assert got == float(usage / Fraction(allocatable)) and not dropped


def test_items_sharing_a_timestamp_and_bad_ones_are_still_counted() -> None:
    body = node_metrics(item("n1", "500m", "1Gi"), item("n2", "1", "2Gi"), item("n1", "250m", "1Gi", "yesterday"),
                        item("n2", "x", "-1Gi"))
    src = make(lambda request: httpx.Response(200, json=body))
    result = src.fetch(NODES)
    assert len(samples_of(result)) == 4 and {s.observed_at for s in samples_of(result)} == {1714557600.0}
    assert result.dropped == {"no_timestamp": 1, "malformed": 1, "negative": 1}
