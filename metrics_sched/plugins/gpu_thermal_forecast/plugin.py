"""GPUThermalForecast: judge a GPU node by the temperature it is heading for, not the one it has.

A node at 70 °C climbing 1 °C a minute crosses 85 °C soon after it receives a job; GPUTemperature sees a cool
node, this plugin sees the forecast. The metric is a forecast the telemetry source evaluates (the Prometheus
preset `dcgm_gpu_temp_forecast`: `predict_linear` of each GPU's temperature over a window, `horizon` ahead, the
hottest GPU per node; see docs/forecasting.md), so the hot path reads one cached value per node as for any metric.

A trend cannot show the pods just placed: a GPU warms over minutes, so a node that received a job a minute ago
still forecasts cool, and a burst would herd onto it (the in-flight ledger lets go of a placement at the next
sample, long before the heat shows). At Reserve the plugin keeps each placement's share of the node's GPUs; for
`window` after it, `recentHeat` x that share is added to the node's forecast (the heat the pod will bring, as the
ledger's gpu_temperature estimate counts it): explain shows it as the forecast's in-flight part. Enable the plugin
at reserve too (or through multiPoint); `recentHeat: 0` turns it off.

Score: headroom of the forecast below `threshold`, normalised over [`coolest`, `threshold`] (lower is better),
as GPUTemperature scores the current value. Filter (optional, `filter: true`): a node whose forecast is above
`threshold` is treated like a hot one and takes no GPU pod. `horizon` and `window` say what the metric is (they
must match the source's window): `explain` and `/decisions` show them beside each candidate's forecast. Args
(defaults):

    metric: gpu_temperature_forecast
    horizon: 30m           # how far ahead the forecast looks (as the source evaluates it)
    window: 10m            # the history the trend is fitted on (as the source evaluates it)
    threshold: 85          # °C
    coolest: 30            # °C, a forecast this cool or cooler scores 100
    filter: false          # true: nodes forecast above the threshold take no GPU pod
    recentHeat: 15         # °C a node whose GPUs all get busy gains: added for pods placed within `window`
    gpuResource: nvidia.com/gpu
    onlyGpuPods: true
    normalization: {method: range}
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from metrics_sched.framework import (
    GPU,
    SUCCESS,
    ArgsError,
    CycleState,
    Filtered,
    FloatArray,
    Handle,
    IntArray,
    MetricEvidence,
    MetricScorePlugin,
    MetricTerm,
    NodeTable,
    Normalization,
    OnMissing,
    PodInfo,
    ReservePlugin,
    Scale,
    ScoreDetail,
    Status,
    explain,
    read_metric,
)

# A Prometheus duration as the source's `window` takes it (one unit: what the explanation shows as written).
_DURATION = re.compile(r"^([1-9][0-9]*)(s|m|h|d)$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def _seconds(text: str) -> float:
    match = _DURATION.match(text)
    assert match is not None  # Args.validate checked it
    return float(int(match.group(1)) * _UNIT_SECONDS[match.group(2)])


class _Recent:
    """The placements of the last window, oldest first: each one's node, time and share of the node's GPUs, and their
    sum per table row kept up to date (a placement adds to its row, one leaving the window or unreserved subtracts):
    a cycle reads the sums, whatever the number of placements. Appending and expiring are amortised O(1) (buffers
    that double, a head past the expired ones, compacted once it is half of them)."""

    def __init__(self) -> None:
        self.nodes: list[str] = []
        self.rows = np.zeros(64, dtype=np.int64)
        self.times = np.zeros(64)
        self.shares = np.zeros(64)
        self.head = 0  # entries before it have left the window
        self.size = 0
        self.by_uid: dict[str, int] = {}
        self.sums: FloatArray = np.zeros(0)
        self.rows_generation = -1

    def __len__(self) -> int:
        return self.size - self.head

    def sync(self, table: NodeTable) -> None:
        """The rows and sums for `table`'s rows (rebuilt when nodes moved rows: rare)."""
        if self.rows_generation == table.rows_generation and self.sums.shape[0] == table.capacity:
            return
        live = slice(self.head, self.size)
        self.rows[live] = [table.index.get(n, -1) for n in self.nodes[live]]
        known = self.rows[live] >= 0
        self.sums = np.bincount(self.rows[live][known], weights=self.shares[live][known],
                                minlength=table.capacity)[: table.capacity].astype(np.float64)
        self.rows_generation = table.rows_generation

    def add(self, uid: str, node: str, table: NodeTable, at: float, share: float) -> None:
        self.sync(table)
        self.remove(uid)
        if self.size == self.rows.shape[0]:
            self.rows, self.times, self.shares = (np.concatenate([a, np.zeros_like(a)])
                                                  for a in (self.rows, self.times, self.shares))
        row = table.index.get(node, -1)
        index = self.size
        self.rows[index], self.times[index], self.shares[index] = row, at, share
        self.nodes.append(node)
        self.by_uid[uid] = index
        self.size += 1
        if row >= 0:
            self.sums[row] += share

    def remove(self, uid: str) -> None:
        index = self.by_uid.pop(uid, None)
        if index is None or index < self.head:
            return
        row = int(self.rows[index])
        if row >= 0 and row < self.sums.shape[0]:
            self.sums[row] -= self.shares[index]
        self.shares[index] = 0.0

    def expire(self, since: float) -> None:
        """Placements older than `since` leave the window (and their rows' sums)."""
        end = self.head + int(np.searchsorted(self.times[self.head:self.size], since, side="left"))
        if end == self.head:
            return
        gone = slice(self.head, end)
        known = self.rows[gone] >= 0
        np.subtract.at(self.sums, self.rows[gone][known], self.shares[gone][known])
        self.head = end
        if self.head == self.size or self.head * 2 > self.size:
            self._compact()

    def _compact(self) -> None:
        keep = slice(self.head, self.size)
        count = self.size - self.head
        self.rows[:count], self.times[:count], self.shares[:count] = (self.rows[keep].copy(), self.times[keep].copy(),
                                                                      self.shares[keep].copy())
        self.nodes = self.nodes[self.head:]
        self.by_uid = {uid: i - self.head for uid, i in self.by_uid.items() if i >= self.head}
        self.head, self.size = 0, count
        if count == 0:
            self.sums[:] = 0.0  # no drift left from the additions and subtractions


