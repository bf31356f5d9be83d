"""The recording rules that pre-aggregate the presets per node, and the source reading them (`recordingRules`).

Against the in-process fake Prometheus of test_source_prometheus: the fake answers by substring of the query,
so a reply keyed on a record name is only given to a query that reads the recording rule.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from adapters.prometheus import PRESETS
from adapters.prometheus.recording_rules import (
    CPUS_RECORD,
    FAST_GROUP,
    SLOW_GROUP,
    recorded_presets,
    recorded_series,
    rule_groups,
    timestamp_record,
    value_record,
)
from adapters.prometheus.rules_manifest import manifest_text
from adapters.prometheus.series import PART_LABEL, combined_query, recorded_query
from devcluster import prometheus as dev_prometheus
from metrics_sched.config import ConfigError
from metrics_sched.telemetry import SourceContext
from metrics_sched.telemetry.batch import samples_of
from tests.unit.test_source_prometheus import (
    NODES,
    T_SAMPLE,
    FakePrometheus,
    _serve,
    by_node,
    source,
)

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def prom() -> Iterator[FakePrometheus]:
    yield from _serve(FakePrometheus())


def rules_by_record(groups: list[dict[str, Any]]) -> dict[str, str]:
    return {rule["record"]: rule["expr"] for group in groups for rule in group["rules"]}


def test_each_rule_records_the_raw_presets_own_query_per_node() -> None:
    """A recorded value is what the raw preset would have answered (same expression, built-in labels), and
    its timestamp rule records the raw samples' own times, not the rule's evaluation time."""
    rules = rules_by_record(rule_groups())
    for preset in ("dcgm_gpu_temp", "dcgm_gpu_util", "dcgm_gpu_engine_active", "dcgm_gpu_power",
                   "node_cpu_utilisation", "opencost_node_hourly_cost"):
        query, timestamp_query = PRESETS[preset].render()
        assert rules[value_record(preset)] == query
        assert rules[timestamp_record(preset)] == timestamp_query
        assert "timestamp(" in timestamp_query
    # The CPU count is the costly half of node_load_per_cpu: recorded alone, in the once-a-minute group; the
    # load per CPU over it (and node_load1's own sample time) with the others.
    assert PRESETS["node_load_per_cpu"].query == f"node_load1 / {rules[CPUS_RECORD]}"
    assert rules[value_record("node_load_per_cpu")] == f"node_load1 / {CPUS_RECORD}"
    assert rules[timestamp_record("node_load_per_cpu")] == PRESETS["node_load_per_cpu"].timestamp_query
    groups = {g["name"]: g for g in rule_groups("15s")}
    assert groups[FAST_GROUP]["interval"] == "15s" and groups[SLOW_GROUP]["interval"] == "1m"
    assert [r["record"] for r in groups[SLOW_GROUP]["rules"]] == [CPUS_RECORD]
    assert "interval" not in {g["name"]: g for g in rule_groups()}[FAST_GROUP]


def test_rules_can_be_limited_to_the_presets_in_use() -> None:
    assert set(rules_by_record(rule_groups(presets={"dcgm_gpu_temp"}))) == {
        value_record("dcgm_gpu_temp"), timestamp_record("dcgm_gpu_temp")}
    assert [g["name"] for g in rule_groups(presets={"node_load_per_cpu"})] == [FAST_GROUP, SLOW_GROUP]
    assert [g["name"] for g in rule_groups(presets={"opencost_node_hourly_cost"})] == [FAST_GROUP]
    assert rule_groups(presets={"no_such_preset"}) == []
    # Every preset has its rules.
    assert set(recorded_presets()) == set(PRESETS)


def test_the_committed_manifest_is_the_generated_one() -> None:
    committed = (REPO / "deploy" / "recording-rules" / "prometheusrule.yaml").read_text()
    assert committed == manifest_text(), (
        "regenerate: python -m adapters.prometheus.rules_manifest > deploy/recording-rules/prometheusrule.yaml")
    doc = yaml.safe_load(committed)
    assert doc["kind"] == "PrometheusRule"
    assert rules_by_record(doc["spec"]["groups"]) == rules_by_record(rule_groups())


def test_the_dev_cluster_loads_only_the_rules_of_its_presets(tmp_path: Path) -> None:
    config = yaml.safe_load(dev_prometheus.write_config(tmp_path, "127.0.0.1:1", 5.0,
                                                        {"dcgm_gpu_temp", "opencost_node_hourly_cost"}).read_text())
    [rule_file] = config["rule_files"]
    loaded = yaml.safe_load(Path(rule_file).read_text())
    assert loaded == {"groups": rule_groups(presets={"dcgm_gpu_temp", "opencost_node_hourly_cost"})}
    assert set(rules_by_record(loaded["groups"])) == {
        value_record(p) for p in ("dcgm_gpu_temp", "opencost_node_hourly_cost")} | {
        timestamp_record(p) for p in ("dcgm_gpu_temp", "opencost_node_hourly_cost")}
    plain = yaml.safe_load(dev_prometheus.write_config(tmp_path / "plain", "127.0.0.1:1", 5.0).read_text())
    assert "rule_files" not in plain


def test_recording_rules_switch_the_presets_to_the_recorded_series(prom: FakePrometheus) -> None:
    metrics = [{"name": "temp", "preset": "dcgm_gpu_temp"}, {"name": "load", "preset": "node_load_per_cpu"},
               {"name": "cost", "preset": "opencost_node_hourly_cost"}, {"name": "up", "query": "up"}]
    raw = source(prom, metrics)
    recorded = source(prom, metrics, recordingRules=True)
    assert raw.config.recording_rules is False and recorded.config.recording_rules is True
    # Raw: the presets' own queries (the fallback).
    assert raw.query_for("temp") == combined_query(*PRESETS["dcgm_gpu_temp"].render())
    # Recorded: both of the rules' series by name, one plain selector (nothing for Prometheus to aggregate).
    temp = recorded.query_for("temp")
    assert temp == '{__name__=~"node:dcgm_gpu_temp:value|node:dcgm_gpu_temp:timestamp_oldest"}'
    assert temp == recorded_query(value_record("dcgm_gpu_temp"), timestamp_record("dcgm_gpu_temp"))
    assert recorded.query_for("load") == recorded_query(value_record("node_load_per_cpu"),
                                                         timestamp_record("node_load_per_cpu"))
    assert recorded.query_for("cost") == recorded_query(value_record("opencost_node_hourly_cost"),
                                                         timestamp_record("opencost_node_hourly_cost"))
    # Custom queries are the operator's own: the same either way.
    assert recorded.query_for("up") == raw.query_for("up")


def test_configured_node_labels_resolve_the_recorded_series_as_they_come(prom: FakePrometheus) -> None:
    """The selector returns the recorded series with every label the rules kept: a configured node label the
    rules' owner added to their `by` lists is read first, as with the raw presets."""
    prom.replies[value_record("dcgm_gpu_temp")] = (200, recorded_vector("dcgm_gpu_temp", [
        ({"k8s_node": "n1", "hostname": "n2"}, 71.0, T_SAMPLE)]))
    src = source(prom, [{"name": "temp", "preset": "dcgm_gpu_temp"}], recordingRules=True, nodeLabels=["k8s_node"])
    result = src.fetch(NODES)
    assert not result.errors
    assert by_node(samples_of(result), "temp")["n1"].value == 71.0
    assert recorded_series("dcgm_gpu_temp") == (value_record("dcgm_gpu_temp"), timestamp_record("dcgm_gpu_temp"))
    assert recorded_series("no_such_preset") is None
    assert set(recorded_presets()) <= set(PRESETS)


