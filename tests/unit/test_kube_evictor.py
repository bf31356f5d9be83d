"""KubeEvictor: the policy/v1 Eviction it POSTs and the statuses it keeps, over httpx.MockTransport."""

from __future__ import annotations

import httpx
import pytest

from adapters.kubernetes import KubeEvictor
from metrics_sched.ports import ApiError, Evictor
from tests.unit.test_kube_pod_writer import Recorder, make_client, status

pytestmark = pytest.mark.unit


def test_evict_posts_an_eviction_preconditioned_on_the_uid() -> None:
    recorder = Recorder()
    evictor: Evictor = KubeEvictor(make_client(recorder))
    evictor.evict("team-a", "web-0", "1234-uid")
    [request] = recorder.requests
    assert (request.method, request.url.path) == ("POST", "/api/v1/namespaces/team-a/pods/web-0/eviction")
    assert request.headers["content-type"].startswith("application/json")
    assert recorder.body() == {
        "apiVersion": "policy/v1", "kind": "Eviction",
        "metadata": {"name": "web-0", "namespace": "team-a"},
        "deleteOptions": {"preconditions": {"uid": "1234-uid"}},
    }


def test_evict_ignores_the_reply_body() -> None:
    KubeEvictor(make_client(Recorder(lambda r: httpx.Response(201, text="not json")))).evict("ns", "p", "u")


@pytest.mark.parametrize(("reply", "expected"), [
    (status(429, "TooManyRequests", "Cannot evict pod as it would violate the pod's disruption budget."), 429),
    (status(404, "NotFound", 'pods "p" not found'), 404),
    (status(409, "Conflict", "Precondition failed: UID in precondition: u, UID in object meta: v"), 409),
    (status(500, "InternalError", "etcdserver: request timed out"), 500),
])
def test_evict_failures_keep_the_status(reply: httpx.Response, expected: int) -> None:
    with pytest.raises(ApiError) as info:
        KubeEvictor(make_client(Recorder(lambda r: reply))).evict("ns", "p", "u")
    assert info.value.status == expected
    assert reply.json()["message"] in info.value.message
