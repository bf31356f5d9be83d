"""A node's recent values of the Prometheus source's metrics, for `metrics-sched sources --history` (a range query
per metric, through prometheus-api-client): what the scheduler's instant queries read, over the last minutes.

Each metric's own query (the recorded value series with `recordingRules`), its series kept where a node label (the
source's `nodeLabels`, then the built-in ones) names the node, folded per instant with the metric's aggregation and
scaled as a refresh would. Series matched by InternalIP only (node-exporter's `instance=IP:port`) are not found
here: name the node's label in `nodeLabels`.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from adapters.prometheus.client import PrometheusClient
from adapters.prometheus.config import MetricSpec, PrometheusConfig
from adapters.prometheus.node_names import BUILT_IN_LABELS

__all__ = ["Series", "node_history"]


@dataclass(frozen=True)
class Series:
    metric: str
    points: tuple[tuple[float, float], ...]  # (unix seconds, value), in time order
    window: str | None  # a history-aware metric's window, in words (windows.Window.describe)


def _fold(values: Sequence[float], aggregation: str) -> float:
    if aggregation == "min":
        return min(values)
    if aggregation == "avg":
        return sum(values) / len(values)
    if aggregation == "sum":
        return sum(values)
    return max(values)  # max, and last (the newest sample: at one instant, the highest of the node's series)


def _series_of(spec: MetricSpec, result: list[dict[str, Any]], node: str) -> list[tuple[float, float]]:
    labels = (*spec.node_labels, *BUILT_IN_LABELS)
    by_time: dict[float, list[float]] = defaultdict(list)
    for series in result:
        metric = series.get("metric") or {}
        if not any(metric.get(label) == node for label in labels):
            continue
        for t, raw in series.get("values") or ():
            value = float(raw)
            if math.isfinite(value) and value <= spec.sentinel_above and (spec.allow_negative or value >= 0):
                by_time[float(t)].append(value)
    return [(t, _fold(v, spec.aggregation) * spec.scale) for t, v in sorted(by_time.items())]


def node_history(config: PrometheusConfig, node: str, start: float, end: float, step: float,
                 metrics: Sequence[str] = ()) -> list[Series]:
    """Each metric (all of the source's when `metrics` is empty) as the node's series over [start, end]."""
    specs = [m for m in config.metrics if not metrics or m.name in metrics]
    client = PrometheusClient(config)
    try:
        out = []
        for spec in specs:
            query = spec.recorded[0] if spec.recorded else spec.query
            result = client.query_range(query, start, end, step)
            out.append(Series(spec.name, tuple(_series_of(spec, result, node)),
                              spec.window.describe() if spec.window else None))
        return out
    finally:
        client.close()
