"""The soak bench at a tiny size: it runs and reports what it promises (never how fast)."""

from __future__ import annotations

import json

import pytest

from bench.soak_bench import markdown, run, slope, trend

pytestmark = pytest.mark.unit


def test_slope_and_flatness() -> None:
    assert slope([0, 1, 2, 3], [5, 7, 9, 11]) == pytest.approx(2.0)
    assert slope([0, 1], [0, 1]) is None  # too few windows to say
    windows = [{"decisions_total": 1000 * i, "rss_mb": 100.0 + 0.5 * i} for i in range(1, 6)]
    rising = trend(windows, "rss_mb", 0.01)
    assert rising["slope_per_1000_decisions"] == pytest.approx(0.5) and rising["flat"] is True
    assert trend(windows, "rss_mb", 0.001)["flat"] is False


def test_soak_runs_at_a_tiny_size() -> None:
    # Two simulated days (a week in the bench): the first is warm-up, the last fifth hammered.
    result = run(True, decisions=100, n_nodes=40, ring_size=50, days=2, plot=None)
    json.dumps(result)
    assert result["checks"]["ok"], result["checks"]
    assert result["decisions"] >= 100 and result["binds"] == {"bound": result["decisions"]}
    assert result["checks"]["tainted_binds"] == 0
    windows = result["windows"]
    assert len(windows) == result["ticks"] // 36 == 8 and windows[-1]["day"] == 2.0
    for window in windows:
        for key in ("p50_ms", "p99_ms", "rss_mb", "allocated_blocks", "decisions_total", "warmup", "hammered"):
            assert key in window, key
    assert windows[0]["warmup"] and windows[-1]["hammered"] and not windows[-1]["warmup"]
    for key in ("rss_mb", "allocated_blocks", "cycle_p50_ms"):
        assert "slope_per_1000_decisions" in result["trend"][key], key
    hammer = result["hammer"]
    # One answer renders at a time: the other clients are told 503 (retry) instead of starving the scheduler.
    assert hammer["requests"] > 0 and hammer["statuses"].get("200", 0) > 0, hammer
    assert set(hammer["statuses"]) <= {"200", "503"}, hammer
    assert hammer["first_answer"]["newest_first"] and hammer["latency_p99_ms"] is not None
    lease = result["lease_renewal"]
    assert sum(lease[k]["renewals"] for k in ("quiet", "while_hammered", "across_bench_pauses")) > 0
    memory = result["memory"]
    assert memory["history"]["timestamped_taints"] > memory["held"]["taint_sets"]
    assert memory["history"]["nodes_deleted"] > 0 and memory["current"]["nodes"] == 40
    assert memory["held"]["decision_ring"] == 50
    assert "Soak" in markdown(result)
