"""In-place resize of a bound pod (issue 14 item 10): the cache counts what the pod holds as kube-scheduler does
(component-helpers resource.PodRequests with UseStatusResources: per container the largest of desired,
allocated and actuated; allocated and actuated only when the resize is Infeasible), and room given back wakes
the parked pods."""

from __future__ import annotations

import copy
import sys
from typing import Any

import pytest

from metrics_sched.model.podinfo import parse_pod
from metrics_sched.model.resize import occupied_requests, resource_fields
from metrics_sched.scheduler import Scheduler
from tests.unit.fakes import FakeAPI, node, pod
from tests.unit.test_scheduler import drain, make

pytestmark = pytest.mark.unit


def resized(body: dict[str, Any], *, spec: str, actuated: str | None = None, allocated: str | None = None,
            infeasible: bool = False) -> dict[str, Any]:
    """The pod with its container's cpu request `spec`, and the kubelet's view of it in the status."""
    new = copy.deepcopy(body)
    new["spec"]["containers"][0]["resources"]["requests"]["cpu"] = spec
    status: dict[str, Any] = {"name": "c", "ready": True}
    if actuated is not None:
        status["resources"] = {"requests": {"cpu": actuated, "memory": "128Mi"}}
    if allocated is not None:
        status["allocatedResources"] = {"cpu": allocated, "memory": "128Mi"}
    new["status"] = {"phase": "Running", "containerStatuses": [status]}
    if infeasible:
        new["status"]["conditions"] = [{"type": "PodResizePending", "status": "True", "reason": "Infeasible"}]
    return new


def cpu_requested(scheduler: Scheduler, name: str = "n0") -> int:
    table = scheduler.state.table
    return int(table.requested[table.index[name], table.resource_index["cpu"]])


def setup() -> tuple[Scheduler, FakeAPI, dict[str, Any]]:
    scheduler, api = make()
    scheduler.queue.initial_backoff = scheduler.queue.max_backoff = 0.001
    scheduler.handlers.on_node_event("ADDED", node("n0", cpu="2"))
    running = api.add_pod(resized(pod("big", cpu="2", node_name="n0"), spec="2", actuated="2", allocated="2"))
    api.add_pod(pod("waiting", cpu="1"))
    drain(scheduler, api)
    assert cpu_requested(scheduler) == 2000 and scheduler.queue.lengths()["unschedulable"] == 1
    return scheduler, api, running


def test_a_resize_down_gives_room_back_once_the_kubelet_applied_it_and_wakes_parked_pods() -> None:
    scheduler, api, running = setup()
    # Asked for, not applied yet: the container may still use 2 CPUs.
    desired = resized(running, spec="1", actuated="2", allocated="2")
    scheduler.handlers.on_pod_event("MODIFIED", desired)
    assert cpu_requested(scheduler) == 2000 and scheduler.queue.lengths()["unschedulable"] == 1
    # Allocated by the kubelet but not actuated by the runtime yet: still 2.
    scheduler.handlers.on_pod_event("MODIFIED", resized(running, spec="1", actuated="2", allocated="1"))
    assert cpu_requested(scheduler) == 2000
    scheduler.handlers.on_pod_event("MODIFIED", resized(running, spec="1", actuated="1", allocated="1"))
    assert cpu_requested(scheduler) == 1000
    assert scheduler.queue.lengths()["unschedulable"] == 0  # the parked pod got another try
    drain(scheduler, api)
    assert api.binds == [("default/waiting", "n0")]
    assert cpu_requested(scheduler) == 2000


def test_a_resize_up_counts_at_once_and_an_infeasible_one_counts_what_is_allocated() -> None:
    scheduler, _, running = setup()
    scheduler.handlers.on_pod_event("MODIFIED", resized(running, spec="3", actuated="2", allocated="2"))
    assert cpu_requested(scheduler) == 3000  # the desired size counts as soon as it is asked for
    infeasible = resized(running, spec="3", actuated="2", allocated="2", infeasible=True)
    scheduler.handlers.on_pod_event("MODIFIED", infeasible)
    assert cpu_requested(scheduler) == 2000  # the kubelet will never grant it


def test_status_churn_of_a_resized_pod_changes_nothing() -> None:
    scheduler, _, running = setup()
    settled = resized(running, spec="1", actuated="1", allocated="1")
    scheduler.handlers.on_pod_event("MODIFIED", settled)
    assert cpu_requested(scheduler) == 1000
    churn = copy.deepcopy(settled)
    churn["status"]["containerStatuses"][0]["restartCount"] = 3
    assert scheduler.handlers._unchanged_placement(churn)  # the fast path: no quantity parsed
    assert not scheduler.handlers._unchanged_placement(resized(running, spec="2", actuated="1", allocated="1"))


def test_a_resized_sidecar_counts_and_a_pod_without_container_status_uses_its_spec() -> None:
    body = pod("p", cpu="1", node_name="n0")
    body["spec"]["initContainers"] = [
        {"name": "sidecar", "restartPolicy": "Always", "resources": {"requests": {"cpu": "500m"}}},
        {"name": "init", "resources": {"requests": {"cpu": "3"}}},
    ]
    requests, _ = occupied_requests(parse_pod(body))
    assert requests["cpu"] == 3500  # the init container with the sidecar beside it
    body["status"] = {"initContainerStatuses": [
        {"name": "sidecar", "resources": {"requests": {"cpu": "2"}}, "allocatedResources": {"cpu": "2"}},
        {"name": "init", "resources": {"requests": {"cpu": "9"}}},  # not resizable: its status is ignored
    ]}
    requests, non_zero = occupied_requests(parse_pod(body))
    assert requests["cpu"] == 5000 and non_zero["cpu"] == 5000  # max(1 + 2, 3 + 2)


def test_resource_fields_are_a_small_digest_equal_exactly_when_the_fields_are() -> None:
    base = {"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "100m", "memory": "1Gi"}}}]},
            "status": {"phase": "Running", "containerStatuses": [{"name": "c", "ready": True}]}}
    reordered = {"status": {"containerStatuses": [{"ready": False, "name": "c"}], "phase": "Pending"},
                 "spec": {"containers": [{"resources": {"requests": {"memory": "1Gi", "cpu": "100m"}}, "name": "c"}]}}
    resized = {"spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "200m", "memory": "1Gi"}}}]}}
    kept = resource_fields(base)
    # Kept with every placed pod: nothing of the decoded object, and 16 bytes of digest.
    assert isinstance(kept, bytes) and len(kept) == 16 and sys.getsizeof(kept) < 64
    assert resource_fields(reordered) == kept  # status churn and key order leave it alone
    assert resource_fields(resized) != kept
