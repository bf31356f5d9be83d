"""Cost: cheaper nodes score higher. Args (defaults):

    metric: node_hourly_cost        # $/h, from OpenCost or the CMDB
    perResource: null               # e.g. nvidia.com/gpu: compare price per GPU instead of per node
    normalization: {method: minmax} # or {method: range, min: 0, max: 40}
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
    deny_missing_mask,
    normalize,
    parse_normalization,
    read_metric,
    stash_raw,
)
from metrics_sched.podinfo import PodInfo
from metrics_sched.state.node_table import FloatArray, IntArray, NodeTable


class Cost(FilterPlugin, ScorePlugin, MetricAwarePlugin):
    name = "Cost"
    events = frozenset({ClusterEvent.NODE_ADDED, ClusterEvent.METRIC_CHANGED})

    def __init__(self, args: Mapping[str, Any], handle: Any) -> None:
        super().__init__(args, handle)
        self.metric: str = args.get("metric", "node_hourly_cost")
        self.per_resource: str | None = args.get("perResource")
        self.normalization = parse_normalization(args.get("normalization"), "normalization", Normalization())
        handle.service("metrics")

    @classmethod
    def check_args(cls, args: Mapping[str, Any]) -> None:
        for key in args:
            if key not in ("metric", "perResource", "normalization"):
                raise ArgsError(key, "unknown field (expected metric, perResource, normalization)")
        for key in ("metric", "perResource"):
            if key in args and not isinstance(args[key], str):
                raise ArgsError(key, "must be a string")
        parse_normalization(args.get("normalization"), "normalization", Normalization())

    def metrics_changed(self, table: NodeTable) -> bool:
        # Thresholds (or a deny-on-missing contract) can admit a node after a refresh: let parked pods retry.
        return denies_missing(self.handle, [self.metric])

    def filter(self, cycle: CycleState, pod: PodInfo, table: NodeTable) -> Filtered:
        deny = deny_missing_mask(read_metric(self.handle, self.metric, table, with_ledger=False))
        if deny is None:
            return Filtered(np.ones(table.capacity, dtype=bool))
        return Filtered.single(~deny, f"node(s) had no fresh {self.metric}")

    def score(self, cycle: CycleState, pod: PodInfo, table: NodeTable, rows: IntArray) -> FloatArray:
        read = read_metric(self.handle, self.metric, table, with_ledger=False)
        stash_raw(cycle, self.name, self.metric, read, rows)
        price = read.values[rows]
        if self.per_resource:
            col = table.resource_index.get(self.per_resource)
            units = table.allocatable[rows, col].astype(np.float64) if col is not None else np.zeros(rows.size)
            with np.errstate(divide="ignore", invalid="ignore"):
                price = np.where(units > 0, price / units, np.nan)
        scores = normalize(price, "lower", self.normalization)
        return apply_missing(scores, read.missing[rows], read.column.contract.on_missing)

    def normalize(self, scores: FloatArray) -> FloatArray:
        return scores
