"""History-aware metrics of the Prometheus source (adapters/prometheus/windows.py, docs/forecasting.md): the
`window` key, the windowed presets and their recording rules."""

from __future__ import annotations

from pathlib import Path

import pytest

from adapters.prometheus import PRESETS, from_config
from adapters.prometheus.config import parse_config
from adapters.prometheus.recording_rules import recorded_presets, rule_groups, timestamp_record, value_record
from adapters.prometheus.windows import Window
from metrics_sched.config import ConfigError
from metrics_sched.telemetry import SourceContext

pytestmark = pytest.mark.unit


def metric(**spec: object) -> object:
    config = parse_config({"url": "http://p", "metrics": [{"name": "m", **spec}]}, base_dir=Path("."))
    return config.metrics[0]


def test_windows_render_range_vectors_of_selectors_and_subqueries_of_the_rest() -> None:
    assert Window("avg_over_time", "15m").apply("node:x:value") == "avg_over_time(node:x:value[15m])"
    assert Window("stddev_over_time", "15m", step="1m").apply("a / b") == "stddev_over_time((a / b)[15m:1m])"
    assert Window("predict_linear", "10m", horizon="30m").apply('t{gpu="0"}') == 'predict_linear(t{gpu="0"}[10m], 1800)'
    assert Window("quantile_over_time", "1h", quantile=0.95).apply("u") == "quantile_over_time(0.95, u[1h])"
    assert Window("deriv", "5m").apply("sum(x)") == "deriv((sum(x))[5m:])"
    assert Window("predict_linear", "10m", horizon="30m").describe() == "predict_linear over 10m, 30m ahead"


def test_a_metrics_window_applies_to_its_query_and_keeps_its_sample_time() -> None:
    spec = metric(query="gpu_temp", window={"function": "predict_linear", "range": "10m", "horizon": "1h"})
    assert spec.query == "predict_linear(gpu_temp[10m], 3600)"  # type: ignore[attr-defined]
    assert spec.timestamp_query == "timestamp(gpu_temp)"  # type: ignore[attr-defined]
    preset = metric(preset="node_cpu_utilisation", window={"function": "max_over_time", "range": "1h", "step": "1m"})
    assert preset.query == f"max_over_time(({PRESETS['node_cpu_utilisation'].render()[0]})[1h:1m])"  # type: ignore[attr-defined]


@pytest.mark.parametrize(("window", "field"), [
    ({"function": "predict_linear", "range": "10m"}, "horizon"),
    ({"function": "avg_over_time", "range": "10m", "horizon": "5m"}, "horizon"),
    ({"function": "quantile_over_time", "range": "10m"}, "quantile"),
    ({"function": "quantile_over_time", "range": "10m", "quantile": 2}, "quantile"),
    ({"function": "rate", "range": "10m"}, "function"),
    ({"function": "avg_over_time", "range": "ten minutes"}, "range"),
    ({"function": "avg_over_time", "range": "10m", "bogus": 1}, "bogus"),
])
def test_bad_windows_are_refused_naming_the_field(window: dict[str, object], field: str) -> None:
    with pytest.raises(ConfigError) as err:
        metric(query="x", window=window)
    assert err.value.field.endswith(f"window.{field}")


def test_windowed_presets_are_their_bases_under_a_window() -> None:
    forecast, _ = PRESETS["dcgm_gpu_temp_forecast"].render()
    # Per GPU (blank sentinels dropped inside the window), 30 minutes ahead from 10, the hottest GPU per node.
    assert "predict_linear((DCGM_FI_DEV_GPU_TEMP < 1e+14)[10m:30s], 1800)" in forecast
    assert forecast.startswith("max by (")
    mean, timestamp = PRESETS["node_cpu_utilisation_mean"].render()
    assert mean.startswith("avg_over_time((1 - sum without") and mean.endswith(")[15m:1m])")
    assert timestamp == PRESETS["node_cpu_utilisation"].render()[1]
    assert PRESETS["node_cpu_utilisation_stddev"].query.startswith("stddev_over_time(")
    assert PRESETS["node_cpu_utilisation_peak"].query.startswith("max_over_time(") and "[1h:1m]" in \
        PRESETS["node_cpu_utilisation_peak"].query
    with pytest.raises(ConfigError, match="windowed already"):
        metric(preset="node_cpu_utilisation_mean", window={"function": "avg_over_time", "range": "5m"})


def test_windowed_presets_are_recorded_over_their_bases_recorded_series() -> None:
    rules = {r["record"]: r["expr"] for g in rule_groups() for r in g["rules"]}
    assert rules[value_record("node_cpu_utilisation_mean")] == "avg_over_time(node:node_cpu_utilisation:value[15m])"
    assert rules[value_record("node_cpu_utilisation_stddev")] == \
        "stddev_over_time(node:node_cpu_utilisation:value[15m])"
    assert rules[value_record("node_cpu_utilisation_peak")] == "max_over_time(node:node_cpu_utilisation:value[1h])"
    assert rules[value_record("dcgm_gpu_temp_forecast")] == PRESETS["dcgm_gpu_temp_forecast"].render()[0]
    # Asking for a windowed preset's rules brings its base's, before it (a group evaluates in order).
    chosen = [r["record"] for g in rule_groups(presets={"node_cpu_utilisation_stddev"}) for r in g["rules"]]
    assert chosen == [value_record("node_cpu_utilisation"), timestamp_record("node_cpu_utilisation"),
                      value_record("node_cpu_utilisation_stddev"), timestamp_record("node_cpu_utilisation_stddev")]
    assert {"dcgm_gpu_temp_forecast", "node_cpu_utilisation_mean"} <= set(recorded_presets())


def test_a_configured_window_over_a_recorded_preset_reads_its_recorded_series() -> None:
    source = from_config("p", {"url": "http://p", "recordingRules": True, "metrics": [
        {"name": "p95", "preset": "node_cpu_utilisation",
         "window": {"function": "quantile_over_time", "range": "1h", "quantile": 0.95}}]}, SourceContext(Path(".")))
    query = source.query_for("p95")
    assert "quantile_over_time(0.95, node:node_cpu_utilisation:value[1h])" in query
    assert timestamp_record("node_cpu_utilisation") in query and "rate(" not in query
    source.close()
