"""PrometheusSource against a tiny in-process Prometheus API on 127.0.0.1 (a thread, no subprocess).

The fake answers the combined value+timestamp query the way Prometheus does: `metrics_sched_part="t"`
series carry sample timestamps, `"v"` series the values, every element stamped with the evaluation time.
"""

from __future__ import annotations

import base64
import json
import logging
import math
import socket
import ssl
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from adapters.http_common import SourceError
from adapters.prometheus import PRESETS, PrometheusSource, from_config, node_names
from adapters.prometheus.config import is_plain_selector
from adapters.prometheus.node_names import BUILT_IN_LABELS, NodeIndex, strip_port
from adapters.prometheus.series import PART_LABEL, combined_query
from devcluster.certs import generate_pki
from metrics_sched.config import ConfigError
from metrics_sched.ports import NodeDirectory
from metrics_sched.telemetry import SourceContext
from metrics_sched.telemetry.batch import samples_of
from tests.local_http import QuietHandler, serving

pytestmark = pytest.mark.unit

EVAL_TIME = 2_000_000_000.0  # what Prometheus stamps every element with: useless as an age
T_SAMPLE = 1_999_999_990.0
TOKEN = "prom-s3cr3t-token-0123456789"
PASSWORD = "hunter2-but-longer-0987"

Labels = dict[str, str]
Reply = tuple[int, Any]  # status, JSON body (or bytes for a raw body)


@dataclass
class Seen:
    query: str
    headers: dict[str, str]


@dataclass
class FakePrometheus:
    url: str = ""
    seen: list[Seen] = field(default_factory=list)
    # query -> reply; the first responder whose key is a substring of the query answers.
    replies: dict[str, Reply | Callable[[], Reply]] = field(default_factory=dict)

    def answer(self, query: str) -> Reply:
        for key, reply in self.replies.items():
            if key in query:
                return reply() if callable(reply) else reply
        return 200, vector([], [])


def vector(values: list[tuple[Labels, float | str]], stamps: list[tuple[Labels, float]]) -> dict[str, Any]:
    result: list[dict[str, Any]] = [{"metric": {**labels, PART_LABEL: "t"}, "value": [EVAL_TIME, repr(float(ts))]}
                                    for labels, ts in stamps]
    result += [{"metric": {"__name__": "m", **labels, PART_LABEL: "v"},
                "value": [EVAL_TIME, value if isinstance(value, str) else repr(float(value))]}
               for labels, value in values]
    return {"status": "success", "data": {"resultType": "vector", "result": result}}


def same_stamps(values: list[tuple[Labels, float | str]], ts: float = T_SAMPLE) -> dict[str, Any]:
    return vector(values, [(labels, ts) for labels, _ in values])


def _handler(fake: FakePrometheus) -> type[QuietHandler]:
    class Handler(QuietHandler):
        def do_GET(self) -> None:
            parts = urlsplit(self.path)
            query = parse_qs(parts.query).get("query", [""])[0]
            fake.seen.append(Seen(query, dict(self.headers.items())))
            status, body = (fake.answer(query) if parts.path in ("/api/v1/query", "/api/v1/query_range")
                            else (404, b"not found"))
            self.reply(status, body if isinstance(body, bytes) else json.dumps(body).encode())

    return Handler


def _serve(fake: FakePrometheus, context: ssl.SSLContext | None = None) -> Iterator[FakePrometheus]:
    with serving(_handler(fake), context) as url:
        fake.url = url
        yield fake


@pytest.fixture
def prom() -> Iterator[FakePrometheus]:
    yield from _serve(FakePrometheus())


NODES = NodeDirectory(
    names=frozenset({"n1", "n2", "n3", "n4", "n5", "n6", "n7", "gpu-1"}),
    by_internal_ip={"10.0.0.4": "n4", "fd00::6": "n6", "10.0.0.7": "n7"},
    cpu_allocatable={},
    memory_allocatable={},
)


def source(prom: FakePrometheus, metrics: list[dict[str, Any]], tmp_path: Path | None = None,
           **extra: Any) -> PrometheusSource:
    spec = {"url": prom.url, "metrics": metrics, **extra}
    return from_config("prom", spec, SourceContext(tmp_path or Path(".")))


def by_node(result_samples: list[Any], metric: str) -> dict[str, Any]:
    return {s.node: s for s in result_samples if s.metric == metric}


