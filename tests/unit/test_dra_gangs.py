"""Gangs whose members need devices: all or nothing holds for ResourceClaims too. Each member of a Coscheduling
gang asks for one GPU through its own claim; with a GPU per member every member binds with its own device; one GPU
short, no member binds, every allocation a waiting member held (pending since its Reserve) is released when the
gang fails, nothing is written to any claim, and the GPUs are free for another pod.
"""

from __future__ import annotations

from typing import Any

import pytest

from metrics_sched.plugins.coscheduling.plugin import Coscheduling
from metrics_sched.plugins.coscheduling.pod_groups import POD_GROUP_KINDS
from tests.polling import poll
from tests.unit.dra_stages import NODE, Obj, StageRig, claim, device_class, node, pod, resource_slice

pytestmark = pytest.mark.unit

GROUP_KIND = {kind.group_version: kind for kind in POD_GROUP_KINDS}["scheduling.x-k8s.io/v1alpha1"]
CONFIG = {"profiles": [{
    "schedulerName": "metrics-sched",
    "plugins": {"queueSort": {"enabled": [{"name": "Coscheduling"}], "disabled": [{"name": "PrioritySort"}]}},
    "pluginConfig": [{"name": "Coscheduling", "args": {"podGroupBackoffSeconds": 0.5}}],
}]}


def gang_rig(members: int, gpus: int) -> StageRig:
    claims = tuple(claim(f"gpu-{i}", owned=False, uid=f"uid-gpu-{i}") for i in range(members))
    # A second node without GPUs: members can only go to the one with devices.
    rig = StageRig(node(), node("spare"), config=CONFIG, claims=claims, classes=(device_class(),),
                   slices=(resource_slice(NODE, "gpu.example.com", *(f"gpu-{i}" for i in range(gpus))),))
    rig.scheduler.handlers.on_object_event(GROUP_KIND, "ADDED", {
        "metadata": {"namespace": "default", "name": "pg", "uid": "uid-pg",
                     "creationTimestamp": "2026-12-01T10:00:00Z"},
        "spec": {"minMember": members}})
    return rig


def member(i: int) -> Obj:
    body = pod(f"gpu-{i}", name=f"m{i}", uid=f"uid-m{i}")
    body["metadata"]["labels"] = {"scheduling.x-k8s.io/pod-group": "pg"}
    return body


def run(rig: StageRig, until: Any, timeout: float, what: str) -> None:
    def step() -> bool:
        rig.scheduler.schedule_one(timeout=0.01)
        return bool(until())
    poll(step, timeout, what, interval=0.0)


def held(rig: StageRig, members: int) -> list[str]:
    """The member claims with an allocation in flight (chosen in Reserve, not written)."""
    return [f"gpu-{i}" for i in range(members) if rig.index.pending(f"uid-gpu-{i}") is not None]


def gang(rig: StageRig) -> Coscheduling:
    plugin = rig.scheduler.frameworks["metrics-sched"].instances["Coscheduling"]
    assert isinstance(plugin, Coscheduling)
    return plugin


def test_a_gang_with_a_device_for_every_member_binds_whole_each_member_on_its_own_device() -> None:
    rig = gang_rig(members=4, gpus=4)
    for i in range(4):
        rig.api.add_pod(member(i))
    run(rig, lambda: len(rig.api.binds) == 4, 30, "all four members bound")
    assert sorted(rig.api.binds) == [(f"default/m{i}", NODE) for i in range(4)]
    devices = []
    for i in range(4):
        status = rig.claims.claims[("default", f"gpu-{i}")]["status"]
        assert status["reservedFor"] == [{"resource": "pods", "name": f"m{i}", "uid": f"uid-m{i}"}]
        devices += [r["device"] for r in status["allocation"]["devices"]["results"]]
    assert sorted(devices) == [f"gpu-{i}" for i in range(4)]
    assert held(rig, 4) == []


def test_a_gang_one_device_short_binds_nothing_and_releases_every_pending_allocation() -> None:
    rig = gang_rig(members=4, gpus=3)
    outcomes: list[str] = []
    gang(rig).tracker.observers.append(lambda key, outcome, seconds: outcomes.append(outcome))
    for i in range(4):
        rig.api.add_pod(member(i))
    # Three members find a GPU each and wait at Permit holding it (pending); the fourth finds none.
    run(rig, lambda: len(rig.scheduler.waiting_pods) == 3, 20, "three members waiting at Permit")
    assert len(held(rig, 4)) == 3
    run(rig, lambda: outcomes, 20, "the gang's attempt to fail")
    assert outcomes[0] == "member_unschedulable"
    poll(lambda: len(rig.scheduler.waiting_pods) == 0 and rig.scheduler.state.assumed_count() == 0, 5,
         "every waiting member rejected and unreserved together")
    # Between attempts (the group backs off) nothing is held: every pending allocation was released.
    assert held(rig, 4) == []
    assert rig.api.binds == [] and rig.claims.writes == []

    # The GPUs are free: once the gang's pods are gone, another pod gets one.
    for i in range(4):
        rig.api.delete_pod(f"default/m{i}")
    rig.claims.put(claim("solo", owned=False, uid="uid-solo"))
    rig.api.add_pod(pod("solo", name="solo", uid="uid-solo-pod"))
    run(rig, lambda: rig.api.binds, 10, "another pod bound")
    assert rig.api.binds == [("default/solo", NODE)]
    assert rig.claims.claims[("default", "solo")]["status"]["allocation"]["devices"]["results"][0]["device"] == \
        "gpu-0"
