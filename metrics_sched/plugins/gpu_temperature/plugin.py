"""GPUTemperature: keep GPU pods off hot nodes, prefer cool ones.

The metric is the hottest GPU of each node (the source aggregates with max). Filter: a node above
`threshold` takes no GPU pod; once hot it is re-admitted only below `threshold - hysteresis`, so a
node hovering at the limit does not flap. A node without a fresh value is not hot: its hysteresis
state expires with the value (maxAge, ttl), and the metric's `onMissing` alone decides what missing
means (`deny` filters the node, `neutral` and `lowest` do not). Score: headroom below the threshold,
normalised over [`coolest`, `threshold`] (or minmax over the candidates).

A pod that asks for GPUs through ResourceClaims (DRA) is judged by the GPUs it would get: where DynamicResources
says which devices those are and they have per-device values (DEVICE_SETS), the hottest of them stands for the
node, so a node with one hot GPU still takes the pod on a cool one; elsewhere the node's value applies. Args
(defaults):

    metric: gpu_temperature
    threshold: 85          # °C
    hysteresis: 5          # °C
    coolest: 30            # °C, a node this cool or cooler scores 100
    gpuResource: nvidia.com/gpu
    onlyGpuPods: true      # pods without GPU requests are neither filtered nor scored by this plugin
    normalization: {method: range}   # or {method: minmax}
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from metrics_sched.framework import (
    DEVICE_SETS,
    GPU,
    ArgsError,
    BoolArray,
    CycleState,
    Filtered,
    FloatArray,
    Handle,
    IntArray,
    MetricScorePlugin,
    MetricTerm,
    NodeTable,
    Normalization,
    PodInfo,
    Scale,
    ScoreDetail,
    read_metric,
)


class GPUTemperature(MetricScorePlugin):
    name = "GPUTemperature"
    node_local = True  # the node's own telemetry

    @dataclass(frozen=True)
    class Args:
        metric: str = "gpu_temperature"
        threshold: float = 85.0
        hysteresis: float = 5.0
        coolest: float = 30.0
        gpu_resource: str = GPU
        only_gpu_pods: bool = True
        normalization: Normalization = field(default_factory=Normalization)

        def validate(self) -> None:
            if self.hysteresis < 0:
                raise ArgsError("hysteresis", "must be >= 0")
            if not self.coolest < self.threshold:
                raise ArgsError("coolest", f"must be below threshold ({self.coolest:g} >= {self.threshold:g})")
            self.normalization.check(Scale("range", self.coolest, self.threshold))

        def scale(self) -> Scale:
            return self.normalization.scale(Scale("range", self.coolest, self.threshold))

    args: Args

    def __init__(self, args: Args, handle: Handle) -> None:
        super().__init__(args, handle)
        self.threshold = self.args.threshold
        self._hot_names: dict[str, float] = {}  # hot node -> when the value that keeps it hot goes stale
        self._state_key: tuple[int, int, int] | None = None
        self._hot: BoolArray = np.zeros(0, dtype=bool)
        self._hot_until: FloatArray = np.zeros(0)
        self._fresh: BoolArray = np.zeros(0, dtype=bool)

    def make_terms(self) -> Sequence[MetricTerm]:
        return (MetricTerm(self.args.metric, "lower", self.args.scale()),)

    def applies(self, pod: PodInfo) -> bool:
        return (not self.args.only_gpu_pods or pod.requests.get(self.args.gpu_resource, 0) > 0
                or bool((pod.raw.get("spec") or {}).get("resourceClaims")))

    def _device_sets(self, cycle: CycleState) -> FloatArray | None:
        """Per row, the hottest GPU the pod's claims would get there (NaN: no per-device value), if known."""
        sets = cycle.get(DEVICE_SETS)
        if sets is None or sets.metric != self.args.metric:
            return None
        return sets.values

    def update_hot(self, table: NodeTable) -> bool:
        """Applies the hysteresis to the latest values; True when some node was re-admitted."""
        key = (self.handle.metrics.generation, table.rows_generation, table.capacity)
        read = read_metric(self.handle, self.args.metric, table, with_ledger=False)
        column = read.column
        # Values age out with time alone, without a new generation: the freshness is part of the state.
        if key == self._state_key and np.array_equal(column.fresh, self._fresh):
            return False
        hot_until = np.full(table.capacity, -np.inf)
        if self._state_key is not None and self._state_key[1:] == key[1:]:
            hot_until[:] = self._hot_until
        else:
            # Nodes came or went: carry the state over by name (a loop over the hot nodes only).
            for name, until in self._hot_names.items():
                row = table.index.get(name)
                if row is not None:
                    hot_until[row] = until
        carried = hot_until > -np.inf
        # The verdict lives as long as the value that gave it: a value fetched after that one went stale
        # starts afresh, so a node is not kept out by a reading older than its maxAge.
        was_hot = carried & (column.fetched_at <= hot_until)
        temps = read.values  # NaN where not fresh: a node without a fresh value is not hot
        with np.errstate(invalid="ignore"):
            hot = (temps > self.threshold) | (was_hot & (temps >= self.threshold - self.args.hysteresis))
        hot &= table.present[: table.capacity]
        contract = column.contract
        expires = np.minimum(column.observed_at + contract.max_age, column.fetched_at + contract.ttl)
        self._hot = hot
        self._hot_until = np.where(hot, expires, -np.inf)
        self._fresh = column.fresh
        rows = np.flatnonzero(hot)
        self._hot_names = dict(zip(table.names_of(rows), self._hot_until[rows].tolist(), strict=True))
        self._state_key = key
        return bool((carried & ~hot).any())

    def metrics_changed(self, table: NodeTable) -> bool:
        re_admitted = self.update_hot(table)
        return super().metrics_changed(table) or re_admitted

    def filter(self, cycle: CycleState, pod: PodInfo, table: NodeTable) -> Filtered:
        verdict = super().filter(cycle, pod, table)
        if not self.applies(pod):
            return verdict
        self.update_hot(table)
        hot = self._hot.copy()
        devices = self._device_sets(cycle)
        if devices is not None:
            known = ~np.isnan(devices[: hot.size])
            with np.errstate(invalid="ignore"):
                hot[known] = devices[: hot.size][known] > self.threshold
        reasons = {f"node(s) had a GPU above {self.threshold:g}°C": hot, **verdict.reasons}
        return Filtered(verdict.feasible & ~hot, reasons)

    def score(self, cycle: CycleState, pod: PodInfo, table: NodeTable, rows: IntArray) -> ScoreDetail:
        detail = super().score(cycle, pod, table, rows)
        devices = self._device_sets(cycle)
        if devices is None or not self.applies(pod):
            return detail
        chosen = devices[rows]
        known = ~np.isnan(chosen)
        if not known.any():
            return detail
        scores = np.array(detail.scores, dtype=np.float64)
        scores[known] = self.args.scale().apply(chosen[known], "lower")
        return ScoreDetail(scores, detail.evidence)