# -- queries ---------------------------------------------------------------------------------------


def test_each_metric_is_one_instant_query_carrying_values_and_their_timestamps(prom: FakePrometheus) -> None:
    src = source(prom, [{"name": "gpu_temp", "preset": "dcgm_gpu_temp"},
                        {"name": "load", "preset": "node_load_per_cpu"}])
    result = src.fetch(NODES)
    assert result.queries == 2
    # (the queries of one refresh run concurrently, so their order is not fixed)
    assert sorted(s.query for s in prom.seen) == sorted([
        combined_query(*PRESETS["dcgm_gpu_temp"].render()),
        combined_query(PRESETS["node_load_per_cpu"].query, "timestamp(node_load1)"),
    ])
    gpu_query = src.query_for("gpu_temp")
    assert gpu_query in [s.query for s in prom.seen]
    assert f'"{PART_LABEL}", "t"' in gpu_query and f'"{PART_LABEL}", "v"' in gpu_query


def test_presets_keep_node_labels_and_time_computed_values_from_raw_selectors() -> None:
    every_node_label = ", ".join(BUILT_IN_LABELS)
    for name, preset in PRESETS.items():
        query, timestamp_query = preset.render()
        # An aggregation keeps every label the node resolver reads (`by` them, or `without` others).
        assert f" by ({every_node_label}) (" in query or " by (" not in query, name
        assert (" by (" in query) == (" by (" in timestamp_query), name  # both halves keep the same labels
        assert timestamp_query.count("timestamp(") == 1, name
    # Configured node labels come first and join the `by` list.
    query, timestamp_query = PRESETS["dcgm_gpu_temp"].render(("k8s_node", "node"))
    assert query == f"max by (k8s_node, {every_node_label}) (DCGM_FI_DEV_GPU_TEMP < 1e+14)"
    assert timestamp_query == f"min by (k8s_node, {every_node_label}) (timestamp(DCGM_FI_DEV_GPU_TEMP))"
    assert PRESETS["opencost_node_hourly_cost"].render() == (
        f"max by ({every_node_label}) (node_total_hourly_cost)",
        f"min by ({every_node_label}) (timestamp(node_total_hourly_cost))")
    assert PRESETS["node_cpu_utilisation"].timestamp_query == \
        'min without (cpu, mode) (timestamp(node_cpu_seconds_total{mode="idle"}))'
    assert PRESETS["dcgm_gpu_util"].aggregation == "avg"
    assert PRESETS["dcgm_gpu_temp"].aggregation == "max"
    assert PRESETS["dcgm_gpu_power"].aggregation == "sum"


@pytest.mark.parametrize(("query", "plain"), [
    ("up", True), ('DCGM_FI_DEV_GPU_TEMP{gpu="0", modelName=~"A.*"}', True), ('{__name__="x"}', True),
    ('x{a="}"}', True), ("rate(x[1m])", False), ("x / y", False), ("sum(x)", False), ("", False),
])
def test_plain_selector_detection(query: str, plain: bool) -> None:
    assert is_plain_selector(query) is plain


# -- node names ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("instance", "host"), [
    ("10.0.0.1:9100", "10.0.0.1"), ("node-a:9100", "node-a"), ("[fd00::6]:9100", "fd00::6"),
    ("fd00::6", "fd00::6"), ("node-a", "node-a"), ("node-a:metrics", "node-a:metrics"),
])
def test_strip_port(instance: str, host: str) -> None:
    assert strip_port(instance) == host


def test_node_resolution_order_port_strip_internal_ip_and_unmatched(prom: FakePrometheus) -> None:
    series: list[tuple[Labels, float | str]] = [
        ({"node": "n1", "hostname": "n2", "instance": "10.0.0.4:9100"}, 1),  # `node` comes first
        ({"hostname": "n2"}, 2),
        ({"Hostname": "n3"}, 3),  # DCGM before 4.6
        ({"instance": "10.0.0.4:9100"}, 4),  # kube-prometheus-stack: node IP + port
        ({"instance": "n5:9100"}, 5),  # kube-prometheus: node name + port
        ({"instance": "[fd00::6]:9100"}, 6),
        ({"hostname": "dcgm-exporter-pod-x", "instance": "10.0.0.7:9100"}, 7),  # unknown value: keep looking
        ({"instance": "10.9.9.9:9100"}, 8),  # no such node
        ({"node": "gone-node"}, 9),
        ({"job": "no-node-label"}, 10),
    ]
    prom.replies["x_metric"] = (200, same_stamps(series))
    result = source(prom, [{"name": "x", "query": "x_metric", "aggregation": "last"}]).fetch(NODES)
    assert {s.node: s.value for s in samples_of(result)} == {
        "n1": 1, "n2": 2, "n3": 3, "n4": 4, "n5": 5, "n6": 6, "n7": 7}
    assert result.unmatched_series == 3
    assert result.dropped == {"unknown_node": 2, "no_node_label": 1}


