"""NodeResourcesFit: the pod's requests must fit in allocatable minus what is already placed; score
by LeastAllocated (spread) or MostAllocated (bin-pack) over weighted resources, as kube-scheduler does.

Scores use kube-scheduler's non-zero view of cpu and memory (a container without requests counts
100m / 200Mi), so pods without requests still spread.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from metrics_sched.framework import (
    CPU,
    DRA_EXTENDED_RESOURCES,
    MEMORY,
    PODS,
    SUCCESS,
    ArgsError,
    Batchable,
    BatchScope,
    BoolArray,
    ClusterEvent,
    CycleState,
    EventHint,
    Filtered,
    FilterPlugin,
    FloatArray,
    Handle,
    IntArray,
    NodeRecord,
    NodeTable,
    Normalized,
    PodInfo,
    PreFilterPlugin,
    QueueingHint,
    Reads,
    RowScores,
    ScorePlugin,
    StateKey,
    Status,
    unchanged,
)

_REQUESTS = StateKey[IntArray]("NodeResourcesFit/requests")
# filter_rows on up to this many rows compares Python ints.
_FEW = 4


@dataclass(frozen=True)
class ResourceWeight:
    name: str
    weight: int = 1

    def validate(self) -> None:
        if not 1 <= self.weight <= 100:
            raise ArgsError("weight", f"must be an integer 1-100, got {self.weight!r}")


@dataclass(frozen=True)
class ScoringStrategy:
    type: Literal["LeastAllocated", "MostAllocated"] = "LeastAllocated"
    resources: tuple[ResourceWeight, ...] = (ResourceWeight(CPU), ResourceWeight(MEMORY))


class NodeResourcesFit(PreFilterPlugin, FilterPlugin, ScorePlugin, Batchable):
    name = "NodeResourcesFit"
    node_local = True  # the node's allocatable and its pods' requests
    normalized = Normalized.COMPLETE  # 100 * (1 - used/capacity), used/capacity held to [0, 1]
    normalize = unchanged  # already 0-100 (see `normalized`): the default's clip would copy them for nothing
    events = frozenset({ClusterEvent.NODE_ADDED, ClusterEvent.NODE_ALLOCATABLE, ClusterEvent.POD_DELETED})

    @classmethod
    def resolvable(cls, reason: str) -> bool:
        """Each of filter()'s reasons (one per resource, made at run time): a node short of a resource or of pod
        slots may have room once lower-priority pods leave."""
        return reason == _reason(PODS) or reason.startswith("Insufficient ")

    def batch_scope(self, pod: PodInfo) -> BatchScope | None:
        """Opportunistic batching: reads the node's allocatable and what its pods request."""
        return BatchScope(Reads.NODE | Reads.PODS)

    @dataclass(frozen=True)
    class Args:
        scoring_strategy: ScoringStrategy = ScoringStrategy()

    args: Args

    def __init__(self, args: Args, handle: Handle) -> None:
        super().__init__(args, handle)
        self.strategy = self.args.scoring_strategy.type
        self.score_resources = [(r.name, r.weight) for r in self.args.scoring_strategy.resources]
        self._kept = RowScores()
        # The last request vector filter_rows saw and its requested columns with their amounts.
        self._needed: tuple[IntArray | None, list[tuple[int, int]]] = (None, [])

    def events_to_register(self) -> list[EventHint]:
        return [EventHint(ClusterEvent.NODE_ADDED, self._fits_on),
                EventHint(ClusterEvent.NODE_ALLOCATABLE, self._fits_on), EventHint(ClusterEvent.POD_DELETED)]

    @staticmethod
    def _fits_on(pod: PodInfo, node: NodeRecord | None) -> QueueingHint:
        """A node that could not hold the pod even empty cannot help it (kube's isSchedulableAfterNodeChange)."""
        if node is None:
            return QueueingHint.QUEUE
        fits = all(node.allocatable.get(resource, 0) >= amount for resource, amount in pod.requests.items() if amount)
        return QueueingHint.QUEUE if fits else QueueingHint.SKIP

    def pre_filter(self, cycle: CycleState, pod: PodInfo) -> Status:
        cycle.write(_REQUESTS, self.handle.table.vector(pod.requests))
        return SUCCESS

    def _requests(self, cycle: CycleState, pod: PodInfo, table: NodeTable) -> IntArray:
        vector = cycle.get(_REQUESTS)
        if vector is None or vector.shape[0] != len(table.resources):
            vector = table.vector(pod.requests)
            cycle.write(_REQUESTS, vector)
        return vector

    def filter(self, cycle: CycleState, pod: PodInfo, table: NodeTable) -> Filtered:
        request = self._requests(cycle, pod, table)
        reasons = {}
        fits = np.ones(table.capacity, dtype=bool)
        through_dra = cycle.get(DRA_EXTENDED_RESOURCES, frozenset())
        for col in np.flatnonzero(request).tolist():
            resource = table.resources[col]
            short = table.free_by_resource[col] < request[col]
            if resource in through_dra:  # a node with none of it serves it through DRA (DynamicResources' part)
                short &= table.allocatable_by_resource[col] != 0
            reasons[_reason(resource)] = short
            fits &= ~short
        return Filtered(fits, reasons)

    def _needs(self, cycle: CycleState, pod: PodInfo, table: NodeTable) -> list[tuple[int, int]]:
        """The requested columns with their amounts."""
        request = self._requests(cycle, pod, table)
        seen = self._needed  # held here: the vector it names is never freed, so never another at its address
        needed = seen[1] if seen[0] is request else None
        if needed is None:  # per request vector (a batch's cycle state holds the same one for every pod it serves)
            needed = [(col, int(request[col])) for col in np.flatnonzero(request).tolist()]
            self._needed = (request, needed)
        return needed

    def filter_rows(self, cycle: CycleState, pod: PodInfo, table: NodeTable, rows: IntArray) -> BoolArray:
        """filter() on a few rows (a batched cycle re-checks the nodes whose pods changed)."""
        needed = self._needs(cycle, pod, table)
        free = table.free_by_resource
        if rows.size <= _FEW:  # a placement's row or two: Python ints, not a dozen numpy calls on a 1xN block
            return np.array([all(int(free[col, row]) >= amount for col, amount in needed) for row in rows.tolist()],
                            dtype=bool)
        # free_by_resource is contiguous per resource: a gather and a compare per requested resource (filter()'s
        # own comparison, on these rows).
        fits: BoolArray = np.ones(rows.size, dtype=bool)
        for col, amount in needed:
            fits &= free[col][rows] >= amount
        return fits

    def reasons_on_row(self, cycle: CycleState, pod: PodInfo, table: NodeTable, row: int) -> frozenset[str] | None:
        """filter()'s reasons for one row, from its free amounts alone."""
        free, resources = table.free_by_resource, table.resources
        short = frozenset(_reason(resources[col])
                          for col, amount in self._needs(cycle, pod, table) if int(free[col, row]) < amount)
        return short or None

    def row_local_scores(self) -> bool:
        return True  # the row's allocatable and requests

    def score(self, cycle: CycleState, pod: PodInfo, table: NodeTable, rows: IntArray) -> FloatArray:
        # Elementwise in the row's resources and these numbers of the pod: kept per row, patched where pods changed.
        key = (pod.non_zero_requests.get(CPU, 0), pod.non_zero_requests.get(MEMORY, 0),
               *(pod.requests.get(resource, 0) for resource, _ in self.score_resources))
        return self._kept.scores(key, table, rows, lambda at: self._score_rows(pod, table, at),
                                 lambda row: self._score_one(pod, table, row))

    def _score_one(self, pod: PodInfo, table: NodeTable, row: int) -> float:
        """_score_rows of one row in Python floats: the same operations in the same order (an int64 over a float64
        is float64(a) / b in numpy, as int / float is in Python), so the same double (tests/unit/test_row_memo)."""
        total = 0.0
        weights = 0
        for resource, weight in self.score_resources:
            col = table.resource_index.get(resource)
            if col is None:
                continue
            capacity = float(table.allocatable_by_resource[col, row])
            if resource == CPU:
                used = int(table.nonzero_by_resource[0, row]) + pod.non_zero_requests.get(CPU, 0)
            elif resource == MEMORY:
                used = int(table.nonzero_by_resource[1, row]) + pod.non_zero_requests.get(MEMORY, 0)
            else:
                used = int(table.requested_by_resource[col, row]) + pod.requests.get(resource, 0)
            ratio = min(float(used) / capacity, 1.0) if capacity > 0 else 1.0
            if self.strategy == "LeastAllocated":
                ratio = 1.0 - ratio
            ratio *= 100.0
            if weight != 1:
                ratio *= weight
            total += ratio
            weights += weight
        return total / weights if weights else total

    def _score_rows(self, pod: PodInfo, table: NodeTable, rows: IntArray) -> FloatArray:
        total = np.zeros(rows.shape[0], dtype=np.float64)
        weights = 0
        for resource, weight in self.score_resources:
            col = table.resource_index.get(resource)
            if col is None:
                continue
            capacity = table.allocatable_by_resource[col][rows]
            if resource == CPU:
                used = table.nonzero_by_resource[0][rows] + pod.non_zero_requests.get(CPU, 0)
            elif resource == MEMORY:
                used = table.nonzero_by_resource[1][rows] + pod.non_zero_requests.get(MEMORY, 0)
            else:
                used = table.requested_by_resource[col][rows] + pod.requests.get(resource, 0)
            # The same float operations as weight * (100 * (1 - min(used / capacity, 1))), in place.
            if capacity.size and capacity.min() > 0:
                ratio = used / capacity
                np.minimum(ratio, 1.0, out=ratio)
            else:
                with np.errstate(divide="ignore", invalid="ignore"):
                    ratio = np.where(capacity > 0, np.minimum(used / capacity, 1.0), 1.0)
            if self.strategy == "LeastAllocated":
                np.subtract(1.0, ratio, out=ratio)
            ratio *= 100.0
            if weight != 1:
                ratio *= weight
            total += ratio
            weights += weight
        result: FloatArray = total / weights if weights else total
        return result


def _reason(resource: str) -> str:
    """What filter() lists a node short of `resource` under (kube's InsufficientResource messages)."""
    return "Too many pods" if resource == PODS else f"Insufficient {resource}"
