"""The metrics plugins report (Coscheduling's gang waits, DefaultPreemption's attempts, a third-party plugin's own):
each declared through the Handle's events (metrics_sched.framework.plugin_events) and registered here, and every
MetricSample a plugin publishes added to its counter or observed by its histogram. Nothing here knows a plugin.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Histogram

from metrics_sched.framework import MetricKind, MetricSample, PluginEvents, PluginMetric
from metrics_sched.observability.children import Children

__all__ = ["PluginMetrics"]


class _Series:
    """A declared metric on the registry, and how a sample lands on it."""

    __slots__ = ("_children", "_counter")

    def __init__(self, spec: PluginMetric, registry: CollectorRegistry) -> None:
        metric: Counter | Histogram
        if spec.kind == MetricKind.COUNTER:
            metric = Counter(spec.name, spec.help, spec.labels, registry=registry)
        else:
            metric = Histogram(spec.name, spec.help, spec.labels, registry=registry,
                               buckets=spec.buckets or Histogram.DEFAULT_BUCKETS)
        self._counter = spec.kind == MetricKind.COUNTER
        self._children = Children(metric, labelled=bool(spec.labels))
        for values in spec.shown:  # 0 from the start: the dashboards read "none", not "no data"
            self._children(*values)

    def add(self, sample: MetricSample) -> None:
        child = self._children(*sample.labels)
        if self._counter:
            child.inc(sample.value)
        else:
            child.observe(sample.value)


class PluginMetrics:
    """Subscribes to MetricSample on each of `buses` (one per scheduler, shared by its Handles) and registers the
    metrics declared there; a metric first seen in a sample (declared later, or never) is registered then."""

    def __init__(self, registry: CollectorRegistry, buses: Iterable[PluginEvents]) -> None:
        self._registry = registry
        self._series: dict[str, _Series] = {}
        self._lock = threading.Lock()  # samples come from any thread (Permit timers, bind workers)
        for events in buses:
            for spec in events.metrics():
                self._register(spec)
            events.subscribe(MetricSample, self.on_sample)

    def _register(self, spec: PluginMetric) -> _Series:
        with self._lock:
            series = self._series.get(spec.name)
            if series is None:
                series = self._series[spec.name] = _Series(spec, self._registry)
            return series

    def on_sample(self, sample: MetricSample) -> None:
        series = self._series.get(sample.metric.name)
        if series is None:
            series = self._register(sample.metric)
        series.add(sample)