def recorded_vector(preset: str, series: list[tuple[dict[str, str], float | str, float]]) -> dict[str, Any]:
    """What Prometheus answers to the recorded selector: each series' value and timestamp records, by name."""
    result: list[dict[str, Any]] = [
        {"metric": {"__name__": timestamp_record(preset), **labels}, "value": [T_SAMPLE + 5, repr(ts)]}
        for labels, _, ts in series]
    result += [{"metric": {"__name__": value_record(preset), **labels},
                "value": [T_SAMPLE + 5, value if isinstance(value, str) else repr(value)]}
               for labels, value, _ in series]
    return {"status": "success", "data": {"resultType": "vector", "result": result}}


def test_recorded_values_come_with_their_raw_samples_time(prom: FakePrometheus) -> None:
    """The recorded timestamp series carries the oldest raw sample's time as its value: that is the age."""
    prom.replies[value_record("dcgm_gpu_temp")] = (200, recorded_vector("dcgm_gpu_temp", [
        ({"hostname": "n1"}, 71.0, T_SAMPLE), ({"hostname": "n2"}, 65.0, T_SAMPLE - 30)]))
    result = source(prom, [{"name": "temp", "preset": "dcgm_gpu_temp"}], recordingRules=True).fetch(NODES)
    assert not result.errors
    samples = by_node(samples_of(result), "temp")
    assert (samples["n1"].value, samples["n1"].observed_at) == (71.0, T_SAMPLE)
    assert (samples["n2"].value, samples["n2"].observed_at) == (65.0, T_SAMPLE - 30)


def test_a_bad_recorded_value_is_dropped_and_counted_and_the_rest_kept(prom: FakePrometheus) -> None:
    """A NaN, a sentinel or a non-numeric value among recorded series (the last one makes the answer fall off
    the typed decoding path) costs only its own node."""
    series: list[tuple[dict[str, str], float | str, float]] = [
        ({"hostname": "n1"}, 71.0, T_SAMPLE), ({"hostname": "n2"}, "NaN", T_SAMPLE),
        ({"hostname": "n3"}, 1e18, T_SAMPLE)]
    prom.replies[value_record("dcgm_gpu_temp")] = (200, recorded_vector("dcgm_gpu_temp", series))
    result = source(prom, [{"name": "temp", "preset": "dcgm_gpu_temp"}], recordingRules=True).fetch(NODES)
    assert set(by_node(samples_of(result), "temp")) == {"n1"}
    assert result.dropped == {"nan": 1, "sentinel": 1}
    body = recorded_vector("dcgm_gpu_temp", [*series[:1], ({"hostname": "n2"}, 60.0, T_SAMPLE)])
    body["data"]["result"][-1]["value"] = [T_SAMPLE, None]  # not a [time, string] pair
    # A label that is not a string: read as its text, and a part marker "3" is neither half.
    body["data"]["result"].append({"metric": {"__name__": "x", PART_LABEL: 3}, "value": [T_SAMPLE, "1"]})
    prom.replies[value_record("dcgm_gpu_temp")] = (200, body)
    result = source(prom, [{"name": "temp", "preset": "dcgm_gpu_temp"}], recordingRules=True).fetch(NODES)
    assert set(by_node(samples_of(result), "temp")) == {"n1"} and result.dropped == {"malformed": 2}


def test_recording_rules_must_be_a_boolean() -> None:
    from adapters.prometheus import from_config

    with pytest.raises(ConfigError) as err:
        from_config("p", {"url": "http://p", "recordingRules": "yes",
                          "metrics": [{"name": "t", "preset": "dcgm_gpu_temp"}]}, SourceContext(Path(".")))
    assert err.value.field == "recordingRules"
