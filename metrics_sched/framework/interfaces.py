"""Extension points, after the Kubernetes scheduling framework (pkg/scheduler/framework/interface.go).

A plugin is a class with a `name`, constructed with its args and a Handle; it implements one or more
extension-point interfaces. Filters work on the whole NodeTable at once and return a boolean mask;
scores return a float vector over the feasible rows. `events` names the cluster events that may make
a pod this plugin rejected schedulable again (the queue moves parked pods only on those).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

import numpy as np

from metrics_sched.config.errors import ArgsError
from metrics_sched.podinfo import PodInfo
from metrics_sched.state.node_table import BoolArray, FloatArray, IntArray, NodeTable


class ClusterEvent(enum.StrEnum):
    NODE_ADDED = "NodeAdd"
    NODE_ALLOCATABLE = "NodeAllocatableChange"
    NODE_SCHEDULABLE = "NodeSchedulableChange"
    NODE_LABELS = "NodeLabelChange"
    NODE_TAINTS = "NodeTaintChange"
    POD_DELETED = "AssignedPodDelete"
    METRIC_CHANGED = "MetricChange"


ALL_EVENTS = frozenset(ClusterEvent)


class Code(enum.Enum):
    SUCCESS = "Success"
    UNSCHEDULABLE = "Unschedulable"
    UNRESOLVABLE = "UnschedulableAndUnresolvable"
    ERROR = "Error"
    SKIP = "Skip"


@dataclass(frozen=True)
class Status:
    code: Code = Code.SUCCESS
    reason: str = ""
    plugin: str = ""

    @property
    def ok(self) -> bool:
        return self.code in (Code.SUCCESS, Code.SKIP)


SUCCESS = Status()


@dataclass
class Filtered:
    """A filter's verdict over every row of the table: feasible[row] and why the others failed.

    `reasons` maps a human reason (as in FailedScheduling messages) to the rows it rejects; a row
    may fail for several reasons, the first reason listed wins when they are counted.
    """

    feasible: BoolArray
    reasons: dict[str, BoolArray] = field(default_factory=dict)

    @classmethod
    def single(cls, feasible: BoolArray, reason: str) -> Filtered:
        return cls(feasible, {reason: ~feasible})


class CycleState(dict[str, Any]):
    """Scratch space of one scheduling cycle, shared by the plugins of that cycle."""


class Handle(Protocol):
    """What a plugin may read from the scheduler."""

    @property
    def table(self) -> NodeTable: ...

    def owner_counts(self, owner_key: str) -> IntArray: ...

    def service(self, name: str) -> Any:
        """A named collaborator registered at wiring time (e.g. the metric cache), or KeyError."""
        ...


class Plugin:
    name: ClassVar[str] = ""
    events: ClassVar[frozenset[ClusterEvent]] = ALL_EVENTS

    def __init__(self, args: Mapping[str, Any], handle: Handle) -> None:
        self.check_args(args)
        self.args = args
        self.handle = handle

    @classmethod
    def check_args(cls, args: Mapping[str, Any]) -> None:
        """Raises ArgsError naming the offending field; plugins with args override this."""
        for key in args:
            raise ArgsError(str(key), f"{cls.name} takes no args")


class MetricAwarePlugin(Plugin):
    """A plugin whose filter depends on telemetry: told after each refresh, it answers whether a node
    may have become admissible (then the queue moves the pods it parked, at once)."""

    def metrics_changed(self, table: NodeTable) -> bool:
        raise NotImplementedError


class QueueSortPlugin(Plugin):
    def sort_key(self, pod: PodInfo) -> tuple[Any, ...]:
        raise NotImplementedError


class PreFilterPlugin(Plugin):
    def pre_filter(self, cycle: CycleState, pod: PodInfo) -> Status:
        raise NotImplementedError


class FilterPlugin(Plugin):
    def filter(self, cycle: CycleState, pod: PodInfo, table: NodeTable) -> Filtered:
        raise NotImplementedError


class PreScorePlugin(Plugin):
    def pre_score(self, cycle: CycleState, pod: PodInfo, table: NodeTable, rows: IntArray) -> Status:
        raise NotImplementedError


class ScorePlugin(Plugin):
    """score() returns raw values over `rows`; normalize() maps them to 0-100 (NaN = no value)."""

    def score(self, cycle: CycleState, pod: PodInfo, table: NodeTable, rows: IntArray) -> FloatArray:
        raise NotImplementedError

    def normalize(self, scores: FloatArray) -> FloatArray:
        return np.clip(scores, 0.0, 100.0)


class ReservePlugin(Plugin):
    def reserve(self, cycle: CycleState, pod: PodInfo, node: str) -> Status:
        raise NotImplementedError

    def unreserve(self, cycle: CycleState, pod: PodInfo, node: str) -> None:
        raise NotImplementedError


class BindPlugin(Plugin):
    def bind(self, cycle: CycleState, pod: PodInfo, node: str) -> Status:
        """Status(SKIP) passes the pod to the next bind plugin."""
        raise NotImplementedError


class PostBindPlugin(Plugin):
    def post_bind(self, cycle: CycleState, pod: PodInfo, node: str) -> None:
        raise NotImplementedError


EXTENSION_POINTS: dict[str, type[Plugin]] = {
    "queueSort": QueueSortPlugin,
    "preFilter": PreFilterPlugin,
    "filter": FilterPlugin,
    "preScore": PreScorePlugin,
    "score": ScorePlugin,
    "reserve": ReservePlugin,
    "bind": BindPlugin,
    "postBind": PostBindPlugin,
}


def max_normalize(scores: FloatArray, reverse: bool = False) -> FloatArray:
    """kube-scheduler's DefaultNormalizeScore: scale so the best is 100 (reverse: the lowest is best)."""
    if scores.size == 0:
        return scores
    top = float(np.nanmax(scores)) if not np.all(np.isnan(scores)) else 0.0
    if top <= 0:
        return np.full_like(scores, 0.0 if not reverse else 100.0)
    normalized = scores * (100.0 / top)
    return 100.0 - normalized if reverse else normalized
