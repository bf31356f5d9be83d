"""PodReporter: no stale PodScheduled=False on a bound pod, a bounded queue of latest verdicts, and repeated
events aggregated into a series (client-go tools/events semantics), against FakeAPI."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from metrics_sched.model.podinfo import PodInfo, parse_pod
from metrics_sched.ports import EventSeries
from metrics_sched.scheduler.reporting import SERIES_FINISH, SERIES_REFRESH, PodReporter
from tests.polling import poll
from tests.schedulers import make_scheduler
from tests.unit.fakes import FakeAPI, node, pod

pytestmark = pytest.mark.unit

T0 = 1_800_000_000.0


class Hold:
    """A FakeAPI.before_write hook that holds the first write of one kind in flight until released."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.entered = threading.Event()
        self.release = threading.Event()
        self._lock = threading.Lock()

    def __call__(self, kind: str) -> None:
        with self._lock:
            if kind != self.kind or self.entered.is_set():
                return
            self.entered.set()
        assert self.release.wait(10), "the held write was never released"


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def api() -> FakeAPI:
    return FakeAPI()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def reporter(api: FakeAPI, clock: Clock) -> Iterator[PodReporter]:
    r = PodReporter(api, "metrics-sched", instance="metrics-sched-0", workers=1, clock=clock)
    yield r
    r.shutdown(wait=False)


def pending(api: FakeAPI, name: str) -> PodInfo:
    created = api.add_pod(pod(name))
    return parse_pod(created)


def test_a_verdict_in_flight_when_the_pod_is_bound_does_not_stick(api: FakeAPI, reporter: PodReporter) -> None:
    # The race: the patch leaves the reporter, the bind lands, then the patch arrives. With the
    # attempt's resourceVersion as precondition the API refuses it; the re-read sees the pod bound.
    p = pending(api, "p")
    hold = Hold("condition")
    api.before_write = hold
    reporter.failed(p, "0/1 nodes are available: 1 Insufficient cpu.", reason="Unschedulable")
    assert hold.entered.wait(5)
    api.bind("default", "p", p.uid, "n1")
    hold.release.set()
    assert reporter.wait_idle(5)
    assert api.pod_scheduled("default/p") == {"type": "PodScheduled", "status": "True"}
    stats = reporter.stats()
    assert (stats.conflicts, stats.stale_dropped, stats.conditions_written) == (1, 1, 0)
    # The event is history, not state: it stays.
    assert len(api.events_for("default/p", "FailedScheduling")) == 1


def test_a_queued_verdict_is_dropped_once_the_pod_is_bound_or_deleted(api: FakeAPI, reporter: PodReporter) -> None:
    first, bound, deleted = pending(api, "first"), pending(api, "bound"), pending(api, "deleted")
    hold = Hold("event")
    api.before_write = hold
    reporter.failed(first, "no fit", reason="Unschedulable")  # the only worker is held on this pod
    assert hold.entered.wait(5)
    reporter.failed(bound, "no fit", reason="Unschedulable")
    reporter.failed(deleted, "no fit", reason="Unschedulable")
    reporter.bound(bound.uid)
    reporter.forget(deleted.uid)
    hold.release.set()
    assert reporter.wait_idle(5)
    assert set(api.conditions) == {"default/first"}
    # The bound pod's FailedScheduling event still goes out; nothing about the deleted pod does.
    assert [e.pod_name for e in api.events] == ["first", "bound"]
    assert reporter.stats().stale_dropped == 2


def test_scheduled_drops_the_verdict_a_worker_already_holds(api: FakeAPI, reporter: PodReporter) -> None:
    p = pending(api, "p")
    hold = Hold("event")
    api.before_write = hold
    reporter.failed(p, "no fit", reason="Unschedulable")
    assert hold.entered.wait(5)  # the worker holds the pod's event and verdict
    api.bind("default", "p", p.uid, "n1")
    reporter.scheduled(p, "n1")
    hold.release.set()
    assert reporter.wait_idle(5)
    assert api.condition_writes == 0 and reporter.stats().conflicts == 0
    assert [e.reason for e in api.events] == ["FailedScheduling", "Scheduled"]


def test_a_conflict_on_a_pod_still_pending_is_retried_on_its_new_version(api: FakeAPI,
                                                                          reporter: PodReporter) -> None:
    p = pending(api, "p")
    api.add_pod(api.pods["default/p"])  # the pod changed (e.g. a label) after the attempt read it
    reporter.failed(p, "no fit", reason="Unschedulable")
    assert reporter.wait_idle(5)
    assert api.pod_scheduled("default/p") == {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                              "message": "no fit"}
    assert (reporter.stats().conflicts, reporter.stats().conditions_written) == (1, 1)


def test_a_pod_recreated_under_its_name_does_not_get_its_predecessors_verdict(api: FakeAPI,
                                                                             reporter: PodReporter) -> None:
    old = pending(api, "p")
    api.delete_pod("default/p")
    pending(api, "p")
    reporter.failed(old, "no fit", reason="Unschedulable")
    assert reporter.wait_idle(5)
    assert api.pod_scheduled("default/p") is None and api.condition_writes == 0


