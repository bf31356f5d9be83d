"""How many API writes the scheduler has in flight: binds and the Scheduled events after them (issue 18: with 16
binds at once and 8 event writers, metrics-sched bound 20 % fewer pods/s than kube-scheduler at the same CPU, and
its events fell behind its binds; a woken writer costs the scheduling loop more than a write, so writers wake
as the backlog grows)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from metrics_sched.config import parse_config
from metrics_sched.config.model import SchedulerConfig
from metrics_sched.model.podinfo import parse_pod
from metrics_sched.plugins import in_tree_registry
from metrics_sched.scheduler.reporting import PODS_PER_WORKER, PodReporter
from tests.schedulers import make_scheduler
from tests.unit.fakes import FakeAPI, node, pod

pytestmark = pytest.mark.unit


class Gate:
    """A FakeAPI.before_write hook: writes of `kind` wait until `parties` of them have been in flight at once, then
    every write passes. Only the peak is asserted: once the backlog has shrunk, fewer writers suffice (a bind
    worker lent to the events returns to its binds, and the writers left have fewer than PODS_PER_WORKER pods
    each), so a barrier on every write would assert more than the policy promises."""

    def __init__(self, kind: str, parties: int) -> None:
        self.kind = kind
        self.parties = parties
        self.in_flight = self.peak = 0
        self.gave_up = False  # a write waited 10 s for the peak: the rest pass at once (the test fails on the peak)
        self._changed = threading.Condition()

    def __call__(self, kind: str) -> None:
        if kind != self.kind:
            return
        with self._changed:
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)
            self._changed.notify_all()
            # The write proceeds either way; the test asserts the peak afterwards.
            if not self._changed.wait_for(lambda: self.peak >= self.parties or self.gave_up, timeout=10):
                self.gave_up = True
                self._changed.notify_all()
            self.in_flight -= 1

    def reached(self) -> bool:
        with self._changed:
            return self.peak >= self.parties


def test_the_default_bind_concurrency_is_kube_scheduler_like() -> None:
    registry = in_tree_registry(third_party=False)
    config = parse_config({}, registry.catalog())
    assert config.bind_workers == SchedulerConfig.bind_workers == 64


def test_a_backlog_of_scheduled_events_gets_a_writer_per_pods_per_worker() -> None:
    """Events keep up with binds: while writes wait on the API, another writer wakes for each PODS_PER_WORKER pods
    waiting (32 bound pods whose event writes block until 4 run at once: with 3 writing, 29 wait, more than
    PODS_PER_WORKER each, so a fourth wakes)."""
    binds = 4 * PODS_PER_WORKER
    api = FakeAPI()
    scheduler = make_scheduler({"bindWorkers": 12}, api)
    gate = Gate("event", 4)
    api.before_write = gate
    try:
        scheduler.handlers.on_node_event("ADDED", node("n0", cpu="64", memory="64Gi"))
        for i in range(binds):
            api.add_pod(pod(f"p{i:02d}", cpu="100m", memory="100Mi"))
        while scheduler.schedule_one(timeout=0.01) is not None:
            pass
        assert scheduler.binder.drain(10)
        assert len(api.binds) == binds
        assert scheduler.reporter.wait_idle(15)
        assert gate.reached(), f"at most {gate.peak} event writes ran at once"
        scheduled = sorted(e.pod_name for e in api.events if e.reason == "Scheduled")
        assert scheduled == [f"p{i:02d}" for i in range(binds)]
    finally:
        scheduler.stop(drain_timeout=5)


def test_a_burst_of_reports_is_taken_by_the_awake_writer_until_it_has_pods_per_worker_waiting() -> None:
    """Waking a writer costs the scheduling loop more than a write: a writer busy with one pod takes the next
    PODS_PER_WORKER in turn, and only one more waiting wakes another."""
    api = FakeAPI()
    reporter = PodReporter(api, "metrics-sched", workers=3)
    writing, release = threading.Event(), threading.Event()

    def hold(kind: str) -> None:
        writing.set()
        release.wait(10)

    api.before_write = hold
    try:
        reporter.scheduled(parse_pod(api.add_pod(pod("first"))), "n0")
        assert writing.wait(5)  # the first writer holds its pod
        for i in range(PODS_PER_WORKER):
            reporter.scheduled(parse_pod(api.add_pod(pod(f"b{i}"))), "n0")
        assert reporter.workers() == 1
        reporter.scheduled(parse_pod(api.add_pod(pod("over"))), "n0")
        assert reporter.workers() == 2
        release.set()
        assert reporter.wait_idle(15)
        assert len([e for e in api.events if e.reason == "Scheduled"]) == PODS_PER_WORKER + 2
    finally:
        release.set()
        reporter.shutdown(wait=False)



def test_scheduled_events_gathered_for_a_batch_wake_one_writer_when_asked() -> None:
    """The binder's Scheduled events (wake=False) wake no writer while fewer than PODS_PER_WORKER pods wait and
    none is awake: wake() (the bind pool, its batch done) wakes one for all of them; PODS_PER_WORKER waiting wake
    one at once; any other report wakes one as before."""
    api = FakeAPI()
    reporter = PodReporter(api, "metrics-sched", workers=3)
    try:
        for i in range(PODS_PER_WORKER - 1):
            reporter.scheduled(parse_pod(api.add_pod(pod(f"g{i}"))), "n0", wake=False)
        assert reporter.workers() == 0 and not api.events
        reporter.wake()
        assert reporter.wait_idle(15)
        assert reporter.workers() == 1
        assert len([e for e in api.events if e.reason == "Scheduled"]) == PODS_PER_WORKER - 1
        reporter.wake()  # nothing gathered: nothing to do
        for i in range(PODS_PER_WORKER):
            reporter.scheduled(parse_pod(api.add_pod(pod(f"h{i}"))), "n0", wake=False)
        # The PODS_PER_WORKER-th woke the idle writer without wake().
        assert _eventually(lambda: len([e for e in api.events if e.reason == "Scheduled"]) == 2 * PODS_PER_WORKER - 1)
        reporter.failed(parse_pod(api.add_pod(pod("unplaced"))), "0/1 nodes are available", reason="Unschedulable")
        assert _eventually(lambda: any(e.reason == "FailedScheduling" for e in api.events))
    finally:
        reporter.shutdown(wait=False)


def _eventually(check: Callable[[], bool], timeout: float = 10.0) -> bool:
    """Polls `check` every millisecond until it holds (True) or `timeout` passes (False)."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)
    return True


