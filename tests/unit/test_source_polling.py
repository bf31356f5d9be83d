"""PolledSource: the health bookkeeping, backoff and circuit breaker every source shares, and the cache driving it."""

from __future__ import annotations

import json
import logging
import types
from collections.abc import Callable
from typing import Any, cast

import pytest

from metrics_sched.ports import FetchResult, NodeDirectory, Sample
from metrics_sched.telemetry import BreakerStatus, CircuitBreaker, MetricCache, PolledSource, SourceHealth

pytestmark = pytest.mark.unit

NODES = NodeDirectory(names=frozenset({"n1", "n2"}), by_internal_ip={}, cpu_allocatable={}, memory_allocatable={})
T0 = 1_800_000_000.0


class Clock:
    def __init__(self, t: float = T0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


Outcome = FetchResult | Exception


def time_zero() -> float:
    return T0


class Scripted(PolledSource):
    """Answers each fetch with the next scripted outcome (a result, or an exception to raise)."""

    def __init__(self, outcomes: list[Outcome], *, interval: float = 10.0, metrics: tuple[str, ...] = ("a", "b"),
                 clock: Callable[[], float] = time_zero, **kwargs: Any) -> None:
        super().__init__("scripted", interval, metrics, clock=clock, **kwargs)
        self.outcomes = outcomes
        self.fetches = 0

    def fetch(self, nodes: NodeDirectory) -> FetchResult:
        self.fetches += 1
        outcome = self.outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome


def ok(value: float = 1.0, **errors: str) -> FetchResult:
    samples = [Sample("a", node, value, T0 - 1) for node in sorted(NODES.names)]
    return FetchResult(samples=samples, dropped={"nan": 1}, errors=dict(errors), queries=2)


def test_a_success_is_recorded_and_the_next_refresh_is_one_interval_later() -> None:
    src = Scripted([ok()])
    assert src.poll(NODES) is not None
    health = src.health
    assert (health.up, health.last_success, health.last_attempt, health.consecutive_failures) == (True, T0, T0, 0)
    assert (health.queries, health.dropped, health.last_error) == (2, {"nan": 1}, "")
    assert src.next_delay() == 10.0 and health.next_attempt == T0 + 10.0


def test_failures_back_off_exponentially_up_to_four_intervals_and_recover_at_once() -> None:
    src = Scripted([RuntimeError("down")] * 5 + [ok()])
    delays = []
    for _ in range(5):
        assert src.poll(NODES) is None
        delays.append(src.next_delay())
    assert delays == [10.0, 20.0, 40.0, 40.0, 40.0]
    health = src.health
    assert (health.up, health.consecutive_failures, health.last_failure) == (False, 5, T0)
    assert health.last_error == "RuntimeError: down" and health.errors_by_reason == {"RuntimeError": 5}
    assert health.next_attempt == T0 + 40.0
    assert src.poll(NODES) is not None
    assert (health.up, health.consecutive_failures, src.next_delay()) == (True, 0, 10.0)


def test_max_backoff_is_configurable_and_never_below_the_interval() -> None:
    assert Scripted([], max_backoff=25.0).max_backoff == 25.0
    assert Scripted([], max_backoff=1.0).max_backoff == 10.0
    assert Scripted([], interval=600.0).max_backoff == 600.0  # 4 intervals, capped at 300 s, but >= interval


def test_every_metric_failing_is_a_failed_refresh_but_a_partial_one_succeeds() -> None:
    src = Scripted([ok(a="boom", b="bang"), ok(a="boom")])
    assert src.poll(NODES) is not None
    assert not src.health.up and src.health.consecutive_failures == 1 and src.next_delay() == 10.0
    assert src.poll(NODES) is not None
    assert src.health.up and src.health.consecutive_failures == 0 and src.health.last_error == "a: boom"
    assert src.health.errors_by_reason == {"metric_error": 3}


def test_a_failure_is_logged_when_it_starts_or_changes_not_on_every_refresh(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    src = Scripted([RuntimeError("down"), RuntimeError("down"), RuntimeError("other"), ok(), ok()])
    for _ in range(5):
        src.poll(NODES)
    messages = [r.getMessage() for r in caplog.records]
    assert len([m for m in messages if "failed" in m]) == 2
    assert len([m for m in messages if "recovered" in m]) == 1


def test_the_breaker_state_is_part_of_the_health_model() -> None:
    monotonic = Clock(0.0)
    breaker = CircuitBreaker(failure_threshold=2, cool_down=30.0, max_cool_down=120.0, clock=monotonic)
    src = Scripted([RuntimeError("down"), RuntimeError("down"), RuntimeError("still down"), ok()], breaker=breaker)
    src.poll(NODES)
    assert src.health.breaker == BreakerStatus("closed", 1, 30.0, 0, None)
    src.poll(NODES)
    assert src.health.breaker == BreakerStatus("open", 2, 30.0, 1, T0 + 30.0)
    assert src.next_delay() == 30.0 and src.health.next_attempt == T0 + 30.0

    body = json.loads(json.dumps(src.health.as_dict(now=T0 + 12.0)))
    assert body["breaker"] == {"state": "open", "consecutive_failures": 2, "cool_down": 30.0, "opened": 1,
                               "reopens_at": T0 + 30.0, "reopens_in": 18.0}

    monotonic.t = 10.0  # still open: no fetch, and it is not counted as another failure
    assert src.poll(NODES) is None and src.fetches == 2 and src.health.attempts == 2
    assert src.health.consecutive_failures == 2 and src.health.errors_by_reason["circuit_open"] == 1

    monotonic.t = 30.0  # half-open: one probe, which fails, so it re-opens for twice as long
    assert src.poll(NODES) is None and src.fetches == 3
    assert src.health.breaker == BreakerStatus("open", 3, 60.0, 2, T0 + 60.0)

    monotonic.t = 90.0
    assert src.poll(NODES) is not None
    assert src.health.breaker == BreakerStatus("closed", 0, 30.0, 2, None) and src.health.up


def test_the_cache_shares_the_sources_health_and_keeps_values_through_a_failure() -> None:
    clock = Clock()
    src = Scripted([ok(5.0), RuntimeError("down")], clock=clock)
    cache = MetricCache(clock=clock)
    cache.start(lambda: NODES)  # before add_source: no background thread, the test drives the refreshes
    cache.add_source(src)
    assert cache.health["scripted"] is src.health
    seen: list[tuple[str, bool]] = []
    cache.refresh_observers.append(lambda name, seconds, good: seen.append((name, good)))
    try:
        cache.refresh("scripted")
        cache.refresh("scripted")
    finally:
        cache.stop()
    assert seen == [("scripted", True), ("scripted", False)]
    assert cache.node_values("n1")["a"]["value"] == 5.0
    assert not cache.health["scripted"].up and cache.health["scripted"].coverage == {"a": 1.0, "b": 0.0}


def test_source_health_keeps_its_positional_constructor() -> None:
    health = SourceHealth("test", 5, ["m"])
    assert (health.name, health.interval, health.metrics, health.breaker) == ("test", 5, ["m"], None)
    assert health.as_dict(now=T0)["last_success_age"] is None


def test_the_sources_endpoint_shows_the_breaker_through_the_health_model() -> None:
    from metrics_sched.serving.status import SchedulerEndpoints

    src = Scripted([RuntimeError("down")], breaker=CircuitBreaker(failure_threshold=1, clock=Clock(0.0)))
    src.poll(NODES)
    cache = MetricCache()
    cache.add_source(src)
    app = cast(Any, types.SimpleNamespace(scheduler=types.SimpleNamespace(metrics=cache)))
    status, content_type, body = SchedulerEndpoints.sources(app, {})
    entry = json.loads(body)["scripted"]
    assert status == 200 and content_type == "application/json"
    assert entry["breaker"]["state"] == "open" and entry["consecutive_failures"] == 1 and entry["up"] is False
    assert entry["last_error"] == "RuntimeError: down" and entry["next_attempt"] == T0 + 30.0


def test_a_refresh_skipped_by_an_open_breaker_is_not_timed() -> None:
    src = Scripted([RuntimeError("down")], breaker=CircuitBreaker(failure_threshold=1, clock=Clock(0.0)))
    cache = MetricCache()
    cache.start(lambda: NODES)  # before add_source: no background thread, the test drives the refreshes
    cache.add_source(src)
    seen: list[bool] = []
    cache.refresh_observers.append(lambda name, seconds, good: seen.append(good))
    try:
        cache.refresh("scripted")  # fails: the breaker opens
        cache.refresh("scripted")  # skipped: no fetch, nothing to time
    finally:
        cache.stop()
    assert seen == [False] and src.fetches == 1 and src.health.attempts == 1
