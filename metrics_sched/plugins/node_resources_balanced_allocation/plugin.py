"""NodeResourcesBalancedAllocation: favour nodes whose resources would be used evenly with the pod on them,
as kube-scheduler's plugin (pkg/scheduler/framework/plugins/noderesources/balanced_allocation.go and
resource_allocation.go) scores them.

For each configured resource, fraction = (requested on the node + the pod's request) / allocatable, capped
at 1; a resource the node does not offer (allocatable 0), and an extended resource the pod does not request,
is left out. score = (1 - std of the fractions) * 100, truncated: std is |f1 - f2| / 2 for two fractions, the
population standard deviation for more, 0 for fewer. As upstream (useRequested), the plain requests count,
not the non-zero defaults NodeResourcesFit scores with; a pod that requests none of the resources
(best effort) is skipped at PreScore. Vectorised over the candidate rows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from metrics_sched.framework import (
    CPU,
    EPHEMERAL_STORAGE,
    MEMORY,
    PODS,
    SUCCESS,
    ArgsError,
    Batchable,
    BatchScope,
    BoolArray,
    Code,
    CycleState,
    FloatArray,
    Handle,
    IntArray,
    NodeTable,
    Normalized,
    PodInfo,
    PreScorePlugin,
    Reads,
    RowScores,
    ScorePlugin,
    StateKey,
    Status,
    unchanged,
)

_REQUESTS = StateKey[tuple[int, ...]]("NodeResourcesBalancedAllocation/requests")
_NATIVE = frozenset({CPU, MEMORY, EPHEMERAL_STORAGE})
MAX_NODE_SCORE = 100.0


@dataclass(frozen=True)
class ResourceSpec:
    name: str
    weight: int = 1


class NodeResourcesBalancedAllocation(PreScorePlugin, ScorePlugin, Batchable):
    name = "NodeResourcesBalancedAllocation"
    normalized = Normalized.COMPLETE  # 100 * (1 - std) of fractions in [0, 1]
    events = frozenset()  # a score: it never rejects a pod

    def __init__(self, args: Any, handle: Handle) -> None:
        super().__init__(args, handle)
        self._kept = RowScores()

    def batch_scope(self, pod: PodInfo) -> BatchScope | None:
        """Opportunistic batching: reads the node's allocatable and what its pods request."""
        return BatchScope(Reads.NODE | Reads.PODS)

    @dataclass(frozen=True)
    class Args:
        resources: tuple[ResourceSpec, ...] = (ResourceSpec(CPU), ResourceSpec(MEMORY))

        def validate(self) -> None:
            """As ValidateNodeResourcesBalancedAllocationArgs: names unique, every weight 1."""
            if not self.resources:
                raise ArgsError("resources", "must name at least one resource")
            seen: set[str] = set()
            for i, resource in enumerate(self.resources):
                if resource.name in seen:
                    raise ArgsError(f"resources[{i}].name", f"duplicate resource {resource.name!r}")
                seen.add(resource.name)
                if resource.weight != 1:
                    raise ArgsError(f"resources[{i}].weight", f"must be 1, got {resource.weight!r}")

    args: Args

    def _pod_requests(self, pod: PodInfo) -> tuple[int, ...]:
        return tuple(pod.requests.get(r.name, 0) for r in self.args.resources)

    def pre_score(self, cycle: CycleState, pod: PodInfo, table: NodeTable, rows: IntArray) -> Status:
        requests = self._pod_requests(pod)
        if not any(requests):  # best effort: skipped, so such pods do not pile onto one node (kubernetes#129138)
            return Status(Code.SKIP)
        cycle.write(_REQUESTS, requests)
        return SUCCESS

    def row_local_scores(self) -> bool:
        return True  # the row's allocatable and requests

    def score(self, cycle: CycleState, pod: PodInfo, table: NodeTable, rows: IntArray) -> FloatArray:
        requests = cycle.get(_REQUESTS)
        if requests is None:  # PreScore not enabled in this profile
            requests = self._pod_requests(pod)
            if not any(requests):
                return np.zeros(rows.shape[0], dtype=np.float64)
        # Elementwise in the row's resources and the pod's requests: kept per row, patched where pods changed.
        return self._kept.scores(requests, table, rows, lambda at: self._score_rows(requests, table, at),
                                 lambda row: self._score_one(requests, table, row))

    def _score_one(self, requests: tuple[int, ...], table: NodeTable, row: int) -> float:
        """_score_rows of one row in Python floats, the same operations in the same order (so the same double);
        rows where some counted resource is not offered, or more than two count, take the vector path."""
        fractions: list[float] = []
        for resource, request in zip(self.args.resources, requests, strict=True):
            name = resource.name
            if name == PODS or (name not in _NATIVE and request == 0):
                continue
            col = table.resource_index.get(name)
            if col is None:
                continue
            allocatable = float(table.allocatable_by_resource[col, row])
            if not allocatable > 0 or len(fractions) == 2:
                return float(self._score_rows(requests, table, np.array([row], dtype=np.int64))[0])
            fractions.append(min(float(int(table.requested_by_resource[col, row]) + request) / allocatable, 1.0))
        if len(fractions) < 2:
            return MAX_NODE_SCORE
        return float(math.trunc((1.0 - abs((fractions[0] - fractions[1]) / 2)) * MAX_NODE_SCORE))

    def _score_rows(self, requests: tuple[int, ...], table: NodeTable, rows: IntArray) -> FloatArray:
        fractions: list[FloatArray] = []
        valid: list[BoolArray | None] = []  # None: every scored row offers the resource
        for resource, request in zip(self.args.resources, requests, strict=True):
            name = resource.name
            if name == PODS or (name not in _NATIVE and request == 0):
                continue  # upstream returns (0, 0) for these: the resource is left out
            col = table.resource_index.get(name)
            if col is None:
                continue  # no node offers it
            allocatable = table.allocatable_by_resource[col][rows]  # contiguous per resource
            used = table.requested_by_resource[col][rows] + request
            if allocatable.all():
                fraction: FloatArray = used / allocatable  # int / float: float64, as float64(a) / float64(b)
                valid.append(None)
            else:
                offered = allocatable > 0
                with np.errstate(divide="ignore", invalid="ignore"):
                    fraction = np.where(offered, used / allocatable, 0.0)
                valid.append(offered)
            np.minimum(fraction, 1.0, out=fraction)
            fractions.append(fraction)
        return _balanced_scores(fractions, valid, rows.shape[0])

    normalize = unchanged  # already 0-100 (upstream has no NormalizeScore for it)


