"""The history-aware plugins of issue 48 against their anchors' formulas and examples.

- LoadRiskBalancing: Trimaran's computeScore table, kubernetes-sigs/scheduler-plugins
  pkg/trimaran/loadvariationriskbalancing/analysis_test.go (TestComputeScore: capacity 100, request 10, usedAvg 40,
  usedStdev 36 -> 57 at margin 1, sensitivity 1; ...), the README's formula risk = [mean + margin*stDev^(1/s)]/2.
- TargetLoadPacking: pkg/trimaran/targetloadpacking/targetloadpacking_test.go (TestTargetLoadPackingScoring: "new
  node" at 0 % scores the target 40, "hot node" at 50 % scores 33, "excess utilization" 130 % scores 0) and
  PredictUtilisation's limit / request x 1.5 / 1 core.
- GPUThermalForecast: the issue's case (a node at 70 °C rising fast loses to one at 74 °C steady), its filter and
  what explain shows (horizon, window).
- HotValue: Crane's hot value (recent placements per node lower its score) on the in-flight ledger: a placement
  counts until a sample measured after it arrives.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from metrics_sched.app.cli.explain_cmd import render_decision
from metrics_sched.config import ConfigError
from metrics_sched.plugins.gpu_thermal_forecast import GPUThermalForecast
from metrics_sched.plugins.hot_value import HotValue
from metrics_sched.plugins.load_risk_balancing.plugin import risk_scores
from metrics_sched.plugins.target_load_packing.plugin import packing_scores, predicted_millicores
from tests.unit.fakes import node, pod
from tests.unit.test_observability import audited
from tests.unit.test_scheduler import drain
from tests.unit.test_telemetry_scoring import NOW, Clock, feed, gpu_nodes, make

pytestmark = pytest.mark.unit


def only(plugin: str, args: dict[str, Any] | None = None, *, extra: tuple[tuple[str, int], ...] = (),
         filter_too: bool = False) -> dict[str, Any]:
    plugins: dict[str, Any] = {"score": {"disabled": [{"name": "*"}], "enabled": [
        {"name": plugin, "weight": 1}, *({"name": n, "weight": w} for n, w in extra)]}}
    if filter_too:
        plugins["filter"] = {"enabled": [{"name": plugin}]}
    config: dict[str, Any] = {"profiles": [{"plugins": plugins}]}
    if args is not None:
        config["profiles"][0]["pluginConfig"] = [{"name": plugin, "args": args}]
    return config


def scores_by_node(scheduler: Any, result: Any, plugin: str) -> dict[str, float]:
    term = next(t for t in result.terms if t.plugin == plugin)
    return dict(zip(scheduler.state.table.names_of(result.feasible_rows), term.normalized.tolist(), strict=True))


# -- LoadRiskBalancing -------------------------------------------------------------------------------------
# (name, margin, sensitivity, usedAvg, usedStdev, expected): analysis_test.go's TestComputeScore, capacity 100 and
# request 10 in every row; here as fractions of the capacity.
TRIMARAN_RISK = [
    ("valid data", 1, 1, 40, 36, 57),
    ("negative usedAvg", 1, 2, -40, 36, 65),
    ("large usedAvg", 1, 2, 200, 36, 20),
    ("negative usedStdev", 1, 2, 40, -36, 75),
    ("large usedStdev", 1, 2, 40, 120, 25),
    ("negative margin", -1, 1, 40, 36, 75),
    ("negative sensitivity", 1, -1, 40, 36, 57),
    ("zero sensitivity", 1, 0, 40, 36, 75),
]


@pytest.mark.parametrize(("name", "margin", "sensitivity", "avg", "std", "expected"), TRIMARAN_RISK,
                         ids=[c[0] for c in TRIMARAN_RISK])
def test_risk_score_is_trimarans(name: str, margin: float, sensitivity: float, avg: float, std: float,
                                 expected: int) -> None:
    score = risk_scores(np.array([avg / 100]), np.array([std / 100]), np.array([10 / 100]), margin, sensitivity)
    assert round(float(score[0])) == expected


def test_load_risk_prefers_the_steady_node_over_the_swinging_one_with_a_lower_mean() -> None:
    values = {"node_cpu_utilisation_mean": {"steady": 0.5, "swinging": 0.4},
              "node_cpu_utilisation_stddev": {"steady": 0.02, "swinging": 0.36}}
    scheduler, api, cache = make(only("LoadRiskBalancing"))
    gpu_nodes(scheduler, ["steady", "swinging"])  # 64 cores each; the pod asks 100m
    feed(cache, values)
    api.add_pod(pod("p"))
    result = scheduler.schedule_one(timeout=1)
    assert result is not None and result.node == "steady"
    demand = 0.1 / 64
    assert scores_by_node(scheduler, result, "LoadRiskBalancing") == pytest.approx({
        "steady": 100 * (1 - (0.5 + demand + 0.02) / 2), "swinging": 100 * (1 - (0.4 + demand + 0.36) / 2)})
    # What /decisions keeps: both metrics of the window, per candidate.
    scheduler, api, cache = make(only("LoadRiskBalancing"))
    ring, _ = audited(scheduler)
    gpu_nodes(scheduler, ["steady", "swinging"])
    feed(cache, values)
    api.add_pod(pod("p"))
    drain(scheduler, api)
    [record] = ring.query(pod="default/p")
    metrics = [m.metric for m in record.candidates[0].terms[0].metrics]
    assert metrics == ["node_cpu_utilisation_mean", "node_cpu_utilisation_stddev"]


def test_load_risk_takes_the_worst_resource_and_a_missing_stddev_counts_as_zero() -> None:
    args = {"safeVarianceSensitivity": 2, "resources": [
        {"resource": "cpu", "mean": "cpu_mean", "stddev": "cpu_std"},
        {"resource": "memory", "mean": "mem_mean", "stddev": "mem_std"}]}
    scheduler, api, cache = make(only("LoadRiskBalancing", args))
    gpu_nodes(scheduler, ["a"])
    feed(cache, {"cpu_mean": {"a": 0.2}, "cpu_std": {"a": 0.04}, "mem_mean": {"a": 0.6}})
    api.add_pod(pod("p", cpu="0", memory="0"))
    result = scheduler.schedule_one(timeout=1)
    assert result is not None
    # cpu: (0.2 + sqrt(0.04)) / 2 = 0.2 -> 80; memory: (0.6 + 0) / 2 = 0.3 -> 70; the node scores its worst.
    assert scores_by_node(scheduler, result, "LoadRiskBalancing") == pytest.approx({"a": 70.0})


def test_load_risk_args_are_checked_as_upstream() -> None:
    with pytest.raises(ConfigError, match="safeVarianceMargin"):
        make(only("LoadRiskBalancing", {"safeVarianceMargin": -1}))


# -- TargetLoadPacking -------------------------------------------------------------------------------------
def test_packing_score_is_trimarans() -> None:
    # targetloadpacking_test.go at the default target 40: new node (0 %) 40, hot node (50 %) 33, excess (130 %) 0;
    # and the ends of the two lines: 100 at the target, 0 at 100 %.
    assert packing_scores(np.array([0.0, 50.0, 130.0, 40.0, 100.0]), 40).tolist() == [40, 33, 0, 100, 0]
    # The README's example target of 70: 35 % packs at 85, 85 % spreads at 35.
    assert packing_scores(np.array([35.0, 85.0]), 70).tolist() == [85, 35]


def test_predicted_use_is_limit_else_request_times_multiplier_else_default() -> None:
    def containers(*resources: dict[str, Any]) -> dict[str, Any]:
        return {"spec": {"containers": [{"name": f"c{i}", "resources": r} for i, r in enumerate(resources)],
                         "overhead": {"cpu": "50m"}}}

    pod_body = containers({"limits": {"cpu": "2"}, "requests": {"cpu": "1"}}, {"requests": {"cpu": "500m"}}, {})
    # 2000 (limit) + 750 (500m x 1.5) + 1000 (best effort: the default) + 50 (overhead)
    assert predicted_millicores(pod_body, 1000, 1.5) == 3800
    assert predicted_millicores({"spec": {}}, 1000, 1.5) == 0  # upstream's "new node" pod has no containers


def test_target_load_packing_packs_up_to_the_target_then_spreads() -> None:
    scheduler, api, cache = make(only("TargetLoadPacking"))
    for name in ("busy", "packable", "idle"):
        scheduler.handlers.on_node_event("ADDED", node(name, cpu="8"))
    feed(cache, {"node_cpu_utilisation": {"busy": 0.30, "packable": 0.20, "idle": 0.05}})
    api.add_pod(pod("p", cpu="1"))  # no limit: 1 core x 1.5 = 18.75 % of 8 cores
    result = scheduler.schedule_one(timeout=1)
    assert result is not None and result.node == "packable"
    # busy 48.75 % > 40: 40 * 51.25 / 60 = 34; packable 38.75 %: 60 * 38.75 / 40 + 40 = 98; idle 23.75 %: 76.
    assert scores_by_node(scheduler, result, "TargetLoadPacking") == {"busy": 34, "packable": 98, "idle": 76}


def test_target_load_packing_args() -> None:
    with pytest.raises(ConfigError, match="targetUtilization"):
        make(only("TargetLoadPacking", {"targetUtilization": 100}))
    with pytest.raises(ConfigError, match="defaultRequests"):
        make(only("TargetLoadPacking", {"defaultRequests": {"cpu": "lots"}}))


# -- GPUThermalForecast ------------------------------------------------------------------------------------
RISING_VS_STEADY: dict[str, dict[str, float]] = {"gpu_temperature": {"rising": 70, "steady": 74},
                    # predict_linear 30m ahead: +1 °C/min for the rising node, flat for the steady one
                    "gpu_temperature_forecast": {"rising": 100, "steady": 74.5}}


def test_a_node_rising_fast_loses_to_a_steady_warmer_one() -> None:
    # GPUTemperature alone prefers the cooler node now; with the forecast beside it, the steady one wins.
    scheduler, api, cache = make(only("GPUTemperature"))
    gpu_nodes(scheduler, ["rising", "steady"])
    feed(cache, RISING_VS_STEADY)
    api.add_pod(pod("p", gpus=1))
    result = scheduler.schedule_one(timeout=1)
    assert result is not None and result.node == "rising"

    scheduler, api, cache = make(only("GPUThermalForecast", extra=(("GPUTemperature", 1),)))
    ring, _ = audited(scheduler)
    gpu_nodes(scheduler, ["rising", "steady"])
    feed(cache, RISING_VS_STEADY)
    api.add_pod(pod("p", gpus=1))
    drain(scheduler, api)
    assert api.binds == [("default/p", "steady")]
    [record] = ring.query(pod="default/p")
    text = render_decision(record.as_dict())
    assert "forecast 30m ahead (trend over the last 10m)" in text
    assert "gpu_temperature_forecast" in text and "74.5" in text


def test_the_forecast_filter_treats_a_node_forecast_above_the_threshold_as_hot() -> None:
    scheduler, api, cache = make(only("GPUThermalForecast", {"filter": True, "horizon": "15m", "window": "5m"},
                                      filter_too=True))
    gpu_nodes(scheduler, ["rising"])
    feed(cache, RISING_VS_STEADY)
    api.add_pod(pod("p", gpus=1))
    result = scheduler.schedule_one(timeout=1)
    assert result is not None and result.node is None
    assert "node(s) had a GPU forecast above 85°C within 15m" in result.message()
    # A refresh with the trend gone re-admits the node.
    feed(cache, {"gpu_temperature_forecast": {"rising": 80}})
    drain(scheduler, api)
    assert api.binds == [("default/p", "rising")]


def test_forecast_args() -> None:
    with pytest.raises(ConfigError, match="horizon"):
        make(only("GPUThermalForecast", {"horizon": "soon"}))
    with pytest.raises(ConfigError, match="coolest"):
        make(only("GPUThermalForecast", {"coolest": 90}))


# -- HotValue -------------------------------------------------------------------------------------------
def test_hot_value_spreads_a_burst_until_telemetry_shows_the_pods() -> None:
    clock = Clock()
    scheduler, api, cache = make(only("HotValue"), clock=clock)
    for name in ("a", "b", "c"):
        scheduler.handlers.on_node_event("ADDED", node(name, cpu="64"))
    feed(cache, {"node_cpu_utilisation": {"a": 0.1, "b": 0.1, "c": 0.1}})
    for i in range(3):
        api.add_pod(pod(f"p{i}", cpu="100m"))
    drain(scheduler, api)
    assert sorted(node_name for _, node_name in api.binds) == ["a", "b", "c"]  # one each: each placement is hot
    plugin = scheduler.frameworks["metrics-sched"].instances["HotValue"]
    assert isinstance(plugin, HotValue)
    table = scheduler.state.table
    # One pod in the last 5m (1/5) and in the last 1m (1/2): 0.7 each.
    assert plugin.hot_values(table)[[table.index[n] for n in "abc"]].tolist() == pytest.approx([0.7] * 3)
    clock.now = NOW + 90  # past the 1m policy
    assert plugin.hot_values(table)[table.index["a"]] == pytest.approx(0.2)
    feed(cache, {"node_cpu_utilisation": {"a": 0.2}}, observed=NOW + 80, fetched=NOW + 90)  # a's sample shows it
    assert plugin.hot_values(table)[[table.index[n] for n in "abc"]].tolist() == pytest.approx([0.0, 0.2, 0.2])


def test_pods_placed_within_the_window_add_their_heat_to_the_forecast_until_it_passes() -> None:
    """A trend shows a pod's heat minutes later: the plugin adds recentHeat x the pod's share of the node's GPUs
    for `window` after it placed the pod (at Reserve), so a burst does not herd onto the coolest forecast."""
    clock = Clock()
    config = only("GPUThermalForecast")
    config["profiles"][0]["plugins"]["reserve"] = {"enabled": [{"name": "GPUThermalForecast"}]}
    scheduler, api, cache = make(config, clock=clock)
    gpu_nodes(scheduler, ["a", "b"])  # 8 GPUs each
    feed(cache, {"gpu_temperature_forecast": {"a": 60, "b": 62}})
    api.add_pod(pod("p1", gpus=4))
    drain(scheduler, api)
    api.add_pod(pod("p2", gpus=4))
    result = scheduler.schedule_one(timeout=1)
    assert result is not None and result.node == "b"  # a: 60 + 15 x 4/8 = 67.5 > 62
    term = next(t for t in result.terms if t.plugin == "GPUThermalForecast")
    [evidence] = term.evidence
    table = scheduler.state.table
    assert evidence.in_flight is not None and evidence.in_flight.take(np.array([table.index["a"]]))[0] == 7.5
    plugin = scheduler.frameworks["metrics-sched"].instances["GPUThermalForecast"]
    assert isinstance(plugin, GPUThermalForecast)
    clock.now = NOW + 601  # the 10m window has passed: the trend shows the pod by now
    assert plugin._heat(table) is None  # pruned: nothing placed within the window


def test_the_recent_placements_sums_follow_additions_removals_and_the_window() -> None:
    from metrics_sched.plugins.gpu_thermal_forecast.plugin import _Recent

    scheduler, _, _ = make(only("GPUThermalForecast"))
    gpu_nodes(scheduler, ["a", "b"])
    table = scheduler.state.table
    a, b = table.index["a"], table.index["b"]
    recent = _Recent()
    for i in range(200):  # past the buffers' first size: they grow
        recent.add(f"u{i}", "a" if i % 2 else "b", table, float(i), 0.125)
    recent.remove("u1")
    recent.add("u3", "b", table, 200.0, 0.5)  # a uid placed again: its old entry goes
    assert recent.sums[[a, b]].tolist() == pytest.approx([98 * 0.125, 100 * 0.125 + 0.5])
    recent.expire(150.0)  # entries before t=150 leave (and the buffers compact)
    assert len(recent) == 51 and recent.head == 0
    assert recent.sums[[a, b]].tolist() == pytest.approx([25 * 0.125, 25 * 0.125 + 0.5])
    scheduler.handlers.on_node_event("ADDED", node("c", gpus=8))  # rows may move: rebuilt from the names
    recent.sync(scheduler.state.table)
    assert recent.sums[[a, b]].tolist() == pytest.approx([25 * 0.125, 25 * 0.125 + 0.5])
    recent.expire(1000.0)
    assert len(recent) == 0 and not recent.sums.any()
