"""The failure table (scheduler.failures): each outcome's action, and the handler carrying it out step by step on
recording fakes (unwind, queue, report, wake, in that order)."""

from __future__ import annotations

from typing import Any, cast

import pytest

from metrics_sched.framework.interfaces import BindOutcomeKind, BindStatus
from metrics_sched.framework.runtime import CycleResult, Framework
from metrics_sched.framework.status import Code, Status
from metrics_sched.model.podinfo import PodInfo, parse_pod
from metrics_sched.scheduler.failures import (
    ACTIONS,
    Action,
    FailureHandler,
    Outcome,
    QueueStep,
    Report,
    Unwind,
    Wake,
    attempt_outcome,
    bind_outcome,
    permit_outcome,
)
from metrics_sched.scheduler.queue import SchedulingQueue
from metrics_sched.scheduler.reporting import PodReporter
from metrics_sched.state.cluster_state import ClusterState
from metrics_sched.supervision import Supervisor, Worker
from tests.unit.fakes import pod

pytestmark = pytest.mark.unit

Oc, U, Q, R, W = Outcome, Unwind, QueueStep, Report, Wake
# The specification, one row an outcome: what each caller did before the table existed.
EXPECTED: dict[Outcome, tuple[Unwind, QueueStep, Report, Wake]] = {
    Oc.UNSCHEDULABLE: (U.NO, Q.PARK, R.UNSCHEDULABLE, W.NO),
    Oc.SCHEDULING_ERROR: (U.NO, Q.BACKOFF, R.ERROR, W.NO),
    Oc.UNREADABLE: (U.NO, Q.PARK_ON_STATUS, R.UNREADABLE, W.NO),
    Oc.LOOP_EXCEPTION: (U.FORCED, Q.BACKOFF, R.ERROR, W.IF_FREED),
    Oc.PERMIT_REJECTED: (U.NO, Q.PARK, R.UNSCHEDULABLE, W.YES),
    Oc.PERMIT_ERROR: (U.NO, Q.BACKOFF, R.ERROR, W.YES),
    Oc.DELETED_WHILE_WAITING: (U.NO, Q.DONE, R.NOTHING, W.NO),
    Oc.BOUND: (U.NO, Q.DONE, R.SCHEDULED, W.NO),
    Oc.ALREADY_BOUND: (U.NO, Q.DONE, R.SCHEDULED, W.NO),
    Oc.BOUND_ELSEWHERE: (U.NO, Q.DONE, R.NOTHING, W.YES),
    Oc.GONE: (U.NO, Q.DONE, R.NOTHING, W.YES),
    Oc.NODE_GONE: (U.YES, Q.AFRESH, R.NOTHING, W.YES),
    Oc.NOT_LEADER: (U.YES, Q.BACKOFF, R.NOTHING, W.YES),
    Oc.UNKNOWN: (U.NO, Q.REBIND, R.NOTHING, W.NO),
    Oc.REJECTED: (U.NO, Q.PARK, R.BIND_REJECTED, W.YES),
    Oc.ERROR: (U.NO, Q.BACKOFF, R.BIND_ERROR, W.YES),
    Oc.BIND_EXCEPTION: (U.YES, Q.BACKOFF, R.NOTHING, W.YES),
}


def test_every_outcome_has_an_action_and_every_bind_outcome_an_outcome() -> None:
    assert set(ACTIONS) == set(Outcome) == set(EXPECTED)
    for kind in BindOutcomeKind:
        assert bind_outcome(kind).value == kind.value


@pytest.mark.parametrize("outcome", list(Outcome))
def test_each_outcome_maps_to_its_action(outcome: Outcome) -> None:
    action = ACTIONS[outcome]
    assert (action.unwind, action.queue, action.report, action.wake) == EXPECTED[outcome]
    # Only the recovery from a bug in the loop goes on past a failing step (the binder guards its own whole).
    assert action.guard == (Worker.SCHEDULING_LOOP if outcome == Oc.LOOP_EXCEPTION else None)


@pytest.mark.parametrize(("code", "attempt", "permit"), [
    (Code.ERROR, Oc.SCHEDULING_ERROR, Oc.PERMIT_ERROR),
    (Code.UNSCHEDULABLE, Oc.UNSCHEDULABLE, Oc.PERMIT_REJECTED),
    (Code.UNRESOLVABLE, Oc.UNSCHEDULABLE, Oc.PERMIT_REJECTED),
])
def test_a_status_code_classifies_the_loops_and_the_permit_callbacks_failures(
        code: Code, attempt: Outcome, permit: Outcome) -> None:
    status = Status(code, "why", "P")
    assert attempt_outcome(status) == attempt
    assert permit_outcome(status) == permit


