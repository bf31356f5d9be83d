"""What the scheduler does when a pod's attempt ends other than bound: one table from the outcome to the action, and
the one handler that carries it out for the scheduling loop, the Permit callback and the binder.

An action is four steps, always in this order (kube-scheduler's handleSchedulingFailure and
handleBindingCycleError, pkg/scheduler/schedule_one.go):
1. unwind: Unreserve and un-assume the pod, unless the framework has done it already (a scheduling cycle that
   failed after Reserve, a rejected Permit wait, a failed binding cycle) or nothing was assumed;
2. the queue: the pod leaves it (done), backs off (an error), starts afresh (its node vanished), is parked until
   an event may help (unschedulable), or stays assumed while the same binding cycle runs again (unknown bind);
3. the report: the Scheduled event, or FailedScheduling with PodScheduled=False;
4. the wake: room given back may fit a parked pod, so they are moved as if an assigned pod had been deleted,
   besides this one. Last, as kube-scheduler defers it: a move before the pod's own verdict would count as an
   event during its attempt, and send the pod itself to backoff instead of parking it.

Nothing here takes a lock of its own: each step takes the queue's, the reporter's or the cluster state's, on the
caller's thread, as the callers did before this table existed.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

from metrics_sched.framework.events import ClusterEvent
from metrics_sched.framework.interfaces import BindOutcomeKind
from metrics_sched.framework.runtime import CycleResult, Framework
from metrics_sched.framework.status import Code, Status
from metrics_sched.scheduler.queue import SchedulingQueue
from metrics_sched.scheduler.reporting import PodReporter
from metrics_sched.state.cluster_state import ClusterState
from metrics_sched.supervision import Supervisor, Worker

__all__ = ["ACTIONS", "Action", "FailureHandler", "Outcome", "QueueStep", "Report", "Unwind", "Wake",
           "attempt_outcome", "bind_outcome", "permit_outcome"]


class Outcome(enum.StrEnum):
    """How a pod's attempt ended. The binder's kinds carry BindOutcomeKind's values (bind_outcome)."""

    # The scheduling loop
    UNSCHEDULABLE = "unschedulable"  # no node fits, or Reserve/Permit turned the chosen one down
    SCHEDULING_ERROR = "scheduling_error"  # a plugin failed during the scheduling cycle
    UNREADABLE = "unreadable"  # the pod's spec cannot be parsed: retrying cannot fix it
    LOOP_EXCEPTION = "loop_exception"  # a bug while the loop handled the pod; what it assumed is unknown
    # The Permit callback: a wait rejected (or timed out), the framework has unwound the pod
    PERMIT_REJECTED = "permit_rejected"
    PERMIT_ERROR = "permit_error"
    DELETED_WHILE_WAITING = "deleted_while_waiting"  # the pod was deleted meanwhile: its deletion woke the others
    # The binder
    BOUND = BindOutcomeKind.BOUND.value
    ALREADY_BOUND = BindOutcomeKind.ALREADY_BOUND.value
    BOUND_ELSEWHERE = BindOutcomeKind.BOUND_ELSEWHERE.value
    GONE = BindOutcomeKind.GONE.value
    NODE_GONE = BindOutcomeKind.NODE_GONE.value
    NOT_LEADER = BindOutcomeKind.NOT_LEADER.value  # the bind fence is closed: the replica's problem, not the pod's
    UNKNOWN = BindOutcomeKind.UNKNOWN.value
    REJECTED = BindOutcomeKind.REJECTED.value
    ERROR = BindOutcomeKind.ERROR.value
    BIND_EXCEPTION = "bind_exception"  # a bug outside the binding cycle


class Unwind(enum.Enum):
    NO = enum.auto()  # nothing assumed, or the framework unwound it already
    YES = enum.auto()  # Framework.unwind: Unreserve, un-assume
    FORCED = enum.auto()  # Framework.unwind if there is one, and the pod forgotten if still assumed after it


