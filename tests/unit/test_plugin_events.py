"""Typed plugin events through the Handle (metrics_sched.framework.plugin_events), and the metrics plugins report
through them: the exporter registers what they declare and counts what they publish, knowing no plugin."""

from __future__ import annotations

import ast
import logging
from dataclasses import dataclass
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

import metrics_sched
from metrics_sched.framework import MetricKind, MetricSample, PluginEvents, PluginMetric
from metrics_sched.observability import SchedulerMetrics
from metrics_sched.observability.plugin_metrics import PluginMetrics
from metrics_sched.plugins.default_preemption.outcome import PREEMPTION
from tests.unit.test_preemption import full_pool, inference, make, record_results, run_until

pytestmark = pytest.mark.unit

COUNTS = PluginMetric("test_plugin_counts", "Counted things, by kind.", MetricKind.COUNTER, ("kind",),
                      shown=(("a",), ("b",)))
WAITS = PluginMetric("test_plugin_waits", "Waits.", MetricKind.HISTOGRAM, buckets=(1, 10))


@dataclass(frozen=True)
class Happened:
    what: str


@dataclass(frozen=True)
class HappenedMore(Happened):
    pass


def test_an_event_nobody_subscribed_to_goes_nowhere() -> None:
    events = PluginEvents()
    assert not events.subscribed(Happened)
    events.publish(Happened("x"))  # nothing to call, nothing raised


def test_subscribers_get_the_events_of_exactly_their_type_in_order() -> None:
    events = PluginEvents()
    seen: list[tuple[str, str]] = []
    events.subscribe(Happened, lambda e: seen.append(("first", e.what)))
    events.subscribe(Happened, lambda e: seen.append(("second", e.what)))
    assert events.subscribed(Happened) and not events.subscribed(HappenedMore)
    events.publish(Happened("x"))
    events.publish(HappenedMore("y"))  # matched by exact type: a subclass is another event
    assert seen == [("first", "x"), ("second", "x")]


def test_a_failing_subscriber_neither_fails_the_plugin_nor_starves_the_others(
        caplog: pytest.LogCaptureFixture) -> None:
    events = PluginEvents()
    seen: list[Happened] = []

    def broken(event: Happened) -> None:
        raise RuntimeError("bug")

    events.subscribe(Happened, broken)
    events.subscribe(Happened, seen.append)
    with caplog.at_level(logging.ERROR, "metrics_sched.framework.plugin_events"):
        events.publish(Happened("x"))
    assert seen == [Happened("x")]
    assert "subscriber" in caplog.text


def test_a_metric_may_be_declared_again_but_not_differently() -> None:
    events = PluginEvents()
    events.declare(COUNTS, WAITS)
    events.declare(COUNTS)  # the same plugin in a second profile
    assert events.metrics() == (COUNTS, WAITS)
    with pytest.raises(ValueError, match="already declared"):
        events.declare(PluginMetric("test_plugin_counts", "Another help.", MetricKind.COUNTER))


def test_a_metric_declaration_is_checked() -> None:
    with pytest.raises(ValueError, match="only a histogram"):
        PluginMetric("c", "h", MetricKind.COUNTER, buckets=(1,))
    with pytest.raises(ValueError, match="do not match"):
        PluginMetric("c", "h", MetricKind.COUNTER, ("kind",), shown=(("a", "b"),))


def exposition(registry: CollectorRegistry) -> str:
    return bytes(generate_latest(registry)).decode()


def test_declared_metrics_show_from_the_start_and_samples_land_on_them() -> None:
    events = PluginEvents()
    events.declare(COUNTS, WAITS)
    registry = CollectorRegistry()
    PluginMetrics(registry, [events])
    text = exposition(registry)
    assert 'test_plugin_counts_total{kind="a"} 0.0' in text and 'test_plugin_counts_total{kind="b"} 0.0' in text
    assert "test_plugin_waits_count 0.0" in text
    events.publish(COUNTS.sample(2, "a"))
    events.publish(COUNTS.sample(1, "c"))
    events.publish(WAITS.sample(5))
    text = exposition(registry)
    assert 'test_plugin_counts_total{kind="a"} 2.0' in text and 'test_plugin_counts_total{kind="c"} 1.0' in text
    assert 'test_plugin_waits_bucket{le="10.0"} 1.0' in text and 'test_plugin_waits_bucket{le="1.0"} 0.0' in text


def test_a_metric_first_seen_in_a_sample_is_registered_then() -> None:
    events = PluginEvents()
    registry = CollectorRegistry()
    PluginMetrics(registry, [events])
    assert "test_plugin_waits" not in exposition(registry)
    events.publish(MetricSample(WAITS, 0.5))
    assert "test_plugin_waits_count 1.0" in exposition(registry)


def metric_value(metrics: SchedulerMetrics, line_start: str) -> float:
    text = metrics.exposition().decode()
    return float(next(line.rsplit(" ", 1)[1] for line in text.splitlines() if line.startswith(line_start)))


def test_preemption_metrics_count_what_the_cycles_show() -> None:
    """DefaultPreemption's own events give what the exporter read from the cycles before: one attempt per
    PostFilter run of the plugin, the victims of each preemption that chose a node."""
    scheduler, api, _ = make()
    metrics = SchedulerMetrics(scheduler)
    assert metric_value(metrics, "scheduler_preemption_attempts_total ") == 0
    assert metric_value(metrics, "scheduler_preemption_victims_count ") == 0
    assert metric_value(metrics, 'metrics_sched_gang_timeouts_total{reason="timeout"}') == 0  # Coscheduling's
    results = record_results(scheduler)
    full_pool(scheduler, api, nodes=3)
    api.add_pod(inference(cpu="2"))
    run_until(scheduler, lambda: any(b[0] == "default/infer" for b in api.binds))
    runs = sum(1 for r in results for plugin, point, _, _ in r.timings
               if point == "PostFilter" and plugin == "DefaultPreemption")
    chosen = [o for r in results if (o := r.cycle.get(PREEMPTION)) is not None and o.node is not None]
    assert runs >= 1 and chosen
    assert metric_value(metrics, "scheduler_preemption_attempts_total ") == runs
    assert metric_value(metrics, "scheduler_preemption_victims_count ") == len(chosen)
    assert metric_value(metrics, "scheduler_preemption_victims_sum ") == sum(len(o.victims) for o in chosen)


@pytest.mark.parametrize(("package", "forbidden"), [
    ("observability", ("metrics_sched.plugins",)),
    ("framework", ("metrics_sched.plugins",)),
    ("state", ("metrics_sched.plugins",)),
])
def test_lower_layers_know_no_concrete_plugin(package: str, forbidden: tuple[str, ...]) -> None:
    """The exporter reads plugins' events, the framework's registry is given its plugins, the PodGroup store reads
    a pod's group from the model: none imports a plugin or a plugin's library."""
    root = Path(metrics_sched.__file__).parent / package
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else \
                [a.name for a in node.names] if isinstance(node, ast.Import) else []
            found += [f"{path.name}: {n}" for n in names if n.startswith(forbidden)]
    assert not found
