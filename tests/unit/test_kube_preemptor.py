"""KubePreemptor: the nomination, DisruptionTarget and delete requests it sends, over httpx.MockTransport."""

from __future__ import annotations

import datetime as dt

import pytest

from adapters.kubernetes import KubePreemptor
from metrics_sched.ports import ApiError, Preemptor
from tests.unit.test_kube_pod_writer import Recorder, make_client, status

pytestmark = pytest.mark.unit

NOW = dt.datetime(2026, 12, 1, 12, 0, 0, tzinfo=dt.UTC)


def test_the_nomination_is_a_merge_patch_of_the_status_and_null_clears_it() -> None:
    recorder = Recorder()
    preemptor: Preemptor = KubePreemptor(make_client(recorder))
    preemptor.set_nominated_node("team-a", "infer", "gpu-3")
    preemptor.set_nominated_node("team-a", "infer", None)
    first, second = recorder.requests
    assert (first.method, first.url.path) == ("PATCH", "/api/v1/namespaces/team-a/pods/infer/status")
    assert first.headers["content-type"].startswith("application/merge-patch+json")
    assert [recorder.body(0), recorder.body(1)] == [{"status": {"nominatedNodeName": "gpu-3"}},
                                                    {"status": {"nominatedNodeName": None}}]
    assert second.url.path == first.url.path


def test_the_victim_gets_the_disruption_target_condition_then_a_delete_preconditioned_on_its_uid() -> None:
    recorder = Recorder()
    preemptor = KubePreemptor(make_client(recorder), clock=lambda: NOW)
    preemptor.mark_disruption_target("ns", "train-0", "metrics-sched: preempting to accommodate a higher priority pod")
    preemptor.delete_pod("ns", "train-0", "uid-7")
    patch, delete = recorder.requests
    assert patch.headers["content-type"].startswith("application/strategic-merge-patch+json")
    assert recorder.body(0) == {"status": {"conditions": [{
        "type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler",
        "message": "metrics-sched: preempting to accommodate a higher priority pod",
        "lastTransitionTime": "2026-12-01T12:00:00Z"}]}}
    assert (delete.method, delete.url.path) == ("DELETE", "/api/v1/namespaces/ns/pods/train-0")
    assert recorder.body(1) == {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": "uid-7"}}


@pytest.mark.parametrize("code", [404, 409, 500])
def test_failures_keep_the_status(code: int) -> None:
    reply = status(code, "Failure", "no")
    with pytest.raises(ApiError) as info:
        KubePreemptor(make_client(Recorder(lambda r: reply))).delete_pod("ns", "p", "u")
    assert info.value.status == code
