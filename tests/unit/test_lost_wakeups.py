"""Lost wakeups (issue 14 item 7): room freed by a pod we had only assumed wakes the parked pods; an update that
arrives while a pod is being scheduled (or bound) is not lost; a deleted pod is never requeued."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from metrics_sched.framework import SUCCESS, ClusterEvent, CycleState, EventHint, PermitPlugin, PodInfo, Status
from metrics_sched.framework.runtime import CycleResult
from metrics_sched.model.podinfo import parse_pod
from metrics_sched.scheduler import Scheduler
from metrics_sched.scheduler.queue import SchedulingQueue
from tests.schedulers import make_scheduler
from tests.unit.fakes import FakeAPI, node, pod
from tests.unit.test_scheduler import drain

pytestmark = pytest.mark.unit


class Hold(PermitPlugin):
    """Holds pods labelled `hold` at Permit (for a minute: the tests decide before)."""

    name = "Hold"

    def permit(self, cycle: CycleState, pod: PodInfo, node: str) -> tuple[Status, float]:
        if "hold" in pod.labels:
            return Status.wait("held"), 60.0
        return SUCCESS, 0.0


def make(*, taints: list[dict[str, str]] | None = None) -> tuple[Scheduler, FakeAPI]:
    config = {"profiles": [{"plugins": {"permit": {"enabled": [{"name": "Hold"}]}}}]}
    api = FakeAPI()
    scheduler = make_scheduler(config, api, plugins=[Hold])
    scheduler.queue.initial_backoff = scheduler.queue.max_backoff = 0.001  # retries at once
    scheduler.handlers.on_node_event("ADDED", node("n0", cpu="1", taints=taints))
    return scheduler, api


def labelled(name: str, labels: dict[str, str], **kw: Any) -> dict[str, Any]:
    body = pod(name, **kw)
    body["metadata"]["labels"] = labels
    return body


def modified(scheduler: Scheduler, body: dict[str, Any]) -> None:
    scheduler.handlers.on_pod_event("MODIFIED", copy.deepcopy(body))


# -- (a) room freed by an assumed pod ---------------------------------------------------------------------
def test_a_pod_deleted_while_held_at_permit_wakes_the_pods_parked_for_its_room() -> None:
    scheduler, api = make()
    api.add_pod(labelled("held", {"hold": "yes"}, cpu="1", priority=10))
    held = scheduler.schedule_one(timeout=1)
    assert held is not None and held.waiting is not None and scheduler.state.assumed_count() == 1
    api.add_pod(pod("parked", cpu="1"))
    scheduler.schedule_one(timeout=1)
    assert scheduler.queue.lengths()["unschedulable"] == 1  # no room: the held pod has it
    api.delete_pod("default/held")  # frees the room it was assumed to take
    assert scheduler.queue.lengths()["unschedulable"] == 0
    drain(scheduler, api)
    assert api.binds == [("default/parked", "n0")]
    scheduler.stop(drain_timeout=1)


# -- (b) an update while the pod is in flight ---------------------------------------------------------------
def test_an_update_during_the_attempt_does_not_park_the_pod_on_the_old_verdict() -> None:
    scheduler, api = make(taints=[{"key": "team", "value": "a", "effect": "NoSchedule"}])
    body = api.add_pod(pod("p"))
    [framework] = scheduler.frameworks.values()
    real_cycle = framework.run_scheduling_cycle
    tolerating = copy.deepcopy(body)
    tolerating["spec"]["tolerations"] = [{"key": "team", "operator": "Equal", "value": "a", "effect": "NoSchedule"}]

    def cycle(info: PodInfo, on_permit: Any) -> CycleResult | None:
        result = real_cycle(info, on_permit)  # decided on the pod without the toleration: nothing fits
        modified(scheduler, tolerating)  # meanwhile the watch delivers the pod with the toleration
        return result

    framework.run_scheduling_cycle = cycle  # type: ignore[method-assign]
    result = scheduler.schedule_one(timeout=1)
    framework.run_scheduling_cycle = real_cycle  # type: ignore[method-assign]
    assert result is not None and result.node is None
    assert scheduler.queue.lengths()["unschedulable"] == 0  # not parked on the verdict about the old pod
    drain(scheduler, api)
    assert api.binds == [("default/p", "n0")]
    scheduler.stop(drain_timeout=1)


def test_an_update_while_the_pod_is_assumed_is_kept_for_its_next_attempt() -> None:
    scheduler, api = make()
    body = api.add_pod(labelled("p", {"hold": "yes"}))
    held = scheduler.schedule_one(timeout=1)
    assert held is not None and held.waiting is not None
    relabelled = copy.deepcopy(body)
    relabelled["metadata"]["labels"] = {"hold": "yes", "tier": "gold"}
    modified(scheduler, relabelled)  # assumed by us: the handler leaves the cache alone
    held.waiting.reject("Hold", "changed my mind")
    # Rejected at Permit for the old pod, but the pod changed meanwhile: retried (not parked), as it is now.
    assert scheduler.queue.lengths()["unschedulable"] == 0
    retried: list[CycleResult] = []
    scheduler.cycle_observers.append(retried.append)
    drain(scheduler, api, timeout=2)
    assert retried and retried[0].pod.labels == {"hold": "yes", "tier": "gold"}
    scheduler.stop(drain_timeout=1)


def queue() -> SchedulingQueue:
    def events_of(_: PodInfo, plugins: set[str]) -> list[EventHint]:
        return [EventHint(ClusterEvent.NODE_ADDED)]

    return SchedulingQueue(lambda p: (-p.priority, p.created), events_of=events_of, initial_backoff=0.0)


def test_only_an_update_that_may_help_unparks_a_pod_in_flight() -> None:
    q = queue()
    body = pod("p")
    q.add(parse_pod(body))
    popped = q.pop(0)
    assert popped is not None
    status_only = copy.deepcopy(body)
    status_only["status"] = {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False"}]}
    q.add(parse_pod(status_only))
    q.unschedulable(popped.uid, {"NodeResourcesFit"})
    assert q.lengths()["unschedulable"] == 1  # a status change cannot change the verdict


# -- (c) requeue and deleted pods ---------------------------------------------------------------------------
def test_requeue_never_brings_back_a_deleted_pod() -> None:
    q = queue()
    gone = parse_pod(pod("gone"))
    q.add(gone)
    q.delete(gone.uid)
    q.requeue(gone)  # e.g. a late "node vanished" for a pod deleted and forgotten since
    assert q.pop(0) is None

    deleted_in_flight = parse_pod(pod("deleted-in-flight"))
    q.add(deleted_in_flight)
    assert q.pop(0) is not None
    q.delete(deleted_in_flight.uid)
    q.requeue(deleted_in_flight)
    assert q.pop(0) is None and q.lengths() == {"active": 0, "backoff": 0, "unschedulable": 0, "gated": 0}


def test_requeue_schedules_the_pod_as_last_seen() -> None:
    q = queue()
    body = pod("p")
    first = parse_pod(body)
    q.add(first)
    assert q.pop(0) is not None
    body["metadata"]["labels"] = {"new": "label"}
    q.update(parse_pod(body))  # while its bind is in flight
    q.requeue(first)  # the binder still holds the pod as it was when scheduled
    again = q.pop(0)
    assert again is not None and again.info.labels == {"new": "label"}
