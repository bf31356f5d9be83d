"""LoadRiskBalancing: prefer nodes whose load is low *and* steady, as Trimaran's LoadVariationRiskBalancing does
(kubernetes-sigs/scheduler-plugins, pkg/trimaran/loadvariationriskbalancing: README.md and analysis.go).

Per resource, from the node's mean utilisation and its standard deviation over a window (two metrics the source
evaluates, e.g. the Prometheus presets `node_cpu_utilisation_mean` and `node_cpu_utilisation_stddev`, fractions
0-1; see docs/forecasting.md):

    mu    = clip(clip(mean, 0, 1) + pod request / node allocatable, 0, 1)   # the pod adds its request, no variance
    sigma = clip(margin * clip(stddev, 0, 1) ^ (1 / sensitivity), 0, 1)
    risk  = (mu + sigma) / 2
    score = 100 * (1 - risk)

and the node's score is that of its worst resource (the lowest). As upstream: a missing standard deviation counts
as 0; sensitivity 0 makes the root power infinite (sigma^inf: 0 below 1); capacity 0 scores 0. Unlike upstream, a
node without a fresh mean has no value (the term drops out for it, or 0 with the metric's `onMissing: lowest`),
and the in-flight ledger's estimate is added to the mean when it has one for that metric. Args (defaults, as
Trimaran's: safeVarianceMargin 1, safeVarianceSensitivity 1; its README recommends 1 and 2):

    safeVarianceMargin: 1
    safeVarianceSensitivity: 1
    resources:
    - {resource: cpu, mean: node_cpu_utilisation_mean, stddev: node_cpu_utilisation_stddev}
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from metrics_sched.framework import (
    CPU,
    ArgsError,
    CycleState,
    FloatArray,
    IntArray,
    MetricEvidence,
    NodeTable,
    Normalized,
    OnMissing,
    PodInfo,
    ScoreDetail,
    ScorePlugin,
    read_metric,
    unchanged,
)

MAX_NODE_SCORE = 100.0


@dataclass(frozen=True)
class RiskResource:
    resource: str = CPU
    mean: str = "node_cpu_utilisation_mean"  # fraction 0-1 of the node's capacity, averaged over the window
    stddev: str = "node_cpu_utilisation_stddev"  # fraction 0-1, its standard deviation over the same window


def risk_scores(mean: FloatArray, stddev: FloatArray, demand: FloatArray, margin: float,
                sensitivity: float) -> FloatArray:
    """Trimaran's computeScore (analysis.go) over arrays of fractions of capacity: mean and stddev measured, demand
    the pod's request. NaN in `mean` stays NaN (no value); NaN in `stddev` counts as 0 (upstream's default)."""
    with np.errstate(invalid="ignore"):
        mu = np.clip(np.clip(mean, 0.0, 1.0) + np.maximum(demand, 0.0), 0.0, 1.0)
        sigma = np.clip(np.nan_to_num(stddev, nan=0.0), 0.0, 1.0)
        if sensitivity > 0:
            sigma = sigma ** (1.0 / sensitivity)
        elif sensitivity == 0:  # Go: math.Pow(sigma, +Inf) is 0 below 1 and 1 at 1
            sigma = np.where(sigma >= 1.0, 1.0, 0.0)
        sigma = np.clip(sigma * margin, 0.0, 1.0)
        result: FloatArray = (1.0 - (mu + sigma) / 2.0) * MAX_NODE_SCORE
    return result


class LoadRiskBalancing(ScorePlugin):
    name = "LoadRiskBalancing"
    normalized = Normalized.IN_RANGE  # 100 * (1 - risk) with risk in [0, 1]; NaN where no mean
    events = frozenset()  # a score: it never rejects a pod

    @dataclass(frozen=True)
    class Args:
        safe_variance_margin: float = 1.0
        safe_variance_sensitivity: float = 1.0
        resources: tuple[RiskResource, ...] = (RiskResource(),)

        def validate(self) -> None:
            # As scheduler-plugins' ValidateLoadVariationRiskBalancingArgs: both non-negative.
            if not self.safe_variance_margin >= 0:
                raise ArgsError("safeVarianceMargin", "must be non-negative")
            if not self.safe_variance_sensitivity >= 0:
                raise ArgsError("safeVarianceSensitivity", "must be non-negative")
            if not self.resources:
                raise ArgsError("resources", "must name at least one {resource, mean, stddev}")

    args: Args

    def score(self, cycle: CycleState, pod: PodInfo, table: NodeTable, rows: IntArray) -> ScoreDetail:
        worst: FloatArray | None = None
        evidence: list[MetricEvidence] = []
        for spec in self.args.resources:
            mean = read_metric(self.handle, spec.mean, table)
            stddev = read_metric(self.handle, spec.stddev, table, with_ledger=False)
            for read in (mean, stddev):
                column = read.column
                evidence.append(MetricEvidence(column.metric, read.measured if read.measured is not None
                                               else read.values, read.in_flight, column.observed_at,
                                               tuple(column.sources)))
            col = table.resource_index.get(spec.resource)
            capacity = (table.allocatable[rows, col].astype(np.float64) if col is not None
                        else np.zeros(rows.shape[0]))
            requested = float(pod.requests.get(spec.resource, 0))
            with np.errstate(divide="ignore", invalid="ignore"):
                demand = np.where(capacity > 0, requested / capacity, 0.0)
            scores = risk_scores(mean.values[rows], stddev.values[rows], demand,
                                 self.args.safe_variance_margin, self.args.safe_variance_sensitivity)
            scores = np.where(capacity > 0, scores, 0.0)  # upstream: an invalid capacity scores 0
            if self.handle.metrics.contract(spec.mean).on_missing == OnMissing.LOWEST:
                scores = np.where(mean.missing[rows], 0.0, scores)
            else:
                scores = np.where(mean.missing[rows], np.nan, scores)
            worst = scores if worst is None else np.fmin(worst, scores)  # fmin: a NaN resource leaves the other
        assert worst is not None  # validate() keeps at least one resource
        return ScoreDetail(worst, tuple(evidence))

    normalize = unchanged  # score() is already on 0-100 (NaN = no value)
