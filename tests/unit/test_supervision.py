"""Supervised workers (issue 14 item 1): an unexpected exception while scheduling a pod is logged with the pod,
counted, the pod un-assumed and requeued, and the loop goes on; a worker that cannot continue fails /healthz."""

from __future__ import annotations

import threading
import types
from collections.abc import Callable, Iterator
from typing import Any, cast

import pytest

from metrics_sched.framework import CycleState, PodInfo, ReservePlugin, Status
from metrics_sched.framework.runtime import CycleResult, Framework
from metrics_sched.observability import SchedulerMetrics
from metrics_sched.scheduler import Scheduler
from metrics_sched.scheduler import scheduler as scheduler_module
from metrics_sched.serving.status import SchedulerEndpoints
from metrics_sched.supervision import Supervisor, Worker
from tests.polling import poll
from tests.schedulers import make_scheduler
from tests.unit.fakes import FakeAPI, node, pod

pytestmark = pytest.mark.unit

UNRESERVED: list[str] = []


class Exploding(ReservePlugin):
    """Raises in Reserve for pods labelled `explode`; records its Unreserve calls."""

    name = "Exploding"

    def reserve(self, cycle: CycleState, pod: PodInfo, node: str) -> Status:
        if "explode" in pod.labels:
            raise RuntimeError("reserve blew up")
        return Status()

    def unreserve(self, cycle: CycleState, pod: PodInfo, node: str) -> None:
        UNRESERVED.append(pod.name)


@pytest.fixture
def running() -> Iterator[Callable[[], tuple[Scheduler, FakeAPI]]]:
    """A scheduler whose loop runs in its own (supervised) thread, with millisecond backoffs."""
    started: list[Scheduler] = []

    def start() -> tuple[Scheduler, FakeAPI]:
        UNRESERVED.clear()
        config = {"profiles": [{"plugins": {"reserve": {"enabled": [{"name": "Exploding"}]}}}]}
        api = FakeAPI()
        scheduler = make_scheduler(config, api, plugins=[Exploding])
        scheduler.queue.initial_backoff, scheduler.queue.max_backoff = 0.002, 0.01
        scheduler.handlers.on_node_event("ADDED", node("n0", cpu="2"))
        started.append(scheduler)
        return scheduler, api

    yield start
    for scheduler in started:
        scheduler.stop(drain_timeout=5)


def bound(api: FakeAPI) -> set[str]:
    with api.lock:
        return {key for key, _ in api.binds}


def healthz(scheduler: Scheduler) -> tuple[int, str]:
    app = cast(Any, types.SimpleNamespace(lost=threading.Event(), scheduler=scheduler))
    status, _, body = SchedulerEndpoints.healthz(app, {})
    return status, body.decode()


def test_a_reserve_plugin_that_raises_requeues_the_pod_and_the_loop_goes_on(
        running: Callable[[], tuple[Scheduler, FakeAPI]]) -> None:
    scheduler, api = running()
    scheduler.start()
    bad = pod("bad", cpu="1", priority=10)
    bad["metadata"]["labels"] = {"explode": "yes"}
    api.add_pod(bad)
    api.add_pod(pod("good", cpu="1"))
    poll(lambda: bound(api) == {"default/good"}, 5, "the next pod bound", interval=0.005)
    # The bad pod keeps coming back (backing off) and never keeps its room.
    poll(lambda: UNRESERVED.count("bad") >= 2, 5, "the bad pod retried", interval=0.005)
    assert scheduler._thread is not None and scheduler._thread.is_alive()
    assert healthz(scheduler) == (200, "ok\n")
    scheduler.stop(drain_timeout=5)  # lets the attempt under way finish: then nothing may be left assumed
    assert scheduler.state.assumed_count() == 0
    lengths = scheduler.queue.lengths()
    assert lengths["active"] + lengths["backoff"] == 1, lengths  # the bad pod, still queued


def test_a_failure_outside_the_plugins_unassumes_requeues_counts_and_the_loop_goes_on(
        running: Callable[[], tuple[Scheduler, FakeAPI]], caplog: pytest.LogCaptureFixture) -> None:
    scheduler, api = running()
    real_submit = scheduler.binder.submit
    failures = [RuntimeError("binder refused the work")]

    def submit(framework: Framework, result: CycleResult, *, wait: bool = True, hold: bool = False) -> Any:
        if failures:
            raise failures.pop()
        return real_submit(framework, result, wait=wait, hold=hold)

    scheduler.binder.submit = submit  # type: ignore[method-assign]
    api.add_pod(pod("first", cpu="1", priority=10))
    api.add_pod(pod("second", cpu="1"))
    scheduler.start()
    # The first pod's attempt failed after it was assumed: had it kept its assumed place, its retry would find
    # it "already placed" and drop it. It was un-assumed (its Reserve plugins unwound) and requeued instead.
    poll(lambda: bound(api) == {"default/first", "default/second"}, 5, "both pods bound", interval=0.005)
    assert scheduler._thread is not None and scheduler._thread.is_alive()
    assert UNRESERVED == ["first"]
    assert scheduler.supervisor.failure_counts()[Worker.SCHEDULING_LOOP] == 1
    assert "default/first" in caplog.text and "binder refused the work" in caplog.text
    assert healthz(scheduler)[0] == 200
    assert scheduler.reporter.wait_idle(5)
    [event] = api.events_for("default/first", "FailedScheduling")
    assert "binder refused the work" in event.note


