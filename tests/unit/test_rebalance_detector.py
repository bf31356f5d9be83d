"""Which nodes are persistently bad: streaks of fresh values above a threshold or the cluster's quantile."""

from __future__ import annotations

import pytest

from metrics_sched.rebalance import NodeRule, RebalanceConfig, RuleKind
from metrics_sched.rebalance.detector import Detector
from metrics_sched.rebalance.wording import duration, number
from tests.unit.fakes import node
from tests.unit.test_rebalance_rebalancer import HOT, INTERVAL, Rig
from tests.unit.test_telemetry_scoring import NOW, feed


def bad(rig: Rig) -> list[tuple[str, float]]:
    return [(b.node, b.since) for b in rig.rebalancer.bad_nodes()]


def test_the_streak_starts_when_the_value_first_exceeds_and_the_node_is_bad_after_for() -> None:
    rig = Rig()
    rig.at(0, {"a": 80, "b": 40})
    rig.at(60, {"a": 86, "b": 40})  # starts here
    rig.at(300, {"a": 90, "b": 40})
    assert bad(rig) == []
    rig.at(359, {"a": 90, "b": 40})
    assert bad(rig) == []
    rig.at(360, {"a": 90, "b": 40})
    assert bad(rig) == [("a", NOW + 60)]


def test_equal_to_the_threshold_is_not_above() -> None:
    rig = Rig(RebalanceConfig(rules=(NodeRule("hot", "gpu_temperature", threshold=85, for_seconds=0),)))
    rig.at(0, {"a": 85.0, "b": 85.1})
    assert [b.node for b in rig.rebalancer.bad_nodes()] == ["b"]


def test_a_value_below_ends_the_streak_and_the_next_one_starts_afresh() -> None:
    rig = Rig()
    rig.at(0, {"a": 90})
    rig.at(200, {"a": 84})  # ends
    rig.at(260, {"a": 90})  # starts again
    rig.at(500, {"a": 90})
    assert bad(rig) == []
    rig.at(560, {"a": 90})
    assert bad(rig) == [("a", NOW + 260)]


def test_a_stale_value_ends_the_streak_however_hot_it_was() -> None:
    rig = Rig()
    rig.at(0, {"a": 99})
    rig.clock.now = NOW + 200
    rig.temperatures({"a": 99}, age=500)  # a frozen exporter: measured long ago (maxAge 120 s)
    rig.rebalancer.tick()
    assert rig.rebalancer._detector.streaking() == 0
    rig.at(300, {"a": 99})  # fresh again: a new streak
    rig.at(599, {"a": 99})
    assert bad(rig) == []
    rig.at(600, {"a": 99})
    assert bad(rig) == [("a", NOW + 300)]


def test_a_missing_value_ends_the_streak_and_never_starts_one() -> None:
    rig = Rig()
    rig.at(0, {"a": 99})
    rig.at(61, {"b": 40})  # a's value is 61 s past its fetch: over the 60 s ttl, as good as missing
    assert rig.rebalancer._detector.streaking() == 0
    for t in range(120, 1000, 60):
        rig.at(t, {"b": 40})
    assert bad(rig) == [] and rig.rebalancer._detector.streaking() == 0


def test_prometheus_dead_all_values_stale_makes_nothing_bad() -> None:
    rig = Rig()
    rig.place("p", "a")
    for t in range(0, 360, 60):
        rig.at(t, {"a": 99, "b": 40, "c": 40})
    assert bad(rig) == [("a", NOW)]
    # No refresh after 360: the values go stale (ttl 60 s) and nothing is evicted, however long it lasts.
    for t in range(420, 3600, 60):
        assert rig.at(t) == []
    assert bad(rig) == [] and rig.rebalancer._detector.streaking() == 0


def test_a_quantile_rule_compares_with_the_clusters_fresh_values() -> None:
    rule = NodeRule("expensive", "node_hourly_cost", RuleKind.QUANTILE, quantile=0.5, for_seconds=0)
    rig = Rig(RebalanceConfig(rules=(rule,)), nodes={n: 1 for n in "abcd"})
    rig.clock.now = NOW
    feed(rig.cache, {"node_hourly_cost": {"a": 10, "b": 2, "c": 3}}, observed=NOW - 1, fetched=NOW)
    # d has no value: neither compared nor part of the quantile (the median of 2, 3, 10 is 3).
    rig.rebalancer.tick()
    [found] = rig.rebalancer.bad_nodes()
    assert (found.node, found.value, found.threshold, found.rule) == ("a", 10.0, 3.0, "expensive")
    # One node with a value is its own quantile: never above it.
    rig.clock.now = NOW + 200
    feed(rig.cache, {"node_hourly_cost": {"a": 10}}, observed=rig.clock.now - 1, fetched=rig.clock.now)
    rig.rebalancer.tick()
    assert rig.rebalancer.bad_nodes() == []


def test_several_rules_each_report_the_node_and_the_first_one_names_the_verdict() -> None:
    warm = NodeRule("warm-gpu", "gpu_temperature", threshold=80, for_seconds=0)
    rig = Rig(RebalanceConfig(rules=(HOT, warm), interval_seconds=INTERVAL))
    rig.place("p", "a")
    verdicts = rig.hot_for(300, {"a": 91.0, "b": 40.0, "c": 60.0})
    assert [(b.node, b.rule) for b in rig.rebalancer.bad_nodes()] == [("a", "hot-gpu"), ("a", "warm-gpu")]
    assert [v.rule for v in verdicts] == ["hot-gpu"]


def test_a_node_that_leaves_is_forgotten_and_starts_afresh_when_it_returns() -> None:
    rig = Rig()
    rig.at(0, {"a": 99, "b": 40})
    rig.at(200, {"a": 99, "b": 40})
    rig.scheduler.handlers.on_node_event("DELETED", node("a"))
    rig.at(260, {"b": 40})
    assert rig.rebalancer._detector.streaking() == 0
    rig.scheduler.handlers.on_node_event("ADDED", node("a", gpus=8))
    rig.at(320, {"a": 99, "b": 40})
    rig.at(600, {"a": 99, "b": 40})
    assert bad(rig) == []
    rig.at(620, {"a": 99, "b": 40})
    assert bad(rig) == [("a", NOW + 320)]


def test_memory_is_only_the_nodes_in_a_streak() -> None:
    rig = Rig(nodes={f"n{i}": 1 for i in range(50)})
    temps = {f"n{i}": (99.0 if i < 5 else 40.0) for i in range(50)}
    for t in range(0, 600, 60):
        rig.at(t, temps)
    detector: Detector = rig.rebalancer._detector
    assert detector.streaking() == 5
    rig.at(660, {n: 40.0 for n in temps})
    assert detector.streaking() == 0


@pytest.mark.parametrize(("seconds", "text"), [(0, "0s"), (45, "45s"), (360, "6m"), (390, "6m30s"), (7200, "2h"),
                                                (3900, "1h5m")])
def test_durations_read_well(seconds: float, text: str) -> None:
    assert duration(seconds) == text


@pytest.mark.parametrize(("value", "text"), [(91.0, "91.0"), (0.93, "0.93"), (4.25, "4.25"), (1234.5, "1.23e+03")])
def test_numbers_read_well(value: float, text: str) -> None:
    assert number(value) == text
