"""Extension points, after the Kubernetes scheduling framework (pkg/scheduler/framework/interface.go).

A plugin is a class with a `name` and a typed `Args` dataclass, constructed once per profile with its
parsed args and the profile's Handle; it implements one or more extension-point interfaces. Filters
work on the whole NodeTable at once and return a boolean mask; scores return a float vector over the
feasible rows. `events_to_register()` names the cluster events (with optional queueing hints) that
may make a pod this plugin rejected schedulable again; the queue moves parked pods only on those.

Threads: QueueSort, PreEnqueue, PreFilter, Filter, PostFilter, PreScore, Score, Reserve and Permit run
on the scheduling thread, one pod at a time; PreBind, Bind and PostBind run on bind workers, several
pods at once; Unreserve runs on either, or on a Permit timer. A plugin with state shared across those
points must lock it. Unreserve must be idempotent (it runs for every Reserve plugin on any failure),
and PreBind too (a bind whose outcome is unknown is retried from PreBind).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple, Protocol

import numpy as np

from metrics_sched.framework.args import NoArgs, parse_args
from metrics_sched.framework.cluster_index import ClusterIndex
from metrics_sched.framework.cycle_state import CycleState
from metrics_sched.framework.events import ALL_EVENTS, ClusterEvent, EventHint
from metrics_sched.framework.filtered import Filtered
from metrics_sched.framework.status import Status
from metrics_sched.model.podinfo import PodInfo
from metrics_sched.state.node_table import BoolArray, FloatArray, IntArray, NodeTable

if TYPE_CHECKING:
    from metrics_sched.framework.handle import Handle

__all__ = [
    "EXTENSION_POINTS",
    "MAX_PERMIT_TIMEOUT",
    "BindOutcomeKind",
    "BindPlugin",
    "BindStatus",
    "FilterPlugin",
    "Filtered",
    "InFlightValues",
    "MetricAwarePlugin",
    "MetricEvidence",
    "Normalized",
    "PermitPlugin",
    "PlacementPlugin",
    "Plugin",
    "PostBindPlugin",
    "PostFilterPlugin",
    "PostFilterResult",
    "PreBindPlugin",
    "PreEnqueuePlugin",
    "PreFilterPlugin",
    "PreScorePlugin",
    "QueueSortPlugin",
    "ReservePlugin",
    "ScoreDetail",
    "ScorePlugin",
    "max_normalize",
    "top_score",
    "unchanged",
]


class InFlightValues(Protocol):
    """Per-row values read by row (a FloatArray, or the in-flight ledger's view of one: InFlightView)."""

    def take(self, rows: IntArray) -> FloatArray: ...

    def item(self, row: int) -> float: ...


class MetricEvidence(NamedTuple):
    """The raw telemetry behind a score term, for the decision record. Over ALL the table's rows (index by
    row, not by position among the candidates): the arrays are the cache's own, shared, never copied. (A named
    tuple: as immutable as a frozen dataclass, made at a third of the cost, and a batched cycle makes one per metric
    it re-scores.)"""

    metric: str
    values: FloatArray  # the sample as measured (without the in-flight part), NaN where none is fresh
    in_flight: InFlightValues | None  # what the in-flight ledger added (take() the rows to read)
    observed_at: FloatArray  # unix seconds, -inf when no sample
    sources: tuple[str, ...]


class ScoreDetail(NamedTuple):
    """A score with the evidence the audit shows; a plain FloatArray is a score without evidence. (A named tuple:
    immutable, and made per plugin and cycle at a third of a frozen dataclass's cost.)"""

    scores: FloatArray
    evidence: tuple[MetricEvidence, ...] = ()


@dataclass(frozen=True)
class PostFilterResult:
    """What PostFilter found: a node the pod may go to once something changes (e.g. victims leave)."""

    nominated_node: str | None = None


# kube-scheduler's maxTimeout for a Permit wait: a plugin asking for longer (or for no limit) gets this.
MAX_PERMIT_TIMEOUT = 15 * 60.0


class BindOutcomeKind(enum.StrEnum):
    """What happened to a pod handed to the binding cycle (the binder adds NOT_LEADER and NODE_GONE)."""

    BOUND = "bound"
    ALREADY_BOUND = "already_bound"  # our bind answered ambiguously; the re-read shows the pod on our node
    BOUND_ELSEWHERE = "bound_elsewhere"  # another scheduler instance won a race
    GONE = "gone"  # deleted, or re-created under the same name with another UID
    NODE_GONE = "node_gone"
    NOT_LEADER = "not_leader"
    UNKNOWN = "unknown"  # neither the bind nor the re-read answered: keep the pod assumed, retry
    REJECTED = "rejected"  # Permit (wait rejected or timed out), PreBind or Bind answered Unschedulable
    ERROR = "error"


@dataclass(frozen=True)
class BindStatus(Status):
    """A Bind plugin's status with what it found out about the pod after an error (GONE, BOUND_ELSEWHERE,
    ALREADY_BOUND); without an outcome, the code decides: SUCCESS bound, PENDING unknown, Unschedulable
    rejected, anything else an error. An outcome that contradicts the code is an error."""

    outcome: BindOutcomeKind | None = None

    def by(self, plugin: str) -> BindStatus:
        """Status.by, keeping the outcome (without dataclasses.replace's field walk: every bind passes here)."""
        if self.plugin == plugin:
            return self
        if type(self) is BindStatus:
            return BindStatus(self.code, self.reason, plugin, self.outcome)
        return dataclasses.replace(self, plugin=plugin)


class Plugin:
    name: ClassVar[str] = ""
    Args: ClassVar[type[Any]] = NoArgs
    events: ClassVar[frozenset[ClusterEvent]] = ALL_EVENTS
    # The cluster indexes the plugin reads (Handle.index): the scheduler builds and feeds each one, and watches
    # their kinds, only when an enabled plugin declares it.
    indexes: ClassVar[tuple[type[ClusterIndex], ...]] = ()
    args: Any

    def __init__(self, args: Any, handle: Handle) -> None:
        """`args` is this plugin's parsed Args (a raw mapping is parsed, for tests and scripts)."""
        self.args = args if isinstance(args, self.Args) else self.parse_args(args)
        self.handle = handle

    @classmethod
    def parse_args(cls, raw: Mapping[str, Any] | None) -> Any:
        """Raises ArgsError naming the offending field (relative to the plugin's args)."""
        return parse_args(cls.Args, raw)

    def events_to_register(self) -> Sequence[EventHint]:
        """Events that may make a pod this plugin rejected schedulable; override to add queueing hints."""
        return [EventHint(event) for event in self.events]


class MetricAwarePlugin(Plugin):
    """A plugin whose filter depends on telemetry: told after each refresh, it answers whether a node
    may have become admissible (then the queue moves the pods it parked, at once)."""

    def metrics_changed(self, table: NodeTable) -> bool:
        raise NotImplementedError


class PreEnqueuePlugin(Plugin):
    """Before a pod enters activeQ: anything but SUCCESS keeps it waiting (gated) until it changes."""

    def pre_enqueue(self, pod: PodInfo) -> Status:
        raise NotImplementedError


class QueueSortPlugin(Plugin):
    def sort_key(self, pod: PodInfo) -> tuple[Any, ...]:
        raise NotImplementedError


class PreFilterPlugin(Plugin):
    def pre_filter(self, cycle: CycleState, pod: PodInfo) -> Status:
        raise NotImplementedError


class FilterPlugin(Plugin):
    """filter() judges every node at once. Two declarations tell preemption (a PostFilter) what its dry runs may
    make of the verdict, as upstream's status codes do:

    - `resolvable_reasons`: the reasons removing lower-priority pods from a node may resolve (upstream's
      Unschedulable). Any other reason is upstream's UnschedulableAndUnresolvable: preemption does not try the
      node. Override `resolvable` for reasons made at run time (e.g. one per resource).
    - `node_local`: the verdict on a node reads that node and the pods on it alone (no other node's pods, as
      inter-pod rules, spreading or claims shared across nodes do). When every filter with something to check for
      a pod is node-local, preemption dry-runs all nodes together; otherwise node by node, which is right whatever
      a filter reads: hence the default, False.
    """

    resolvable_reasons: ClassVar[frozenset[str]] = frozenset()
    node_local: ClassVar[bool] = False

    @classmethod
    def resolvable(cls, reason: str) -> bool:
        """Whether removing pods from a node may resolve `reason`, one of filter()'s."""
        return reason in cls.resolvable_reasons

    def filter(self, cycle: CycleState, pod: PodInfo, table: NodeTable) -> Filtered:
        raise NotImplementedError


class PlacementPlugin(Plugin):
    """After Score, before the pick: narrows where the pod may go among its scored `rows` (`total` are their
    weighted scores), e.g. a gang placed as a whole in the topology domain that suits every member. Returns a
    mask over `rows` (None: no narrowing) and a status; a rejection fails the cycle with that status. Not a
    configurable point: a Filter plugin implements it, and runs it wherever its Filter is enabled."""

    def place(self, cycle: CycleState, pod: PodInfo, table: NodeTable, rows: IntArray,
              total: FloatArray) -> tuple[BoolArray | None, Status]:
        raise NotImplementedError


class PostFilterPlugin(Plugin):
    """Runs when no node fits (e.g. preemption). `rejections` counts nodes per filter reason.
    SUCCESS with a nominated node ends PostFilter; UNSCHEDULABLE lets the next plugin try."""

    def post_filter(self, cycle: CycleState, pod: PodInfo, table: NodeTable,
                    rejections: Mapping[str, int]) -> tuple[PostFilterResult, Status]:
        raise NotImplementedError


class PreScorePlugin(Plugin):
    def pre_score(self, cycle: CycleState, pod: PodInfo, table: NodeTable, rows: IntArray) -> Status:
        raise NotImplementedError


class Normalized(enum.Enum):
    """What a score plugin's normalize() promises; the runtime checks whatever is not promised (two reductions
    and a mask per plugin per cycle, which the built-in plugins, correct by construction, spare it).
    tests/unit/test_score_promises.py holds every built-in plugin to its promise."""

    UNCHECKED = "unchecked"  # anything: held to 0-100, anything not finite made NaN
    IN_RANGE = "in-range"  # 0-100, or NaN where there is no value
    COMPLETE = "complete"  # 0-100 on every row, never NaN


class ScorePlugin(Plugin):
    """score() returns raw values over `rows` (or a ScoreDetail with evidence); normalize() maps them
    to 0-100 (NaN = no value: the term drops out for that node and the others are re-weighted)."""

    normalized: ClassVar[Normalized] = Normalized.UNCHECKED

    def score(self, cycle: CycleState, pod: PodInfo, table: NodeTable, rows: IntArray) -> FloatArray | ScoreDetail:
        raise NotImplementedError

    def normalize(self, scores: FloatArray) -> FloatArray:
        return np.clip(scores, 0.0, 100.0)


def unchanged(plugin: ScorePlugin, scores: FloatArray) -> FloatArray:
    """normalize() for a plugin whose scores are already on 0-100: each maps to itself (so opportunistic batching
    normalises only the rows that changed, as for the default clip)."""
    return scores


class ReservePlugin(Plugin):
    def reserve(self, cycle: CycleState, pod: PodInfo, node: str) -> Status:
        raise NotImplementedError

    def unreserve(self, cycle: CycleState, pod: PodInfo, node: str) -> None:
        raise NotImplementedError


class PermitPlugin(Plugin):
    """(status, timeout): SUCCESS lets the pod go; Unschedulable (or Error) rejects it; WAIT holds it up to
    `timeout` seconds (at most MAX_PERMIT_TIMEOUT) until allow()/reject() on the waiting pod
    (Handle.waiting_pods), called from any thread."""

    def permit(self, cycle: CycleState, pod: PodInfo, node: str) -> tuple[Status, float]:
        raise NotImplementedError


class PreBindPlugin(Plugin):
    def pre_bind(self, cycle: CycleState, pod: PodInfo, node: str) -> Status:
        raise NotImplementedError


class BindPlugin(Plugin):
    def bind(self, cycle: CycleState, pod: PodInfo, node: str) -> Status:
        """SKIP passes the pod to the next bind plugin; a BindStatus tells what happened after an error."""
        raise NotImplementedError


class PostBindPlugin(Plugin):
    def post_bind(self, cycle: CycleState, pod: PodInfo, node: str) -> None:
        raise NotImplementedError


EXTENSION_POINTS: dict[str, type[Plugin]] = {
    "preEnqueue": PreEnqueuePlugin,
    "queueSort": QueueSortPlugin,
    "preFilter": PreFilterPlugin,
    "filter": FilterPlugin,
    "postFilter": PostFilterPlugin,
    "preScore": PreScorePlugin,
    "score": ScorePlugin,
    "reserve": ReservePlugin,
    "permit": PermitPlugin,
    "preBind": PreBindPlugin,
    "bind": BindPlugin,
    "postBind": PostBindPlugin,
}


def top_score(scores: FloatArray) -> float:
    """The highest of `scores` max_normalize scales by: NaN (no score) aside, 0 when none has one."""
    if scores.size == 0:
        return 0.0
    top = float(scores.max())
    if np.isnan(top):  # some row has no score: the best of the others
        top = float(np.nanmax(scores)) if not np.all(np.isnan(scores)) else 0.0
    return top


def max_normalize(scores: FloatArray, reverse: bool = False) -> FloatArray:
    """kube-scheduler's DefaultNormalizeScore: scale so the best is 100 (reverse: the lowest is best); each value
    with top_score alone (Batchable.normalize_by_top)."""
    if scores.size == 0:
        return scores
    top = top_score(scores)
    if top <= 0:
        return np.full_like(scores, 0.0 if not reverse else 100.0)
    normalized = scores * (100.0 / top)
    return 100.0 - normalized if reverse else normalized


