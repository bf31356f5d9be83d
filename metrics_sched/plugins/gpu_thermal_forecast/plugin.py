"""GPUThermalForecast: judge a GPU node by the temperature it is heading for, not the one it has.

A node at 70 °C climbing 1 °C a minute crosses 85 °C soon after it receives a job; GPUTemperature sees a cool
node, this plugin sees the forecast. The metric is a forecast the telemetry source evaluates (the Prometheus
preset `dcgm_gpu_temp_forecast`: `predict_linear` of each GPU's temperature over a window, `horizon` ahead, the
hottest GPU per node; see docs/forecasting.md), so the hot path reads one cached value per node as for any metric.

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
    ArgsError,
    CycleState,
    Filtered,
    Handle,
    IntArray,
    MetricScorePlugin,
    MetricTerm,
    NodeTable,
    Normalization,
    PodInfo,
    Scale,
    ScoreDetail,
    explain,
    read_metric,
)

# A Prometheus duration as the source's `window` takes it (one unit: what the explanation shows as written).
_DURATION = re.compile(r"^[1-9][0-9]*(s|m|h|d)$")


class GPUThermalForecast(MetricScorePlugin):
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
        gpu_resource: str = GPU
        only_gpu_pods: bool = True
        normalization: Normalization = field(default_factory=Normalization)

        def validate(self) -> None:
            for name in ("horizon", "window"):
                if not _DURATION.match(getattr(self, name)):
                    raise ArgsError(name, f"must be a duration like 30m, got {getattr(self, name)!r}")
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

    def make_terms(self) -> Sequence[MetricTerm]:
        return (MetricTerm(self.args.metric, "lower", self.args.scale()),)

    def applies(self, pod: PodInfo) -> bool:
        return (not self.args.only_gpu_pods or pod.requests.get(self.args.gpu_resource, 0) > 0
                or bool((pod.raw.get("spec") or {}).get("resourceClaims")))

    def metrics_changed(self, table: NodeTable) -> bool:
        # A refresh may bring a node's forecast back under the threshold: parked pods retry.
        return self.args.filter or super().metrics_changed(table)

    def filter(self, cycle: CycleState, pod: PodInfo, table: NodeTable) -> Filtered:
        verdict = super().filter(cycle, pod, table)
        if not self.args.filter or not self.applies(pod):
            return verdict
        forecast = read_metric(self.handle, self.args.metric, table, with_ledger=False).values
        with np.errstate(invalid="ignore"):
            hot = forecast > self.args.threshold  # NaN (no fresh forecast) is not hot: onMissing decides
        return Filtered(verdict.feasible & ~hot, {self._reason: hot, **verdict.reasons})

    def score(self, cycle: CycleState, pod: PodInfo, table: NodeTable, rows: IntArray) -> ScoreDetail:
        detail = super().score(cycle, pod, table, rows)
        if self.applies(pod):
            explain(cycle, self.note)
        return detail
