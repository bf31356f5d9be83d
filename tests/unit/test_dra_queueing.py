"""When a pod with claims goes back to the queue: the queueing-hint tables of kube-scheduler's DynamicResources,
ported from pkg/scheduler/framework/plugins/dynamicresources/dynamicresources_test.go (the resource.k8s.io/v1
version): TestIsSchedulableAfterClaimChange (`isSchedulableAfterClaimChange`) and
TestIsSchedulableAfterPodChange (`isSchedulableAfterPodChange`, registered for UpdatePodGeneratedResourceClaim).

Our queue runs PreEnqueue again on a pod's own update instead of a pod hint, so the pod-change table is shown
through the whole Scheduler: a pod gated because its template's claim was not created yet is enqueued (and binds)
when its update brings resourceClaimStatuses naming a claim that exists, and stays gated otherwise. The
"backoff-wrong-new-object" / "backoff-wrong-old-object" cases (an object that is not a claim or pod) cannot happen
here: the hint is given typed ClaimChange objects.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from metrics_sched.framework import ClusterEvent, QueueingHint
from metrics_sched.model.podinfo import parse_pod
from metrics_sched.plugins.dynamic_resources.index import ClaimChange
from tests.unit.dra_stages import (
    CLAIM,
    NODE,
    POD,
    POD_UID,
    Obj,
    StageRig,
    allocated,
    claim,
    device_class,
    pod,
    resource_slice,
)
from tests.unit.test_scheduler import drain

pytestmark = pytest.mark.unit

PENDING = claim()
ALLOCATED = allocated(PENDING)
OTHER_ALLOCATED = allocated(claim("not-my-claim", owned=False))


def hint_of(rig: StageRig) -> Callable[[Any, Any], QueueingHint]:
    found = next(e.hint for e in rig.plugin().events_to_register()
                 if e.event == ClusterEvent.RESOURCE_CLAIM_CHANGED)
    assert found is not None
    return found


def changed(body: Obj, change: Callable[[Obj], None]) -> Obj:
    out = copy.deepcopy(body)
    change(out)
    return out


# -- TestIsSchedulableAfterClaimChange ---------------------------------------------------------------------------
@pytest.mark.parametrize(("case", "body", "stored", "old", "new", "want"), [
    # A pod whose template claim is not created yet cannot use any claim change (and deletions are not registered
    # upstream; here a deletion counts as a deallocation, but only for pods whose claims resolve).
    ("skip-deletes", pod(template=CLAIM, in_status=False), (), ALLOCATED, None, QueueingHint.SKIP),
    ("skip-wrong-claim", pod(template=CLAIM, in_status=False), (), None,
     changed(ALLOCATED, lambda c: c["metadata"]["ownerReferences"][0].update(uid=POD_UID + "123")),
     QueueingHint.SKIP),
    ("skip-unrelated-claim", pod(template=CLAIM, in_status=False), (ALLOCATED,), None,
     changed(ALLOCATED, lambda c: c["metadata"].update(name=CLAIM + "-foo", uid="uid-foo")), QueueingHint.SKIP),
    ("queue-on-add", pod(CLAIM), (PENDING,), None, PENDING, QueueingHint.QUEUE),
    ("skip-adding-finalizer", pod(CLAIM), (PENDING,), PENDING,
     changed(PENDING, lambda c: c["metadata"].update(finalizers=["foo"])), QueueingHint.SKIP),
    ("queue-on-status-change", pod(CLAIM), (PENDING,), PENDING,
     changed(PENDING, lambda c: c["status"].update(allocation={})), QueueingHint.QUEUE),
    # Another claim's devices were freed: any pod whose claims resolve may use them.
    ("claim-deallocate", pod(CLAIM), (PENDING, OTHER_ALLOCATED), OTHER_ALLOCATED,
     changed(OTHER_ALLOCATED, lambda c: c["status"].pop("allocation")), QueueingHint.QUEUE),
])
def test_is_schedulable_after_claim_change(case: str, body: Obj, stored: tuple[Obj, ...], old: Obj | None,
                                           new: Obj | None, want: QueueingHint) -> None:
    rig = StageRig(claims=stored)
    if new is not None:
        rig.claims.put(new)  # the event's claim is in the informer when the hint runs
    assert hint_of(rig)(parse_pod(body), ClaimChange(old, new)) == want, case


def test_a_deleted_allocated_claim_queues_pods_whose_claims_resolve() -> None:
    """Our index frees a deleted claim's devices at once (upstream hears of the deallocation first)."""
    rig = StageRig(claims=(PENDING,))
    assert hint_of(rig)(parse_pod(pod(CLAIM)), ClaimChange(OTHER_ALLOCATED, None)) == QueueingHint.QUEUE


