"""TargetLoadPacking: pack pods onto nodes up to a target CPU utilisation, then spread, as Trimaran's
TargetLoadPacking does (kubernetes-sigs/scheduler-plugins, pkg/trimaran/targetloadpacking: README.md and
targetloadpacking.go).

The pod's CPU use is predicted from its containers: the CPU limit where there is one, else the request times
`defaultRequestsMultiplier`, else `defaultRequests` (best effort), plus the pod overhead. With U the node's
utilisation in percent once the pod and the pods placed since its last sample (the in-flight ledger, upstream's
ScheduledPodsCache) are added:

    U <= target:        score = (100 - target) * U / target + target   # rises to 100 at the target: pack
    target < U <= 100:  score = target * (100 - U) / (100 - target)    # falls to 0 at 100 %: spread
    U > 100:            score = 0

rounded to an integer as upstream. A node without a fresh utilisation has no value (upstream scores it 0; the
metric's `onMissing: lowest` does the same here). Args (defaults, upstream's):

    metric: node_cpu_utilisation   # fraction 0-1 of the node's CPUs
    targetUtilization: 40          # percent (upstream recommends 10 below the utilisation wanted)
    defaultRequests: {cpu: "1"}    # for containers with neither request nor limit
    defaultRequestsMultiplier: 1.5 # for containers with a request and no limit
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from metrics_sched.framework import (
    CPU,
    ArgsError,
    CycleState,
    FloatArray,
    Handle,
    IntArray,
    MetricEvidence,
    NodeTable,
    Normalized,
    OnMissing,
    PodInfo,
    QuantityError,
    ScoreDetail,
    ScorePlugin,
    parse_resource_list,
    read_metric,
    unchanged,
)


def packing_scores(predicted: FloatArray, target: float) -> FloatArray:
    """Upstream's Score over an array of predicted utilisations in percent (NaN stays NaN)."""
    with np.errstate(invalid="ignore"):
        below = (100.0 - target) * predicted / target + target
        above = target * (100.0 - predicted) / (100.0 - target)
        scores = np.where(predicted > target, np.where(predicted > 100.0, 0.0, above), below)
        result: FloatArray = np.floor(scores + 0.5)  # Go's math.Round on non-negative values
    return result


def predicted_millicores(pod: Mapping[str, Any], default_millicores: int, multiplier: float) -> int:
    """Upstream's PredictUtilisation over the pod's containers, plus its overhead (init containers do not count)."""
    spec = pod.get("spec") or {}
    total = 0
    for container in spec.get("containers") or ():
        resources = container.get("resources") or {}
        try:
            limits = parse_resource_list(resources.get("limits"))
            requests = parse_resource_list(resources.get("requests"))
        except QuantityError:
            limits, requests = {}, {}  # the pod's own parse reports it; here it predicts as best effort
        if CPU in limits:
            total += limits[CPU]
        elif CPU in requests:
            total += int(np.floor(requests[CPU] * multiplier + 0.5))
        else:
            total += default_millicores
    with contextlib.suppress(QuantityError):
        total += parse_resource_list(spec.get("overhead")).get(CPU, 0)
    return total


class TargetLoadPacking(ScorePlugin):
    name = "TargetLoadPacking"
    normalized = Normalized.IN_RANGE  # 0-100 by construction, NaN where no utilisation
    events = frozenset()  # a score: it never rejects a pod

    @dataclass(frozen=True)
    class Args:
        metric: str = "node_cpu_utilisation"
        target_utilization: float = 40.0
        default_requests: dict[str, str] = field(default_factory=lambda: {CPU: "1"})
        default_requests_multiplier: float = 1.5

        def validate(self) -> None:
            # As scheduler-plugins' ValidateTargetLoadPackingArgs: a percentage, exclusive of 0 and 100 here (the
            # score divides by target and by 100 - target).
            if not 0 < self.target_utilization < 100:
                raise ArgsError("targetUtilization", "must be a percentage above 0 and below 100")
            if not self.default_requests_multiplier > 0:
                raise ArgsError("defaultRequestsMultiplier", "must be positive")
            try:
                parse_resource_list(self.default_requests)
            except QuantityError as exc:
                raise ArgsError("defaultRequests", str(exc)) from None

    args: Args

    def __init__(self, args: Args, handle: Handle) -> None:
        super().__init__(args, handle)
        self.default_millicores = parse_resource_list(self.args.default_requests).get(CPU, 1000)

    def score(self, cycle: CycleState, pod: PodInfo, table: NodeTable, rows: IntArray) -> ScoreDetail:
        read = read_metric(self.handle, self.args.metric, table)
        col = table.resource_index.get(CPU)
        capacity = table.allocatable[rows, col].astype(np.float64) if col is not None else np.zeros(rows.shape[0])
        pod_millicores = predicted_millicores(pod.raw, self.default_millicores, self.args.default_requests_multiplier)
        with np.errstate(divide="ignore", invalid="ignore"):
            predicted = np.where(capacity > 0, 100.0 * (read.values[rows] + pod_millicores / capacity), 0.0)
        scores = packing_scores(predicted, self.args.target_utilization)
        if self.handle.metrics.contract(self.args.metric).on_missing == OnMissing.LOWEST:
            scores = np.where(read.missing[rows], 0.0, scores)
        column = read.column
        evidence = MetricEvidence(column.metric, read.measured if read.measured is not None else read.values,
                                  read.in_flight, column.observed_at, tuple(column.sources))
        return ScoreDetail(scores, (evidence,))

    normalize = unchanged  # score() is already on 0-100 (NaN = no value)