class Calls:
    """Records every collaborator call, in order, across the fakes."""

    def __init__(self, fail: frozenset[str] = frozenset()) -> None:
        self.seen: list[tuple[Any, ...]] = []
        self.fail = fail  # names of calls that raise

    def __call__(self, *call: Any) -> None:
        self.seen.append(call)
        if call[0] in self.fail:
            raise RuntimeError(f"{call[0]} failed")

    def names(self) -> list[str]:
        return [c[0] for c in self.seen]


class FakeQueue:
    def __init__(self, calls: Calls) -> None:
        self.calls = calls

    def done(self, uid: str) -> None:
        self.calls("done", uid)

    def retry_later(self, uid: str) -> None:
        self.calls("retry_later", uid)

    def requeue(self, info: PodInfo) -> None:
        self.calls("requeue", info.uid)

    def unschedulable(self, uid: str, rejected_by: set[str]) -> None:
        self.calls("unschedulable", uid, frozenset(rejected_by))

    def move_all(self, event: Any, detail: Any = None, *, besides: str | None = None) -> int:
        self.calls("move_all", event.name, detail, besides)
        return 0


class FakeReporter:
    def __init__(self, calls: Calls) -> None:
        self.calls = calls

    def scheduled(self, pod: PodInfo, node: str, summary: str = "", *, wake: bool = True) -> None:
        self.calls("scheduled", pod.uid, node, summary, wake)

    def failed(self, pod: PodInfo, message: str, *, reason: str) -> None:
        self.calls("failed", pod.uid, reason, message)


class FakeState:
    def __init__(self, calls: Calls) -> None:
        self.calls = calls

    def forget(self, uid: str) -> None:
        self.calls("forget", uid)


class FakeFramework:
    def __init__(self, calls: Calls) -> None:
        self.calls = calls

    def unwind(self, result: CycleResult) -> None:
        self.calls("unwind", result.pod.uid)
        result.assumed = False


def handler(calls: Calls) -> tuple[FailureHandler, Framework, Supervisor]:
    supervisor = Supervisor()
    failures = FailureHandler(cast(ClusterState, FakeState(calls)), cast(SchedulingQueue, FakeQueue(calls)),
                              cast(PodReporter, FakeReporter(calls)), supervisor)
    failures.rebind = lambda framework, result: calls("rebind", result.pod.uid)
    return failures, cast(Framework, FakeFramework(calls)), supervisor


def attempt(node: str | None = "n1", *, assumed: bool = True, status: Status | None = None) -> CycleResult:
    body = pod("p")
    body["metadata"]["uid"] = "u1"
    result = CycleResult(pod=parse_pod(body), profile="default", node=node,
                         assumed=assumed, rejected_by={"NodeResourcesFit"}, nodes_total=2, summary="fits")
    if status is not None:
        result.status = status
    return result


WAKE = ("move_all", "POD_DELETED", None, "u1")
BIND_REJECTED = BindStatus(Code.UNSCHEDULABLE, "volume conflict", "VolumeBinding", BindOutcomeKind.REJECTED)
BIND_ERROR = BindStatus(Code.ERROR, "connection refused", "DefaultBinder", BindOutcomeKind.ERROR)


