"""Per-device metrics of the Prometheus source (`deviceLabels`): configuration, queries, decoding, into the cache.

- `deviceLabels` is validated where it is written (each error names its field; `check-config` exits 2), allowed
  on the per-GPU DCGM presets and custom queries only, and written into the preset's `by (...)` lists; such a
  metric reads the raw series even with `recordingRules` (the records are per node);
- the node value stays today's (the aggregation over the node's GPUs, stamped with the oldest) and each device's
  own value and stamp come beside it, the device named by the first present of its labels; a series without one
  counts for its node only (`no_device_label`); refused values leave out their device and not the rest;
- the reduce plan gives exactly what the general way gives, declines a device named twice, and hands the cache
  the same key list refresh after refresh;
- from a Prometheus answer to `MetricCache.device_values`.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from adapters.prometheus.client import Answer
from adapters.prometheus.config import MetricSpec, parse_config
from adapters.prometheus.plan import build_plan
from adapters.prometheus.series import reduce_result
from adapters.prometheus.source import PrometheusSource
from metrics_sched.app.cli import main
from metrics_sched.config import ConfigError
from metrics_sched.config.contract import FreshnessContract
from metrics_sched.ports import NodeDirectory
from metrics_sched.telemetry import MetricCache
from metrics_sched.telemetry.batch import BatchedFetchResult
from tests.unit.test_metric_batches import INDEX, body, raw, series, typed
from tests.unit.test_source_prometheus import (
    NODES,
    T_SAMPLE,
    FakePrometheus,
    Labels,
    _serve,
    same_stamps,
    source,
    vector,
)

pytestmark = pytest.mark.unit

DEVICE_LABELS = ["UUID", "gpu"]


@pytest.fixture
def prom() -> Iterator[FakePrometheus]:
    yield from _serve(FakePrometheus())


def gpus(values: list[float | str], host: str = "gpu-1") -> list[tuple[Labels, float | str]]:
    return [({"gpu": str(i), "UUID": f"GPU-{host}-{i}", "hostname": host}, v) for i, v in enumerate(values)]


def fetched(prom: FakePrometheus, metrics: list[dict[str, Any]], **extra: Any) -> BatchedFetchResult:
    src = source(prom, metrics, **extra)
    try:
        return src.fetch(NODES)
    finally:
        src.close()


def node_values(result: BatchedFetchResult) -> dict[str, dict[str, tuple[float, float]]]:
    return {b.metric: {n: (v, t) for n, v, t in zip(b.nodes, b.values.tolist(), b.observed_at.tolist(),
                                                     strict=True)} for b in result.batches}


def device_values(result: BatchedFetchResult) -> dict[str, dict[tuple[str, str], tuple[float, float]]]:
    return {b.metric: {(n, d): (v, t) for n, d, v, t in b.items()} for b in result.device_batches}


# -- configuration -----------------------------------------------------------------------------------------------


def test_device_labels_join_the_presets_by_lists_and_bypass_the_per_node_recording_rules() -> None:
    config = parse_config({"url": "http://p", "recordingRules": True, "metrics": [
        {"name": "temp", "preset": "dcgm_gpu_temp", "deviceLabels": DEVICE_LABELS},
        {"name": "util", "preset": "dcgm_gpu_util"},
        {"name": "custom", "query": "DCGM_FI_DEV_GPU_TEMP", "deviceLabels": ["gpu"]}]}, base_dir=Path("."))
    temp, util, custom = config.metrics
    assert temp.device_labels == ("UUID", "gpu") and temp.recorded is None
    assert temp.query.startswith("max by (") and temp.query.endswith(", UUID, gpu) (DCGM_FI_DEV_GPU_TEMP < 1e+14)")
    assert temp.timestamp_query.endswith(", UUID, gpu) (timestamp(DCGM_FI_DEV_GPU_TEMP))")
    assert "hostname" in temp.query  # the node labels stay in the list
    assert util.recorded is not None and util.device_labels == ()  # the others read the records as before
    assert custom.query == "DCGM_FI_DEV_GPU_TEMP" and custom.device_labels == ("gpu",)


@pytest.mark.parametrize(("metric", "field"), [
    ({"preset": "dcgm_gpu_temp", "deviceLabels": "UUID"}, "metrics[0].deviceLabels"),
    ({"preset": "dcgm_gpu_temp", "deviceLabels": []}, "metrics[0].deviceLabels"),
    ({"preset": "dcgm_gpu_temp", "deviceLabels": ["UUID", "pci-bus"]}, "metrics[0].deviceLabels[1]"),
    ({"preset": "dcgm_gpu_temp", "deviceLabels": ["UUID", 3]}, "metrics[0].deviceLabels[1]"),
    ({"preset": "dcgm_gpu_temp", "deviceLabels": ["UUID", "UUID"]}, "metrics[0].deviceLabels"),
    ({"preset": "node_load_per_cpu", "deviceLabels": ["cpu"]}, "metrics[0].deviceLabels"),
    ({"preset": "opencost_node_hourly_cost", "deviceLabels": ["UUID"]}, "metrics[0].deviceLabels"),
])
def test_device_label_errors_name_the_field(metric: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config({"url": "http://p", "metrics": [{"name": "m", **metric}]}, base_dir=Path("."))
    assert info.value.field == field, info.value


def test_check_config_exits_2_naming_the_device_labels(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(json.dumps({"sources": [{"name": "prom", "type": "prometheus", "url": "http://p", "metrics": [
        {"name": "gpu_temperature", "preset": "dcgm_gpu_temp", "deviceLabels": ["UUID", "gpu"]},
        {"name": "node_hourly_cost", "preset": "opencost_node_hourly_cost", "deviceLabels": ["UUID"]}]}]}))
    with pytest.raises(SystemExit) as info:
        main(["check-config", str(path)])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert "sources[0].metrics[1].deviceLabels" in err and "one series per node" in err


# -- decoding ----------------------------------------------------------------------------------------------------


def test_each_gpus_value_comes_beside_the_node_value_it_had_before(prom: FakePrometheus) -> None:
    temps, utils, powers = [61, 67, 91, 58], [10, 20, 30, 40], [100.5, 200.25, 50]
    prom.replies["DCGM_FI_DEV_GPU_TEMP"] = (200, same_stamps(gpus(list(temps))))
    prom.replies["DCGM_FI_DEV_GPU_UTIL"] = (200, same_stamps(gpus(list(utils))))
    prom.replies["DCGM_FI_DEV_POWER_USAGE"] = (200, same_stamps(gpus(list(powers))))
    metrics = [{"name": "temp", "preset": "dcgm_gpu_temp"}, {"name": "util", "preset": "dcgm_gpu_util"},
               {"name": "power", "preset": "dcgm_gpu_power"},
               {"name": "coolest", "preset": "dcgm_gpu_temp", "aggregation": "min"}]
    before = fetched(prom, metrics)
    after = fetched(prom, [{**m, "deviceLabels": DEVICE_LABELS} for m in metrics])
    assert node_values(after) == node_values(before) == {
        "temp": {"gpu-1": (91, T_SAMPLE)}, "util": {"gpu-1": (25, T_SAMPLE)}, "power": {"gpu-1": (350.75, T_SAMPLE)},
        "coolest": {"gpu-1": (58, T_SAMPLE)}}
    assert device_values(before) == {}
    devices = device_values(after)
    assert devices["temp"] == {("gpu-1", f"GPU-gpu-1-{i}"): (t, T_SAMPLE) for i, t in enumerate(temps)}
    assert devices["coolest"] == devices["temp"]  # one series per GPU: the aggregation leaves it as it is
    assert devices["power"] == {("gpu-1", f"GPU-gpu-1-{i}"): (p, T_SAMPLE) for i, p in enumerate(powers)}
    assert after.dropped == {} and after.errors == {}


def test_each_device_keeps_its_own_stamp_and_the_node_value_is_as_old_as_its_oldest(prom: FakePrometheus) -> None:
    series_ = gpus([60, 90, 70])
    prom.replies["DCGM_FI_DEV_GPU_TEMP"] = (200, vector(series_, [(series_[0][0], 1000.0), (series_[1][0], 1010.0),
                                                                  (series_[2][0], 1020.0)]))
    result = fetched(prom, [{"name": "hottest", "preset": "dcgm_gpu_temp", "deviceLabels": DEVICE_LABELS},
                            {"name": "newest", "preset": "dcgm_gpu_temp", "aggregation": "last",
                             "deviceLabels": DEVICE_LABELS}])
    assert node_values(result) == {"hottest": {"gpu-1": (90, 1000.0)}, "newest": {"gpu-1": (70, 1020.0)}}
    expected = {("gpu-1", "GPU-gpu-1-0"): (60, 1000.0), ("gpu-1", "GPU-gpu-1-1"): (90, 1010.0),
                ("gpu-1", "GPU-gpu-1-2"): (70, 1020.0)}
    assert device_values(result) == {"hottest": expected, "newest": expected}


def test_the_first_present_device_label_names_the_device(prom: FakePrometheus) -> None:
    labelled: list[tuple[Labels, float | str]] = [
        ({"hostname": "gpu-1", "UUID": "GPU-aaaa", "gpu": "0"}, 50),  # UUID first
        ({"hostname": "gpu-1", "gpu": "1"}, 60),  # no UUID: its index
        ({"hostname": "gpu-1", "UUID": "", "gpu": "2"}, 70),  # an empty label is no label (as in Prometheus)
        ({"hostname": "gpu-1", "job": "dcgm"}, 95),  # neither: counts for the node value only
    ]
    prom.replies["DCGM_FI_DEV_GPU_TEMP"] = (200, same_stamps(labelled))
    result = fetched(prom, [{"name": "temp", "preset": "dcgm_gpu_temp", "deviceLabels": DEVICE_LABELS}])
    assert node_values(result) == {"temp": {"gpu-1": (95, T_SAMPLE)}}
    assert set(device_values(result)["temp"]) == {("gpu-1", "GPU-aaaa"), ("gpu-1", "1"), ("gpu-1", "2")}
    assert result.dropped == {"no_device_label": 1}


def test_a_refused_value_leaves_out_its_device_and_not_the_others(prom: FakePrometheus) -> None:
    prom.replies["DCGM_FI_DEV_GPU_TEMP"] = (200, same_stamps(gpus([61, "NaN", 9.2e18, -4, 66])))
    result = fetched(prom, [{"name": "temp", "preset": "dcgm_gpu_temp", "deviceLabels": DEVICE_LABELS}])
    assert node_values(result) == {"temp": {"gpu-1": (66, T_SAMPLE)}}
    assert device_values(result)["temp"] == {("gpu-1", "GPU-gpu-1-0"): (61, T_SAMPLE),
                                             ("gpu-1", "GPU-gpu-1-4"): (66, T_SAMPLE)}
    assert result.dropped == {"nan": 1, "sentinel": 1, "negative": 1}


# -- the reduce plan ---------------------------------------------------------------------------------------------

DEVICE_METRIC = {how: MetricSpec(name="temp", query="t", timestamp_query="timestamp(t)", aggregation=how,
                                 node_labels=(), sentinel_above=1e14, device_labels=("UUID", "gpu"))
                 for how in ("max", "min", "avg", "sum", "last")}


def reduced_both(metric: MetricSpec, answer: list[dict[str, Any]]) -> tuple[Any, Any]:
    plan = build_plan(metric, typed(answer), raw(answer), INDEX)
    assert plan is not None
    vector_ = raw(answer)
    assert plan.matches(vector_, INDEX)
    fast = plan.apply(metric, vector_)
    slow = reduce_result(metric, typed(answer), INDEX)
    assert fast is not None and fast.batch is not None and fast.devices is not None
    assert slow.batch is not None and slow.devices is not None

    def view(r: Any) -> Any:
        return (r.batch.samples(), r.devices.items(), r.dropped, r.unmatched, r.matched_by_rule, r.unmatched_examples)

    return view(fast), view(slow)


@pytest.mark.parametrize("how", ["max", "min", "avg", "sum", "last"])
@pytest.mark.parametrize("seed", range(12))
def test_the_plan_reduces_a_per_device_answer_as_the_general_way_does(seed: int, how: str) -> None:
    rng = random.Random(seed)
    answer: list[dict[str, Any]] = []
    for i in rng.sample(range(8), rng.randint(1, 8)):
        for g in range(rng.randint(1, 4)):
            labels = rng.choice([{"node": f"n{i}", "UUID": f"GPU-{i}-{g}", "gpu": str(g)},
                                 {"hostname": f"n{i}", "gpu": str(g)}])
            if g == 3:
                labels = {"node": f"n{i}", "job": "x"}  # no device label
            answer.append(series(labels, "v", rng.choice(["50", "NaN", "-1", "+Inf", "1e15", "0", "99.5", "61.25"])))
            if rng.random() < 0.8:  # some devices have no timestamp series of their own
                answer.append(series(labels, "t", str(1990.0 - rng.randint(0, 9))))
    for j in range(rng.randint(0, 3)):
        answer.append(series({"node": f"gone-{j}", "UUID": "GPU-x"}, "v", "5"))
    rng.shuffle(answer)
    fast, slow = reduced_both(DEVICE_METRIC[how], answer)
    assert fast == slow


def test_the_plan_declines_a_device_named_twice_which_the_general_way_aggregates() -> None:
    answer = [series({"node": "n0", "gpu": "0", "job": "a"}, "v", "50"),
              series({"node": "n0", "gpu": "0", "job": "b"}, "v", "70"),
              series({"node": "n0", "gpu": "1"}, "v", "60"), series({"node": "n0"}, "t", "1990")]
    assert build_plan(DEVICE_METRIC["max"], typed(answer), raw(answer), INDEX) is None
    slow = reduce_result(DEVICE_METRIC["avg"], typed(answer), INDEX)
    assert slow.batch is not None and slow.devices is not None
    assert slow.batch.samples()[0].value == 60.0  # the node: the average of its three series
    assert slow.devices.items() == [("n0", "0", 60.0, 1990.0), ("n0", "1", 60.0, 1990.0)]


def test_the_source_hands_the_cache_the_same_keys_while_the_series_stay() -> None:
    config = parse_config({"url": "http://127.0.0.1:1", "metrics": [
        {"name": "temp", "query": "t", "deviceLabels": DEVICE_LABELS}]}, base_dir=Path("."))
    src = PrometheusSource("prom", config)
    answers: list[list[dict[str, Any]]] = []
    src._client.query_answer = lambda promql: Answer(body(answers[-1]))  # type: ignore[method-assign]
    nodes = NodeDirectory(frozenset({"n0", "n1"}), {}, {}, {})

    def answer(t0: float, t1: float) -> list[dict[str, Any]]:
        out = []
        for node, temps in (("n0", (t0, 40.0)), ("n1", (t1, 45.0))):
            for g, temp in enumerate(temps):
                labels = {"node": node, "UUID": f"GPU-{node}-{g}"}
                out += [series(labels, "v", repr(temp)), series(labels, "t", "1990")]
        return out

    try:
        answers.append(answer(50.0, 60.0))
        first = src.fetch(nodes)
        answers.append(answer(51.0, 61.0))
        second = src.fetch(nodes)
        assert second.device_batches[0].keys is first.device_batches[0].keys  # the cache reuses its slots
        assert second.batches[0].nodes is first.batches[0].nodes
        assert [(n, v) for n, v, _ in zip(second.batches[0].nodes, second.batches[0].values.tolist(),
                                          second.batches[0].observed_at.tolist(), strict=True)] == [("n0", 51.0),
                                                                                                     ("n1", 61.0)]
    finally:
        src.close()


# -- into the cache ----------------------------------------------------------------------------------------------


def test_per_device_values_arrive_in_the_cache_from_a_prometheus_answer(prom: FakePrometheus) -> None:
    now = T_SAMPLE + 2
    prom.replies["DCGM_FI_DEV_GPU_TEMP"] = (200, same_stamps(gpus([61, 91]) + gpus([40], host="n1")))
    src = source(prom, [{"name": "gpu_temperature", "preset": "dcgm_gpu_temp", "deviceLabels": DEVICE_LABELS}])
    cache = MetricCache({"gpu_temperature": FreshnessContract(max_age=30.0, ttl=60.0)}, clock=lambda: now)
    cache.add_source(src)
    cache.set_directory(lambda: NODES)
    try:
        cache.refresh("prom")
    finally:
        src.close()
    devices = cache.device_values("gpu_temperature", "gpu-1")
    assert {d: (v.value, v.age(now)) for d, v in devices.items()} == {"GPU-gpu-1-0": (61.0, 2.0),
                                                                      "GPU-gpu-1-1": (91.0, 2.0)}
    assert cache.device_value("gpu_temperature", "n1", "GPU-n1-0") == (40.0, T_SAMPLE)
    assert cache.node_values("gpu-1")["gpu_temperature"]["value"] == 91.0
    assert cache.health["prom"].devices == {"gpu_temperature": 3}
    assert math.isclose(cache.health["prom"].coverage["gpu_temperature"], 2 / len(NODES.names))
