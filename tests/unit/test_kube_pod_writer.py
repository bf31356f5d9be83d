"""KubePodWriter and KubeLeaseStore request shapes and error mapping, over httpx.MockTransport."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from adapters.kubernetes.client import KubeClient
from adapters.kubernetes.config import KubeConfig
from adapters.kubernetes.lease_store import KubeLeaseStore
from adapters.kubernetes.pod_writer import KubePodWriter
from adapters.kubernetes.rate_limit import TokenBucket
from adapters.kubernetes.tokens import StaticToken
from metrics_sched.ports import ApiError, EventSeries, LeaseRecord, LeaseStore, PodWriter, SchedulingEvent

pytestmark = pytest.mark.unit

NOW = dt.datetime(2026, 11, 30, 13, 5, 10, 123456, tzinfo=dt.UTC)


class Recorder:
    def __init__(self, reply: Callable[[httpx.Request], httpx.Response] | None = None) -> None:
        self.requests: list[httpx.Request] = []
        self.reply = reply or (lambda r: httpx.Response(201, json={}))

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        return self.reply(request)

    def body(self, index: int = -1) -> Any:
        return json.loads(self.requests[index].content)


def make_client(recorder: Recorder) -> KubeClient:
    return KubeClient(KubeConfig(server="https://kube.test", token=StaticToken("t")),
                      transport=httpx.MockTransport(recorder))


def status(code: int, reason: str, message: str = "") -> httpx.Response:
    return httpx.Response(code, json={"kind": "Status", "code": code, "reason": reason, "message": message})


def writer_for(recorder: Recorder) -> KubePodWriter:
    return KubePodWriter(make_client(recorder), clock=lambda: NOW)


def test_bind_posts_a_binding_carrying_the_pod_uid() -> None:
    recorder = Recorder()
    writer: PodWriter = writer_for(recorder)
    writer.bind("team-a", "web-0", "1234-uid", "node-7")
    request = recorder.requests[0]
    assert (request.method, request.url.path) == ("POST", "/api/v1/namespaces/team-a/pods/web-0/binding")
    assert recorder.body() == {
        "apiVersion": "v1", "kind": "Binding",
        "metadata": {"name": "web-0", "namespace": "team-a", "uid": "1234-uid"},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "node-7"},
    }


def test_bind_ignores_the_reply_body() -> None:
    # Whatever the server answers with a 201 (even something no model would parse), the bind succeeded.
    writer_for(Recorder(lambda r: httpx.Response(201, text="not json"))).bind("ns", "p", "u", "n")


@pytest.mark.parametrize(("reply", "expected"), [
    (status(409, "Conflict", 'Operation cannot be fulfilled on pods/binding "p": pod p is already assigned'), 409),
    (status(404, "NotFound", 'pods "p" not found'), 404),
    (status(500, "InternalError", "etcdserver: request timed out"), 500),
])
def test_bind_failures_keep_the_status(reply: httpx.Response, expected: int) -> None:
    with pytest.raises(ApiError) as info:
        writer_for(Recorder(lambda r: reply)).bind("ns", "p", "u", "n")
    assert info.value.status == expected
    assert reply.json()["message"] in info.value.message


def test_bind_transport_failure_is_ambiguous() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out")

    with pytest.raises(ApiError) as info:
        writer_for(Recorder(refuse)).bind("ns", "p", "u", "n")
    assert info.value.status is None and info.value.ambiguous


def test_get_pod_returns_the_json_or_none_when_gone() -> None:
    pod = {"kind": "Pod", "metadata": {"name": "p"}, "spec": {"nodeName": "n"}}
    assert writer_for(Recorder(lambda r: httpx.Response(200, json=pod))).get_pod("ns", "p") == pod
    assert writer_for(Recorder(lambda r: status(404, "NotFound"))).get_pod("ns", "p") is None
    with pytest.raises(ApiError):
        writer_for(Recorder(lambda r: status(403, "Forbidden"))).get_pod("ns", "p")


def test_record_event_posts_an_events_k8s_io_event() -> None:
    recorder = Recorder()
    writer_for(recorder).record_event(SchedulingEvent(
        namespace="team-a", pod_name="web-0", pod_uid="1234-uid", type="Warning", reason="FailedScheduling",
        action="Scheduling", note="é" * 600, reporting_controller="metrics-sched",
        reporting_instance="metrics-sched-abc"))
    request = recorder.requests[0]
    assert request.url.path == "/apis/events.k8s.io/v1/namespaces/team-a/events"
    body = recorder.body()
    assert body["metadata"]["namespace"] == "team-a"
    name, suffix = body["metadata"]["name"].split(".")
    # client-go's naming: the pod, then the event time in nanoseconds as hex.
    assert name == "web-0" and int(suffix, 16) // 1000 == int(NOW.timestamp()) * 1_000_000 + NOW.microsecond
    assert body["eventTime"] == "2026-11-30T13:05:10.123456Z"
    assert body["regarding"] == {"apiVersion": "v1", "kind": "Pod", "namespace": "team-a", "name": "web-0",
                                 "uid": "1234-uid"}
    assert (body["type"], body["reason"], body["action"]) == ("Warning", "FailedScheduling", "Scheduling")
    assert (body["reportingController"], body["reportingInstance"]) == ("metrics-sched", "metrics-sched-abc")
    # 600 two-byte characters: cut to the API's 1024-byte limit on a character boundary.
    assert len(body["note"].encode()) <= 1024 and body["note"].endswith("...")


def test_event_names_differ_within_one_microsecond_and_fit_the_name_limit() -> None:
    recorder = Recorder()
    writer = writer_for(recorder)
    event = SchedulingEvent(namespace="ns", pod_name="p" * 253, pod_uid="u", type="Normal", reason="Scheduled",
                            action="Binding", note="", reporting_controller="c", reporting_instance="i")
    writer.record_event(event)
    writer.record_event(event)
    names = [recorder.body(i)["metadata"]["name"] for i in range(2)]
    assert names[0] != names[1] and all(len(n) <= 253 for n in names)


def test_pod_scheduled_condition_is_a_strategic_merge_patch_of_status() -> None:
    recorder = Recorder(lambda r: httpx.Response(200, json={}))
    writer_for(recorder).set_pod_scheduled_condition("ns", "p", status="False", reason="Unschedulable",
                                                     message="0/50 nodes are available")
    request = recorder.requests[0]
    assert (request.method, request.url.path) == ("PATCH", "/api/v1/namespaces/ns/pods/p/status")
    assert request.headers["Content-Type"] == "application/strategic-merge-patch+json"
    assert recorder.body() == {"status": {"conditions": [{
        "type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/50 nodes are available",
        "lastProbeTime": None, "lastTransitionTime": "2026-11-30T13:05:10Z"}]}}


def test_pod_scheduled_condition_with_a_resource_version_is_a_precondition() -> None:
    recorder = Recorder(lambda r: status(409, "Conflict", "the object has been modified"))
    with pytest.raises(ApiError) as info:
        writer_for(recorder).set_pod_scheduled_condition("ns", "p", status="False", reason="Unschedulable",
                                                         message="m", resource_version="4711")
    assert info.value.conflict
    body = recorder.body()
    assert body["metadata"] == {"resourceVersion": "4711"}
    assert body["status"]["conditions"][0]["reason"] == "Unschedulable"


SCHEDULED = SchedulingEvent(namespace="ns", pod_name="p", pod_uid="u", type="Warning", reason="FailedScheduling",
                            action="Scheduling", note="n", reporting_controller="c", reporting_instance="i")
SERIES = EventSeries(count=3, last_observed=NOW.timestamp() + 60)


def test_record_event_returns_its_name_and_may_start_as_a_series() -> None:
    recorder = Recorder()
    writer = writer_for(recorder)
    name = writer.record_event(SCHEDULED)
    assert recorder.body(0)["metadata"]["name"] == name and "series" not in recorder.body(0)
    writer.record_event(SCHEDULED, EventSeries(2, NOW.timestamp()))
    assert recorder.body(1)["series"] == {"count": 2, "lastObservedTime": "2026-11-30T13:05:10.123456Z"}


def test_update_event_series_patches_only_the_series() -> None:
    recorder = Recorder(lambda r: httpx.Response(200, json={}))
    writer_for(recorder).update_event_series(SCHEDULED, "p.18a2b", SERIES)
    [request] = recorder.requests
    assert (request.method, request.url.path) == ("PATCH", "/apis/events.k8s.io/v1/namespaces/ns/events/p.18a2b")
    assert request.headers["Content-Type"] == "application/merge-patch+json"
    assert recorder.body() == {"series": {"count": 3, "lastObservedTime": "2026-11-30T13:06:10.123456Z"}}


def test_an_expired_series_event_is_created_again_under_its_name() -> None:
    replies = iter([status(404, "NotFound", 'events.events.k8s.io "p.18a2b" not found'), httpx.Response(201, json={})])
    recorder = Recorder(lambda r: next(replies))
    writer_for(recorder).update_event_series(SCHEDULED, "p.18a2b", SERIES)
    assert [r.method for r in recorder.requests] == ["PATCH", "POST"]
    body = recorder.body()
    assert body["metadata"]["name"] == "p.18a2b" and body["reason"] == "FailedScheduling"
    assert body["series"] == {"count": 3, "lastObservedTime": "2026-11-30T13:06:10.123456Z"}


def test_update_event_series_raises_other_errors() -> None:
    with pytest.raises(ApiError) as info:
        writer_for(Recorder(lambda r: status(500, "InternalError"))).update_event_series(SCHEDULED, "p.1", SERIES)
    assert info.value.ambiguous


# -- leases ----------------------------------------------------------------------------------------
LEASE: dict[str, Any] = {
    "kind": "Lease", "apiVersion": "coordination.k8s.io/v1",
    "metadata": {"name": "metrics-sched", "namespace": "kube-system", "resourceVersion": "42",
                 "labels": {"app": "metrics-sched"}},
    "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15, "acquireTime": "2026-11-30T13:00:00.000000Z",
             "renewTime": "2026-11-30T13:05:00.000000Z", "leaseTransitions": 3, "strategy": "OldestEmulationVersion"},
}


def record(**changes: Any) -> LeaseRecord:
    base = {"namespace": "kube-system", "name": "metrics-sched", "holder": "a", "lease_duration_seconds": 15,
            "acquire_time": "2026-11-30T13:00:00.000000Z", "renew_time": "2026-11-30T13:05:00.000000Z",
            "lease_transitions": 3, "resource_version": "42"}
    return LeaseRecord(**{**base, **changes})


def test_lease_get_parses_the_spec_and_is_none_when_absent() -> None:
    store: LeaseStore = KubeLeaseStore(make_client(Recorder(lambda r: httpx.Response(200, json=LEASE))))
    assert store.get("kube-system", "metrics-sched") == record()
    assert KubeLeaseStore(make_client(Recorder(lambda r: status(404, "NotFound")))).get("ns", "x") is None


def test_lease_create_posts_the_spec() -> None:
    recorder = Recorder(lambda r: httpx.Response(201, json=LEASE))
    created = KubeLeaseStore(make_client(recorder)).create(record(resource_version=None))
    assert recorder.requests[0].url.path == "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases"
    assert recorder.body()["spec"] == {k: v for k, v in LEASE["spec"].items() if k != "strategy"}
    assert created.resource_version == "42"


def test_lease_update_puts_with_the_resource_version_and_keeps_unmodelled_fields() -> None:
    renewed = {**LEASE, "metadata": {**LEASE["metadata"], "resourceVersion": "43"},
               "spec": {**LEASE["spec"], "holderIdentity": "b", "renewTime": "2026-11-30T13:05:10.123456Z"}}
    replies = iter([httpx.Response(200, json=LEASE), httpx.Response(200, json=renewed)])
    recorder = Recorder(lambda r: next(replies))
    store = KubeLeaseStore(make_client(recorder))
    current = store.get("kube-system", "metrics-sched")
    assert current is not None
    updated = store.update(LeaseRecord(**{**current.__dict__, "holder": "b",
                                          "renew_time": "2026-11-30T13:05:10.123456Z"}))
    request = recorder.requests[1]
    assert (request.method, request.url.path) == (
        "PUT", "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/metrics-sched")
    body = recorder.body()
    assert body["metadata"]["resourceVersion"] == "42"
    assert body["metadata"]["labels"] == {"app": "metrics-sched"}
    assert body["spec"]["strategy"] == "OldestEmulationVersion"
    assert body["spec"]["holderIdentity"] == "b"
    assert updated.holder == "b" and updated.resource_version == "43"


def test_lease_release_drops_the_holder() -> None:
    recorder = Recorder(lambda r: httpx.Response(200, json=LEASE))
    KubeLeaseStore(make_client(recorder)).update(record(holder=None))
    assert "holderIdentity" not in recorder.body()["spec"]


def test_lease_update_conflict_and_missing_resource_version() -> None:
    store = KubeLeaseStore(make_client(Recorder(lambda r: status(409, "Conflict", "the object has been modified"))))
    with pytest.raises(ApiError) as info:
        store.update(record())
    assert info.value.conflict
    with pytest.raises(ValueError, match="resource_version"):
        store.update(record(resource_version=None))


def test_lease_calls_bypass_the_write_rate_limit() -> None:
    slept: list[float] = []
    client = make_client(Recorder(lambda r: httpx.Response(200, json=LEASE)))
    client.limiter = TokenBucket(1.0, 1, clock=lambda: 0.0, sleep=slept.append)
    store = KubeLeaseStore(client)
    for _ in range(3):
        current = store.get("kube-system", "metrics-sched")
        assert current is not None
        store.update(current)
    assert slept == []
    writer = KubePodWriter(client)
    for _ in range(2):
        writer.set_pod_scheduled_condition("ns", "p", status="False", reason="Unschedulable", message="m")
    assert slept == [pytest.approx(1.0)]