def test_per_metric_node_labels_override_the_source_order(prom: FakePrometheus) -> None:
    prom.replies["x_metric"] = (200, same_stamps([({"node": "n1", "instance": "10.0.0.4:9100"}, 1)]))
    src = source(prom, [{"name": "a", "query": "x_metric"},
                        {"name": "b", "query": "x_metric", "nodeLabels": ["instance"]}],
                 nodeLabels=["node"])
    result = src.fetch(NODES)
    assert [(s.metric, s.node) for s in samples_of(result)] == [("a", "n1"), ("b", "n4")]


# -- aggregation, checks and timestamps ------------------------------------------------------------


def gpus(values: list[float | str], host: str = "gpu-1") -> list[tuple[Labels, float | str]]:
    return [({"gpu": str(i), "UUID": f"GPU-{i}", "hostname": host}, v) for i, v in enumerate(values)]


def test_presets_aggregate_a_nodes_gpus(prom: FakePrometheus) -> None:
    prom.replies["DCGM_FI_DEV_GPU_TEMP"] = (200, same_stamps(gpus([61, 67, 91, 58, 60, 62, 64, 66])))
    prom.replies["DCGM_FI_DEV_GPU_UTIL"] = (200, same_stamps(gpus([10, 20, 30, 40])))
    prom.replies["DCGM_FI_DEV_POWER_USAGE"] = (200, same_stamps(gpus([100.5, 200.25, 50])))
    src = source(prom, [{"name": "temp", "preset": "dcgm_gpu_temp"},
                        {"name": "util", "preset": "dcgm_gpu_util"},
                        {"name": "power", "preset": "dcgm_gpu_power"},
                        {"name": "coolest", "preset": "dcgm_gpu_temp", "aggregation": "min"}])
    result = src.fetch(NODES)
    assert {s.metric: s.value for s in samples_of(result)} == {"temp": 91, "util": 25, "power": 350.75, "coolest": 58}
    assert all(s.node == "gpu-1" and s.observed_at == T_SAMPLE for s in samples_of(result))
    assert result.errors == {} and result.dropped == {}


def test_scale_for_dcgm_ratio_utilisation(prom: FakePrometheus) -> None:
    prom.replies["DCGM_FI_DEV_GPU_UTIL"] = (200, same_stamps(gpus([0.25, 0.75])))
    result = source(prom, [{"name": "util", "preset": "dcgm_gpu_util", "scale": 100}]).fetch(NODES)
    assert [s.value for s in samples_of(result)] == [50.0]


def test_observed_at_is_the_samples_own_timestamp_and_a_combined_value_is_as_old_as_its_oldest_input(
        prom: FakePrometheus) -> None:
    series = gpus([60, 90, 70])
    stamps = [(series[0][0], 1000.0), (series[1][0], 1010.0), (series[2][0], 1020.0)]
    prom.replies["DCGM_FI_DEV_GPU_TEMP"] = (200, vector(series, stamps))
    src = source(prom, [{"name": "hottest", "preset": "dcgm_gpu_temp"},
                        {"name": "newest", "preset": "dcgm_gpu_temp", "aggregation": "last"}])
    samples = {s.metric: s for s in samples_of(src.fetch(NODES))}
    assert (samples["hottest"].value, samples["hottest"].observed_at) == (90, 1000.0)
    assert (samples["newest"].value, samples["newest"].observed_at) == (70, 1020.0)
    assert all(s.observed_at != EVAL_TIME for s in samples.values())