def test_the_bind_pool_wakes_a_writer_for_its_batch_once_it_is_bound() -> None:
    """Scheduled events of binds handed over in a batch are written once the batch is bound, with no wait_idle()
    to push them: the pool's worker, finding no bind waiting, wakes a writer."""
    api = FakeAPI()
    scheduler = make_scheduler({"bindWorkers": 4}, api)
    try:
        scheduler.handlers.on_node_event("ADDED", node("n0", cpu="64", memory="64Gi"))
        for i in range(5):
            api.add_pod(pod(f"p{i}", cpu="100m", memory="100Mi"))
        while scheduler.schedule_one(timeout=0.01) is not None:
            pass
        assert _eventually(lambda: sorted(e.pod_name for e in api.events if e.reason == "Scheduled")
                           == [f"p{i}" for i in range(5)])
    finally:
        scheduler.stop(drain_timeout=5)


def test_a_bind_worker_writes_the_gathered_events_itself_while_no_bind_waits() -> None:
    """write_gathered writes the gathered reports on the calling thread (no writer started) while stop() is False;
    once it is True a writer is woken for the rest; a second caller while one is lent leaves them to it."""
    api = FakeAPI()
    reporter = PodReporter(api, "metrics-sched", workers=3)
    scheduled = lambda: sorted(e.pod_name for e in api.events if e.reason == "Scheduled")  # noqa: E731
    try:
        for name in ("a0", "a1", "a2"):
            reporter.scheduled(parse_pod(api.add_pod(pod(name))), "n0", wake=False)
        reporter.write_gathered(lambda: False)
        assert scheduled() == ["a0", "a1", "a2"] and reporter.workers() == 0

        for name in ("b0", "b1", "b2"):
            reporter.scheduled(parse_pod(api.add_pod(pod(name))), "n0", wake=False)
        answers = iter([False, True])  # a bind arrives after the first pod
        reporter.write_gathered(lambda: next(answers))
        assert scheduled() == ["a0", "a1", "a2", "b0"]
        assert _eventually(lambda: scheduled() == ["a0", "a1", "a2", "b0", "b1", "b2"])
        assert reporter.workers() == 1  # woken for the rest

        writing, release = threading.Event(), threading.Event()

        def hold(kind: str) -> None:
            writing.set()
            release.wait(10)

        api.before_write = hold
        reporter.scheduled(parse_pod(api.add_pod(pod("c0"))), "n0", wake=False)
        lent = threading.Thread(target=reporter.write_gathered, args=(lambda: False,))
        lent.start()
        assert writing.wait(5)  # the lent worker is writing c0
        reporter.scheduled(parse_pod(api.add_pod(pod("c1"))), "n0", wake=False)
        reporter.write_gathered(lambda: False)  # returns at once: c1 is the lent worker's
        release.set()
        lent.join(10)
        assert scheduled()[-2:] == ["c0", "c1"]
        assert reporter.workers() == 1
    finally:
        release.set()
        reporter.shutdown(wait=False)


def test_gathered_events_are_written_at_shutdown() -> None:
    """Scheduled events gathered for a batch that no bind worker wrote (the pool stopping) are written by the
    reporter's shutdown(wait=True), as any queued report."""
    api = FakeAPI()
    reporter = PodReporter(api, "metrics-sched", workers=2)
    for i in range(3):
        reporter.scheduled(parse_pod(api.add_pod(pod(f"s{i}"))), "n0", wake=False)
    assert reporter.workers() == 0
    reporter.shutdown(wait=True)
    assert sorted(e.pod_name for e in api.events if e.reason == "Scheduled") == ["s0", "s1", "s2"]