class QueueStep(enum.Enum):
    DONE = enum.auto()  # the pod leaves the queue (bound, given up, deleted)
    BACKOFF = enum.auto()  # SchedulingQueue.retry_later
    AFRESH = enum.auto()  # SchedulingQueue.requeue: a fresh start with the pod as the binder holds it
    # Unschedulable under the plugins that rejected it: the filters', or the status's once it had a node.
    PARK = enum.auto()
    PARK_ON_STATUS = enum.auto()  # unschedulable under the status's plugin, node or not
    REBIND = enum.auto()  # stays assumed and in flight: the binder runs the same binding cycle after a backoff


class Report(enum.Enum):
    """What the pod is told (PodReporter), and in which words."""

    NOTHING = enum.auto()
    SCHEDULED = enum.auto()  # the Scheduled event (written by a bind worker between batches: wake=False)
    UNSCHEDULABLE = enum.auto()  # Unschedulable, the attempt's own message (CycleResult.message)
    ERROR = enum.auto()  # SchedulerError, the attempt's own message
    UNREADABLE = enum.auto()  # SchedulerError, the parse error
    BIND_REJECTED = enum.auto()  # Unschedulable, "<plugin>: <reason>" of the bind status
    BIND_ERROR = enum.auto()  # SchedulerError, "binding rejected: <plugin>: <reason>"


class Wake(enum.Enum):
    """Whether parked pods are moved as after an assigned pod's deletion (this pod excluded)."""

    NO = enum.auto()
    YES = enum.auto()  # the attempt held room (assumed) that it has given back
    IF_FREED = enum.auto()  # only if the pod was assumed when the handler was called


@dataclass(frozen=True)
class Action:
    unwind: Unwind
    queue: QueueStep
    report: Report
    wake: Wake
    # A failing unwind or report is counted under this worker and the next step runs (recovering from a bug
    # must not fail on the same bug); None: the exception reaches the caller.
    guard: Worker | None = None


_PARK_ON_REJECTERS = Action(Unwind.NO, QueueStep.PARK, Report.UNSCHEDULABLE, Wake.NO)
_UNREADABLE = Action(Unwind.NO, QueueStep.PARK_ON_STATUS, Report.UNREADABLE, Wake.NO)
_BACK_OFF = Action(Unwind.NO, QueueStep.BACKOFF, Report.ERROR, Wake.NO)
_GIVEN_BACK = Action(Unwind.YES, QueueStep.BACKOFF, Report.NOTHING, Wake.YES)  # unwound quietly, tried again
_DONE = Action(Unwind.NO, QueueStep.DONE, Report.NOTHING, Wake.NO)
_BOUND = Action(Unwind.NO, QueueStep.DONE, Report.SCHEDULED, Wake.NO)
_LOST = Action(Unwind.NO, QueueStep.DONE, Report.NOTHING, Wake.YES)  # the pod is gone or someone else's now

ACTIONS: Mapping[Outcome, Action] = MappingProxyType({
    Outcome.UNSCHEDULABLE: _PARK_ON_REJECTERS,
    Outcome.SCHEDULING_ERROR: _BACK_OFF,
    Outcome.UNREADABLE: _UNREADABLE,  # parked until the pod is updated (or the periodic flush)
    Outcome.LOOP_EXCEPTION: Action(Unwind.FORCED, QueueStep.BACKOFF, Report.ERROR, Wake.IF_FREED,
                                   guard=Worker.SCHEDULING_LOOP),
    Outcome.PERMIT_REJECTED: Action(Unwind.NO, QueueStep.PARK, Report.UNSCHEDULABLE, Wake.YES),
    Outcome.PERMIT_ERROR: Action(Unwind.NO, QueueStep.BACKOFF, Report.ERROR, Wake.YES),
    Outcome.DELETED_WHILE_WAITING: _DONE,
    Outcome.BOUND: _BOUND,
    Outcome.ALREADY_BOUND: _BOUND,
    Outcome.BOUND_ELSEWHERE: _LOST,  # the watch counts the pod where it is bound
    Outcome.GONE: _LOST,
    Outcome.NODE_GONE: Action(Unwind.YES, QueueStep.AFRESH, Report.NOTHING, Wake.YES),
    Outcome.NOT_LEADER: _GIVEN_BACK,  # and nothing reported: a replica about to lose the lease says nothing
    Outcome.UNKNOWN: Action(Unwind.NO, QueueStep.REBIND, Report.NOTHING, Wake.NO),  # never overcommit
    Outcome.REJECTED: Action(Unwind.NO, QueueStep.PARK, Report.BIND_REJECTED, Wake.YES),
    Outcome.ERROR: Action(Unwind.NO, QueueStep.BACKOFF, Report.BIND_ERROR, Wake.YES),
    Outcome.BIND_EXCEPTION: _GIVEN_BACK,  # the binder guards the whole handling
})


