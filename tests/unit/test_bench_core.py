"""The core bench at a tiny size: it runs and reports what it promises (never how fast)."""

from __future__ import annotations

import json

import pytest

from bench.core_bench import CORE_CONFIG, make_cluster, run
from bench.scenario import build_scheduler
from metrics_sched.plugins import BUILTIN

pytestmark = pytest.mark.unit


def test_every_builtin_plugin_is_on() -> None:
    harness = build_scheduler(CORE_CONFIG)
    try:
        # One queueSort only: the default, Coscheduling, sorts as PrioritySort does for pods in no group.
        assert set(harness.framework.instances) == set(BUILTIN) - {"PrioritySort"}
    finally:
        harness.stop()


def test_cluster_is_deterministic_by_seed() -> None:
    assert make_cluster(20, seed=4) == make_cluster(20, seed=4)
    assert make_cluster(20, seed=4) != make_cluster(20, seed=5)


def test_core_bench_runs_at_a_tiny_size() -> None:
    result = run(True, sizes=(50,), decisions=50, cycles=30, warmup=5, rss_nodes=50, rss_pods=200,
                 profile_nodes=50, profile_decisions=20, ledger_nodes=50, ledger_entries=(0, 200))
    json.dumps(result)
    (row,) = result["sizes"]
    assert row["nodes"] == 50
    for key in ("decisions_per_second", "p50_ms", "p99_ms", "max_ms", "cycle", "decision"):
        assert key in row, key
    assert row["decision"]["decisions"] == 50 and row["decision"]["unscheduled"] == 0
    assert row["cycle"]["decisions"] == 30 and row["cycle"]["unscheduled"] == 0
    assert "Score/GPUTemperature" in row["cycle"]["plugin_us_per_cycle"]
    assert row["decision"]["binds"] == 55  # warm-up included: every placed pod was handed to the binder
    default = result["default_profile"]  # the default profile alone, at profile_nodes
    assert default["nodes"] == 50 and default["decision"]["decisions"] == 50 and default["decision"]["unscheduled"] == 0
    assert "Score/CustomMetric" in row["cycle"]["plugin_us_per_cycle"]
    assert "Score/CustomMetric" not in default["cycle"]["plugin_us_per_cycle"]
    assert "Score/NodeLoad" in default["cycle"]["plugin_us_per_cycle"]
    assert "error" not in result["rss"], result["rss"].get("error")
    assert result["rss"]["pods_in_state"] >= 200 and result["rss"]["rss_mb"] > 0
    assert 0 < len(result["profile"]["top_cumulative"]) <= 15
    assert [r["ledger_entries"] for r in result["ledger_scaling"]] == [0, 200]