def test_a_value_whose_labels_differ_from_its_timestamp_series_takes_its_nodes_oldest_time(
        prom: FakePrometheus) -> None:
    values: list[tuple[Labels, float | str]] = [({"instance": "n1:9100"}, 0.5), ({"instance": "n2:9100"}, 0.7)]
    stamps = [({"instance": "n1:9100", "job": "node"}, 1500.0), ({"instance": "n1:9100", "job": "other"}, 1400.0)]
    prom.replies["load"] = (200, vector(values, stamps))
    result = source(prom, [{"name": "load", "query": "load", "timestampQuery": "timestamp(up)"}]).fetch(NODES)
    assert [(s.node, s.observed_at) for s in samples_of(result)] == [("n1", 1400.0)]
    assert result.dropped == {"no_timestamp": 1}


def test_nan_inf_negative_and_sentinels_are_dropped_and_counted(prom: FakePrometheus) -> None:
    prom.replies["DCGM_FI_DEV_POWER_USAGE"] = (200, same_stamps(
        gpus(["NaN", "+Inf", "-Inf", -5, "9223372036854775794", "140737488355328", 300]) + gpus(["NaN"], "n1")))
    prom.replies["custom"] = (200, same_stamps([({"node": "n2"}, -3), ({"node": "n3"}, 2e15), ({"node": "n4"}, 9e14)]))
    src = source(prom, [{"name": "power", "preset": "dcgm_gpu_power"},
                        {"name": "delta", "query": "custom", "allowNegative": True}])
    result = src.fetch(NODES)
    assert {(s.metric, s.node): s.value for s in samples_of(result)} == {
        ("power", "gpu-1"): 300, ("delta", "n2"): -3, ("delta", "n4"): 9e14}
    assert result.dropped == {"nan": 2, "inf": 2, "negative": 1, "sentinel": 3}


def test_a_node_whose_every_series_is_refused_has_no_sample(prom: FakePrometheus) -> None:
    prom.replies["DCGM_FI_DEV_GPU_TEMP"] = (200, same_stamps(gpus(["NaN", "NaN"])))
    result = source(prom, [{"name": "temp", "preset": "dcgm_gpu_temp"}]).fetch(NODES)
    assert samples_of(result) == [] and result.dropped == {"nan": 2}


def test_malformed_elements_are_counted_and_the_rest_used(prom: FakePrometheus) -> None:
    body = same_stamps([({"node": "n1"}, 1)])
    body["data"]["result"] += [{"metric": {"node": "n2", PART_LABEL: "v"}, "value": [EVAL_TIME, "abc"]},
                               {"metric": {"node": "n2"}, "values": [[1, "1"]]}, "junk"]
    prom.replies["x"] = (200, body)
    result = source(prom, [{"name": "x", "query": "x"}]).fetch(NODES)
    assert [s.node for s in samples_of(result)] == ["n1"]
    assert result.dropped == {"malformed": 3}


def test_the_decoded_answer_is_used_without_copies_yet_odd_elements_are_still_sorted_out(
        prom: FakePrometheus) -> None:
    # Elements are taken from the decoded body as they are; only an element with a label that is not a string
    # is copied (with string labels), and one whose value is not a number is counted, not fatal.
    body = same_stamps([({"node": "n1"}, 1), ({"hostname": "n2"}, "NaN"), ({"node": "n3"}, "+Inf")])
    body["data"]["result"] += [
        {"metric": {"node": 4, PART_LABEL: "v"}, "value": [EVAL_TIME, "4"]},  # node "4": unknown, counted
        {"metric": {"node": "n5", PART_LABEL: "v"}, "value": [EVAL_TIME, None]},  # no number
        {"metric": {"node": "n5", PART_LABEL: "v"}, "value": "5"},  # not a pair
        {"metric": ["node", "n5"], "value": [EVAL_TIME, "5"]},  # labels not a mapping
        {"metric": {"node": "n6", PART_LABEL: "x"}, "value": [EVAL_TIME, "6"]},  # neither half
    ]
    prom.replies["x"] = (200, body)
    src = source(prom, [{"name": "x", "query": "x"}])
    result = src.fetch(NODES)
    assert [(s.node, s.value, s.observed_at) for s in samples_of(result)] == [("n1", 1.0, T_SAMPLE)]
    assert result.dropped == {"malformed": 4, "nan": 1, "inf": 1, "unknown_node": 1}
    matching = result.series_matching["x"]
    assert matching.matched == {"node": 2, "hostname": 1} and matching.unmatched == 1
    assert matching.unmatched_examples == ({"node": "4"},)
    # The same series again: node resolution is remembered per node-label values, with the same outcome.
    assert src.fetch(NODES).dropped == result.dropped


