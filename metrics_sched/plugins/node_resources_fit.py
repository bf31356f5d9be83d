"""NodeResourcesFit: the pod's requests must fit in allocatable minus what is already placed; score
by LeastAllocated (spread) or MostAllocated (bin-pack) over weighted resources, as kube-scheduler does.

Scores use kube-scheduler's non-zero view of cpu and memory (a container without requests counts
100m / 200Mi), so pods without requests still spread.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from metrics_sched.config.errors import ArgsError
from metrics_sched.framework.interfaces import (
    SUCCESS,
    ClusterEvent,
    CycleState,
    Filtered,
    FilterPlugin,
    PreFilterPlugin,
    ScorePlugin,
    Status,
)
from metrics_sched.podinfo import PodInfo
from metrics_sched.resources import CPU, MEMORY, PODS
from metrics_sched.state.node_table import FloatArray, IntArray, NodeTable

STRATEGIES = ("LeastAllocated", "MostAllocated")
_STATE_KEY = "NodeResourcesFit/requests"


class NodeResourcesFit(PreFilterPlugin, FilterPlugin, ScorePlugin):
    name = "NodeResourcesFit"
    events = frozenset({ClusterEvent.NODE_ADDED, ClusterEvent.NODE_ALLOCATABLE, ClusterEvent.POD_DELETED})

    def __init__(self, args: Mapping[str, Any], handle: Any) -> None:
        super().__init__(args, handle)
        strategy = args.get("scoringStrategy") or {}
        self.strategy: str = strategy.get("type", "LeastAllocated")
        resources = strategy.get("resources") or [{"name": CPU, "weight": 1}, {"name": MEMORY, "weight": 1}]
        self.score_resources: list[tuple[str, int]] = [(r["name"], int(r.get("weight", 1))) for r in resources]

    @classmethod
    def check_args(cls, args: Mapping[str, Any]) -> None:
        for key in args:
            if key != "scoringStrategy":
                raise ArgsError(key, "unknown field (expected scoringStrategy)")
        strategy = args.get("scoringStrategy") or {}
        if not isinstance(strategy, Mapping):
            raise ArgsError("scoringStrategy", "must be a mapping")
        for key in strategy:
            if key not in ("type", "resources"):
                raise ArgsError(f"scoringStrategy.{key}", "unknown field (expected type, resources)")
        if strategy.get("type", "LeastAllocated") not in STRATEGIES:
            raise ArgsError("scoringStrategy.type", f"must be one of {', '.join(STRATEGIES)}, "
                                                    f"got {strategy.get('type')!r}")
        resources = strategy.get("resources", [])
        if not isinstance(resources, list):
            raise ArgsError("scoringStrategy.resources", "must be a list of {name, weight}")
        for i, item in enumerate(resources):
            if not isinstance(item, Mapping) or not isinstance(item.get("name"), str):
                raise ArgsError(f"scoringStrategy.resources[{i}].name", "must be a resource name")
            weight = item.get("weight", 1)
            if isinstance(weight, bool) or not isinstance(weight, int) or not 1 <= weight <= 100:
                raise ArgsError(f"scoringStrategy.resources[{i}].weight", f"must be an integer 1-100, got {weight!r}")

    def pre_filter(self, cycle: CycleState, pod: PodInfo) -> Status:
        cycle[_STATE_KEY] = self.handle.table.vector(pod.requests)
        return SUCCESS

    def _requests(self, cycle: CycleState, pod: PodInfo, table: NodeTable) -> IntArray:
        vector = cycle.get(_STATE_KEY)
        if vector is None or vector.shape[0] != len(table.resources):
            vector = cycle[_STATE_KEY] = table.vector(pod.requests)
        result: IntArray = vector
        return result

    def filter(self, cycle: CycleState, pod: PodInfo, table: NodeTable) -> Filtered:
        request = self._requests(cycle, pod, table)
        wanted = np.flatnonzero(request)
        free = table.allocatable[:, wanted] - table.requested[:, wanted]
        short = free < request[wanted]
        reasons = {}
        for i, col in enumerate(wanted):
            resource = table.resources[col]
            reason = "Too many pods" if resource == PODS else f"Insufficient {resource}"
            reasons[reason] = short[:, i]
        return Filtered(np.asarray(~short.any(axis=1), dtype=bool), reasons)

    def score(self, cycle: CycleState, pod: PodInfo, table: NodeTable, rows: IntArray) -> FloatArray:
        total = np.zeros(rows.shape[0], dtype=np.float64)
        weights = 0
        for resource, weight in self.score_resources:
            col = table.resource_index.get(resource)
            if col is None:
                continue
            capacity = table.allocatable[rows, col].astype(np.float64)
            if resource == CPU:
                used = table.nonzero_requested[rows, 0] + pod.non_zero_requests.get(CPU, 0)
            elif resource == MEMORY:
                used = table.nonzero_requested[rows, 1] + pod.non_zero_requests.get(MEMORY, 0)
            else:
                used = table.requested[rows, col] + pod.requests.get(resource, 0)
            with np.errstate(divide="ignore", invalid="ignore"):
                ratio = np.where(capacity > 0, np.minimum(used / capacity, 1.0), 1.0)
            total += weight * (100.0 * ((1.0 - ratio) if self.strategy == "LeastAllocated" else ratio))
            weights += weight
        result: FloatArray = total / weights if weights else total
        return result
