"""CustomMetricsSource: MetricValueLists (v1beta2, v1beta1) and ExternalMetricValueLists over MockTransport
and against the emulator's Custom Metrics APIs; quantities, scale, item timestamps, drops, coverage, config."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import httpx
import pytest

from adapters.custom_metrics import CustomMetricsSource, from_config
from adapters.custom_metrics.source import UNMATCHED_SHOWN
from devcluster.emulator import EmulatorControl, EmulatorServer, serve
from metrics_sched.config import ConfigError
from metrics_sched.ports import NodeDirectory, SeriesMatching
from metrics_sched.telemetry import SourceContext
from metrics_sched.telemetry.registry import SourceRegistry

pytestmark = pytest.mark.unit

NODES = NodeDirectory(names=frozenset({"n1", "n2", "n3"}), by_internal_ip={}, cpu_allocatable={},
                      memory_allocatable={})
STAMP = "2024-05-01T10:00:00Z"
T0 = 1714557600.0
Handler = Callable[[httpx.Request], httpx.Response]


def value(node: str, raw: object, timestamp: object = STAMP, kind: str = "Node") -> dict[str, Any]:
    return {"describedObject": {"kind": kind, "name": node, "apiVersion": "/v1"}, "metric": {"name": "m"},
            "timestamp": timestamp, "windowSeconds": 60, "value": raw}


def value_list(*items: object) -> dict[str, Any]:
    return {"kind": "MetricValueList", "apiVersion": "custom.metrics.k8s.io/v1beta2", "metadata": {},
            "items": list(items)}


def make(handler: Handler, **config: Any) -> CustomMetricsSource:
    client = httpx.Client(base_url="https://kube.test", transport=httpx.MockTransport(handler))
    return from_config("custom", config, SourceContext(Path("."), lambda: client))


def test_node_values_are_exact_quantities_scaled_and_stamped_by_their_items() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json=value_list(value("n1", "250500m"), value("n2", "2k", "2024-05-01T10:00:07.5Z"),
                                                   value("n3", 3)))

    src = make(handler, nodeMetrics=[{"name": "gpu_power_kw", "metric": "gpu_power_watts", "scale": 0.001,
                                      "selector": "gpu=all"}])
    result = src.poll(NODES)
    assert result is not None and result.errors == {} and result.dropped == {} and result.queries == 1
    assert unquote(seen[0].url.path) == "/apis/custom.metrics.k8s.io/v1beta2/nodes/*/gpu_power_watts"
    assert seen[0].url.params["metricLabelSelector"] == "gpu=all"
    got = {s.node: (s.metric, s.observed_at) for s in result.samples}
    assert got == {"n1": ("gpu_power_kw", T0), "n2": ("gpu_power_kw", T0 + 7.5), "n3": ("gpu_power_kw", T0)}
    assert {s.node: s.value for s in result.samples} == pytest.approx({"n1": 0.2505, "n2": 2.0, "n3": 0.003})
    assert src.health.up
    assert src.health.series_matching["gpu_power_kw"] == SeriesMatching({"describedObject": 3}, 0, ())


def test_bad_items_are_dropped_and_counted_and_unknown_nodes_named() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=value_list(
            value("gone", "1"),  # no such node
            value("n1", "lots"),  # not a quantity
            value("n2", "1", "yesterday"),  # unusable timestamp
            value("n3", None),  # no value
            value("n3", "1", kind="Pod"),  # not a node
            value("n1", True),
            "junk",
            value("n3", "5"), value("n3", "6"),  # a second series for a node: the first stands
        ))

    src = make(handler, nodeMetrics=[{"name": "m"}])
    result = src.fetch(NODES)
    assert [(s.node, s.value) for s in result.samples] == [("n3", 5.0)]
    assert result.unmatched_series == 1
    assert result.dropped == {"unknown_node": 1, "malformed": 4, "no_timestamp": 1, "missing": 1, "duplicate": 1}
    assert result.series_matching["m"] == SeriesMatching({"describedObject": 1}, 1, ({"kind": "Node", "name": "gone"},))


def test_unmatched_names_shown_are_bounded() -> None:
    items = [value(f"x{i}", "1") for i in range(UNMATCHED_SHOWN + 5)]
    src = make(lambda r: httpx.Response(200, json=value_list(*items)), nodeMetrics=[{"name": "m"}])
    result = src.fetch(NODES)
    assert result.unmatched_series == UNMATCHED_SHOWN + 5
    matching = result.series_matching["m"]
    assert matching.unmatched == UNMATCHED_SHOWN + 5 and len(matching.unmatched_examples) == UNMATCHED_SHOWN


def test_one_metric_failing_is_that_metrics_error_and_all_failing_is_down() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if unquote(request.url.path).endswith("/missing"):
            return httpx.Response(404, json={"kind": "Status", "message": "the server could not find the metric"})
        return httpx.Response(200, json=value_list(value("n1", "1")))

    src = make(handler, nodeMetrics=[{"name": "ok"}, {"name": "missing"}])
    result = src.poll(NODES)
    assert result is not None and [s.metric for s in result.samples] == ["ok"]
    assert set(result.errors) == {"missing"} and "HTTP 404: the server could not find the metric" in result.errors[
        "missing"]
    assert src.health.up

    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    down = make(refuse, nodeMetrics=[{"name": "a"}, {"name": "b"}])
    assert down.poll(NODES) is not None and not down.health.up
    assert "ConnectError" in down.health.last_error
    garbled = make(lambda r: httpx.Response(200, text="<html>"), nodeMetrics=[{"name": "a"}])
    assert "not JSON" in garbled.fetch(NODES).errors["a"]
    empty = make(lambda r: httpx.Response(200, json={"kind": "Status"}), nodeMetrics=[{"name": "a"}])
    assert "no items list" in empty.fetch(NODES).errors["a"]


def test_v1beta1_is_asked_for_when_configured() -> None:
    paths: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        paths.append(unquote(request.url.path))
        item = value("n1", "7")
        del item["metric"]
        return httpx.Response(200, json=value_list({**item, "metricName": "m"}))

    src = make(handler, apiVersion="v1beta1", nodeMetrics=[{"name": "m"}])
    assert [(s.node, s.value) for s in src.fetch(NODES).samples] == [("n1", 7.0)]
    assert paths == ["/apis/custom.metrics.k8s.io/v1beta1/nodes/*/m"]


def external_list(*values: object) -> dict[str, Any]:
    return {"kind": "ExternalMetricValueList", "apiVersion": "external.metrics.k8s.io/v1beta1", "metadata": {},
            "items": [{"metricName": "spot_price", "metricLabels": {}, "timestamp": STAMP, "value": v}
                      for v in values]}


def test_an_external_value_goes_to_every_node_or_to_the_selected_ones() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if request.url.path == "/api/v1/nodes":
            return httpx.Response(200, json={"kind": "PartialObjectMetadataList", "items": [
                {"metadata": {"name": "n2"}}, {"metadata": {"name": "elsewhere"}}]})
        return httpx.Response(200, json=external_list("1250m"))

    src = make(handler, externalMetrics=[
        {"name": "spot_price_everywhere", "metric": "spot_price"},
        {"name": "spot_price", "namespace": "pricing", "selector": "zone=z1",
         "nodeSelector": "node.kubernetes.io/lifecycle=spot"},
    ])
    result = src.fetch(NODES)
    assert result.errors == {} and result.queries == 3
    got = sorted((s.metric, s.node, s.value, s.observed_at) for s in result.samples)
    everywhere = [("spot_price_everywhere", n, 1.25, T0) for n in ("n1", "n2", "n3")]
    assert got == [("spot_price", "n2", 1.25, T0), *everywhere]
    assert [r.url.path for r in seen] == ["/apis/external.metrics.k8s.io/v1beta1/namespaces/default/spot_price",
                                          "/apis/external.metrics.k8s.io/v1beta1/namespaces/pricing/spot_price",
                                          "/api/v1/nodes"]
    assert seen[1].url.params["metricLabelSelector"] == "zone=z1"
    assert seen[2].url.params["labelSelector"] == "node.kubernetes.io/lifecycle=spot"
    assert "PartialObjectMetadataList" in seen[2].headers["Accept"]
    assert result.series_matching == {"spot_price": SeriesMatching({"nodeSelector": 1}, 0, ()),
                                      "spot_price_everywhere": SeriesMatching({"all_nodes": 1}, 0, ())}


@pytest.mark.parametrize(("values", "reason"), [((), "missing"), (("1", "2"), "ambiguous")])
def test_an_external_metric_needs_exactly_one_series(values: tuple[str, ...], reason: str) -> None:
    src = make(lambda r: httpx.Response(200, json=external_list(*values)), externalMetrics=[{"name": "spot_price"}])
    result = src.fetch(NODES)
    assert result.samples == [] and result.dropped == {reason: 1}
    assert f"{len(values)} series" in result.errors["spot_price"]


@pytest.fixture
def emulator() -> Iterator[EmulatorServer]:
    server = serve("127.0.0.1", 0).start()
    try:
        yield server
    finally:
        server.close()


@pytest.mark.parametrize("version", ["v1beta2", "v1beta1"])
def test_against_the_emulators_custom_metrics_api(emulator: EmulatorServer, version: str) -> None:
    with EmulatorControl(emulator.url) as control:
        control.set_custom_metric("gpu_power_watts", {"n1": 250, "n2": 310.5, "ghost": 1,
                                                      "n3": {"value": "junk", "timestamp": T0}})
        control.set_external_metric("default", "spot_price", [{"value": 0.75, "timestamp": T0 + 1,
                                                               "labels": {"zone": "z1"}}])
    client = httpx.Client(base_url=emulator.url)
    spec = {"apiVersion": version, "nodeMetrics": [{"name": "gpu_power", "metric": "gpu_power_watts"}],
            "externalMetrics": [{"name": "spot", "metric": "spot_price", "selector": "zone=z1"}]}
    src = from_config("custom", spec, SourceContext(Path("."), lambda: client))
    try:
        result = src.poll(NODES)
    finally:
        src.close()
    assert result is not None and result.errors == {}
    got = {(s.metric, s.node): s.value for s in result.samples}
    assert got == {("gpu_power", "n1"): 250.0, ("gpu_power", "n2"): 310.5,
                   ("spot", "n1"): 0.75, ("spot", "n2"): 0.75, ("spot", "n3"): 0.75}
    assert result.dropped == {"unknown_node": 1, "malformed": 1}
    assert {s.observed_at for s in result.samples if s.metric == "spot"} == {T0 + 1}
    assert result.series_matching["gpu_power"] == SeriesMatching({"describedObject": 2}, 1,
                                                                 ({"kind": "Node", "name": "ghost"},))


def test_the_type_is_registered() -> None:
    client = httpx.Client(transport=httpx.MockTransport(lambda r: httpx.Response(200)))
    spec = {"name": "cm", "type": "custom-metrics", "nodeMetrics": [{"name": "m"}]}
    [src] = SourceRegistry.from_entry_points().build_all([spec], SourceContext(Path("."), lambda: client))
    assert isinstance(src, CustomMetricsSource) and src.metrics() == ["m"]
    src.close()


@pytest.mark.parametrize(("spec", "field"), [
    ({}, "nodeMetrics"),
    ({"nodeMetrics": [{"name": "a"}], "externalMetrics": [{"name": "a"}]}, "externalMetrics[0].name"),
    ({"nodeMetrics": [{"metric": "a"}]}, "nodeMetrics[0].name"),
    ({"nodeMetrics": [{"name": "a", "metric": "x/y"}]}, "nodeMetrics[0].metric"),
    ({"nodeMetrics": [{"name": "a", "scale": 0}]}, "nodeMetrics[0].scale"),
    ({"nodeMetrics": [{"name": "a", "nodeSelector": "x"}]}, "nodeMetrics[0].nodeSelector"),
    ({"nodeMetrics": [{"name": "a"}], "apiVersion": "v1"}, "apiVersion"),
    ({"nodeMetrics": [{"name": "a"}], "timeout": "1m"}, "timeout"),
    ({"nodeMetrics": {"name": "a"}}, "nodeMetrics"),
    ({"externalMetrics": [{"name": "a", "namespace": ""}]}, "externalMetrics[0].namespace"),
    ({"nodeMetrics": [{"name": "a"}], "url": "http://x"}, "url"),
])
def test_config_errors_name_the_field(spec: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as info:
        from_config("cm", spec, SourceContext(Path("."), httpx.Client))
    assert info.value.field == field


def test_an_external_value_whose_node_selector_matches_no_known_node_is_shown_unmatched() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/api/v1/nodes":
            return httpx.Response(200, json={"kind": "PartialObjectMetadataList", "items": [
                {"metadata": {"name": "elsewhere"}}]})
        return httpx.Response(200, json=external_list("3"))

    src = make(handler, externalMetrics=[{"name": "spot_price", "nodeSelector": "lifecycle=spot"}])
    result = src.fetch(NODES)
    assert result.samples == [] and result.errors == {}
    assert result.series_matching["spot_price"] == SeriesMatching(
        {}, 1, ({"metricName": "spot_price", "nodeSelector": "lifecycle=spot"},))