def test_unmatched_examples_keep_the_metric_name_but_not_the_part_marker(prom: FakePrometheus) -> None:
    prom.replies["x"] = (200, same_stamps([({"node": "elsewhere", "job": "j"}, 1)]))
    result = source(prom, [{"name": "x", "query": "x"}]).fetch(NODES)
    assert result.series_matching["x"].unmatched_examples == ({"__name__": "m", "node": "elsewhere", "job": "j"},)


def test_remembered_node_resolution_matches_resolve_and_stays_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    index = NodeIndex(NODES)
    series: list[dict[str, str]] = [
        {"node": "n1"}, {"instance": "10.0.0.4:9100"}, {"instance": "n5:9100", "job": "a"},
        {"instance": "n5:9100", "job": "b"}, {"hostname": "nope"}, {"job": "x"}, {"k8s": "n2"}]
    for configured in ((), ("k8s",)):
        for labels in series + series:
            assert index.resolve_cached(labels, configured) == index.resolve(labels, configured)
    monkeypatch.setattr(node_names, "RESOLVED_LIMIT", 3)
    small = NodeIndex(NODES)
    for i in range(10):
        small.resolve_cached({"node": f"n{i}"})
        assert len(small._resolved) <= 3


# -- failures --------------------------------------------------------------------------------------


def test_one_failing_metric_does_not_stop_the_others(prom: FakePrometheus) -> None:
    prom.replies["bad_promql"] = (400, {"status": "error", "errorType": "bad_data",
                                        "error": "1:7: parse error: unexpected end of input"})
    prom.replies["overloaded"] = (503, {"status": "error", "errorType": "unavailable", "error": "too many queries"})
    prom.replies["not_json"] = (200, b"<html>proxy error</html>")
    prom.replies["matrix"] = (200, {"status": "success", "data": {"resultType": "scalar",
                                                                  "result": [EVAL_TIME, "1"]}})
    prom.replies["good"] = (200, same_stamps([({"node": "n1"}, 42)]))
    metrics = [{"name": name, "query": name} for name in ("bad_promql", "overloaded", "not_json", "matrix", "good")]
    src = source(prom, metrics)
    result = src.fetch(NODES)
    assert [(s.metric, s.value) for s in samples_of(result)] == [("good", 42)]
    assert result.queries == 5
    assert result.errors["bad_promql"] == "HTTP 400: bad_data: 1:7: parse error: unexpected end of input"
    assert result.errors["overloaded"] == "HTTP 503: unavailable: too many queries"
    assert result.errors["not_json"].startswith("malformed response")
    assert result.errors["matrix"].startswith("expected an instant vector")
    src.poll(NODES)
    health = src.health
    assert health.consecutive_failures == 0 and health.last_success is not None and health.up
    assert "bad_promql: HTTP 400" in health.last_error  # the partial failure stays visible


def test_an_answer_without_data_result_fails_only_that_metric(prom: FakePrometheus) -> None:
    prom.replies["nodata"] = (200, {"status": "success"})
    prom.replies["listbody"] = (200, [1, 2])
    prom.replies["good"] = (200, same_stamps([({"node": "n1"}, 42)]))
    result = source(prom, [{"name": n, "query": n} for n in ("nodata", "listbody", "good")]).fetch(NODES)
    assert result.errors == {"nodata": "malformed response: no data.result",
                             "listbody": "malformed response: no data.result"}
    assert [(s.metric, s.value) for s in samples_of(result)] == [("good", 42)]


def test_a_query_timeout_fails_only_that_metric(prom: FakePrometheus) -> None:
    def slow() -> Reply:
        time.sleep(0.5)
        return 200, same_stamps([({"node": "n1"}, 1)])

    prom.replies["slow"] = slow
    prom.replies["fast"] = (200, same_stamps([({"node": "n2"}, 2)]))
    src = source(prom, [{"name": "slow", "query": "slow"}, {"name": "fast", "query": "fast"}], timeout="200ms")
    result = src.fetch(NODES)
    assert result.errors == {"slow": "no answer within 0.2s"}
    assert [(s.metric, s.node) for s in samples_of(result)] == [("fast", "n2")]