def _balanced_scores(fractions: list[FloatArray], valid: list[BoolArray | None], n: int) -> FloatArray:
    """balancedResourceScorer over every row at once, with the float operations in upstream's order (so
    the truncated scores match at the boundaries): per row, only the fractions whose resource is offered
    (`valid`, None when every row offers it)."""
    if not fractions:
        return np.full(n, MAX_NODE_SCORE)
    std: FloatArray
    if all(v is None for v in valid):  # the common case: the same resources count on every row
        if len(fractions) == 1:
            return np.full(n, MAX_NODE_SCORE)
        if len(fractions) == 2:
            std = np.abs((fractions[0] - fractions[1]) / 2)
        else:
            total = fractions[0].copy()
            for fraction in fractions[1:]:
                total += fraction
            mean = total / len(fractions)
            squares = np.zeros(n, dtype=np.float64)
            for fraction in fractions:
                deviation = fraction - mean
                squares += deviation * deviation
            std = np.sqrt(squares / len(fractions))
        result: FloatArray = np.trunc((1.0 - std) * MAX_NODE_SCORE)
        return result
    masks = [np.ones(n, dtype=bool) if v is None else v for v in valid]
    count = np.zeros(n, dtype=np.int64)
    total = np.zeros(n, dtype=np.float64)
    first = np.zeros(n, dtype=np.float64)
    second = np.zeros(n, dtype=np.float64)
    for fraction, offered in zip(fractions, masks, strict=True):
        first = np.where(offered & (count == 0), fraction, first)
        second = np.where(offered & (count == 1), fraction, second)
        total = np.where(offered, total + fraction, total)
        count = count + offered
    std = np.where(count == 2, np.abs((first - second) / 2), 0.0)
    more = count > 2
    if more.any():
        with np.errstate(divide="ignore", invalid="ignore"):
            mean = total / count
        squares = np.zeros(n, dtype=np.float64)
        for fraction, offered in zip(fractions, masks, strict=True):
            squares = np.where(offered, squares + (fraction - mean) * (fraction - mean), squares)
        with np.errstate(divide="ignore", invalid="ignore"):
            std = np.where(more, np.sqrt(squares / count), std)
    mixed: FloatArray = np.trunc((1.0 - std) * MAX_NODE_SCORE)
    return mixed
