"""The gang attempt bookkeeping (plugins/coscheduling/tracker.py): quorum, failure, backoff, stale attempts."""

from __future__ import annotations

from metrics_sched.model.group_membership import GroupApi, GroupKey
from metrics_sched.plugins.coscheduling.tracker import GangDecision, GangTracker

KEY = GroupKey(GroupApi.COSCHEDULING, "ns", "pg")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def make() -> tuple[GangTracker, Clock, list[tuple[str, float]]]:
    clock = Clock()
    tracker = GangTracker(clock=clock, wall=clock)
    seen: list[tuple[str, float]] = []
    tracker.observers.append(lambda key, outcome, seconds: seen.append((outcome, seconds)))
    return tracker, clock, seen


def test_a_failed_attempt_returns_its_members_and_backs_the_group_off() -> None:
    tracker, clock, seen = make()
    tracker.reserve(KEY, "a", "n1")
    clock.now += 2
    tracker.reserve(KEY, "b", "n2")
    tracker.decide(KEY, GangDecision(KEY, "zone", "z1", "ns/a", "why"), None)
    assert tracker.unreserve(KEY, "a")  # a member of an incomplete attempt leaving fails it
    clock.now += 1
    assert tracker.fail(KEY, "timeout", backoff=5) == {"b": "n2"}
    assert seen == [("timeout", 3.0)]
    assert tracker.decision(KEY) is None  # the next attempt chooses its domain again
    assert tracker.backoff_left(KEY) == 5
    assert tracker.fail(KEY, "timeout", backoff=5) is None  # nothing left to reject
    clock.now += 5
    assert tracker.backoff_left(KEY) == 0
    assert tracker.last_failure(KEY) == 103.0


def test_a_complete_attempt_keeps_its_domain_and_is_not_failed_by_a_late_member() -> None:
    tracker, clock, seen = make()
    tracker.reserve(KEY, "a", "n1")
    tracker.reserve(KEY, "b", "n2")
    tracker.decide(KEY, GangDecision(KEY, "zone", "z1", "ns/a", "why"), None)
    clock.now += 1.5
    assert tracker.complete(KEY) == 1.5
    assert tracker.complete(KEY) is None
    assert seen == [("scheduled", 1.5)]
    assert not tracker.unreserve(KEY, "a")  # a bind failure after the quorum: that member retries alone
    assert tracker.fail(KEY, "member_unschedulable", backoff=5) is None
    assert tracker.backoff_left(KEY) == 0
    decision = tracker.decision(KEY)
    assert decision is not None and decision.domain == "z1"  # later members still go to the gang's domain


def test_a_complete_attempt_of_deleted_members_gives_way_to_a_new_one() -> None:
    tracker, _, _ = make()
    tracker.reserve(KEY, "old", "n1")
    tracker.complete(KEY)
    tracker.reserve(KEY, "new", "n2", live={"new"})  # the gang's pods were re-created
    attempt = tracker.attempt(KEY)
    assert attempt is not None and not attempt.complete and attempt.reserved == {"new": "n2"}
    tracker.prune(lambda key: False)
    assert tracker.attempt(KEY) is None