def attempt_outcome(status: Status) -> Outcome:
    """A scheduling cycle that did not place the pod."""
    return Outcome.SCHEDULING_ERROR if status.code == Code.ERROR else Outcome.UNSCHEDULABLE


def permit_outcome(status: Status) -> Outcome:
    """A Permit wait that ended in a rejection."""
    return Outcome.PERMIT_ERROR if status.code == Code.ERROR else Outcome.PERMIT_REJECTED


def bind_outcome(kind: BindOutcomeKind) -> Outcome:
    """A binding cycle's outcome."""
    return _OF_BIND[kind]


# Looked up once per bind: a dict, not Enum's call by value (a Python-level lookup through EnumType.__call__).
_OF_BIND: Mapping[BindOutcomeKind, Outcome] = {kind: Outcome(kind.value) for kind in BindOutcomeKind}


# Step functions, looked up when the handler compiles the table (never per pod: an Enum member's attribute lookup
# and hash are Python-level, ~0.2 µs each on 3.11, and a bind would pay a dozen).
_Step = Callable[[CycleResult, "Framework | None", Status, bool], None]  # (result, framework, status, held)
_Reason = Literal["Unschedulable", "SchedulerError"]


def _attempt_message(result: CycleResult, status: Status) -> str:
    return result.message()


def _parse_error(result: CycleResult, status: Status) -> str:
    return result.pod.parse_error or ""


def _bind_rejection(result: CycleResult, status: Status) -> str:
    return f"{status.plugin}: {status.reason}"


def _bind_error(result: CycleResult, status: Status) -> str:
    where = f"{status.plugin}: " if status.plugin else ""
    return f"binding rejected: {where}{status.reason}"


_FAILED: Mapping[Report, tuple[_Reason, Callable[[CycleResult, Status], str]]] = {
    Report.UNSCHEDULABLE: ("Unschedulable", _attempt_message),
    Report.ERROR: ("SchedulerError", _attempt_message),
    Report.UNREADABLE: ("SchedulerError", _parse_error),
    Report.BIND_REJECTED: ("Unschedulable", _bind_rejection),
    Report.BIND_ERROR: ("SchedulerError", _bind_error),
}


