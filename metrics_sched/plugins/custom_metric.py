"""CustomMetric: any configured metric as a score term, with a direction and an optional hard limit.

    metrics:
    - metric: gpu_utilisation
      direction: lower            # lower | higher is better
      weight: 1                   # relative weight among this plugin's metrics
      normalization: {method: range, min: 0, max: 100}
      filterAbove: 95             # optional: nodes above take no pod (filterBelow likewise)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from metrics_sched.config.errors import ArgsError
from metrics_sched.framework.interfaces import (
    ClusterEvent,
    CycleState,
    Filtered,
    FilterPlugin,
    MetricAwarePlugin,
    ScorePlugin,
)
from metrics_sched.plugins.metric_terms import (
    Direction,
    Normalization,
    apply_missing,
    denies_missing,
    direction,
    normalize,
    number,
    parse_normalization,
    read_metric,
    reject_missing,
    stash_raw,
)
from metrics_sched.podinfo import PodInfo
from metrics_sched.state.node_table import FloatArray, IntArray, NodeTable
from metrics_sched.telemetry.contract import OnMissing

_KEYS = ("metric", "direction", "weight", "normalization", "filterAbove", "filterBelow")


@dataclass(frozen=True)
class _Term:
    metric: str
    better: Direction
    weight: float
    normalization: Normalization
    above: float | None
    below: float | None


def _term(spec: Mapping[str, Any], field: str) -> _Term:
    for key in spec:
        if key not in _KEYS:
            raise ArgsError(f"{field}.{key}", f"unknown field (expected one of {', '.join(_KEYS)})")
    if not isinstance(spec.get("metric"), str) or not spec["metric"]:
        raise ArgsError(f"{field}.metric", "must name a metric")
    weight = number(spec.get("weight", 1), f"{field}.weight")
    if weight <= 0:
        raise ArgsError(f"{field}.weight", "must be > 0")
    return _Term(
        metric=spec["metric"],
        better=direction(spec.get("direction", "lower"), f"{field}.direction"),
        weight=weight,
        normalization=parse_normalization(spec.get("normalization"), f"{field}.normalization", Normalization()),
        above=None if spec.get("filterAbove") is None else number(spec["filterAbove"], f"{field}.filterAbove"),
        below=None if spec.get("filterBelow") is None else number(spec["filterBelow"], f"{field}.filterBelow"),
    )


class CustomMetric(FilterPlugin, ScorePlugin, MetricAwarePlugin):
    name = "CustomMetric"
    events = frozenset({ClusterEvent.NODE_ADDED, ClusterEvent.METRIC_CHANGED})

    def __init__(self, args: Mapping[str, Any], handle: Any) -> None:
        super().__init__(args, handle)
        self.terms = [_term(spec, f"metrics[{i}]") for i, spec in enumerate(args["metrics"])]
        handle.service("metrics")

    @classmethod
    def check_args(cls, args: Mapping[str, Any]) -> None:
        for key in args:
            if key != "metrics":
                raise ArgsError(key, "unknown field (expected metrics)")
        specs = args.get("metrics")
        if not isinstance(specs, list) or not specs:
            raise ArgsError("metrics", "must be a non-empty list of {metric, direction, ...}")
        for i, spec in enumerate(specs):
            if not isinstance(spec, Mapping):
                raise ArgsError(f"metrics[{i}]", "must be a mapping")
            _term(spec, f"metrics[{i}]")

    def metrics_changed(self, table: NodeTable) -> bool:
        # Thresholds (or a deny-on-missing contract) can admit a node after a refresh: let parked pods retry.
        thresholds = any(t.above is not None or t.below is not None for t in self.terms)
        return thresholds or denies_missing(self.handle, [t.metric for t in self.terms])

    def filter(self, cycle: CycleState, pod: PodInfo, table: NodeTable) -> Filtered:
        feasible = np.ones(table.capacity, dtype=bool)
        reasons = {}
        for term in self.terms:
            read = read_metric(self.handle, term.metric, table, with_ledger=False)
            with np.errstate(invalid="ignore"):
                if term.above is not None:
                    over = read.values > term.above
                    reasons[f"node(s) had {term.metric} above {term.above:g}"] = over
                    feasible &= ~over
                if term.below is not None:
                    under = read.values < term.below
                    reasons[f"node(s) had {term.metric} below {term.below:g}"] = under
                    feasible &= ~under
            feasible = reject_missing(read, feasible, reasons)
        return Filtered(feasible, reasons)

    def score(self, cycle: CycleState, pod: PodInfo, table: NodeTable, rows: IntArray) -> FloatArray:
        total = np.zeros(rows.size)
        weights = np.zeros(rows.size)
        for term in self.terms:
            read = read_metric(self.handle, term.metric, table)
            stash_raw(cycle, self.name, term.metric, read, rows)
            policy = read.column.contract.on_missing
            scores = apply_missing(normalize(read.values[rows], term.better, term.normalization),
                                   read.missing[rows], policy if policy != OnMissing.DENY else OnMissing.NEUTRAL)
            present = ~np.isnan(scores)
            total += np.where(present, scores * term.weight, 0.0)
            weights += present * term.weight
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(weights > 0, total / weights, np.nan)

    def normalize(self, scores: FloatArray) -> FloatArray:
        return scores