def test_every_metric_failing_counts_as_a_failed_refresh(prom: FakePrometheus) -> None:
    prom.replies["q"] = (500, {"status": "error", "errorType": "internal", "error": "boom"})
    src = source(prom, [{"name": "a", "query": "q_a"}, {"name": "b", "query": "q_b"}])
    assert src.poll(NODES) is not None and src.poll(NODES) is not None
    assert src.health.consecutive_failures == 2 and not src.health.up
    assert src.health.errors_by_reason == {"metric_error": 4}


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def test_unreachable_prometheus_raises_from_fetch() -> None:
    src = from_config("prom", {"url": f"http://127.0.0.1:{_closed_port()}", "metrics": [
        {"name": "a", "preset": "dcgm_gpu_temp"}, {"name": "b", "preset": "dcgm_gpu_util"}]}, SourceContext(Path(".")))
    with pytest.raises(SourceError, match="unreachable"):
        src.fetch(NODES)
    assert src.poll(NODES) is None
    health = src.health
    assert health.consecutive_failures == 1 and "unreachable" in health.last_error and not health.up
    src.close()


# -- auth, secrecy, TLS ----------------------------------------------------------------------------


def test_bearer_token_from_file_is_sent_and_never_shown(prom: FakePrometheus, tmp_path: Path,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "token").write_text(TOKEN + "\n")
    prom.replies["q"] = lambda: (401, {"status": "error", "errorType": "auth",
                                       "error": f"bad header Authorization: {prom.seen[-1].headers['Authorization']}"})
    caplog.set_level(logging.DEBUG)
    src = source(prom, [{"name": "a", "query": "q"}], tmp_path, auth={"bearerTokenFile": "token"})
    result = src.poll(NODES)
    assert result is not None
    assert prom.seen[-1].headers["Authorization"] == f"Bearer {TOKEN}"
    assert result.errors["a"].startswith("HTTP 401")
    for text in (result.errors["a"], str(src.health.as_dict()), repr(src), repr(src.config), caplog.text):
        assert TOKEN not in text


def test_basic_auth_password_from_file(prom: FakePrometheus, tmp_path: Path,
                                       caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "password").write_text(PASSWORD)
    encoded = base64.b64encode(f"scheduler:{PASSWORD}".encode()).decode()
    prom.replies["q"] = (403, {"status": "error", "errorType": "auth", "error": f"denied {encoded} / {PASSWORD}"})
    src = source(prom, [{"name": "a", "query": "q"}], tmp_path,
                 auth={"basicAuth": {"username": "scheduler", "passwordFile": str(tmp_path / "password")}})
    result = src.poll(NODES)
    assert result is not None
    assert prom.seen[-1].headers["Authorization"] == f"Basic {encoded}"
    for text in (result.errors["a"], str(src.health.as_dict()), repr(src.config), caplog.text):
        assert PASSWORD not in text and encoded not in text


def test_tls_is_verified_against_the_configured_ca(tmp_path: Path) -> None:
    pki = generate_pki(tmp_path / "pki")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(pki.serving_cert, pki.serving_key)
    fake = FakePrometheus(replies={"q": (200, same_stamps([({"node": "n1"}, 1)]))})
    served = _serve(fake, context)
    next(served)
    try:
        trusted = source(fake, [{"name": "a", "query": "q"}], tls={"caFile": str(pki.ca_cert)})
        assert [s.value for s in samples_of(trusted.fetch(NODES))] == [1]
        untrusted = source(fake, [{"name": "a", "query": "q"}])  # system trust store: does not know this CA
        with pytest.raises(SourceError, match="unreachable"):
            untrusted.fetch(NODES)
    finally:
        next(served, None)


# -- config ----------------------------------------------------------------------------------------


def test_config_defaults_and_durations() -> None:
    src = from_config("prom", {"url": "http://prom:9090/", "type": "prometheus", "name": "prom",
                               "interval": "15s", "metrics": [{"name": "t", "preset": "dcgm_gpu_temp"}]},
                      SourceContext(Path(".")))
    assert (src.name, src.interval, src.metrics()) == ("prom", 15.0, ["t"])
    assert src.config.url == "http://prom:9090" and src.config.timeout == 5.0
    assert src.config.node_labels == ()  # only the built-in order (adapters/prometheus/node_names.py)
    metric = src.config.metrics[0]
    assert (metric.aggregation, metric.scale, metric.allow_negative) == ("max", 1.0, False)
    custom = from_config("p", {"url": "http://p", "interval": 30, "metrics": [{"name": "c", "query": "up"}]},
                         SourceContext(Path(".")))
    assert custom.interval == 30.0
    # By default a query never outlives the refresh it belongs to.
    quick = from_config("p", {"url": "http://p", "interval": "2s", "metrics": [{"name": "c", "query": "up"}]},
                        SourceContext(Path(".")))
    assert quick.config.timeout == 2.0
    assert (custom.config.metrics[0].timestamp_query, custom.config.metrics[0].aggregation) == ("timestamp(up)", "max")


