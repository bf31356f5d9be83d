"""KubeEvictor: the policy/v1 Eviction it POSTs (a dry run too) and the statuses it keeps; and the namespace LIST
the rebalancer reads a gang's members with; over httpx.MockTransport."""

from __future__ import annotations

import httpx
import pytest

from adapters.kubernetes import KubeEvictor
from adapters.kubernetes.lister import KubeClusterLister
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


def test_a_dry_run_eviction_asks_the_api_server_to_check_and_change_nothing() -> None:
    # deleteOptions.dryRun ["All"]: the API server checks the PodDisruptionBudget and deletes nothing
    # (pkg/registry/core/pod/storage/eviction.go); a refusal is the same 429 as for a real eviction.
    recorder = Recorder()
    KubeEvictor(make_client(recorder)).evict("team-a", "web-0", "1234-uid", dry_run=True)
    assert recorder.body()["deleteOptions"] == {"preconditions": {"uid": "1234-uid"}, "dryRun": ["All"]}
    refused = status(429, "TooManyRequests", "Cannot evict pod as it would violate the pod's disruption budget.")
    with pytest.raises(ApiError) as info:
        KubeEvictor(make_client(Recorder(lambda r: refused))).evict("ns", "p", "u", dry_run=True)
    assert info.value.status == 429


def test_one_namespaces_pods_are_listed_page_by_page_with_the_label_selector() -> None:
    pages = [{"items": [{"metadata": {"name": "m0"}}], "metadata": {"continue": "next"}},
             {"items": [{"metadata": {"name": "m1"}}], "metadata": {}}]
    recorder = Recorder(lambda r: httpx.Response(200, json=pages[len(recorder.requests) - 1]))
    lister = KubeClusterLister(make_client(recorder), page_size=1)
    found = list(lister.namespace_pods("ml", "scheduling.x-k8s.io/pod-group=g"))
    assert [p["metadata"]["name"] for p in found] == ["m0", "m1"]
    assert [r.url.path for r in recorder.requests] == ["/api/v1/namespaces/ml/pods"] * 2
    assert [dict(r.url.params) for r in recorder.requests] == [
        {"limit": "1", "labelSelector": "scheduling.x-k8s.io/pod-group=g"},
        {"limit": "1", "labelSelector": "scheduling.x-k8s.io/pod-group=g", "continue": "next"}]
    recorder.requests.clear()
    pages[0] = {"items": [], "metadata": {}}
    assert list(lister.namespace_pods("ml")) == []
    assert dict(recorder.requests[0].url.params) == {"limit": "1"}  # no selector: the whole namespace
