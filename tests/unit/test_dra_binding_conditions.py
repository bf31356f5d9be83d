"""Devices with binding conditions (DRADeviceBindingConditions and DRAResourceClaimDeviceStatus, beta and on in
Kubernetes 1.36): the allocation copies a device's bindingConditions and bindingFailureConditions, PreBind waits
until the driver reports every binding condition True in the claim's status.devices, fails on a failure condition
or a claim's binding timeout (counted from its allocationTimestamp), and the next attempt's Filter finds such a
claim unavailable so that PostFilter deallocates it and other devices can be tried. Pools whose devices have
binding conditions are tried after every other pool (docs/design/dra.md §2.4, §2.9, §3.1).

Ported from pkg/scheduler/framework/plugins/dynamicresources/dynamicresources_test.go (TestPlugin cases named in
each test; the resource.k8s.io/v1 version with `testPluginCase`), then the same through the whole Scheduler.
"""

from __future__ import annotations

import copy
import datetime
import threading
import time
from typing import Any

import pytest

from metrics_sched.framework import Code
from metrics_sched.plugins.dynamic_resources.allocator import AllocatedState, Allocator
from metrics_sched.plugins.dynamic_resources.cel import SelectorCache
from metrics_sched.plugins.dynamic_resources.index import SLICES
from tests.polling import poll
from tests.unit.dra_stages import (
    CLAIM,
    CLAIM2,
    CLASS,
    DRIVER,
    DRIVER2,
    NODE,
    POD,
    Obj,
    StageRig,
    allocated,
    allocation,
    claim,
    device_class,
    drive,
    node,
    pod,
    request,
    reserved_for,
    resource_slice,
    stripped,
)

pytestmark = pytest.mark.unit

CONDITIONS: dict[str, Any] = {"bindingConditions": ["condition"], "bindingFailureConditions": ["failed"]}


def fabric_slice(driver: str = DRIVER, device: str = "instance-1") -> Obj:
    """fabricSlice: a device attached on demand (bindsToNode, binding and failure conditions), offered to worker by
    a node selector."""
    body = resource_slice(NODE, driver, device, bindsToNode=True, **CONDITIONS)
    del body["spec"]["nodeName"]
    body["spec"]["nodeSelector"] = {"nodeSelectorTerms": [{"matchFields": [
        {"key": "metadata.name", "operator": "In", "values": [NODE]}]}]}
    return body


def with_conditions(body: Obj, device: str = "instance-1", driver: str = DRIVER, **statuses: str) -> Obj:
    """The claim with status.devices reporting `statuses` (condition type -> "True"/"False") for one device."""
    out = copy.deepcopy(body)
    out["status"]["devices"] = [{"driver": driver, "pool": NODE, "device": device, "conditions": [
        {"type": t, "status": s, "reason": f"{t}-reason", "message": f"{t} is {s}",
         "lastTransitionTime": "2026-12-07T00:00:00Z"} for t, s in statuses.items()]}]
    return out


def stamped(body: Obj, seconds_ago: float) -> Obj:
    out = copy.deepcopy(body)
    at = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=seconds_ago)
    out["status"]["allocation"]["allocationTimestamp"] = at.isoformat()
    return out


PENDING = claim()
PENDING2 = claim(CLAIM2, request("req-2"))
WITH_CONDITIONS = allocation(**CONDITIONS)  # allocationResultWithBindingConditions
WITH_CONDITIONS2 = allocation(("req-2", DRIVER2, NODE, "instance-2"), **CONDITIONS)
BOUND = with_conditions(allocated(PENDING, WITH_CONDITIONS), condition="True", failed="False")  # boundClaim
BOUND2 = with_conditions(allocated(PENDING2, WITH_CONDITIONS2), "instance-2", DRIVER2, condition="True",
                         failed="False")
FAILED = with_conditions(allocated(PENDING, WITH_CONDITIONS), condition="False", failed="True")  # failedBindingClaim
FAILED2 = with_conditions(allocated(PENDING2, WITH_CONDITIONS2), "instance-2", DRIVER2, condition="False",
                          failed="True")