class FailureHandler:
    """Carries out ACTIONS. The binder connects `rebind` (QueueStep.REBIND) when it is built."""

    def __init__(self, state: ClusterState, queue: SchedulingQueue, reporter: PodReporter,
                 supervisor: Supervisor) -> None:
        self.state = state
        self.queue = queue
        self.reporter = reporter
        self.supervisor = supervisor
        self.rebind: Callable[[Framework, CycleResult], None] | None = None
        self._plans = {outcome: self._compile(action) for outcome, action in ACTIONS.items()}

    def handle(self, outcome: Outcome, result: CycleResult, framework: Framework | None = None,
               status: Status | None = None) -> None:
        """Carries out the outcome's action on the pod of `result`. `framework`: the pod's profile, for the unwind
        and the rebind; `status`: the binding cycle's (the attempt's own, result.status, otherwise)."""
        held = result.assumed  # before the unwind: Wake.IF_FREED
        status = status if status is not None else result.status
        for step in self._plans[outcome]:
            step(result, framework, status, held)

    # -- the table, compiled ---------------------------------------------------------------------
    def _compile(self, action: Action) -> tuple[_Step, ...]:
        """The action's steps, in order (the module docstring's)."""
        steps: list[_Step] = []
        if action.unwind is not Unwind.NO:
            steps.append(self._guarded(action, self._unwind if action.unwind is Unwind.YES else self._unwind_if_any))
            if action.unwind is Unwind.FORCED:
                steps.append(self._forget_if_assumed)
        steps.append({QueueStep.DONE: self._done, QueueStep.BACKOFF: self._back_off, QueueStep.AFRESH: self._afresh,
                      QueueStep.PARK: self._park, QueueStep.PARK_ON_STATUS: self._park_on_status,
                      QueueStep.REBIND: self._rebind}[action.queue])
        if action.report is Report.SCHEDULED:
            steps.append(self._guarded(action, self._scheduled))
        elif action.report is not Report.NOTHING:
            reason, message = _FAILED[action.report]
            steps.append(self._guarded(action, functools.partial(self._failed, reason, message)))
        if action.wake is Wake.YES:
            steps.append(self._wake)
        elif action.wake is Wake.IF_FREED:
            steps.append(self._wake_if_freed)
        return tuple(steps)

    def _guarded(self, action: Action, step: _Step) -> _Step:
        worker = action.guard
        if worker is None:
            return step

        def guarded(result: CycleResult, framework: Framework | None, status: Status, held: bool) -> None:
            self.supervisor.guard(worker, lambda: step(result, framework, status, held), pod=result.pod.key)
        return guarded

    # -- the steps -------------------------------------------------------------------------------
    def _unwind(self, result: CycleResult, framework: Framework | None, status: Status, held: bool) -> None:
        assert framework is not None, "an unwind needs the pod's framework"
        framework.unwind(result)

    def _unwind_if_any(self, result: CycleResult, framework: Framework | None, status: Status, held: bool) -> None:
        if framework is not None:
            framework.unwind(result)

    def _forget_if_assumed(self, result: CycleResult, framework: Framework | None, status: Status,
                           held: bool) -> None:
        if result.assumed:  # no framework, or its unwind failed: the pod must not keep its room
            self.state.forget(result.pod.uid)
            result.assumed = False

    def _done(self, result: CycleResult, framework: Framework | None, status: Status, held: bool) -> None:
        self.queue.done(result.pod.uid)

    def _back_off(self, result: CycleResult, framework: Framework | None, status: Status, held: bool) -> None:
        self.queue.retry_later(result.pod.uid)

    def _afresh(self, result: CycleResult, framework: Framework | None, status: Status, held: bool) -> None:
        self.queue.requeue(result.pod)

    def _park(self, result: CycleResult, framework: Framework | None, status: Status, held: bool) -> None:
        self.queue.unschedulable(result.pod.uid, result.rejected_by if result.node is None else {status.plugin})

    def _park_on_status(self, result: CycleResult, framework: Framework | None, status: Status, held: bool) -> None:
        self.queue.unschedulable(result.pod.uid, {status.plugin})

    def _rebind(self, result: CycleResult, framework: Framework | None, status: Status, held: bool) -> None:
        assert self.rebind is not None and framework is not None, "a rebind needs the binder and the profile"
        self.rebind(framework, result)

    def _scheduled(self, result: CycleResult, framework: Framework | None, status: Status, held: bool) -> None:
        assert result.node is not None
        self.reporter.scheduled(result.pod, result.node, result.summary, wake=False)

    def _failed(self, reason: _Reason, message: Callable[[CycleResult, Status], str], result: CycleResult,
                framework: Framework | None, status: Status, held: bool) -> None:
        self.reporter.failed(result.pod, message(result, status), reason=reason)

    def _wake(self, result: CycleResult, framework: Framework | None, status: Status, held: bool) -> None:
        self.queue.move_all(ClusterEvent.POD_DELETED, None, besides=result.pod.uid)

    def _wake_if_freed(self, result: CycleResult, framework: Framework | None, status: Status, held: bool) -> None:
        if held:
            self._wake(result, framework, status, held)
