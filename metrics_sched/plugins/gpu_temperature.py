"""GPUTemperature: keep GPU pods off hot nodes, prefer cool ones.

The metric is the hottest GPU of each node (the source aggregates with max). Filter: a node above
`threshold` takes no GPU pod; once hot it is re-admitted only below `threshold - hysteresis`, so a
node hovering at the limit does not flap. Score: headroom below the threshold, normalised over
[`coolest`, `threshold`] (or minmax over the candidates). Args (defaults):

    metric: gpu_temperature
    threshold: 85          # °C
    hysteresis: 5          # °C
    coolest: 30            # °C, a node this cool or cooler scores 100
    gpuResource: nvidia.com/gpu
    onlyGpuPods: true      # pods without GPU requests are neither filtered nor scored by this plugin
    normalization: {method: range}   # or {method: minmax}
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
    deny_missing_mask,
    normalize,
    number,
    parse_normalization,
    read_metric,
    stash_raw,
)
from metrics_sched.podinfo import PodInfo
from metrics_sched.resources import GPU
from metrics_sched.state.node_table import BoolArray, FloatArray, IntArray, NodeTable

_ARGS = ("metric", "threshold", "hysteresis", "coolest", "gpuResource", "onlyGpuPods", "normalization")


class GPUTemperature(FilterPlugin, ScorePlugin, MetricAwarePlugin):
    name = "GPUTemperature"
    events = frozenset({ClusterEvent.NODE_ADDED, ClusterEvent.METRIC_CHANGED})

    def __init__(self, args: Mapping[str, Any], handle: Any) -> None:
        super().__init__(args, handle)
        self.metric: str = args.get("metric", "gpu_temperature")
        self.threshold = float(args.get("threshold", 85.0))
        self.hysteresis = float(args.get("hysteresis", 5.0))
        self.coolest = float(args.get("coolest", 30.0))
        self.gpu_resource: str = args.get("gpuResource", GPU)
        self.only_gpu_pods: bool = args.get("onlyGpuPods", True)
        self.normalization = parse_normalization(
            args.get("normalization"), "normalization", Normalization("range", self.coolest, self.threshold))
        if self.normalization.method == "range" and "normalization" not in args:
            self.normalization = Normalization("range", self.coolest, self.threshold)
        handle.service("metrics")  # fail at start-up, not at the first pod, if telemetry is not wired
        self._hot_names: set[str] = set()
        self._state_key: tuple[int, int, int] | None = None
        self._hot: BoolArray = np.zeros(0, dtype=bool)

    @classmethod
    def check_args(cls, args: Mapping[str, Any]) -> None:
        for key in args:
            if key not in _ARGS:
                raise ArgsError(key, f"unknown field (expected one of {', '.join(_ARGS)})")
        threshold = number(args.get("threshold", 85.0), "threshold")
        hysteresis = number(args.get("hysteresis", 5.0), "hysteresis")
        coolest = number(args.get("coolest", 30.0), "coolest")
        if hysteresis < 0:
            raise ArgsError("hysteresis", "must be >= 0")
        if not coolest < threshold:
            raise ArgsError("coolest", f"must be below threshold ({coolest} >= {threshold})")
        if not isinstance(args.get("onlyGpuPods", True), bool):
            raise ArgsError("onlyGpuPods", "must be true or false")
        parse_normalization(args.get("normalization"), "normalization", Normalization("range", coolest, threshold))

    def applies(self, pod: PodInfo) -> bool:
        return not self.only_gpu_pods or pod.requests.get(self.gpu_resource, 0) > 0

    def update_hot(self, table: NodeTable) -> bool:
        """Applies the hysteresis to the latest values; True when some node was re-admitted."""
        read = read_metric(self.handle, self.metric, table, with_ledger=False)
        key = (self.handle.service("metrics").generation, table.rows_generation, table.capacity)
        if key == self._state_key:
            return False
        was_hot = np.zeros(table.capacity, dtype=bool)
        if self._state_key is not None and self._state_key[1:] == key[1:]:
            was_hot[:] = self._hot
        else:
            # Nodes came or went: carry the state over by name (a loop over the hot nodes only).
            rows = [table.index[n] for n in self._hot_names if n in table.index]
            was_hot[rows] = True
        temps = read.values
        known = ~np.isnan(temps)
        with np.errstate(invalid="ignore"):
            hot = np.where(known, (temps > self.threshold) | (was_hot & ~(temps < self.threshold - self.hysteresis)),
                           was_hot)
        hot &= table.present[: table.capacity]
        self._hot = hot
        self._hot_names = set(table.names_of(np.flatnonzero(hot)))
        self._state_key = key
        return bool((was_hot & ~hot).any())

    def metrics_changed(self, table: NodeTable) -> bool:
        return self.update_hot(table)

    def filter(self, cycle: CycleState, pod: PodInfo, table: NodeTable) -> Filtered:
        if not self.applies(pod):
            return Filtered(np.ones(table.capacity, dtype=bool))
        self.update_hot(table)
        reasons = {f"node(s) had a GPU above {self.threshold:g}°C": self._hot.copy()}
        feasible = ~self._hot
        read = read_metric(self.handle, self.metric, table, with_ledger=False)
        deny = deny_missing_mask(read)
        if deny is not None:
            reasons[f"node(s) had no fresh {self.metric}"] = deny
            feasible = feasible & ~deny
        return Filtered(feasible, reasons)

    def score(self, cycle: CycleState, pod: PodInfo, table: NodeTable, rows: IntArray) -> FloatArray:
        if not self.applies(pod):
            return np.full(rows.shape[0], np.nan)
        read = read_metric(self.handle, self.metric, table)
        stash_raw(cycle, self.name, self.metric, read, rows)
        scores = normalize(read.values[rows], "lower", self.normalization)
        return apply_missing(scores, read.missing[rows], read.column.contract.on_missing)

    def normalize(self, scores: FloatArray) -> FloatArray:
        return scores  # score() is already on 0-100 (NaN = no value)