def deallocated(body: Obj) -> Obj:
    """What PostFilter writes: no reservedFor, allocation or device status (the finalizer stays)."""
    out = stripped(body)
    for key in ("reservedFor", "allocation", "devices"):
        out["status"].pop(key, None)
    return out


# -- TestPlugin cases, stage by stage -----------------------------------------------------------------------------
def test_bound_claim_with_succeeded_binding_conditions() -> None:
    """"bound-claim-with-succeeded-binding-conditions": every condition True: PreBind only adds the reservation."""
    rig = StageRig(claims=(BOUND,))
    run = drive(rig, pod(CLAIM))
    assert run.pre_bind is not None and run.pre_bind.ok
    assert run.stored["prebind"] == {CLAIM: stripped(reserved_for(BOUND))}


def test_multi_claims_binding_conditions_all_success() -> None:
    """"multi-claims-binding-conditions-all-success"."""
    rig = StageRig(claims=(BOUND, BOUND2), classes=(device_class(),), slices=(fabric_slice(),
                                                                              fabric_slice(DRIVER2, "instance-2")))
    run = drive(rig, pod(CLAIM, CLAIM2))
    assert run.pre_bind is not None and run.pre_bind.ok
    assert run.stored["prebind"] == {CLAIM: stripped(reserved_for(BOUND)), CLAIM2: stripped(reserved_for(BOUND2))}


@pytest.mark.parametrize(("case", "claims", "freed"), [
    ("bound-claim-with-failed-binding", (FAILED,), CLAIM),
    # Not ready ten minutes after the allocation (the default timeout is 600 s).
    ("bound-claim-with-timed-out-binding", (stamped(with_conditions(allocated(PENDING, WITH_CONDITIONS)), 600.5),),
     CLAIM),
    # Conditions reported, but not the ones the device needs: not ready, and timed out.
    ("bound-claim-with-mixed-binding-conditions", (stamped(with_conditions(
        allocated(PENDING, WITH_CONDITIONS), condition1="True", condition2="False"), 600.5),), CLAIM),
    ("multi-claims-binding-conditions-one-fail", (BOUND, FAILED2), CLAIM2),
])
def test_a_claim_whose_devices_failed_to_bind_is_deallocated(case: str, claims: tuple[Obj, ...], freed: str) -> None:
    """Filter: the claim is not available on any node; PostFilter deallocates it (the other claim is kept)."""
    rig = StageRig(claims=claims, slices=(fabric_slice(), fabric_slice(DRIVER2, "instance-2")))
    names = [c["metadata"]["name"] for c in claims]
    run = drive(rig, pod(*names))
    assert run.rejected == {NODE: "resourceclaim not available on the node"}, case
    assert run.post_filter is not None
    assert (run.post_filter.code, run.post_filter.reason) == (Code.UNSCHEDULABLE,
                                                              "deallocation of ResourceClaim completed")
    assert run.stored["postfilter"] == {c["metadata"]["name"]: deallocated(c) if c["metadata"]["name"] == freed
                                        else stripped(c) for c in claims}


def test_a_claim_not_ready_but_within_its_timeout_waits() -> None:
    """The counterpart of the timed-out case: allocated a moment ago and not ready, the claim is still available:
    PreBind waits for it (here until the timeout, 1 s, which names the claim)."""
    body = stamped(with_conditions(allocated(PENDING, WITH_CONDITIONS)), 0)
    rig = StageRig(claims=(body,), args={"bindingTimeoutSeconds": 1})
    started = time.monotonic()
    run = drive(rig, pod(CLAIM))
    assert run.rejected == {} and run.pre_bind is not None
    assert run.pre_bind.code == Code.ERROR and run.pre_bind.reason in ("claim my-pod-my-resource binding timeout",
                                                                       "device binding timeout")
    assert time.monotonic() - started >= 1.0


