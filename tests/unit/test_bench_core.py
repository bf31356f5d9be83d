"""The core bench at a tiny size: it runs and reports what it promises (never how fast)."""

from __future__ import annotations

import json

import pytest

from bench.core_bench import CORE_CONFIG, cycle_kinds, make_cluster, run
from bench.scenario import build_scheduler
from metrics_sched.plugins import BUILTIN, HISTORY_AWARE

pytestmark = pytest.mark.unit


def test_every_builtin_plugin_is_on() -> None:
    harness = build_scheduler(CORE_CONFIG)
    try:
        # One queueSort only: the default, Coscheduling, sorts as PrioritySort does for pods in no group. The opt-in
        # history-aware plugins are left out: the core's figures are those of the profiles without them (issue 48).
        assert set(harness.framework.instances) == set(BUILTIN) - {"PrioritySort"} - HISTORY_AWARE
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
    # Each measured decision counted as a full cycle or a batched one (20 templates among 50 pods: both kinds).
    assert 0 < row["decision"]["full_cycles"] < 50 and "full_p50_ms" in row["decision"]
    assert "batched_p99_ms" in row["decision"]
    default = result["default_profile"]  # the default profile alone, at profile_nodes
    assert default["nodes"] == 50 and default["decision"]["decisions"] == 50 and default["decision"]["unscheduled"] == 0
    assert "Score/CustomMetric" in row["cycle"]["plugin_us_per_cycle"]
    assert "Score/CustomMetric" not in default["cycle"]["plugin_us_per_cycle"]
    assert "Score/NodeLoad" in default["cycle"]["plugin_us_per_cycle"]
    assert "error" not in result["rss"], result["rss"].get("error")
    assert result["rss"]["pods_in_state"] >= 200 and result["rss"]["rss_mb"] > 0
    assert 0 < len(result["profile"]["top_cumulative"]) <= 15
    assert [r["ledger_entries"] for r in result["ledger_scaling"]] == [0, 200]


def test_cycle_kinds_splits_full_and_batched_decisions() -> None:
    split = cycle_kinds([0.001, 0.002, 0.003, 0.004], [True, False, True, False])
    assert split["full_cycles"] == 2
    assert split["full_p50_ms"] == 2.0 and split["batched_p50_ms"] == 3.0
    assert cycle_kinds([0.001], [False]) == {"full_cycles": 0, "batched_p50_ms": 1.0, "batched_p99_ms": 1.0}


def test_batch_bench_places_the_deployment_on_a_running_scheduler() -> None:
    """The batch bench's warm-up pod (another template) is placed first and untimed, alike batched and unbatched;
    the fresh scheduler's first cycle is reported apart and the Deployment's own first two cycles are timed."""
    from bench import batch_bench

    pods = batch_bench.deployment(12)
    warm = batch_bench.warmup_pods(1)
    config = batch_bench.PROFILES["no_default_spread"]
    batched = batch_bench.place(config, 40, pods, batching=True, warmup=warm)
    unbatched = batch_bench.place(config, 40, pods, batching=False, warmup=warm)
    assert len(batched["warm_nodes"]) == 1 and batched["warm_nodes"][0] is not None
    assert (batched["nodes"], batched["warm_nodes"]) == (unbatched["nodes"], unbatched["warm_nodes"])
    assert batched["placed"] == 12 and batched["batched"] == 10  # the full cycle, the one that stores, then batched
    assert batched["cold_first_cycle_ms"] > 0 and len(batched["first_cycles_us"]) == 2
    assert batch_bench.place(config, 40, pods, batching=True)["cold_first_cycle_ms"] is None  # no warm-up asked
