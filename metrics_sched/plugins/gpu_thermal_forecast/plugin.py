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
    """Placements within the window: their node, time and share of the node's GPUs, in append-only arrays (a sum
    per row is one bincount, whatever their number)."""

    def __init__(self) -> None:
        self.nodes: list[str] = []
        self.rows = np.zeros(0, dtype=np.int64)
        self.times = np.zeros(0)
        self.shares = np.zeros(0)
        self.by_uid: dict[str, int] = {}
        self.rows_generation = -1

    def add(self, uid: str, node: str, row: int, at: float, share: float) -> None:
        self.remove(uid)
        self.by_uid[uid] = len(self.nodes)
        self.nodes.append(node)
        self.rows = np.append(self.rows, row)
        self.times = np.append(self.times, at)
        self.shares = np.append(self.shares, share)

    def remove(self, uid: str) -> None:
        at = self.by_uid.pop(uid, None)
        if at is not None:
            self.shares[at] = 0.0

    def prune(self, since: float) -> None:
        keep = np.flatnonzero(self.times >= since)
        if keep.size == self.times.size:
            return
        self.nodes = [self.nodes[i] for i in keep.tolist()]
        self.rows, self.times, self.shares = self.rows[keep], self.times[keep], self.shares[keep]
        position = {int(old): new for new, old in enumerate(keep.tolist())}
        self.by_uid = {uid: position[i] for uid, i in self.by_uid.items() if i in position}

    def per_row(self, table: NodeTable, since: float) -> FloatArray:
        if self.rows_generation != table.rows_generation:
            self.rows = np.array([table.index.get(n, -1) for n in self.nodes], dtype=np.int64)
            self.rows_generation = table.rows_generation
        live = (self.times >= since) & (self.rows >= 0)
        summed: FloatArray = np.bincount(self.rows[live], weights=self.shares[live], minlength=table.capacity)[
            : table.capacity].astype(np.float64)
        return summed


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
            try:
                self.scale()
            except ArgsError as exc:
                raise ArgsError(f"normalization.{exc.field}", exc.message) from None

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
        if not self.args.recent_heat or not self._recent.nodes:
            return None
        since = self._clock() - self._window
        self._recent.prune(since)
        if not self._recent.nodes:
            return None
        heat = self._recent.per_row(table, since)
        heat *= self.args.recent_heat
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
            self._recent.rows_generation = table.rows_generation if not self._recent.nodes \
                else self._recent.rows_generation
            self._recent.add(pod.uid, node, row, self._clock(), requested / gpus)
        return SUCCESS

    def unreserve(self, cycle: CycleState, pod: PodInfo, node: str) -> None:
        self._recent.remove(pod.uid)