def test_prebind_fail_with_binding_timeout() -> None:
    """"prebind-fail-with-binding-timeout": the timeout runs from the claim's allocation, not from PreBind: allocated
    1 s before a 2 s timeout ends and never ready, PreBind fails naming the claim (upstream: 590 s into 600 s), not
    with the overall "device binding timeout"."""
    body = stamped(with_conditions(allocated(PENDING, WITH_CONDITIONS)), 1.0)
    rig = StageRig(claims=(body,), args={"bindingTimeoutSeconds": 2})
    run = drive(rig, pod(CLAIM))
    assert run.rejected == {}
    assert run.pre_bind is not None and run.pre_bind.code == Code.ERROR
    assert run.pre_bind.reason == "claim my-pod-my-resource binding timeout"
    assert run.stored["prebind"] == {CLAIM: stripped(reserved_for(body))}  # reserved before waiting


def test_pre_bind_fails_on_a_failure_condition_reported_while_it_waits() -> None:
    """isPodReadyForBinding: a failure condition turning True while PreBind waits ends the wait with its reason."""
    body = stamped(with_conditions(allocated(PENDING, WITH_CONDITIONS)), 0)
    rig = StageRig(claims=(body,), args={"bindingTimeoutSeconds": 30})

    def fail_soon() -> None:
        def report() -> None:
            poll(lambda: rig.claims.claims[("default", CLAIM)]["status"].get("reservedFor"), 10, "the reservation")
            current = rig.claims.claims[("default", CLAIM)]
            rig.claims.put(with_conditions(current, condition="False", failed="True"))

        threading.Thread(target=report, daemon=True).start()

    started = time.monotonic()
    run = drive(rig, pod(CLAIM), before_pre_bind=fail_soon)
    assert run.pre_bind is not None and run.pre_bind.code == Code.ERROR
    assert run.pre_bind.reason == 'claim my-pod-my-resource binding failed: reason=failed-reason, ' \
                                  'message="failed is True"'
    assert time.monotonic() - started < 10


# -- through the whole Scheduler ----------------------------------------------------------------------------------
def run_until(rig: StageRig, done: Any, timeout: float, what: str) -> None:
    def step() -> bool:
        rig.scheduler.schedule_one(timeout=0.01)
        return bool(done())
    poll(step, timeout, what, interval=0.0)


def stored(rig: StageRig, name: str = CLAIM) -> Obj:
    return rig.claims.claims[("default", name)]


def reserved(rig: StageRig, name: str = CLAIM) -> bool:
    status = stored(rig, name)["status"]
    return bool(status.get("allocation") and status.get("reservedFor"))


def test_pre_bind_waits_for_the_binding_conditions_then_binds() -> None:
    rig = StageRig(claims=(PENDING,), classes=(device_class(),), slices=(fabric_slice(),),
                   args={"bindingTimeoutSeconds": 30})
    rig.schedule(pod(CLAIM))
    run_until(rig, lambda: reserved(rig), 10, "the claim allocated and reserved")
    [result] = stored(rig)["status"]["allocation"]["devices"]["results"]
    assert result == {"request": "req-1", "driver": DRIVER, "pool": NODE, "device": "instance-1", **CONDITIONS}
    assert stored(rig)["status"]["allocation"]["allocationTimestamp"]
    assert rig.scheduler.binder.in_flight() == 1 and rig.api.binds == []  # PreBind is waiting
    rig.claims.put(with_conditions(stored(rig), condition="True"))  # the driver attached the device
    run_until(rig, lambda: rig.api.binds, 10, "the pod bound")
    assert rig.api.binds == [(f"default/{POD}", NODE)]


