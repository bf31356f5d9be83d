"""Preemption and devices: kube-scheduler does not preempt for DynamicResources' reasons (they are
UnschedulableAndUnresolvable: removing a pod does not free its devices, the claim's deallocation does, and that
event requeues the pod; docs/design/dra.md §2.5). A high-priority pod whose GPU is held by lower-priority pods is
left unschedulable with no victim; once the claim is deallocated it is retried and binds.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from metrics_sched.framework.runtime import CycleResult
from metrics_sched.plugins.default_preemption.outcome import PREEMPTION, PreemptionOutcome
from tests.polling import poll
from tests.unit.dra_stages import NODE, Obj, StageRig, allocated, claim, device_class, node, pod, resource_slice
from tests.unit.fakes import FakeAPI
from tests.unit.test_preemption import FakePreemptor

pytestmark = pytest.mark.unit

DRIVER = "gpu.example.com"


def low_claim(i: int) -> Obj:
    """A claim holding gpu-i for the low-priority pod low-i (allocated and reserved for it)."""
    body = allocated(claim(f"low-{i}", owned=False, uid=f"uid-low-{i}"), {
        "devices": {"results": [{"request": "req-1", "driver": DRIVER, "pool": NODE, "device": f"gpu-{i}"}]},
        "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": [NODE]}]}]}})
    body["status"]["reservedFor"] = [{"resource": "pods", "name": f"low-{i}", "uid": f"uid-low-pod-{i}"}]
    return body


def outcome_of(results: list[CycleResult], key: str) -> PreemptionOutcome | None:
    found = [r.cycle.get(PREEMPTION) for r in results if r.pod.key == key]
    return next((o for o in reversed(found) if o is not None), None)


def run(rig: StageRig, until: Any, timeout: float, what: str) -> None:
    def step() -> bool:
        rig.scheduler.schedule_one(timeout=0.01)
        return bool(until())
    poll(step, timeout, what, interval=0.0)


def test_a_high_priority_pod_does_not_preempt_for_devices_and_binds_once_a_claim_is_deallocated() -> None:
    api = FakeAPI()
    preemptor = FakePreemptor(api)
    rig = StageRig(node(), claims=(low_claim(0), low_claim(1)), classes=(device_class(),),
                   slices=(resource_slice(NODE, DRIVER, "gpu-0", "gpu-1"),), api=api, preemptor=preemptor)
    results: list[CycleResult] = []
    rig.scheduler.cycle_observers.append(results.append)
    for i in range(2):  # the holders: priority 0, bound on the node, with plenty of cpu left
        low = pod(f"low-{i}", name=f"low-{i}", uid=f"uid-low-pod-{i}")
        low["spec"]["nodeName"] = NODE
        low["status"] = {"phase": "Running", "startTime": "2026-11-30T12:00:00Z"}
        rig.api.add_pod(low)
    rig.claims.put(claim("high", owned=False, uid="uid-high"))
    high = pod("high", name="high", uid="uid-high-pod")
    high["spec"]["priority"] = 1000
    rig.api.add_pod(high)

    run(rig, lambda: outcome_of(results, "default/high") is not None, 10, "preemption considered")
    outcome = outcome_of(results, "default/high")
    assert outcome is not None and outcome.victims == ()
    assert outcome.reason == "0/1 nodes are available: 1 Preemption is not helpful for scheduling."
    assert preemptor.calls == []  # no nomination, no victim
    assert rig.api.binds == []
    assert rig.scheduler.reporter.wait_idle(10)
    message = (rig.api.pod_scheduled("default/high") or {}).get("message", "")
    assert message.startswith("0/1 nodes are available: 1 cannot allocate all claims."), message

    # low-1 ends and the resource-claim controller deallocates its claim: the update requeues the pod.
    rig.api.delete_pod("default/low-1")
    freed = copy.deepcopy(rig.claims.claims[("default", "low-1")])
    for key in ("allocation", "reservedFor"):
        freed["status"].pop(key)
    rig.claims.put(freed)
    run(rig, lambda: rig.api.binds, 10, "the high-priority pod bound")
    assert rig.api.binds == [("default/high", NODE)]
    assert rig.claims.claims[("default", "high")]["status"]["allocation"]["devices"]["results"][0]["device"] == \
        "gpu-1"
    assert preemptor.calls == []
