"""The scheduling loop holds its binds back while more pods wait for it, and hands them over in batches
(scheduler.binding: HANDOFF_BATCH, HANDOFF_DELAY); nothing held is ever left behind."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from metrics_sched.scheduler import Scheduler
from metrics_sched.scheduler.binding import HANDOFF_BATCH, HANDOFF_DELAY, SLOW_DECISION
from tests.polling import poll
from tests.schedulers import make_scheduler
from tests.unit.fakes import FakeAPI, node, pod

pytestmark = pytest.mark.unit


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make(pods: int, config: dict[str, Any] | None = None) -> tuple[Scheduler, FakeAPI, Clock]:
    api = FakeAPI()
    scheduler = make_scheduler(config, api)
    clock = Clock()
    scheduler.binder.pool.clock = clock  # frozen: only the batch size decides, however slow the machine
    for i in range(4):
        scheduler.handlers.on_node_event("ADDED", node(f"n{i}", cpu="64", memory="64Gi"))
    for i in range(pods):
        api.add_pod(pod(f"p{i:02d}", cpu="100m", memory="100Mi"))
    return scheduler, api, clock


def test_binds_wait_for_a_batch_while_pods_wait_and_all_go_when_none_is_left() -> None:
    extra = 3
    scheduler, api, _ = make(HANDOFF_BATCH + extra)
    for _ in range(HANDOFF_BATCH - 1):
        assert scheduler.schedule_one(timeout=0) is not None
    assert scheduler.binder.in_flight() == HANDOFF_BATCH - 1
    assert api.binds == []  # held: never queued, so none can have run
    scheduler.schedule_one(timeout=0)  # the batch is full: handed over at once
    poll(lambda: len(api.binds) == HANDOFF_BATCH, 10, "the first batch's binds", interval=0.002)
    for _ in range(extra - 1):
        scheduler.schedule_one(timeout=0)
    assert scheduler.queue.has_ready()
    assert len(api.binds) == HANDOFF_BATCH  # the next ones are held again
    scheduler.schedule_one(timeout=0)  # the last pod: nothing waits for the loop, so nothing is held
    assert not scheduler.queue.has_ready()
    poll(lambda: len(api.binds) == HANDOFF_BATCH + extra, 10, "every bind", interval=0.002)
    assert sorted(name for name, _ in api.binds) == [f"default/p{i:02d}" for i in range(HANDOFF_BATCH + extra)]
    assert scheduler.binder.drain(10)
    scheduler.stop()


def test_the_loop_lets_go_of_the_gil_once_per_batch_handed_over_while_pods_wait() -> None:
    scheduler, api, _ = make(2 * HANDOFF_BATCH + 1)
    yields: list[int] = []
    scheduler.binder.yield_gil = lambda: yields.append(len(scheduler.binder.pool._held))
    for _ in range(2 * HANDOFF_BATCH):
        scheduler.schedule_one(timeout=0)
    assert yields == [0, 0]  # once per batch, right after it was handed over (nothing held then)
    scheduler.schedule_one(timeout=0)  # the last: handed over with no pod left waiting, and no yield
    assert len(yields) == 2
    assert scheduler.binder.drain(10)
    assert len(api.binds) == 2 * HANDOFF_BATCH + 1
    scheduler.stop()


def test_a_held_bind_waits_at_most_handoff_delay_measured_at_the_next_decision() -> None:
    scheduler, api, clock = make(6)
    scheduler.schedule_one(timeout=0)
    scheduler.schedule_one(timeout=0)
    assert api.binds == []
    clock.now += 2 * HANDOFF_DELAY
    scheduler.schedule_one(timeout=0)  # the two before it have waited long enough: handed over first
    # the third is held, its own wait just begun
    poll(lambda: scheduler.binder.in_flight() == 1, 10, "the two handed over to finish", interval=0.002)
    assert len(api.binds) == 2
    scheduler.stop()


def test_drain_and_stop_hand_over_what_is_held() -> None:
    scheduler, api, _ = make(6)
    for _ in range(3):
        scheduler.schedule_one(timeout=0)
    assert api.binds == []
    assert scheduler.binder.drain(10)
    assert len(api.binds) == 3
    for _ in range(2):
        scheduler.schedule_one(timeout=0)
    assert len(api.binds) == 3
    assert scheduler.stop()
    assert len(api.binds) == 5


def test_fewer_bind_slots_than_a_batch_hold_nothing_back_forever() -> None:
    """bindWorkers 1 allows 4 binds in flight: the loop waiting for room must first hand over what it holds,
    or it would wait for itself."""
    pods = HANDOFF_BATCH * 2
    scheduler, api, _ = make(pods, {"bindWorkers": 1})
    assert scheduler.binder.max_pending < HANDOFF_BATCH
    loop = threading.Thread(target=lambda: [scheduler.schedule_one(timeout=0) for _ in range(pods)], daemon=True)
    loop.start()
    loop.join(30)
    assert not loop.is_alive()
    poll(lambda: len(api.binds) == pods, 10, "every bind", interval=0.002)
    scheduler.stop()


def test_a_slow_decision_leaves_its_due_batch_to_the_next_decision() -> None:
    """A decision that took longer than SLOW_DECISION does not hand the full batch over at its end (it would pay for
    both): the next decision does, first thing."""
    scheduler, api, clock = make(HANDOFF_BATCH + 2)
    for _ in range(HANDOFF_BATCH - 1):
        scheduler.schedule_one(timeout=0)
    def slow(_result: object) -> None:  # the next decision's cycle takes long
        clock.now += 2 * SLOW_DECISION

    scheduler.cycle_observers.append(slow)
    yields: list[int] = []
    scheduler.binder.yield_gil = lambda: yields.append(len(api.binds))
    scheduler.schedule_one(timeout=0)  # fills the batch, slowly: held
    assert scheduler.binder.pool._held and len(scheduler.binder.pool._held) == HANDOFF_BATCH
    assert yields == [] and api.binds == []
    scheduler.cycle_observers.remove(slow)
    scheduler.schedule_one(timeout=0)  # hands the batch over before its own cycle
    assert yields == [0]
    poll(lambda: len(api.binds) == HANDOFF_BATCH, 10, "the deferred batch's binds", interval=0.002)
    assert scheduler.binder.pool._held and len(scheduler.binder.pool._held) == 1  # its own, held again
    assert scheduler.binder.drain(10)
    assert len(api.binds) == HANDOFF_BATCH + 1
    scheduler.stop()