@pytest.mark.parametrize(("outcome", "result", "status", "calls"), [
    # The framework unwound the pod already: the binder's outcomes after the binding cycle.
    (Oc.BOUND, attempt(assumed=False), None, [("done", "u1"), ("scheduled", "u1", "n1", "fits", False)]),
    (Oc.GONE, attempt(assumed=False), None, [("done", "u1"), WAKE]),
    (Oc.BOUND_ELSEWHERE, attempt(assumed=False), None, [("done", "u1"), WAKE]),
    (Oc.REJECTED, attempt(assumed=False), BIND_REJECTED,
     [("unschedulable", "u1", frozenset({"VolumeBinding"})),
      ("failed", "u1", "Unschedulable", "VolumeBinding: volume conflict"), WAKE]),
    (Oc.ERROR, attempt(assumed=False), BIND_ERROR,
     [("retry_later", "u1"), ("failed", "u1", "SchedulerError", "binding rejected: DefaultBinder: connection refused"),
      WAKE]),
    (Oc.UNKNOWN, attempt(), None, [("rebind", "u1")]),  # stays assumed, nothing else
    # The binder undoes the attempt itself.
    (Oc.NODE_GONE, attempt(), None, [("unwind", "u1"), ("requeue", "u1"), WAKE]),
    (Oc.NOT_LEADER, attempt(), None, [("unwind", "u1"), ("retry_later", "u1"), WAKE]),
    (Oc.BIND_EXCEPTION, attempt(), None, [("unwind", "u1"), ("retry_later", "u1"), WAKE]),
    # The loop: a cycle that did not place the pod wakes no one (nothing stayed assumed).
    (Oc.UNSCHEDULABLE, attempt(None, assumed=False, status=Status.unschedulable("no room", "NodeResourcesFit")), None,
     [("unschedulable", "u1", frozenset({"NodeResourcesFit"})),
      ("failed", "u1", "Unschedulable", "0/2 nodes are available: no room.")]),
    (Oc.UNSCHEDULABLE, attempt(assumed=False, status=Status.unschedulable("quota", "Quota")), None,
     [("unschedulable", "u1", frozenset({"Quota"})), ("failed", "u1", "Unschedulable", "Quota: quota")]),
    (Oc.SCHEDULING_ERROR, attempt(None, assumed=False, status=Status.error("boom", "Fit")), None,
     [("retry_later", "u1"), ("failed", "u1", "SchedulerError", "running Fit: boom")]),
    # The Permit callback: the wait ended in a rejection, the framework unwound the pod.
    (Oc.PERMIT_REJECTED, attempt(assumed=False, status=Status.unschedulable("waited 5s at Permit", "Gang")), None,
     [("unschedulable", "u1", frozenset({"Gang"})), ("failed", "u1", "Unschedulable", "Gang: waited 5s at Permit"),
      WAKE]),
    (Oc.PERMIT_ERROR, attempt(assumed=False, status=Status.error("boom", "Gang")), None,
     [("retry_later", "u1"), ("failed", "u1", "SchedulerError", "running Gang: boom"), WAKE]),
    (Oc.DELETED_WHILE_WAITING, attempt(assumed=False), None, [("done", "u1")]),
])
def test_the_handler_runs_unwind_queue_report_wake_in_order(
        outcome: Outcome, result: CycleResult, status: Status | None, calls: list[tuple[Any, ...]]) -> None:
    seen = Calls()
    failures, framework, _ = handler(seen)
    failures.handle(outcome, result, framework, status)
    assert seen.seen == calls


def test_an_unreadable_pod_is_parked_under_its_parse_error_whatever_its_filters() -> None:
    seen = Calls()
    failures, _, _ = handler(seen)
    result = attempt(None, assumed=False, status=Status.error("bad quantity", "PodInfo"))
    result.pod.parse_error = "bad quantity"
    failures.handle(Oc.UNREADABLE, result)
    assert seen.seen == [("unschedulable", "u1", frozenset({"PodInfo"})),
                         ("failed", "u1", "SchedulerError", "bad quantity")]


@pytest.mark.parametrize(("fail", "assumed", "calls"), [
    # Unwound: the pod gave its room back, so parked pods are woken.
    (frozenset(), True, ["unwind", "retry_later", "failed", "move_all"]),
    # The unwind failed: the pod is forgotten all the same, and the report failing stops nothing either.
    (frozenset({"unwind", "failed"}), True, ["unwind", "forget", "retry_later", "failed", "move_all"]),
    # Nothing was assumed: nothing to give back, no one woken.
    (frozenset(), False, ["unwind", "retry_later", "failed"]),
])
def test_the_loops_recovery_goes_on_past_a_failing_step(fail: frozenset[str], assumed: bool,
                                                       calls: list[str]) -> None:
    seen = Calls(fail)
    failures, framework, supervisor = handler(seen)
    result = attempt(assumed=assumed, status=Status.error("scheduler error: KeyError()", "scheduler"))
    failures.handle(Oc.LOOP_EXCEPTION, result, framework)
    assert seen.names() == calls
    assert not result.assumed
    assert supervisor.failure_counts()[Worker.SCHEDULING_LOOP] == len(fail)


def test_the_loops_recovery_without_a_framework_forgets_the_pod() -> None:
    seen = Calls()
    failures, _, _ = handler(seen)
    result = attempt(status=Status.error("scheduler error: KeyError()", "scheduler"))
    failures.handle(Oc.LOOP_EXCEPTION, result, None)
    assert seen.names() == ["forget", "retry_later", "failed", "move_all"]


@pytest.mark.parametrize("outcome", [Oc.NOT_LEADER, Oc.REJECTED, Oc.BOUND])
def test_a_failing_step_outside_the_loops_recovery_reaches_the_caller(outcome: Outcome) -> None:
    seen = Calls(frozenset({"unwind", "unschedulable", "scheduled"}))
    failures, framework, _ = handler(seen)
    with pytest.raises(RuntimeError):
        failures.handle(outcome, attempt(), framework, BIND_REJECTED)
    assert "move_all" not in seen.names()


def test_an_action_is_frozen() -> None:
    with pytest.raises(AttributeError):
        ACTIONS[Oc.BOUND].wake = Wake.YES  # type: ignore[misc]
    assert isinstance(ACTIONS[Oc.BOUND], Action)