def test_a_failure_condition_fails_the_binding_then_the_claim_is_deallocated_and_tried_again() -> None:
    rig = StageRig(claims=(PENDING,), classes=(device_class(),), slices=(fabric_slice(),),
                   args={"bindingTimeoutSeconds": 30})
    rig.schedule(pod(CLAIM))
    run_until(rig, lambda: reserved(rig), 10, "the claim allocated and reserved")
    first = stored(rig)["metadata"]["resourceVersion"]
    rig.claims.put(with_conditions(stored(rig), condition="False", failed="True"))
    # PreBind fails; Unreserve takes the pod out of reservedFor; the next attempt's Filter finds the claim failed,
    # PostFilter deallocates it; the deallocation requeues the pod, which allocates the device again.
    run_until(rig, lambda: any(verb == "status" and not body["status"].get("allocation")
                               for verb, body in rig.claims.writes), 20, "the claim deallocated")
    failed = [e.note for e in rig.api.events_for(f"default/{POD}", "FailedScheduling")]
    assert any('claim my-pod-my-resource binding failed: reason=failed-reason, message="failed is True"' in note
               for note in failed), failed
    run_until(rig, lambda: reserved(rig) and stored(rig)["metadata"]["resourceVersion"] != first
              and not stored(rig)["status"].get("devices"), 20, "allocated and reserved again")
    rig.claims.put(with_conditions(stored(rig), condition="True", failed="False"))
    run_until(rig, lambda: rig.api.binds, 10, "the pod bound")
    assert rig.api.binds == [(f"default/{POD}", NODE)]


def test_a_binding_timeout_fails_the_binding_and_the_claim_is_deallocated() -> None:
    """No condition is ever reported: PreBind gives up after bindingTimeoutSeconds; the slice goes away meanwhile,
    so once the stale allocation is deallocated the pod finds no device and waits, holding nothing."""
    rig = StageRig(claims=(PENDING,), classes=(device_class(),), slices=(fabric_slice(),),
                   args={"bindingTimeoutSeconds": 1})
    rig.schedule(pod(CLAIM))
    run_until(rig, lambda: reserved(rig), 10, "the claim allocated and reserved")
    rig.scheduler.handlers.on_object_event(SLICES, "DELETED", fabric_slice())
    run_until(rig, lambda: rig.api.events_for(f"default/{POD}", "FailedScheduling")
              and not stored(rig)["status"].get("allocation") and rig.scheduler.binder.in_flight() == 0, 20,
              "the binding timed out and the claim deallocated")
    notes = [e.note for e in rig.api.events_for(f"default/{POD}", "FailedScheduling")]
    assert any("binding timeout" in note for note in notes), notes
    assert rig.api.binds == []
    assert rig.index.pending(PENDING["metadata"]["uid"]) is None
    assert not stored(rig)["status"].get("reservedFor")


# -- pools with binding conditions come last ----------------------------------------------------------------------
def test_pools_with_binding_conditions_are_tried_after_the_others_even_when_cooler() -> None:
    """lexicographical-sorting-with-binding-conditions (allocator), through the plugin: the fabric pool's driver
    name sorts first, yet the node's own device is taken; the fabric device only when that one is gone. With
    telemetry ranking devices, a cooler fabric device still comes after every device without binding conditions
    (upstream's order between the two groups is kept; telemetry orders devices within each)."""
    local = resource_slice(NODE, "z-local", "gpu-0")
    fabric = resource_slice(NODE, "a-fabric", "gpu-9", bindsToNode=True, **CONDITIONS)
    classes = {CLASS: device_class()}
    temperatures = {"gpu-0": 80.0, "gpu-9": 30.0}
    allocator = Allocator(AllocatedState(), classes, [local, fabric], SelectorCache(),
                          rank=lambda node_name, driver, pool, device: temperatures[device])
    [first] = allocator.allocate(node(), [claim()]) or []
    assert first["devices"]["results"][0]["device"] == "gpu-0"
    taken = AllocatedState(allocated_devices={("z-local", NODE, "gpu-0")})
    allocator = Allocator(taken, classes, [local, fabric], SelectorCache(),
                          rank=lambda node_name, driver, pool, device: temperatures[device])
    [second] = allocator.allocate(node(), [claim()]) or []
    assert second["devices"]["results"][0] == {"request": "req-1", "driver": "a-fabric", "pool": NODE,
                                               "device": "gpu-9", **CONDITIONS}

    rig = StageRig(claims=(PENDING,), classes=(device_class(),), slices=(local, fabric))
    run = drive(rig, pod(CLAIM))
    assert run.stored["prebind"][CLAIM]["status"]["allocation"]["devices"]["results"][0]["driver"] == "z-local"
    assert run.pre_bind is not None and run.pre_bind.ok  # no binding conditions: no wait
