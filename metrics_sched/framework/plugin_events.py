"""Typed events a plugin publishes through its Handle, and the subscribers that read them (observability).

A plugin publishes an event object, `handle.events.publish(event)`; a subscriber registers a callback per event
type, `events.subscribe(MetricSample, callback)`. Events are matched by their exact type (no subclass walk), so
publishing costs one dict lookup when nobody listens: a plugin may publish on its hot path.

The events /metrics reads are generic, so it needs to know no plugin: a plugin declares the metrics it reports
(PluginMetric: name, help, kind, labels, buckets, the label values shown from the start) with
`handle.events.declare(...)` when it is built, and publishes their values as MetricSample events. The exporter
registers every declared metric when it starts (its series read 0 before the first event, so a dashboard shows
"none" rather than "no data") and any other metric at its first sample.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

__all__ = ["MetricKind", "MetricSample", "PluginEvents", "PluginMetric"]

E = TypeVar("E")
log = logging.getLogger(__name__)


class MetricKind(enum.StrEnum):
    COUNTER = "counter"  # a sample's value is added
    HISTOGRAM = "histogram"  # a sample's value is observed


@dataclass(frozen=True)
class PluginMetric:
    """A metric a plugin reports through MetricSample events (the exporter adds `_total` to a counter's name)."""

    name: str
    help: str
    kind: MetricKind
    labels: tuple[str, ...] = ()
    buckets: tuple[float, ...] = ()  # a histogram's upper bounds (empty: prometheus_client's default ones)
    shown: tuple[tuple[str, ...], ...] = ()  # label values exported from the start, so 0 reads as "none"

    def __post_init__(self) -> None:
        if self.buckets and self.kind != MetricKind.HISTOGRAM:
            raise ValueError(f"{self.name}: only a histogram has buckets")
        for values in self.shown:
            if len(values) != len(self.labels):
                raise ValueError(f"{self.name}: shown label values {values} do not match the labels {self.labels}")

    def sample(self, value: float = 1.0, *labels: str) -> MetricSample:
        return MetricSample(self, value, labels)


@dataclass(frozen=True, slots=True)
class MetricSample:
    """One value of a declared metric: added to a counter, observed by a histogram. A sample that never changes
    (a counter's +1 without labels) can be built once and published again and again."""

    metric: PluginMetric
    value: float = 1.0
    labels: tuple[str, ...] = ()


class PluginEvents:
    """The bus every Handle of a scheduler shares. Subscribing and declaring happen while the scheduler is built;
    publishing from any thread needs no lock (a type's callbacks are a tuple replaced whole)."""

    __slots__ = ("_metrics", "_subscribers")

    def __init__(self) -> None:
        self._subscribers: dict[type, tuple[Callable[[Any], None], ...]] = {}
        self._metrics: dict[str, PluginMetric] = {}

    def subscribe(self, kind: type[E], callback: Callable[[E], None]) -> None:
        """`callback` gets every event of exactly type `kind` published from now on."""
        self._subscribers[kind] = (*self._subscribers.get(kind, ()), callback)

    def subscribed(self, kind: type) -> bool:
        """Whether anyone listens to `kind`: a plugin may skip building an event that is costly to build."""
        return kind in self._subscribers

    def publish(self, event: object) -> None:
        callbacks = self._subscribers.get(type(event))
        if callbacks is None:
            return
        for callback in callbacks:
            try:
                callback(event)
            except Exception:  # a broken subscriber must not fail the plugin that published
                log.exception("subscriber %r failed on %r", callback, event)

    def declare(self, *metrics: PluginMetric) -> None:
        """The metrics a plugin reports; the same metric may be declared again (one plugin in several profiles),
        another metric under a taken name may not."""
        for metric in metrics:
            known = self._metrics.setdefault(metric.name, metric)
            if known != metric:
                raise ValueError(f"metric {metric.name} is already declared differently: {known}")

    def metrics(self) -> tuple[PluginMetric, ...]:
        """The metrics declared so far, in declaration order."""
        return tuple(self._metrics.values())
