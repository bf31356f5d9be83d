"""Property tests (issue 44, "Bad input, tried systematically"): whatever bytes a telemetry backend answers
(Prometheus, metrics.k8s.io, custom/external metrics, a CMDB), a source's fetch gives values, per-metric
errors and drop counts, or raises SourceError (the whole source is down this round, which the poller counts
and logs). Any other exception is a parser defect. The bodies are arbitrary bytes, JSON of any shape with
awkward leaves, and near-valid answers whose fields hold the wrong types or non-finite, huge and malformed
numbers."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adapters.cmdb import CmdbSource
from adapters.cmdb.config import parse_config as parse_cmdb_config
from adapters.custom_metrics import from_config as custom_metrics_source
from adapters.http_common import SourceError
from adapters.metrics_server import from_config as metrics_server_source
from adapters.prometheus import PrometheusSource
from adapters.prometheus import from_config as prometheus_source
from adapters.prometheus.series import PART_LABEL
from metrics_sched.ports import FetchResult, NodeDirectory
from metrics_sched.telemetry import SourceContext
from metrics_sched.telemetry.batch import samples_of
from tests.local_http import QuietHandler, serving

pytestmark = pytest.mark.unit

NODES = NodeDirectory(names=frozenset({"n1", "n2", "gpu-1"}), by_internal_ip={"10.0.0.4": "n2"},
                      cpu_allocatable={"n1": 4.0, "n2": 0.5}, memory_allocatable={"n1": 8.0 * 2**30, "n2": 0.0})
FUZZ = settings(deadline=None, derandomize=True, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                         HealthCheck.too_slow])

# Leaves that break number and quantity parsers: non-finite, out of float range, past int()'s 4300 digits,
# quantities with odd suffixes, timestamps that are not times, wrong types.
NUMBERS = st.sampled_from([
    "NaN", "+Inf", "-Inf", "inf", "1e309", "-1e309", "1e-400", "9" * 5000, "0x10", "1_0", " 1 ", "", "-0", "12",
    "250m", "1Gi", "1Ki", "3k", "1e3", "1E", "Ki", "m", "1.5.5", "10n", "-5", "1Ei", "99999999999999999999999Ei",
    "2024-05-01T10:00:00Z", "2024-13-45T99:99:99Z", "0001-01-01T00:00:00Z", "9999-12-31T23:59:59.999999999Z",
    "not a time", "\x00", "٣",
])
LEAVES = st.one_of(st.none(), st.booleans(), st.integers(), st.integers(min_value=-(2**80), max_value=2**80),
                   st.floats(allow_nan=False, allow_infinity=False), NUMBERS, st.text(max_size=12))
JSON = st.recursive(LEAVES, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                    st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                    max_leaves=12)
NODE_NAMES = st.sampled_from(["n1", "n2", "gpu-1", "gone", "10.0.0.4", "10.0.0.4:9100", ""])
WRONG = st.one_of(LEAVES, st.lists(LEAVES, max_size=2), st.dictionaries(st.text(max_size=4), LEAVES, max_size=2))


def maybe(value: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """The right value most of the time, else anything at all (a wrong type, a missing field)."""
    return st.one_of(value, value, value, WRONG)


def bodies(near_valid: st.SearchStrategy[Any]) -> st.SearchStrategy[bytes]:
    """Arbitrary bytes, truncated or NaN-bearing JSON, JSON of any shape, and near-valid answers."""
    as_json = near_valid.map(lambda doc: json.dumps(doc).encode())
    return st.one_of(
        st.binary(max_size=64),
        as_json, as_json, as_json,
        JSON.map(lambda doc: json.dumps(doc).encode()),
        st.tuples(as_json, st.integers(min_value=0, max_value=200)).map(lambda t: t[0][:t[1]]),  # cut short
        as_json.map(lambda b: b.replace(b'"NaN"', b"NaN").replace(b'"+Inf"', b"Infinity")),  # bare non-JSON
        as_json.map(lambda b: b.replace(b"\"", b"\xff", 1)),  # not UTF-8
    )


def assert_values(result: FetchResult) -> None:
    for sample in samples_of(result):
        assert sample.node in NODES.names
        assert math.isfinite(sample.value), sample
    assert all(isinstance(message, str) and message for message in result.errors.values())
    assert all(isinstance(count, int) and count > 0 for count in result.dropped.values())


def fetch_or_source_error(fetch: Callable[[NodeDirectory], FetchResult]) -> None:
    try:
        result = fetch(NODES)
    except SourceError as exc:
        assert str(exc).strip()
        return
    assert_values(result)


# -- Prometheus ---------------------------------------------------------------------------------------------

@st.composite
def prometheus_vectors(draw: st.DrawFn) -> Any:
    def element() -> Any:
        labels = {"instance": draw(NODE_NAMES), "node": draw(NODE_NAMES), "gpu": draw(st.sampled_from("01")),
                  PART_LABEL: draw(st.sampled_from(["v", "t", "x"])), "__name__": "m"}
        if draw(st.booleans()):
            labels[draw(st.text(max_size=4))] = draw(maybe(st.text(max_size=4)))
        return {"metric": draw(maybe(st.just(labels))),
                "value": draw(maybe(st.lists(maybe(NUMBERS), min_size=2, max_size=2).map(lambda p: [1.7e9, p[1]])))}
    result = [element() for _ in range(draw(st.integers(min_value=0, max_value=6)))]
    return {"status": draw(maybe(st.just("success"))),
            "data": draw(maybe(st.fixed_dictionaries({"resultType": maybe(st.just("vector")),
                                                      "result": maybe(st.just(result))})))}


class _Answer:
    body = b""


@pytest.fixture(scope="module")
def prometheus() -> Iterator[tuple[PrometheusSource, _Answer]]:
    answer = _Answer()

    class Handler(QuietHandler):
        def do_GET(self) -> None:
            self.reply(200, answer.body)

    with serving(Handler) as url:
        # A preset (devices, recorded series) and a raw selector: both reduction paths, and the reduce plan
        # kept between answers as it is between refreshes.
        src = prometheus_source("prom", {"url": url, "metrics": [{"name": "gpu_temp", "preset": "dcgm_gpu_temp"},
                                                                  {"name": "up", "query": "up"}]},
                                SourceContext(Path(".")))
        try:
            yield src, answer
        finally:
            src.close()


PROMETHEUS_TRIED = 60


@settings(FUZZ, max_examples=PROMETHEUS_TRIED)
@given(body=bodies(prometheus_vectors()))
def test_any_prometheus_answer_gives_values_or_errors(prometheus: tuple[PrometheusSource, _Answer],
                                                      body: bytes) -> None:
    src, answer = prometheus
    answer.body = body
    fetch_or_source_error(src.fetch)


# -- metrics.k8s.io NodeMetricsList --------------------------------------------------------------------------

@st.composite
def node_metrics_lists(draw: st.DrawFn) -> Any:
    items = [{"metadata": maybe(st.fixed_dictionaries({"name": maybe(NODE_NAMES)})),
              "timestamp": maybe(NUMBERS), "window": maybe(st.sampled_from(["30s", "1m", "x"])),
              "usage": maybe(st.fixed_dictionaries({"cpu": maybe(NUMBERS), "memory": maybe(NUMBERS)}))}
             for _ in range(draw(st.integers(min_value=0, max_value=5)))]
    return {"kind": "NodeMetricsList", "apiVersion": "metrics.k8s.io/v1beta1",
            "items": draw(maybe(st.tuples(*(st.fixed_dictionaries(i) for i in items)).map(list)))}


def mock_client(bodies_by_call: Callable[[httpx.Request], bytes]) -> httpx.Client:
    return httpx.Client(base_url="https://kube.test", transport=httpx.MockTransport(
        lambda request: httpx.Response(200, content=bodies_by_call(request))))


METRICS_SERVER_TRIED = 150


@settings(FUZZ, max_examples=METRICS_SERVER_TRIED)
@given(body=bodies(node_metrics_lists()))
def test_any_node_metrics_list_gives_values_or_errors(body: bytes) -> None:
    client = mock_client(lambda _: body)
    src = metrics_server_source("ms", {}, SourceContext(Path("."), lambda: client))
    try:
        fetch_or_source_error(src.fetch)
    finally:
        src.close()


# -- custom.metrics.k8s.io / external.metrics.k8s.io -------------------------------------------------------

@st.composite
def metric_value_lists(draw: st.DrawFn) -> Any:
    items = [st.fixed_dictionaries({
        "describedObject": maybe(st.fixed_dictionaries({"kind": maybe(st.sampled_from(["Node", "Pod"])),
                                                        "name": maybe(NODE_NAMES)})),
        "metricName": maybe(st.just("m")), "metricLabels": maybe(st.dictionaries(st.text(max_size=3), LEAVES)),
        "timestamp": maybe(NUMBERS), "windowSeconds": maybe(st.integers()), "value": maybe(NUMBERS)})
        for _ in range(draw(st.integers(min_value=0, max_value=4)))]
    return {"kind": draw(st.sampled_from(["MetricValueList", "ExternalMetricValueList"])),
            "items": draw(maybe(st.tuples(*items).map(list)))}


CUSTOM_METRICS_TRIED = 100


@settings(FUZZ, max_examples=CUSTOM_METRICS_TRIED)
@given(node_body=bodies(metric_value_lists()), external_body=bodies(metric_value_lists()))
def test_any_custom_or_external_metrics_answer_gives_values_or_errors(node_body: bytes,
                                                                      external_body: bytes) -> None:
    client = mock_client(lambda request: external_body if "external" in request.url.path else node_body)
    src = custom_metrics_source("cm", {"nodeMetrics": [{"name": "power", "metric": "gpu_power_watts",
                                                        "selector": "gpu=all"}],
                                       "externalMetrics": [{"name": "price", "metric": "spot_price",
                                                            "namespace": "default"}]},
                                SourceContext(Path("."), lambda: client))
    try:
        fetch_or_source_error(src.fetch)
    finally:
        src.close()


# -- CMDB ----------------------------------------------------------------------------------------------------

@st.composite
def cmdb_pages(draw: st.DrawFn) -> Any:
    items = [st.fixed_dictionaries({"name": maybe(NODE_NAMES), "v": maybe(st.one_of(NUMBERS, LEAVES)),
                                    "t": maybe(NUMBERS), "nested": maybe(st.fixed_dictionaries({"w": LEAVES}))})
             for _ in range(draw(st.integers(min_value=0, max_value=4)))]
    listed = st.tuples(*items).map(list)
    return {"results": draw(maybe(st.one_of(listed, listed.map(lambda xs: {str(i): x for i, x in enumerate(xs)})))),
            "next": draw(maybe(st.sampled_from([None, "/api/items?page=2", "https://elsewhere.test/x", "::", ""]))),
            "count": draw(maybe(st.integers()))}


CMDB_SPECS = [
    {"itemsPath": "results", "nodeKey": "name", "fields": {"v": "v", "w": {"path": "nested.w", "scale": 1e300}},
     "timestampPath": "t"},
    {"itemsPath": "results", "itemsMode": "dictValues", "nodeKey": "name", "fields": {"v": "v"},
     "pagination": {"type": "next", "nextPath": "next"}, "maxPages": 3},
    {"itemsPath": "results", "nodeKey": "name", "fields": {"v": {"path": "v", "allowNegative": True}},
     "pagination": {"type": "offset", "offsetParam": "offset", "limitParam": "limit", "pageSize": 2},
     "maxPages": 3},
]
CMDB_TRIED = 100


@settings(FUZZ, max_examples=CMDB_TRIED)
@given(spec=st.sampled_from(CMDB_SPECS), body=bodies(cmdb_pages()),
       link=st.sampled_from(["", '<https://cmdb.test/api/items?p=2>; rel="next"', "<>; rel=next", "garbage"]))
def test_any_cmdb_answer_gives_values_or_errors(spec: dict[str, Any], body: bytes, link: str) -> None:
    config = parse_cmdb_config({"url": "https://cmdb.test/api/items", "retries": 0, **spec}, base_dir=Path("."))
    headers = {"Link": link} if link else {}
    src = CmdbSource("cmdb", config, transport=httpx.MockTransport(
        lambda request: httpx.Response(200, content=body, headers=headers)), clock=lambda: 1000.0,
        wall_clock=lambda: 1_800_000_000.0, sleep=lambda _: None)
    try:
        fetch_or_source_error(src.fetch)
    finally:
        src.close()


