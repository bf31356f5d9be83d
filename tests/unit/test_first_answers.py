"""Issue 44, defect 8: scheduling waits for each telemetry source's first answer, as kube-scheduler waits for its
informers (bounded; a first failure is an answer too), and /readyz names the sources it still waits for.

Before the fix a scheduler started against nodes that all read 92 °C bound a GPU pod created right after /readyz
answered 200, before the first Prometheus answer: start_caches returned once the watches had synced, and the
scheduling loop started at once. Here the app's own sequence is driven (start_caches, then the scheduling loop, as
app.scheduler_app.run does) with a source whose first fetch is held.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator

import pytest

from metrics_sched.app.core import start_caches
from metrics_sched.ports import ClusterEventSink, FetchResult, NodeDirectory, Sample
from metrics_sched.scheduler import Scheduler
from metrics_sched.scheduler.event_handlers import ClusterEventHandlers
from metrics_sched.serving.status import SchedulerEndpoints
from metrics_sched.telemetry import PolledSource
from metrics_sched.telemetry.first_answers import FirstAnswers
from tests.polling import poll
from tests.schedulers import make_scheduler
from tests.unit.fakes import FakeAPI, node, pod

pytestmark = pytest.mark.unit

HOT = 92.0


class Held(PolledSource):
    """A Prometheus stand-in whose first fetch waits for the test: it then answers, fails, or never ends."""

    def __init__(self, outcome: str) -> None:
        super().__init__("prometheus", 3600.0, ("gpu_temp",))  # one refresh in the test's life
        self.outcome = outcome
        self.entered = threading.Event()
        self.release = threading.Event()

    def fetch(self, nodes: NodeDirectory) -> FetchResult:
        self.entered.set()
        self.release.wait(30 if self.outcome != "hangs" else 60)
        if self.outcome == "fails":
            raise ConnectionError("connection refused")
        return FetchResult(samples=[Sample("gpu_temp", name, HOT, 0.0) for name in sorted(nodes.names)],
                           dropped={}, errors={})


class Synced:
    """The watches: the initial LIST of every awaited kind delivered at start."""

    def start(self, sink: ClusterEventSink) -> None:
        assert isinstance(sink, ClusterEventHandlers)
        for resource in sorted(sink.awaited):
            sink.on_synced(resource)

    def stop(self) -> None:
        pass


@pytest.fixture
def started() -> Iterator[list[Scheduler]]:
    schedulers: list[Scheduler] = []
    yield schedulers
    for scheduler in schedulers:
        scheduler.stop(drain_timeout=5)
        scheduler.metrics.stop()


def _boot(source: Held, started: list[Scheduler], first_answer_timeout: float | None = None,
          ) -> tuple[Scheduler, FakeAPI, threading.Thread, threading.Event]:
    """The app's startup on its own thread: caches, then (once start_caches returned) the scheduling loop."""
    api = FakeAPI()
    scheduler = make_scheduler(None, api)
    scheduler.metrics.add_source(source)
    started.append(scheduler)
    scheduler.handlers.on_node_event("ADDED", node("gpu-1"))
    api.add_pod(pod("train"))  # created before scheduling may start: it must wait for the telemetry
    stop = threading.Event()

    def boot() -> None:
        bound = {} if first_answer_timeout is None else {"first_answer_timeout": first_answer_timeout}
        if start_caches(scheduler, Synced(), stop, **bound):
            scheduler.start()

    thread = threading.Thread(target=boot, name="boot", daemon=True)
    thread.start()
    return scheduler, api, thread, stop


def _readyz(scheduler: Scheduler) -> tuple[int, str]:
    status, _, body = SchedulerEndpoints(None, scheduler, None).readyz({})  # type: ignore[arg-type]
    assert isinstance(body, bytes)
    return status, body.decode()


@pytest.mark.parametrize("outcome", ["answers", "fails"])
def test_scheduling_starts_at_the_first_answer_and_not_before(started: list[Scheduler], outcome: str) -> None:
    source = Held(outcome)
    scheduler, api, boot, _ = _boot(source, started)
    assert source.entered.wait(5)
    # The source is being asked: nothing schedules, and /readyz says what it waits for.
    assert _readyz(scheduler) == (503, "waiting for the first answer of telemetry source(s): prometheus\n")
    assert boot.is_alive() and scheduler._thread is None  # the scheduling loop has not started
    assert scheduler.queue.lengths()["active"] == 1 and api.binds == []
    source.release.set()
    boot.join(5)
    assert not boot.is_alive() and scheduler._thread is not None
    assert _readyz(scheduler) == (200, "ok\n")
    if outcome == "answers":  # its values are in the cache before the first pod is looked at
        assert scheduler.metrics.node_values("gpu-1")["gpu_temp"]["value"] == HOT
    else:
        assert not source.health.up
    poll(lambda: api.binds == [("default/train", "gpu-1")], 5, "the pod bound once scheduling started")


def test_a_source_that_never_answers_delays_scheduling_by_the_bound_only(
        started: list[Scheduler], caplog: pytest.LogCaptureFixture) -> None:
    source = Held("hangs")
    with caplog.at_level(logging.WARNING, logger="metrics_sched.app"):
        scheduler, api, boot, _ = _boot(source, started, first_answer_timeout=0.5)
        assert source.entered.wait(5)
        boot.join(5)
    assert not boot.is_alive() and scheduler._thread is not None
    assert _readyz(scheduler) == (200, "ok\n")
    assert "telemetry source(s) prometheus gave no first answer within 0s" in caplog.text
    poll(lambda: api.binds == [("default/train", "gpu-1")], 5, "the pod bound after the bound")
    source.release.set()


def test_stop_ends_the_wait_and_nothing_starts(started: list[Scheduler]) -> None:
    source = Held("hangs")
    scheduler, _, boot, stop = _boot(source, started)
    assert source.entered.wait(5)
    stop.set()
    boot.join(5)
    assert not boot.is_alive() and scheduler._thread is None
    source.release.set()


def test_first_answers_bookkeeping() -> None:
    answers = FirstAnswers()
    assert answers.wait(0) == [] and answers.waiting_for() == []  # no source: nothing to wait for
    answers.expect("b")
    answers.expect("a")
    assert answers.waiting_for() == ["a", "b"]
    answers.answered("a")
    answers.answered("a")  # a later refresh changes nothing
    assert answers.waiting_for() == ["b"]
    assert answers.wait(0, stopped=lambda: True) == ["b"] and answers.waiting_for() == ["b"]  # stopped: not given up
    assert answers.wait(0.05) == ["b"] and answers.waiting_for() == []  # the bound passed: no longer waited for
    assert answers.unanswered() == ["b"]  # ... though it has still not answered
    answers.answered("b")
    assert answers.unanswered() == []
