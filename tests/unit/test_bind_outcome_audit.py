"""Issue 44, defect 10: a decision record and its log line state the bind's outcome.

A Binding refused by the API server (an admission policy denying pods/binding, a namespace being deleted) left the
record at `result: scheduled, message: "bound to node-X"` and the log at `<pod> scheduled: node-X`, while the pod
stayed Pending: the runbook of MetricsSchedBindErrors sends operators to that log.
"""

from __future__ import annotations

import logging

import pytest

from metrics_sched.audit import DecisionRing
from metrics_sched.audit.auditor import Auditor
from metrics_sched.audit.record import bind_verdict
from metrics_sched.framework.interfaces import BindOutcomeKind
from metrics_sched.ports import ApiError
from tests.polling import poll
from tests.unit.fakes import node, pod
from tests.unit.test_observability import audited
from tests.unit.test_scheduler import drain, make

DENIED = "admission webhook \"deny-binding\" denied the request"


def logged(caplog: pytest.LogCaptureFixture, count: int) -> list[logging.LogRecord]:
    """The decision log's lines once there are `count` of them (the bind's is written by the bind worker after it
    gives its place back, which is what Binder.drain waits for)."""
    def lines() -> list[logging.LogRecord] | None:
        found = [r for r in caplog.records if r.name == "metrics_sched.decisions"]
        return found if len(found) >= count else None
    return poll(lines, 5, f"{count} decision log lines")


def test_a_refused_bind_is_recorded_and_logged_as_failed(caplog: pytest.LogCaptureFixture) -> None:
    scheduler, api = make()
    ring, _ = audited(scheduler)
    scheduler.handlers.on_node_event("ADDED", node("n0"))
    api.fail_next_binds.append(ApiError(403, DENIED, reason="Forbidden"))
    api.add_pod(pod("p"))
    with caplog.at_level(logging.INFO, logger="metrics_sched.decisions"):
        scheduler.schedule_one(timeout=1)
        assert scheduler.binder.drain(10)
        assert api.binds == []
        decided, ended = logged(caplog, 2)  # the decision when made, then its bind's outcome, under one id
        [refused] = ring.query(pod="default/p")
        assert refused.result == "error" and refused.bind == "error", refused
        assert refused.node == "n0"  # where the bind went
        assert refused.message == f"bind to n0 failed: HTTP 403: {DENIED}", refused.message
        assert "bound to" not in refused.message
        assert decided.getMessage() == "default/p scheduled: binding to n0"
        assert ended.levelno == logging.WARNING
        assert ended.getMessage() == f"default/p error: bind to n0 failed: HTTP 403: {DENIED}"
        assert vars(ended)["decision_id"] == vars(decided)["decision_id"] == refused.id
        assert vars(ended)["bind"] == "error"
        caplog.clear()
        drain(scheduler, api)  # the policy lifted: the retry binds
    assert api.binds == [("default/p", "n0")]
    ended = logged(caplog, 2)[-1]
    bound, _ = ring.query(pod="default/p")  # newest first
    assert bound.result == "scheduled" and bound.bind == "bound" and bound.message == "bound to n0"
    assert ended.levelno == logging.INFO and ended.getMessage() == "default/p scheduled: bound to n0"


def test_a_failed_bind_is_logged_even_with_decision_logging_off(caplog: pytest.LogCaptureFixture) -> None:
    scheduler, api = make()
    auditor = Auditor(scheduler.state, DecisionRing(10), config_hash="h", log_decisions=False)
    scheduler.cycle_observers.append(auditor.on_cycle)
    scheduler.bind_observers.append(auditor.on_bind)
    scheduler.handlers.on_node_event("ADDED", node("n0"))
    api.fail_next_binds.append(ApiError(403, "namespace default is being terminated"))
    api.add_pod(pod("p"))
    with caplog.at_level(logging.INFO, logger="metrics_sched.decisions"):
        scheduler.schedule_one(timeout=1)
        assert scheduler.binder.drain(10)
        [line] = logged(caplog, 1)  # the failure alone: no line per decision
        caplog.clear()
        drain(scheduler, api)
    assert line.levelno == logging.WARNING
    assert line.getMessage() == "default/p error: bind to n0 failed: HTTP 403: namespace default is being terminated"
    assert api.binds == [("default/p", "n0")] and not caplog.records  # bound: nothing logged


@pytest.mark.parametrize(("kind", "detail", "result", "message"), [
    (BindOutcomeKind.BOUND, "", "scheduled", "bound to n0"),
    (BindOutcomeKind.ALREADY_BOUND, "", "scheduled", "bound to n0"),
    (BindOutcomeKind.REJECTED, "Coscheduling: waiting timed out", "unschedulable",
     "bind to n0 rejected: Coscheduling: waiting timed out"),
    (BindOutcomeKind.ERROR, "HTTP 403: namespace is terminating", "error",
     "bind to n0 failed: HTTP 403: namespace is terminating"),
    (BindOutcomeKind.UNKNOWN, "no response: timeout", "error", "bind to n0 not done (unknown): no response: timeout"),
    (BindOutcomeKind.GONE, "HTTP 404: not found", "error", "bind to n0 not done (gone): HTTP 404: not found"),
    (BindOutcomeKind.NOT_LEADER, "", "error", "bind to n0 not done (not_leader)"),
    (BindOutcomeKind.NODE_GONE, "", "error", "bind to n0 not done (node_gone)"),
])
def test_every_bind_outcome_has_its_own_verdict(kind: BindOutcomeKind, detail: str, result: str,
                                                message: str) -> None:
    assert bind_verdict(kind, "n0", detail) == (result, message)
