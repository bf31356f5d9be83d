"""How many API writes the scheduler has in flight: binds and the Scheduled events after them (issue 18: with 16
binds at once and 8 event writers, metrics-sched bound 20 % fewer pods/s than kube-scheduler at the same CPU, and
its events fell behind its binds)."""

from __future__ import annotations

import threading

import pytest

from metrics_sched.config import parse_config
from metrics_sched.config.model import SchedulerConfig
from metrics_sched.framework.registry import Registry
from metrics_sched.model.podinfo import parse_pod
from metrics_sched.scheduler import Scheduler
from metrics_sched.scheduler.reporting import PodReporter
from tests.polling import poll
from tests.unit.fakes import FakeAPI, node, pod

pytestmark = pytest.mark.unit


class Gate:
    """A FakeAPI.before_write hook: each write of `kind` waits until `parties` of them are in flight at once."""

    def __init__(self, kind: str, parties: int) -> None:
        self.kind = kind
        self.barrier = threading.Barrier(parties, timeout=10)

    def __call__(self, kind: str) -> None:
        if kind == self.kind:
            self.barrier.wait()  # BrokenBarrierError (the write fails) if fewer ever run at once


def test_the_default_bind_concurrency_is_kube_scheduler_like() -> None:
    registry = Registry.default(third_party=False)
    config = parse_config({}, registry.catalog())
    assert config.bind_workers == SchedulerConfig.bind_workers == 64


def test_as_many_scheduled_events_are_written_at_once_as_pods_are_bound() -> None:
    workers = 12  # more than the reporter's own default of 8
    registry = Registry.default(third_party=False)
    api = FakeAPI()
    scheduler = Scheduler(parse_config({"bindWorkers": workers}, registry.catalog()), registry.plugins, api)
    api.watchers.append(scheduler.handlers)
    gate = Gate("event", workers)
    api.before_write = gate
    try:
        scheduler.handlers.on_node_event("ADDED", node("n0", cpu="64", memory="64Gi"))
        for i in range(workers):
            api.add_pod(pod(f"p{i:02d}", cpu="100m", memory="100Mi"))
        while scheduler.schedule_one(timeout=0.01) is not None:
            pass
        assert scheduler.binder.drain(10)
        assert len(api.binds) == workers
        assert scheduler.reporter.wait_idle(15)
        assert not gate.barrier.broken
        scheduled = sorted(e.pod_name for e in api.events if e.reason == "Scheduled")
        assert scheduled == [f"p{i:02d}" for i in range(workers)]
    finally:
        scheduler.stop(drain_timeout=5)


def test_a_burst_of_reports_gets_a_writer_each_even_when_one_was_waiting() -> None:
    """The worker woken for one pod's report is no longer counted as waiting: the next pod's report, arriving
    before that worker runs, starts another writer instead of counting on it too."""
    api = FakeAPI()
    reporter = PodReporter(api, "metrics-sched", workers=3)
    try:
        first = parse_pod(api.add_pod(pod("first")))
        reporter.scheduled(first, "n0")
        assert reporter.wait_idle(10)  # one worker, now waiting for work
        gate = Gate("event", 3)
        api.before_write = gate
        for name in ("a", "b", "c"):
            reporter.scheduled(parse_pod(api.add_pod(pod(name))), "n0")
        assert reporter.wait_idle(15)
        assert not gate.barrier.broken
        poll(lambda: {"a", "b", "c"} <= {e.pod_name for e in api.events}, 5, "the three events")
    finally:
        reporter.shutdown(wait=False)