class GPUThermalForecast(MetricScorePlugin, ReservePlugin):
    name = "GPUThermalForecast"
    node_local = True  # the node's own telemetry

    @dataclass(frozen=True)
    class Args:
        metric: str = "gpu_temperature_forecast"
        horizon: str = "30m"
        window: str = "10m"
        threshold: float = 85.0
        coolest: float = 30.0
        filter: bool = False
        recent_heat: float = 15.0
        gpu_resource: str = GPU
        only_gpu_pods: bool = True
        normalization: Normalization = field(default_factory=Normalization)

        def validate(self) -> None:
            for name in ("horizon", "window"):
                if not _DURATION.match(getattr(self, name)):
                    raise ArgsError(name, f"must be a duration like 30m, got {getattr(self, name)!r}")
            if not self.recent_heat >= 0:
                raise ArgsError("recentHeat", "must be >= 0")
            if not self.coolest < self.threshold:
                raise ArgsError("coolest", f"must be below threshold ({self.coolest:g} >= {self.threshold:g})")
            self.normalization.check(Scale("range", self.coolest, self.threshold))

        def scale(self) -> Scale:
            return self.normalization.scale(Scale("range", self.coolest, self.threshold))

    args: Args

    def __init__(self, args: Args, handle: Handle) -> None:
        super().__init__(args, handle)
        a = self.args
        # Made once: the same words for every decision (the audit keeps each note once per record).
        self.note = (f"{self.name}: {a.metric} is the hottest GPU's temperature forecast {a.horizon} ahead "
                     f"(trend over the last {a.window}); threshold {a.threshold:g}°C"
                     + (", nodes forecast above it filtered" if a.filter else ""))
        self._reason = f"node(s) had a GPU forecast above {a.threshold:g}°C within {a.horizon}"
        self._window = _seconds(a.window)
        self._recent = _Recent()
        self._clock = handle.metrics.clock

    def make_terms(self) -> Sequence[MetricTerm]:
        return (MetricTerm(self.args.metric, "lower", self.args.scale()),)

    def applies(self, pod: PodInfo) -> bool:
        return (not self.args.only_gpu_pods or pod.requests.get(self.args.gpu_resource, 0) > 0
                or bool((pod.raw.get("spec") or {}).get("resourceClaims")))

    def metrics_changed(self, table: NodeTable) -> bool:
        # A refresh may bring a node's forecast back under the threshold: parked pods retry.
        return self.args.filter or super().metrics_changed(table)

    def _heat(self, table: NodeTable) -> FloatArray | None:
        """Per row: the heat of the pods placed on it within the window (None: none, or recentHeat 0)."""
        if not self.args.recent_heat or not len(self._recent):
            return None
        self._recent.expire(self._clock() - self._window)
        if not len(self._recent):
            return None
        self._recent.sync(table)
        heat: FloatArray = self._recent.sums * self.args.recent_heat
        return heat

    def _forecast(self, table: NodeTable) -> tuple[FloatArray, FloatArray | None, MetricEvidence, bool]:
        """Per row: the forecast with the recent placements' heat, that heat, the evidence, and whether a row
        without a value scores 0 (onMissing: lowest)."""
        read = read_metric(self.handle, self.args.metric, table, with_ledger=False)
        heat = self._heat(table)
        values = read.values if heat is None else read.values + heat
        column = read.column
        evidence = MetricEvidence(column.metric, read.values, heat, column.observed_at, tuple(column.sources))
        return values, heat, evidence, column.contract.on_missing == OnMissing.LOWEST

    def filter(self, cycle: CycleState, pod: PodInfo, table: NodeTable) -> Filtered:
        verdict = super().filter(cycle, pod, table)
        if not self.args.filter or not self.applies(pod):
            return verdict
        forecast = self._forecast(table)[0]
        with np.errstate(invalid="ignore"):
            hot = forecast > self.args.threshold  # NaN (no fresh forecast) is not hot: onMissing decides
        return Filtered(verdict.feasible & ~hot, {self._reason: hot, **verdict.reasons})

    def score(self, cycle: CycleState, pod: PodInfo, table: NodeTable, rows: IntArray) -> ScoreDetail:
        if not self.applies(pod):
            return super().score(cycle, pod, table, rows)
        explain(cycle, self.note)
        values, heat, evidence, lowest = self._forecast(table)
        if heat is None:
            return super().score(cycle, pod, table, rows)
        scores = self._terms[0].scale.apply(values[rows], "lower")
        if lowest:
            scores = np.where(np.isnan(values[rows]), 0.0, scores)
        return ScoreDetail(scores, (evidence,))

    def reserve(self, cycle: CycleState, pod: PodInfo, node: str) -> Status:
        if not self.args.recent_heat or not self.applies(pod):
            return SUCCESS
        table = self.handle.table
        row = table.index.get(node)
        col = table.resource_index.get(self.args.gpu_resource)
        if row is None or col is None:
            return SUCCESS
        gpus = float(table.allocatable[row, col])
        requested = pod.requests.get(self.args.gpu_resource, 0)
        if gpus > 0 and requested:
            self._recent.add(pod.uid, node, table, self._clock(), requested / gpus)
        return SUCCESS

    def unreserve(self, cycle: CycleState, pod: PodInfo, node: str) -> None:
        self._recent.remove(pod.uid)