def test_an_attempt_whose_result_is_lost_after_assume_is_unwound(
        running: Callable[[], tuple[Scheduler, FakeAPI]]) -> None:
    scheduler, api = running()
    [framework] = scheduler.frameworks.values()
    real_cycle = framework.run_scheduling_cycle
    raised: list[str] = []

    def cycle(info: PodInfo, on_permit: Callable[[CycleResult, Status], None]) -> CycleResult | None:
        result = real_cycle(info, on_permit)
        if not raised:
            raised.append(info.name)
            raise RuntimeError("lost after assume")  # the pod is assumed; its result never reaches the loop
        return result

    framework.run_scheduling_cycle = cycle  # type: ignore[method-assign]
    api.add_pod(pod("p", cpu="2"))
    scheduler.start()
    poll(lambda: bound(api) == {"default/p"}, 5, "the pod bound on its retry", interval=0.005)
    assert raised == ["p"] and UNRESERVED == ["p"]
    assert scheduler.supervisor.failure_counts()[Worker.SCHEDULING_LOOP] == 1


def test_a_loop_that_dies_fails_healthz_counts_and_stops_the_app(
        running: Callable[[], tuple[Scheduler, FakeAPI]], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scheduler_module, "LOOP_RETRY_DELAY", 0.001)
    scheduler, _ = running()
    metrics = SchedulerMetrics(scheduler)
    stopped = threading.Event()
    scheduler.supervisor.on_fatal(lambda _: stopped.set())  # what the app does: shut down, release the lease

    def broken(timeout: float | None = None) -> None:
        raise RuntimeError("queue corrupted")

    scheduler.queue.pop = broken  # type: ignore[assignment,method-assign]
    scheduler.start()
    assert stopped.wait(5)
    poll(lambda: scheduler._thread is not None and not scheduler._thread.is_alive(), 5, "the loop thread ended",
         interval=0.005)
    status, body = healthz(scheduler)
    assert status == 500
    assert "scheduling_loop" in body and "queue corrupted" in body
    exposition = metrics.exposition().decode()
    assert 'metrics_sched_worker_failures_total{worker="scheduling_loop"} 5.0' in exposition
    assert 'metrics_sched_worker_failures_total{worker="binder"} 0.0' in exposition


def test_leadership_lost_still_fails_healthz_first(running: Callable[[], tuple[Scheduler, FakeAPI]]) -> None:
    scheduler, _ = running()
    app = cast(Any, types.SimpleNamespace(lost=threading.Event(), scheduler=scheduler))
    app.lost.set()
    assert SchedulerEndpoints.healthz(app, {})[0] == 500


@pytest.mark.parametrize("ending", ["raises", "system-exit", "returns"])
def test_a_spawned_thread_that_ends_while_running_is_fatal(ending: str) -> None:
    supervisor = Supervisor()

    def target() -> None:
        if ending == "raises":
            raise ValueError("boom")
        if ending == "system-exit":
            raise SystemExit(3)

    supervisor.spawn(Worker.SOURCE, target, name="source-x", stopping=lambda: False).join(5)
    [problem] = supervisor.problems()
    assert problem.startswith("source (source-x): ")
    assert not supervisor.healthy()
    assert supervisor.failure_counts()[Worker.SOURCE] == (0 if ending == "returns" else 1)


def test_a_spawned_thread_that_returns_on_stop_is_fine_and_guard_counts() -> None:
    supervisor = Supervisor()
    stop = threading.Event()
    thread = supervisor.spawn(Worker.LEADER_ELECTION, lambda: stop.wait(5) and None, name="leader-election",
                              stopping=stop.is_set)
    stop.set()
    thread.join(5)
    assert supervisor.healthy() and supervisor.problems() == []
    assert supervisor.guard(Worker.REPORTER, lambda: 1 / 0, pod="default/p") is False
    assert supervisor.guard(Worker.REPORTER, lambda: None) is True
    assert supervisor.failure_counts() == {**dict.fromkeys(Worker, 0), Worker.REPORTER: 1}
    assert supervisor.healthy()  # a survived failure is counted, not fatal


def test_a_bind_worker_that_raises_gives_its_room_back_and_the_pod_is_bound_on_retry(
        running: Callable[[], tuple[Scheduler, FakeAPI]]) -> None:
    scheduler, api = running()
    binder = scheduler.binder
    real_bind = binder._bind
    failures = [RuntimeError("bind worker blew up")]

    def bind(framework: Framework, result: CycleResult) -> Any:
        if failures:
            raise failures.pop()
        return real_bind(framework, result)

    binder._bind = bind  # type: ignore[method-assign]
    api.add_pod(pod("p", cpu="2"))
    scheduler.start()
    poll(lambda: bound(api) == {"default/p"}, 5, "the pod bound on its retry", interval=0.005)
    assert scheduler.supervisor.failure_counts()[Worker.BINDER] == 1
    assert binder.drain(5) and binder.in_flight() == 0  # the failed run gave its slot back
    assert healthz(scheduler)[0] == 200
