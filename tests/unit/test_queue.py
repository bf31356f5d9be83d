"""Queue semantics: ordering, backoff, parking and moves on events, gated pods."""

from __future__ import annotations

from typing import Any

from metrics_sched.framework import ClusterEvent, EventHint, QueueingHint
from metrics_sched.model.podinfo import PodInfo, parse_pod
from metrics_sched.scheduler.queue import SchedulingQueue
from tests.unit.fakes import pod


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make(clock: Clock, events: dict[str, set[ClusterEvent]] | None = None) -> SchedulingQueue:
    table = events or {"NodeResourcesFit": {ClusterEvent.NODE_ADDED, ClusterEvent.POD_DELETED}}

    def events_of(_: PodInfo, plugins: set[str]) -> list[EventHint]:
        return [EventHint(e) for p in plugins for e in table.get(p, set())]

    return SchedulingQueue(lambda p: (-p.priority, p.created), events_of=events_of, clock=clock)


def info(name: str, **kw: Any) -> PodInfo:
    return parse_pod(pod(name, **kw))


def test_priority_then_age() -> None:
    q = make(Clock())
    old = info("old")
    young = info("young")
    young.created = old.created + 10
    vip = info("vip", priority=10)
    vip.created = old.created + 20
    for p in (young, old, vip):
        q.add(p)
    assert [q.pop(0).info.name for _ in range(3)] == ["vip", "old", "young"]  # type: ignore[union-attr]


def test_backoff_doubles_to_the_cap() -> None:
    q = make(Clock())
    assert [q.backoff_duration(n) for n in (1, 2, 3, 4, 5, 6)] == [1, 2, 4, 8, 10, 10]


def test_retry_waits_for_backoff() -> None:
    clock = Clock()
    q = make(clock)
    q.add(info("p"))
    popped = q.pop(0)
    assert popped is not None
    q.retry_later(popped.uid)
    assert q.lengths()["backoff"] == 1
    assert q.pop(0) is None
    clock.now += 1.01
    again = q.pop(0)
    assert again is not None and again.attempts == 2


def test_parked_pod_moves_only_on_a_relevant_event() -> None:
    clock = Clock()
    q = make(clock)
    q.add(info("p"))
    popped = q.pop(0)
    assert popped is not None
    q.unschedulable(popped.uid, {"NodeResourcesFit"})
    assert q.lengths()["unschedulable"] == 1
    assert q.move_all(ClusterEvent.NODE_TAINTS) == 0
    assert q.move_all(ClusterEvent.NODE_ADDED) == 1
    clock.now += 5
    assert q.pop(0) is not None


def test_event_during_the_attempt_is_not_lost() -> None:
    clock = Clock()
    q = make(clock)
    q.add(info("p"))
    popped = q.pop(0)
    assert popped is not None
    q.move_all(ClusterEvent.NODE_ADDED)  # a node arrives while we decide "nothing fits"
    q.unschedulable(popped.uid, {"NodeResourcesFit"})
    assert q.lengths()["unschedulable"] == 0 and q.lengths()["backoff"] == 1


def test_parked_pods_are_retried_after_five_minutes() -> None:
    clock = Clock()
    q = make(clock)
    q.add(info("p"))
    popped = q.pop(0)
    assert popped is not None
    q.unschedulable(popped.uid, {"Unknown"})
    clock.now += 299
    assert q.pop(0) is None
    clock.now += 2
    assert q.pop(0) is not None


def test_gated_pods_wait_until_the_gates_go() -> None:
    q = make(Clock())
    gated = info("g", schedulingGates=[{"name": "quota"}])
    q.add(gated)
    assert q.lengths()["gated"] == 1 and q.pop(0) is None
    released = parse_pod({**gated.raw, "spec": {**gated.raw["spec"], "schedulingGates": []}})
    q.add(released)
    assert q.pop(0) is not None


def test_deleted_pod_leaves_the_queue() -> None:
    q = make(Clock())
    p = info("p")
    q.add(p)
    q.delete(p.uid)
    assert q.pop(0) is None


def test_a_queueing_hint_decides_whether_an_event_moves_the_pod() -> None:
    clock = Clock()
    wanted = {"big"}  # the hint: only a node named "big" can help

    def events_of(_: PodInfo, plugins: set[str]) -> list[EventHint]:
        return [EventHint(ClusterEvent.NODE_ADDED, lambda pod, node: QueueingHint.QUEUE
                          if node["metadata"]["name"] in wanted else QueueingHint.SKIP)]

    q = SchedulingQueue(lambda p: (-p.priority, p.created), events_of=events_of, clock=clock)
    q.add(info("p"))
    popped = q.pop(0)
    assert popped is not None
    q.unschedulable(popped.uid, {"Fit"})
    assert q.move_all(ClusterEvent.NODE_ADDED, {"metadata": {"name": "small"}}) == 0
    assert q.lengths()["unschedulable"] == 1
    assert q.move_all(ClusterEvent.NODE_ADDED, {"metadata": {"name": "big"}}) == 1


def test_pre_enqueue_keeps_a_pod_gated_until_it_changes() -> None:
    clock = Clock()
    q = SchedulingQueue(lambda p: (-p.priority, p.created), events_of=lambda _p, _s: [],
                        pre_enqueue=lambda p: "ready" in p.labels, clock=clock)
    body = pod("p")
    q.add(parse_pod(body))
    assert q.lengths()["gated"] == 1 and q.pop(0) is None
    body["metadata"]["labels"] = {"ready": "1"}
    q.add(parse_pod(body))
    assert q.lengths()["gated"] == 0
    popped = q.pop(0)
    assert popped is not None and popped.info.name == "p"


def test_pre_enqueue_is_asked_again_when_a_pod_comes_back_to_active() -> None:
    clock = Clock()
    ready = {"p": True}
    q = SchedulingQueue(lambda p: (-p.priority, p.created), events_of=lambda _p, _s: [],
                        pre_enqueue=lambda p: ready[p.name], clock=clock)
    q.add(info("p"))
    popped = q.pop(0)
    assert popped is not None
    ready["p"] = False  # e.g. its gang lost a member meanwhile
    q.retry_later(popped.uid)
    clock.now += 60
    assert q.pop(0) is None and q.lengths()["gated"] == 1
