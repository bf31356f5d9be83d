"""The rebalance bench at a tiny size: it runs and reports what it promises (never how fast)."""

from __future__ import annotations

import json

import pytest

from bench.rebalance_bench import CONTENDERS, heat_up, markdown, run, temperatures, why_skipped
from bench.scenario import make_scenario

pytestmark = pytest.mark.unit


def test_nodes_heat_up_from_their_start_to_the_peak() -> None:
    scenario = make_scenario(20, seed=2)
    heating = heat_up(scenario, steps=10, seed=2)
    assert len(heating) == 5 and all(0 <= h.start < 5 for h in heating)
    before, after = temperatures(scenario, heating, 0), temperatures(scenario, heating, 100)
    for h in heating:
        assert before[h.node] == scenario.nodes[h.node].temperature and after[h.node] == 95.0
    assert sorted(after)[len(after) // 2] >= sorted(before)[len(before) // 2]


def test_skipped_reasons_lose_their_numbers() -> None:
    assert why_skipped("gpu_temperature 91.0 > 85 for 10m; b scores 70.1 vs 65.0 here (+5.1); "
                       "limit: 1 per node per interval") == "limit: 1 per node per interval"
    assert why_skipped("gpu_temperature 91.0 > 85 for 10m; no node better by 10 points (best: b 70.1 vs 65.0 here)"
                       ) == "no node better"


def test_rebalance_run_on_a_tiny_scenario() -> None:
    result = run(True, nodes=24, steps=12, seed=0)
    json.dumps(result)
    contenders = result["contenders"]
    assert list(contenders) == list(CONTENDERS)
    without = contenders["without the rebalancer"]
    assert without["evictions"] == 0 and without["verdicts"] == {}
    assert all(row["evictions"] == 0 for row in without["timeline"])
    assert len(without["timeline"]) == 13 and without["timeline"][0]["pods_above_threshold"] == 0
    for name, contender in contenders.items():
        summary = contender["summary"]
        for key in ("mean_gpu_temp_avg", "max_gpu_temp_peak", "pod_hours_above_threshold", "hourly_cost_avg",
                    "hourly_cost_final"):
            assert summary[key] is not None, (name, key)
        # Every pod is still placed at the end: an evicted pod's replacement was placed.
        assert summary["placed_final"] == without["summary"]["placed_final"] > 0
        assert contender["evictions"] == sum(row["evictions"] for row in contender["timeline"])
        assert contender["verdicts"].get("evicted", 0) == contender["evictions"]
    moved = contenders["with the rebalancer (margin 5)"]
    assert moved["evictions"] > 0
    assert moved["summary"]["pod_hours_above_threshold"] < without["summary"]["pod_hours_above_threshold"]
    assert "| with the rebalancer (margin 5) |" in markdown(result)
