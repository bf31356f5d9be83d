"""The sources bench's account of each dev-cluster process' CPU per round of refreshes (bench/sources_bench.py)."""

from __future__ import annotations

import pytest

from bench.sources_bench import cpu_per_round

pytestmark = pytest.mark.unit


def test_each_process_cpu_per_round_is_its_share_of_the_rounds_largest_first() -> None:
    before = {"prometheus": 10.0, "emulator": 5.0, "etcd": 1.0}
    after = {"prometheus": 11.0, "emulator": 5.5, "etcd": 1.25}
    assert list(cpu_per_round(before, after, 5).items()) == [("prometheus", 0.2), ("emulator", 0.1), ("etcd", 0.05)]


def test_beyond_background_subtracts_what_a_process_spends_in_a_rounds_time_anyway() -> None:
    """etcd spends 0.1 CPU-s a second with no refresh running: over rounds of 0.5 s that is 0.05 a round, all of
    what it spent (nothing beyond); Prometheus idles and spends 0.2 a round beyond."""
    before, after = {"prometheus": 0.0, "etcd": 0.0}, {"prometheus": 1.0, "etcd": 0.25}
    idle = {"prometheus": 0.0, "etcd": 0.5}
    beyond = cpu_per_round(before, after, 5, idle, idle_seconds=5.0, round_seconds=0.5)
    assert beyond == {"prometheus": 0.2, "etcd": 0.0}


def test_a_process_that_started_between_the_readings_counts_nothing() -> None:
    assert cpu_per_round({}, {"kwok": 3.0}, 5) == {"kwok": 0.0}
