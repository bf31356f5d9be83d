"""NodeLoad: prefer lightly loaded nodes, by CPU utilisation and/or load per CPU (lower is better).

Each configured metric is normalised on its own range and the available ones are averaged; the
in-flight ledger adds the load of pods placed since the node's last sample. Args (defaults):

    metrics:
    - {metric: node_cpu_utilisation, min: 0, max: 1}   # 0-1, from metrics-server or node_exporter
    - {metric: node_load_per_cpu, min: 0, max: 2}      # node_load1 / cpus
    maxUtilisation: null   # optional filter: nodes above this (first metric's units) take no pod
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import ClassVar

from metrics_sched.framework import ArgsError, ClusterEvent, MetricScorePlugin, MetricTerm, Scale


@dataclass(frozen=True)
class LoadMetric:
    metric: str
    min: float = 0.0
    max: float = 1.0

    def validate(self) -> None:
        if not self.max > self.min:
            raise ArgsError("max", "must be greater than min")


class NodeLoad(MetricScorePlugin):
    name = "NodeLoad"
    events = frozenset({ClusterEvent.NODE_ADDED, ClusterEvent.METRIC_CHANGED, ClusterEvent.POD_DELETED})
    filter_with_ledger: ClassVar[bool] = True  # a node we just filled is over the limit before telemetry says so

    @dataclass(frozen=True)
    class Args:
        metrics: tuple[LoadMetric, ...] = (LoadMetric("node_cpu_utilisation", 0.0, 1.0),
                                           LoadMetric("node_load_per_cpu", 0.0, 2.0))
        max_utilisation: float | None = None

        def validate(self) -> None:
            if not self.metrics:
                raise ArgsError("metrics", "must be a non-empty list of {metric, min, max}")

    args: Args

    def make_terms(self) -> Sequence[MetricTerm]:
        terms = [MetricTerm(m.metric, "lower", Scale("range", m.min, m.max)) for m in self.args.metrics]
        terms[0] = replace(terms[0], filter_above=self.args.max_utilisation)
        return terms
