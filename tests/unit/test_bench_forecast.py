"""The forecast and load-variance benches at a tiny size: they run and report what they promise (never how fast),
and their models are what their docstrings say."""

from __future__ import annotations

import numpy as np
import pytest

from bench import forecast_bench, load_risk_bench

pytestmark = pytest.mark.unit


def test_predict_linear_is_prometheus_least_squares_line_horizon_ahead() -> None:
    minutes = np.arange(20, dtype=np.float64)
    readings = np.stack([50 + 1.5 * minutes, np.full(20, 60.0)], axis=1)
    ahead = forecast_bench.predict_linear(readings, 19)
    # A straight climb of 1.5 °C a minute, 30 minutes past the last reading; a flat one stays.
    assert ahead.tolist() == pytest.approx([50 + 1.5 * (19 + forecast_bench.HORIZON_MIN), 60.0])
    assert forecast_bench.predict_linear(readings, 0).tolist() == [50.0, 60.0]  # one reading: itself


def test_the_forecast_bench_runs_and_compares_the_two_profiles() -> None:
    result = forecast_bench.run(True, nodes=12)
    assert set(result["contenders"]) == set(forecast_bench.CONTENDERS)
    for row in result["contenders"].values():
        assert row["first_placements"] > 0 and 0 <= row["bad_placements"] <= row["placements"]
    assert set(result["comparison"]) == {"bad_placements_change_pct", "evictions_change_pct",
                                         "objective_per_pod_change_pct"}
    assert "| with GPUThermalForecast |" in forecast_bench.markdown(result)


def test_the_load_risk_bench_runs_every_contender_on_the_same_pods() -> None:
    result = load_risk_bench.run(True, nodes=10)
    rows = result["contenders"]
    assert set(rows) == set(load_risk_bench.CONTENDERS)
    assert len({r["placed"] for r in rows.values()}) == 1
    assert all(0 <= r["on_nodes_peaking_above_90"] <= r["judged"] for r in rows.values())
    util, swinging = load_risk_bench.background(10, 120, 0)
    assert swinging.sum() == 5 and util[:, swinging].std(axis=0).min() > util[:, ~swinging].std(axis=0).max()
    assert "Trimaran's recommended" in load_risk_bench.markdown(result)