# -- TestIsSchedulableAfterPodChange, through the queue ----------------------------------------------------------
def update_pod(rig: StageRig, key: str, change: Callable[[Obj], None]) -> None:
    """The pod's own update, as the watch delivers it."""
    with rig.api.lock:
        body = rig.api.pods[key]
        change(body)
        rig.api._bump(body)
        snapshot = copy.deepcopy(body)
    for watcher in rig.api.watchers:
        watcher.on_pod_event("MODIFIED", snapshot)


def created(rig: StageRig, *names: str) -> Callable[[Obj], None]:
    """The resource-claim controller's status update: the claim made for each named entry."""
    def change(body: Obj) -> None:
        body["status"]["resourceClaimStatuses"] = [{"name": n, "resourceClaimName": CLAIM} for n in names]
    return change


def gated_rig(body: Obj, *claims: Obj) -> StageRig:
    rig = StageRig(claims=claims, classes=(device_class(),), slices=(resource_slice(),))
    assert rig.schedule(body) is None  # PreEnqueue keeps it out: nothing to pop
    assert rig.scheduler.queue.lengths()["gated"] == 1
    return rig


def test_complete() -> None:
    """"complete": the status now names the template's claim, which exists: the pod is enqueued and binds."""
    rig = gated_rig(pod(template=CLAIM, in_status=False), PENDING)
    update_pod(rig, f"default/{POD}", created(rig, "my-resource"))
    drain(rig.scheduler, rig.api)
    assert rig.api.binds == [(f"default/{POD}", NODE)]


def test_wrong_pod() -> None:
    """"wrong-pod": another pod's update changes nothing for this one."""
    rig = gated_rig(pod(template=CLAIM, in_status=False), PENDING)
    other = pod(template=CLAIM, in_status=False, name=POD + "2", uid=POD_UID + "2")
    rig.api.add_pod(other)
    update_pod(rig, f"default/{POD}2", created(rig, "my-resource"))  # names a claim owned by my-pod, not by it
    drain(rig.scheduler, rig.api)
    assert rig.api.binds == []
    assert rig.scheduler.queue.lengths()["gated"] == 2


def test_missing_claim() -> None:
    """"missing-claim": the status names a claim that does not exist (yet): still gated; its creation wakes it."""
    rig = gated_rig(pod(template=CLAIM, in_status=False))
    update_pod(rig, f"default/{POD}", created(rig, "my-resource"))
    drain(rig.scheduler, rig.api)
    assert rig.api.binds == [] and rig.scheduler.queue.lengths()["gated"] == 1
    rig.claims.put(PENDING)
    drain(rig.scheduler, rig.api)
    assert rig.api.binds == [(f"default/{POD}", NODE)]


def test_incomplete() -> None:
    """"incomplete": two template claims, only one created: still gated."""
    body = pod(template=CLAIM, in_status=False)
    body["spec"]["resourceClaims"].append({"name": "my-resource-2", "resourceClaimTemplateName": CLAIM})
    rig = gated_rig(body, PENDING)
    update_pod(rig, f"default/{POD}", created(rig, "my-resource"))
    drain(rig.scheduler, rig.api)
    assert rig.api.binds == [] and rig.scheduler.queue.lengths()["gated"] == 1