def test_only_the_latest_verdict_per_pod_waits_and_the_queue_is_bounded(api: FakeAPI, clock: Clock) -> None:
    reporter = PodReporter(api, "metrics-sched", instance="i", workers=1, max_pending=3, clock=clock)
    try:
        pods = [pending(api, f"p{i}") for i in range(6)]
        hold = Hold("event")
        api.before_write = hold
        reporter.failed(pods[0], "first", reason="Unschedulable")
        assert hold.entered.wait(5)
        for p in (pods[1], pods[2], pods[3]):
            reporter.failed(p, "older", reason="SchedulerError")
        reporter.failed(pods[3], "newer", reason="Unschedulable")  # replaces p3's verdict, p3 still waits
        for p in (pods[4], pods[5]):  # over the bound: p1 and p2, the least recently reported, are dropped
            reporter.failed(p, "no fit", reason="SchedulerError")
        hold.release.set()
        assert reporter.wait_idle(5)
        assert set(api.conditions) == {"default/p0", "default/p3", "default/p4", "default/p5"}
        assert api.conditions["default/p3"]["message"] == "newer"
        stats = reporter.stats()
        assert (stats.overflow_dropped, stats.conditions_written) == (2, 4)
    finally:
        reporter.shutdown(wait=False)


def test_repeated_events_become_a_series_written_on_the_second_and_when_it_ends(
    api: FakeAPI, reporter: PodReporter, clock: Clock
) -> None:
    p = pending(api, "p")
    reporter.failed(p, "0/3 nodes: Insufficient cpu.", reason="Unschedulable")
    assert reporter.wait_idle(5)
    assert api.series_for("default/p", "FailedScheduling") == [None]

    clock.now += 10
    reporter.failed(p, "0/3 nodes: GPU too hot.", reason="Unschedulable")  # another note: still isomorphic
    assert reporter.wait_idle(5)
    assert api.series_for("default/p", "FailedScheduling") == [EventSeries(2, T0 + 10)]
    assert reporter.stats().series_updated == 1

    for _ in range(3):  # later occurrences only count
        clock.now += 60
        reporter.failed(p, "0/3 nodes: GPU too hot.", reason="Unschedulable")
    assert reporter.wait_idle(5)
    assert api.series_for("default/p", "FailedScheduling") == [EventSeries(2, T0 + 10)]
    assert reporter.stats().series_updated == 1

    clock.now += SERIES_FINISH - 1  # not over yet
    reporter.tick()
    assert reporter.wait_idle(5)
    assert reporter.stats().series_updated == 1
    clock.now += 2  # no isomorphic event for 6 minutes: the final count is written and the series closed
    reporter.tick()
    assert reporter.wait_idle(5)
    assert api.series_for("default/p", "FailedScheduling") == [EventSeries(5, T0 + 190)]
    assert reporter.open_series() == 0

    reporter.failed(p, "0/3 nodes: GPU too hot.", reason="Unschedulable")  # a new Event
    assert reporter.wait_idle(5)
    assert api.series_for("default/p", "FailedScheduling") == [EventSeries(5, T0 + 190), None]
    assert len(api.events) == 2
    # The condition is not aggregated: it holds the latest verdict.
    assert api.conditions["default/p"]["message"] == "0/3 nodes: GPU too hot."


def test_a_long_series_is_written_every_30_minutes(api: FakeAPI, reporter: PodReporter, clock: Clock) -> None:
    p = pending(api, "p")
    for _ in range(2):
        reporter.failed(p, "no fit", reason="Unschedulable")
        assert reporter.wait_idle(5)
    started = clock.now
    while clock.now - started < SERIES_REFRESH:
        clock.now += 300  # every 5 minutes: the series never ends
        reporter.failed(p, "no fit", reason="Unschedulable")
        reporter.tick()
        assert reporter.wait_idle(5)
    assert api.series_for("default/p", "FailedScheduling") == [EventSeries(8, clock.now)]
    assert reporter.stats().series_updated == 2  # count 2, then the refresh


def test_events_of_other_reasons_or_pods_are_not_isomorphic(api: FakeAPI, reporter: PodReporter) -> None:
    a, b = pending(api, "a"), pending(api, "b")
    for p in (a, b, a, b):
        reporter.failed(p, "no fit", reason="Unschedulable")
    reporter.scheduled(a, "n1")
    assert reporter.wait_idle(5)
    assert api.series_for("default/a", "FailedScheduling") == api.series_for("default/b", "FailedScheduling")
    assert [s.count if s else 1 for s in api.series_for("default/a", "FailedScheduling")] == [2]
    assert api.series_for("default/a", "Scheduled") == [None]


def test_a_deleted_pods_series_are_forgotten(api: FakeAPI, reporter: PodReporter) -> None:
    p = pending(api, "p")
    reporter.failed(p, "no fit", reason="Unschedulable")
    assert reporter.wait_idle(5)
    assert reporter.open_series() == 1
    reporter.forget(p.uid)
    assert reporter.open_series() == 0


def test_the_scheduler_never_leaves_unschedulable_on_a_pod_it_bound() -> None:
    """The issue's reproduction end to end: the verdict of a failed attempt is still on its way when a node
    arrives and the next attempt binds the pod."""
    api = FakeAPI()
    scheduler = make_scheduler({"podInitialBackoffSeconds": 0.1, "podMaxBackoffSeconds": 0.1}, api)
    try:
        scheduler.handlers.on_node_event("ADDED", node("small", gpus=1))
        hold = Hold("condition")
        api.before_write = hold
        api.add_pod(pod("big", gpus=2))
        scheduler.schedule_one(timeout=1)
        assert hold.entered.wait(5)
        scheduler.handlers.on_node_event("ADDED", node("large", gpus=2))

        def bound() -> bool:
            scheduler.schedule_one(timeout=0.01)
            return bool(api.binds)

        poll(bound, 5, "the bind on the new node", interval=0)
        assert scheduler.binder.drain(5)
        hold.release.set()
        assert scheduler.reporter.wait_idle(5)
        assert api.binds == [("default/big", "large")]
        assert api.pod_scheduled("default/big") == {"type": "PodScheduled", "status": "True"}
    finally:
        hold.release.set()
        scheduler.stop(drain_timeout=1)
