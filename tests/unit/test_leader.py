"""Leader election against an in-memory lease store, on a fake monotonic clock."""

from __future__ import annotations

from metrics_sched.config import LeaderElectionConfig
from metrics_sched.leader import LeaderElector
from tests.unit.fakes import FakeAPI


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_one_leader_and_takeover_after_expiry() -> None:
    store, clock = FakeAPI(), Clock()
    config = LeaderElectionConfig()
    a = LeaderElector(store, config, "a", clock=clock)
    b = LeaderElector(store, config, "b", clock=clock)
    assert a.try_acquire_or_renew() and a.is_leader
    assert not b.try_acquire_or_renew() and not b.is_leader
    clock.now += 5
    assert a.try_acquire_or_renew()  # renew
    assert not b.try_acquire_or_renew()
    # a dies: b must see the record unchanged for a whole leaseDuration on its own clock
    clock.now += 14
    assert not b.try_acquire_or_renew()
    clock.now += 1.5
    assert b.try_acquire_or_renew() and b.is_leader
    lease = store.get("kube-system", "metrics-sched")
    assert lease is not None and lease.holder == "b" and lease.lease_transitions == 1


def test_leader_that_cannot_renew_stops_being_leader_at_the_deadline() -> None:
    store, clock = FakeAPI(), Clock()
    a = LeaderElector(store, LeaderElectionConfig(), "a", clock=clock)
    assert a.try_acquire_or_renew()
    clock.now += 9.9
    assert a.is_leader
    clock.now += 0.2
    assert not a.is_leader  # renewDeadline (10 s) passed without a renewal


def test_release_hands_over_at_once() -> None:
    store, clock = FakeAPI(), Clock()
    a = LeaderElector(store, LeaderElectionConfig(), "a", clock=clock)
    b = LeaderElector(store, LeaderElectionConfig(), "b", clock=clock)
    assert a.try_acquire_or_renew()
    a.release()
    assert b.try_acquire_or_renew()
