"""The scheduler core end to end in memory: watch events in, binds and events out."""

from __future__ import annotations

import time
from typing import Any

import pytest

from metrics_sched.ports import ApiError
from metrics_sched.scheduler import Scheduler
from tests.schedulers import make_scheduler
from tests.unit.fakes import FakeAPI, node, pod


def make(config: dict[str, Any] | None = None) -> tuple[Scheduler, FakeAPI]:
    api = FakeAPI()
    return make_scheduler(config, api), api


def drain(scheduler: Scheduler, api: FakeAPI, timeout: float = 10.0) -> None:
    """Runs cycles until nothing is active, backing off or binding; then waits for the reports."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        scheduler.schedule_one(timeout=0.01)
        lengths = scheduler.queue.lengths()
        if not lengths["active"] and not lengths["backoff"] and scheduler.binder.in_flight() == 0:
            break
    assert scheduler.binder.drain(10)
    assert scheduler.reporter.wait_idle(10)


def test_200_pods_on_20_nodes_that_fit_10_each() -> None:
    scheduler, api = make()
    for i in range(20):
        scheduler.handlers.on_node_event("ADDED", node(f"n{i:02d}", cpu="1", memory="10Gi"))
    for i in range(200):
        api.add_pod(pod(f"p{i:03d}", cpu="100m", memory="100Mi"))
    drain(scheduler, api)
    assert len(api.binds) == 200
    assert len({name for name, _ in api.binds}) == 200  # each bound exactly once
    per_node: dict[str, int] = {}
    for _, n in api.binds:
        per_node[n] = per_node.get(n, 0) + 1
    assert set(per_node.values()) == {10}
    table = scheduler.state.table
    assert (table.requested[table.rows()] <= table.allocatable[table.rows()]).all()
    assert len(api.events_for("default/p000", "Scheduled")) == 1


def test_pod_that_fits_nowhere_is_reported_then_bound_when_a_node_arrives() -> None:
    scheduler, api = make()
    scheduler.handlers.on_node_event("ADDED", node("small", gpus=1))
    api.add_pod(pod("big", gpus=2))
    drain(scheduler, api)
    assert api.binds == []
    assert api.conditions["default/big"]["reason"] == "Unschedulable"
    [event] = api.events_for("default/big", "FailedScheduling")
    assert event.note == "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."
    assert event.reporting_controller == "metrics-sched"
    assert scheduler.queue.lengths()["unschedulable"] == 1
    scheduler.handlers.on_node_event("ADDED", node("large", gpus=2))
    assert scheduler.queue.lengths()["unschedulable"] == 0
    drain(scheduler, api)
    assert api.binds == [("default/big", "large")]


def test_gpu_pods_only_where_two_gpus_are_free() -> None:
    scheduler, api = make()
    scheduler.handlers.on_node_event("ADDED", node("g4", gpus=4))
    scheduler.handlers.on_node_event("ADDED", node("g1", gpus=1))
    scheduler.handlers.on_node_event("ADDED", node("g0"))
    for i in range(3):
        api.add_pod(pod(f"gpu{i}", gpus=2))
    drain(scheduler, api)
    assert sorted(api.binds) == [("default/gpu0", "g4"), ("default/gpu1", "g4")]
    assert "default/gpu2" in api.conditions


@pytest.mark.parametrize(
    "spec",
    [
        pod("theirs", scheduler="default-scheduler"),
        pod("bound", node_name="n0"),
        pod("gated", schedulingGates=[{"name": "wait"}]),
    ],
    ids=["other-scheduler", "already-bound", "gated"],
)
def test_pods_that_are_not_ours_are_never_touched(spec: dict[str, Any]) -> None:
    scheduler, api = make()
    scheduler.handlers.on_node_event("ADDED", node("n0"))
    api.add_pod(spec)
    drain(scheduler, api)
    assert api.binds == []
    assert api.events == []
    assert api.conditions == {}


def test_deleting_pod_is_never_touched() -> None:
    scheduler, api = make()
    scheduler.handlers.on_node_event("ADDED", node("n0"))
    doomed = pod("doomed")
    doomed["metadata"]["deletionTimestamp"] = "2026-11-30T12:00:00Z"
    api.add_pod(doomed)
    drain(scheduler, api)
    assert api.binds == [] and api.events == []


def test_malformed_quantity_gets_an_event_and_the_loop_carries_on() -> None:
    scheduler, api = make()
    scheduler.handlers.on_node_event("ADDED", node("n0"))
    api.add_pod(pod("bad", cpu="lots"))
    api.add_pod(pod("good"))
    drain(scheduler, api)
    assert api.binds == [("default/good", "n0")]
    [event] = api.events_for("default/bad", "FailedScheduling")
    assert "malformed resource quantity" in event.note and "lots" in event.note
    assert api.conditions["default/bad"]["reason"] == "SchedulerError"


def test_409_already_bound_is_done_and_never_retried() -> None:
    scheduler, api = make()
    scheduler.handlers.on_node_event("ADDED", node("n0"))
    api.bind_then_fail.append(ApiError(None, "connection reset"))  # bound, but the reply was lost
    api.add_pod(pod("p"))
    drain(scheduler, api)
    assert api.binds == [("default/p", "n0")]
    assert scheduler.queue.lengths() == {"active": 0, "backoff": 0, "unschedulable": 0, "gated": 0}
    assert not scheduler.state.pods[next(iter(scheduler.state.pods))].assumed


def test_definite_bind_failure_forgets_and_retries() -> None:
    scheduler, api = make()
    scheduler.handlers.on_node_event("ADDED", node("n0", cpu="1"))
    api.fail_next_binds.append(ApiError(500, "etcd timeout"))
    api.add_pod(pod("p", cpu="1"))
    scheduler.schedule_one(timeout=1)
    assert scheduler.binder.drain(10)
    assert api.binds == []
    assert not scheduler.state.pods  # forgotten: capacity released
    assert scheduler.queue.lengths()["backoff"] == 1
    drain(scheduler, api)
    assert api.binds == [("default/p", "n0")]


def test_priority_orders_the_queue() -> None:
    scheduler, api = make()
    scheduler.handlers.on_node_event("ADDED", node("n0", cpu="1"))
    api.add_pod(pod("low", cpu="1", priority=1))
    api.add_pod(pod("high", cpu="1", priority=100))
    drain(scheduler, api)
    assert api.binds == [("default/high", "n0")]


def test_init_containers_and_overhead_are_counted() -> None:
    scheduler, api = make()
    scheduler.handlers.on_node_event("ADDED", node("n0", cpu="2"))
    heavy_init = pod("init", cpu="100m", initContainers=[{"name": "i", "resources": {"requests": {"cpu": "1500m"}}}],
                     overhead={"cpu": "600m"})
    api.add_pod(heavy_init)  # needs max(100m, 1500m) + 600m = 2100m > 2
    drain(scheduler, api)
    assert api.binds == []
    assert "Insufficient cpu" in api.events_for("default/init", "FailedScheduling")[0].note
