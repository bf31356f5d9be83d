"""Telemetry plugins as declarations over MetricScorePlugin: CustomMetric's scoring, thresholds, missing
values and args; and a new score plugin of a few lines that reaches explain, the decision ring (what
/decisions serves) and /metrics with no other change."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from metrics_sched.app.cli.explain_cmd import render_decision
from metrics_sched.audit import DecisionRing
from metrics_sched.config import ConfigError, parse_config
from metrics_sched.framework import MetricScorePlugin, MetricTerm, Scale
from metrics_sched.observability import SchedulerMetrics
from metrics_sched.plugins import in_tree_registry
from metrics_sched.plugins.custom_metric.plugin import CustomMetric
from tests.unit.fakes import FakeAPI, pod
from tests.unit.test_observability import audited
from tests.unit.test_scheduler import drain
from tests.unit.test_telemetry_scoring import feed, gpu_nodes, make

pytestmark = pytest.mark.unit


def custom(metrics: list[dict[str, Any]], contracts: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"metrics": contracts or {}, "profiles": [{"plugins": {
        "filter": {"enabled": [{"name": "CustomMetric"}]},
        "score": {"disabled": [{"name": "*"}], "enabled": [{"name": "CustomMetric", "weight": 1}]}},
        "pluginConfig": [{"name": "CustomMetric", "args": {"metrics": metrics}}]}]}


def term_of(result: Any, plugin: str) -> Any:
    return next(t for t in result.terms if t.plugin == plugin)


def test_custom_metric_weighted_mean_with_direction_and_range() -> None:
    scheduler, api, cache = make(custom([
        {"metric": "gpu_utilisation", "direction": "lower", "weight": 3,
         "normalization": {"method": "range", "min": 0, "max": 100}},
        {"metric": "gpu_memory_free", "direction": "higher", "weight": 1,
         "normalization": {"min": 0, "max": 80}},
    ]))
    gpu_nodes(scheduler, ["a", "b"])
    feed(cache, {"gpu_utilisation": {"a": 20, "b": 60}, "gpu_memory_free": {"a": 0, "b": 80}})
    api.add_pod(pod("p", gpus=1))
    result = scheduler.schedule_one(timeout=1)
    assert result is not None
    term = term_of(result, "CustomMetric")
    by_node = dict(zip(scheduler.state.table.names_of(result.feasible_rows), term.normalized, strict=True))
    # a: (3*80 + 1*0)/4 = 60; b: (3*40 + 1*100)/4 = 55
    assert by_node == pytest.approx({"a": 60.0, "b": 55.0})
    assert result.node == "a"
    assert [e.metric for e in term.evidence] == ["gpu_utilisation", "gpu_memory_free"]


def test_custom_metric_missing_value_drops_out_and_the_rest_is_reweighted() -> None:
    scheduler, api, cache = make(custom([
        {"metric": "m1", "direction": "higher", "normalization": {"min": 0, "max": 10}},
        {"metric": "m2", "direction": "higher", "normalization": {"min": 0, "max": 10}},
    ]))
    gpu_nodes(scheduler, ["a", "b"])
    feed(cache, {"m1": {"a": 5, "b": 5}, "m2": {"a": 10}})  # b has no m2
    api.add_pod(pod("p"))
    result = scheduler.schedule_one(timeout=1)
    assert result is not None
    by_node = dict(zip(scheduler.state.table.names_of(result.feasible_rows),
                       term_of(result, "CustomMetric").normalized, strict=True))
    assert by_node == pytest.approx({"a": 75.0, "b": 50.0})  # b: m1 alone, not m1 + 0


def test_custom_metric_thresholds_filter_and_a_refresh_readmits_at_once() -> None:
    scheduler, api, cache = make(custom([{"metric": "gpu_utilisation", "filterAbove": 90, "filterBelow": 1}]))
    gpu_nodes(scheduler, ["busy", "off"])
    feed(cache, {"gpu_utilisation": {"busy": 95, "off": 0}})
    api.add_pod(pod("p", gpus=1))
    drain(scheduler, api)
    assert api.binds == []
    note = api.events_for("default/p", "FailedScheduling")[0].note
    assert "1 node(s) had gpu_utilisation above 90" in note and "1 node(s) had gpu_utilisation below 1" in note
    feed(cache, {"gpu_utilisation": {"busy": 50, "off": 0}})
    assert scheduler.queue.lengths()["unschedulable"] == 0  # a threshold plugin moves parked pods on refresh
    drain(scheduler, api)
    assert api.binds == [("default/p", "busy")]


def test_custom_metric_on_missing_deny_filters_and_lowest_scores_zero() -> None:
    scheduler, api, cache = make(custom([{"metric": "m", "direction": "higher"}], {"m": {"onMissing": "deny"}}))
    gpu_nodes(scheduler, ["known", "unknown"])
    feed(cache, {"m": {"known": 1}})
    api.add_pod(pod("p"))
    result = scheduler.schedule_one(timeout=1)
    assert result is not None and result.rejections == {"node(s) had no fresh m": 1}
    assert scheduler.state.table.names_of(result.feasible_rows) == ["known"]

    scheduler, api, cache = make(custom([{"metric": "m", "direction": "higher",
                                          "normalization": {"min": 0, "max": 10}}], {"m": {"onMissing": "lowest"}}))
    gpu_nodes(scheduler, ["known", "unknown"])
    feed(cache, {"m": {"known": 1}})
    api.add_pod(pod("p"))
    result = scheduler.schedule_one(timeout=1)
    assert result is not None
    scores = dict(zip(scheduler.state.table.names_of(result.feasible_rows),
                      term_of(result, "CustomMetric").normalized, strict=True))
    assert scores == pytest.approx({"known": 10.0, "unknown": 0.0})


@pytest.mark.parametrize(("args", "field"), [
    ({}, "metrics"),
    ({"metrics": []}, "metrics"),
    ({"metrics": [{"direction": "lower"}]}, "metrics[0].metric"),
    ({"metrics": [{"metric": "m", "direction": "up"}]}, "metrics[0].direction"),
    ({"metrics": [{"metric": "m", "weight": 0}]}, "metrics[0].weight"),
    ({"metrics": [{"metric": "m", "normalization": {"min": 5, "max": 5}}]}, "metrics[0].normalization.max"),
    ({"metrics": [{"metric": "m", "filterAbove": "high"}]}, "metrics[0].filterAbove"),
    ({"metrics": [{"metric": "m", "colour": "red"}]}, "metrics[0].colour"),
])
def test_custom_metric_args_errors_name_the_field(args: dict[str, Any], field: str) -> None:
    registry = in_tree_registry(third_party=False)
    config = {"profiles": [{"plugins": {"score": {"enabled": [{"name": "CustomMetric"}]}},
                            "pluginConfig": [{"name": "CustomMetric", "args": args}]}]}
    with pytest.raises(ConfigError) as info:
        parse_config(config, registry.catalog())
    assert info.value.field == f"profiles[0].pluginConfig[0].args.{field}", info.value


def test_custom_metric_parses_its_args_once_into_terms() -> None:
    parsed = CustomMetric.parse_args({"metrics": [{"metric": "m", "direction": "higher", "weight": 2}]})
    [term] = parsed.metrics
    assert term.term() == MetricTerm("m", "higher", Scale(), 2.0)


# -- a new telemetry plugin, as a user writes it -----------------------------------------------------------
class GPUPower(MetricScorePlugin):
    name = "GPUPower"
    TERMS = (MetricTerm("gpu_power_watts", better="lower", scale=Scale("range", 100, 700)),)


def placed_by(plugin: type[MetricScorePlugin], weight: int = 1) -> tuple[FakeAPI, DecisionRing, SchedulerMetrics]:
    """Pod default/p placed by `plugin` alone (audited) on two GPU nodes drawing 150 W (frugal) and 650 W (hungry)."""
    config = {"profiles": [{"plugins": {"score": {"enabled": [{"name": plugin.name, "weight": weight}]}}}]}
    registry = in_tree_registry(third_party=False)
    registry.register(plugin)
    scheduler, api, cache = make(config, registry=registry)
    ring, metrics = audited(scheduler)
    gpu_nodes(scheduler, ["frugal", "hungry"])
    feed(cache, {"gpu_power_watts": {"frugal": 150, "hungry": 650}, "gpu_temperature": {"frugal": 60, "hungry": 60}})
    api.add_pod(pod("p", gpus=1))
    drain(scheduler, api)
    return api, ring, metrics


def test_a_new_metric_plugin_shows_in_explain_decisions_and_metrics() -> None:
    api, ring, metrics = placed_by(GPUPower, weight=4)
    assert api.binds == [("default/p", "frugal")]

    [record] = ring.query(pod="default/p")  # what /decisions serves
    winner = record.candidates[0]
    power = next(t for t in winner.terms if t.plugin == "GPUPower")
    assert power.weight == 4 and power.metrics[0].metric == "gpu_power_watts" and power.metrics[0].value == 150
    assert power.normalized == pytest.approx(100 * (700 - 150) / 600)

    text = render_decision(record.as_dict())  # what `metrics-sched explain` prints
    assert "gpu_power_watts=150.00" in text and "GPUPower" in text

    families = {f.name: f for f in text_string_to_metric_families(metrics.exposition().decode())}
    samples = families["metrics_sched_decision_metric_value"].samples
    assert any(s.labels.get("metric") == "gpu_power_watts" and s.name.endswith("_count") and s.value == 1
               for s in samples)
    plugin_runs = families["scheduler_plugin_execution_duration_seconds"].samples
    assert any(s.labels.get("plugin") == "GPUPower" and s.labels.get("extension_point") == "Score"
               for s in plugin_runs)
    assert not np.isnan(power.normalized)


class WideRange(MetricScorePlugin):
    """A range scale whose bounds are further apart than a double holds."""

    name = "WideRange"
    TERMS = (MetricTerm("gpu_power_watts", better="lower",
                        scale=Scale("range", -float(np.finfo(np.float64).max), float(np.finfo(np.float64).max))),)


def test_a_range_wider_than_a_double_scores_as_scale_apply_does() -> None:
    """Its span overflows: the plugin scores it through Scale.apply (which halves: every ordinary value is about the
    middle of such a range, 50), not through its fused columns (which would divide by inf: 100 for every node)."""
    _, ring, _ = placed_by(WideRange)
    [record] = ring.query(pod="default/p")
    scores = {c.node: next(t for t in c.terms if t.plugin == "WideRange").normalized for c in record.candidates}
    assert scores == {"frugal": 50.0, "hungry": 50.0}