@pytest.mark.parametrize(("spec", "field"), [
    ({"metrics": [{"name": "a", "preset": "dcgm_gpu_temp"}]}, "url"),
    ({"url": "ftp://x", "metrics": [{"name": "a", "preset": "dcgm_gpu_temp"}]}, "url"),
    ({"url": "http://user:pw@prom", "metrics": [{"name": "a", "preset": "dcgm_gpu_temp"}]}, "url"),
    ({"url": "http://p", "metrics": []}, "metrics"),
    ({"url": "http://p", "timeout": 31, "metrics": [{"name": "a", "preset": "dcgm_gpu_temp"}]}, "timeout"),
    ({"url": "http://p", "interval": "soon", "metrics": [{"name": "a", "preset": "dcgm_gpu_temp"}]}, "interval"),
    ({"url": "http://p", "metrics": [{"name": "a", "preset": "dcgm_gpu_temp"},
                                     {"name": "b", "preset": "dcgm_gpu_util", "aggregation": "median"}]},
     "metrics[1].aggregation"),
    ({"url": "http://p", "metrics": [{"name": "a", "preset": "nope"}]}, "metrics[0].preset"),
    ({"url": "http://p", "metrics": [{"name": "a", "preset": "dcgm_gpu_temp", "query": "up"}]}, "metrics[0]"),
    ({"url": "http://p", "metrics": [{"name": "a", "query": "rate(x[1m])"}]}, "metrics[0].timestampQuery"),
    ({"url": "http://p", "metrics": [{"name": "a", "query": "up"}, {"name": "a", "query": "up"}]},
     "metrics[1].name"),
    ({"url": "http://p", "metrics": [{"name": "a", "query": "up", "scale": 0}]}, "metrics[0].scale"),
    ({"url": "http://p", "metrics": [{"name": "a", "query": "up", "nodeLabels": []}]}, "metrics[0].nodeLabels"),
    ({"url": "http://p", "metrics": [{"name": "a", "query": "up", "agregation": "max"}]},
     "metrics[0].agregation"),
    ({"url": "https://p", "tls": {"insecureSkipVerify": True}, "metrics": [{"name": "a", "query": "up"}]},
     "tls.insecureSkipVerify"),
    ({"url": "https://p", "insecure": True, "metrics": [{"name": "a", "query": "up"}]}, "insecure"),
    ({"url": "https://p", "tls": {"caFile": "/nonexistent/ca.pem"}, "metrics": [{"name": "a", "query": "up"}]},
     "tls.caFile"),
    ({"url": "http://p", "auth": {"bearerTokenFile": "/nonexistent/token"}, "metrics": [{"name": "a", "query": "up"}]},
     "auth.bearerTokenFile"),
    ({"url": "http://p", "auth": {"basicAuth": {"username": "u"}}, "metrics": [{"name": "a", "query": "up"}]},
     "auth.basicAuth.passwordFile"),
])
def test_config_errors_name_the_field(spec: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as info:
        from_config("prom", spec, SourceContext(Path(".")))
    assert info.value.field == field


def test_an_empty_token_file_is_a_config_error_that_names_the_file(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("  \n")
    with pytest.raises(ConfigError) as info:
        from_config("p", {"url": "http://p", "auth": {"bearerTokenFile": "token"},
                          "metrics": [{"name": "a", "query": "up"}]}, SourceContext(tmp_path))
    assert info.value.field == "auth.bearerTokenFile" and "empty" in info.value.message


def test_aggregate_helper_is_exact_for_sums() -> None:
    from adapters.prometheus.series import aggregate

    assert aggregate("sum", [(0.1, 1.0)] * 10) == (1.0, 1.0)
    assert math.isclose(aggregate("avg", [(1.0, 5.0), (2.0, 3.0)])[0], 1.5)
