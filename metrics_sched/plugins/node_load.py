"""NodeLoad: prefer lightly loaded nodes, by CPU utilisation and/or load per CPU (lower is better).

Each configured metric is normalised on its own range and the available ones are averaged; the
in-flight ledger adds the load of pods placed since the node's last sample. Args (defaults):

    metrics:
    - {metric: node_cpu_utilisation, min: 0, max: 1}   # 0-1, from metrics-server or node_exporter
    - {metric: node_load_per_cpu, min: 0, max: 2}      # node_load1 / cpus
    maxUtilisation: null   # optional filter: nodes above this (first metric's units) take no pod
"""

from __future__ import annotations

from collections.abc import Mapping
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
    Normalization,
    apply_missing,
    denies_missing,
    normalize,
    number,
    read_metric,
    reject_missing,
    stash_raw,
)
from metrics_sched.podinfo import PodInfo
from metrics_sched.state.node_table import FloatArray, IntArray, NodeTable
from metrics_sched.telemetry.contract import OnMissing

DEFAULT_METRICS = (("node_cpu_utilisation", 0.0, 1.0), ("node_load_per_cpu", 0.0, 2.0))


class NodeLoad(FilterPlugin, ScorePlugin, MetricAwarePlugin):
    name = "NodeLoad"
    events = frozenset({ClusterEvent.NODE_ADDED, ClusterEvent.METRIC_CHANGED, ClusterEvent.POD_DELETED})

    def __init__(self, args: Mapping[str, Any], handle: Any) -> None:
        super().__init__(args, handle)
        specs = args.get("metrics")
        self.metrics: list[tuple[str, Normalization]] = (
            [(m, Normalization("range", lo, hi)) for m, lo, hi in DEFAULT_METRICS] if specs is None else
            [(s["metric"], Normalization("range", float(s.get("min", 0.0)), float(s.get("max", 1.0))))
             for s in specs])
        limit = args.get("maxUtilisation")
        self.max_utilisation: float | None = None if limit is None else float(limit)
        handle.service("metrics")

    @classmethod
    def check_args(cls, args: Mapping[str, Any]) -> None:
        for key in args:
            if key not in ("metrics", "maxUtilisation"):
                raise ArgsError(key, "unknown field (expected metrics, maxUtilisation)")
        specs = args.get("metrics")
        if specs is not None:
            if not isinstance(specs, list) or not specs:
                raise ArgsError("metrics", "must be a non-empty list of {metric, min, max}")
            for i, spec in enumerate(specs):
                if not isinstance(spec, Mapping) or not isinstance(spec.get("metric"), str):
                    raise ArgsError(f"metrics[{i}].metric", "must name a metric")
                low = number(spec.get("min", 0.0), f"metrics[{i}].min")
                high = number(spec.get("max", 1.0), f"metrics[{i}].max")
                if not high > low:
                    raise ArgsError(f"metrics[{i}].max", "must be greater than min")
        if args.get("maxUtilisation") is not None:
            number(args["maxUtilisation"], "maxUtilisation")

    def metrics_changed(self, table: NodeTable) -> bool:
        # Thresholds (or a deny-on-missing contract) can admit a node after a refresh: let parked pods retry.
        return bool(self.max_utilisation is not None) or denies_missing(self.handle, [m for m, _ in self.metrics])

    def filter(self, cycle: CycleState, pod: PodInfo, table: NodeTable) -> Filtered:
        feasible = np.ones(table.capacity, dtype=bool)
        reasons = {}
        for i, (metric, _) in enumerate(self.metrics):
            read = read_metric(self.handle, metric, table)
            if i == 0 and self.max_utilisation is not None:
                with np.errstate(invalid="ignore"):
                    over = read.values > self.max_utilisation
                reasons[f"node(s) were above {self.max_utilisation:g} {metric}"] = over
                feasible &= ~over
            feasible = reject_missing(read, feasible, reasons)
        return Filtered(feasible, reasons)

    def score(self, cycle: CycleState, pod: PodInfo, table: NodeTable, rows: IntArray) -> FloatArray:
        parts = []
        for metric, norm in self.metrics:
            read = read_metric(self.handle, metric, table)
            stash_raw(cycle, self.name, metric, read, rows)
            scores = normalize(read.values[rows], "lower", norm)
            policy = read.column.contract.on_missing
            parts.append(apply_missing(scores, read.missing[rows], policy if policy != OnMissing.DENY
                                       else OnMissing.NEUTRAL))
        stacked = np.vstack(parts)
        counts = (~np.isnan(stacked)).sum(axis=0)
        sums = np.nansum(stacked, axis=0)
        return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)

    def normalize(self, scores: FloatArray) -> FloatArray:
        return scores
