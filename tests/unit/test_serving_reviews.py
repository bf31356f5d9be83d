"""The API-server side of the authenticated endpoint against a fake API server: the TokenReview and
SubjectAccessReview requests and how their answers read, and how `explain` finds the Lease holder's endpoint."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry

from adapters.kubernetes import KubeClient, KubeConfig, StaticToken
from adapters.kubernetes.reviews import ACCESS_REVIEWS, TOKEN_REVIEWS, KubeReviews
from metrics_sched.app.errors import UserError
from metrics_sched.app.leader_target import find_leader, holds, service_of_host
from metrics_sched.app.scheduler_client import connect
from metrics_sched.app.serving_setup import build_server
from metrics_sched.config.model import ServerConfig
from metrics_sched.serving import ReviewUnavailable, User

pytestmark = pytest.mark.unit

SECRET = "s3cr3t-token-value"
Handler = Callable[[httpx.Request], httpx.Response]


def client(handler: Handler) -> KubeClient:
    return KubeClient(KubeConfig(server="https://k", token=StaticToken("scheduler-token")),
                      transport=httpx.MockTransport(handler))


def test_token_review_reads_the_user_and_sends_the_token_only_in_the_body() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        token = json.loads(request.content)["spec"]["token"]
        if token != SECRET:
            return httpx.Response(201, json={"status": {"authenticated": False, "error": "invalid bearer token"}})
        return httpx.Response(201, json={"status": {"authenticated": True, "user": {
            "username": "system:serviceaccount:ns:reader", "uid": "42", "groups": ["system:serviceaccounts"],
            "extra": {"authentication.kubernetes.io/pod-name": ["p"]}}}})

    reviews = KubeReviews(client(handler))
    user = reviews.review_token(SECRET)
    assert user == User("system:serviceaccount:ns:reader", uid="42", groups=("system:serviceaccounts",),
                        extra={"authentication.kubernetes.io/pod-name": ("p",)})
    assert reviews.review_token("other") is None  # an invalid token is a "no", not an outage
    assert seen[0].url.path == TOKEN_REVIEWS and seen[0].method == "POST"
    assert seen[0].headers["Authorization"] == "Bearer scheduler-token"  # the scheduler's own credentials


def test_access_review_asks_about_the_non_resource_url() -> None:
    bodies: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.path == ACCESS_REVIEWS
        body = json.loads(request.content)
        bodies.append(body)
        allowed = body["spec"]["nonResourceAttributes"]["path"] == "/metrics"
        return httpx.Response(201, json={"status": {"allowed": allowed, "reason": "" if allowed else "no rule",
                                                    "evaluationError": "" if allowed else "webhook timed out"}})

    reviews = KubeReviews(client(handler))
    user = User("alice", uid="7", groups=("team",), extra={"scopes": ("a",)})
    assert reviews.review_access(user, "get", "/metrics").allowed
    denied = reviews.review_access(user, "get", "/decisions")
    assert not denied.allowed and denied.reason == "no rule"  # an evaluation error with a "no" stays a "no"
    assert bodies[0]["spec"] == {"user": "alice", "uid": "7", "groups": ["team"], "extra": {"scopes": ["a"]},
                                 "nonResourceAttributes": {"path": "/metrics", "verb": "get"}}


@pytest.mark.parametrize("failure", [
    lambda request: httpx.Response(403, json={"kind": "Status", "message": "cannot create tokenreviews"}),
    lambda request: httpx.Response(503, text="unavailable"),
    lambda request: httpx.Response(201, json={"kind": "TokenReview"}),  # no status
    lambda request: (_ for _ in ()).throw(httpx.ConnectError("refused")),
])
def test_anything_but_an_answer_is_unavailable_and_never_quotes_the_token(failure: Handler) -> None:
    reviews = KubeReviews(client(failure))
    with pytest.raises(ReviewUnavailable) as caught:
        reviews.review_token(SECRET)
    assert SECRET not in str(caught.value)
    with pytest.raises(ReviewUnavailable):
        reviews.review_access(User("alice"), "get", "/metrics")


# -- the leader behind the Service ------------------------------------------------------------------
def fake_cluster(holder: str | None, *, ports: list[dict[str, Any]] | None = None) -> KubeClient:
    def handler(request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == "/api/v1/namespaces/ms/services/metrics-sched":
            return httpx.Response(200, json={"spec": {"ports": ports or [
                {"name": "https", "port": 10259}, {"name": "other", "port": 1}]}})
        if path == "/apis/coordination.k8s.io/v1/namespaces/ms/leases/metrics-sched":
            return httpx.Response(200, json={"spec": {"holderIdentity": holder} if holder else {}})
        if path == "/apis/discovery.k8s.io/v1/namespaces/ms/endpointslices":
            assert request.url.params["labelSelector"] == "kubernetes.io/service-name=metrics-sched"
            return httpx.Response(200, json={"items": [{
                "ports": [{"name": "other", "port": 1}, {"name": "https", "port": 10259}],
                "endpoints": [
                    {"addresses": ["10.0.0.5"], "targetRef": {"kind": "Pod", "name": "metrics-sched-abc"}},
                    {"addresses": ["fd00::7"], "targetRef": {"kind": "Pod", "name": "metrics-sched-def"}},
                ]}]})
        return httpx.Response(404, json={"kind": "Status", "message": "not found"})

    return client(handler)


def test_the_lease_holder_is_the_endpoint_asked() -> None:
    target = find_leader(fake_cluster("metrics-sched-def_1a2b3c4d"), "ms", "metrics-sched", "ms", "metrics-sched")
    assert (target.url, target.pod, target.server_name) == ("https://[fd00::7]:10259", "metrics-sched-def",
                                                            "metrics-sched.ms.svc")
    target = find_leader(fake_cluster("metrics-sched-abc"), "ms", "metrics-sched", "ms", "metrics-sched")
    assert target.url == "https://10.0.0.5:10259"


@pytest.mark.parametrize(("holder", "lease", "message"), [
    (None, "metrics-sched", "has no holder"),
    ("metrics-sched-zzz_1234", "metrics-sched", "is not an endpoint of Service ms/metrics-sched"),
    ("metrics-sched-abc", "elsewhere", "Lease ms/elsewhere not found"),
])
def test_no_leader_to_ask_is_a_user_error(holder: str | None, lease: str, message: str) -> None:
    with pytest.raises(UserError, match=message):
        find_leader(fake_cluster(holder), "ms", "metrics-sched", "ms", lease)


def test_a_service_without_an_https_port_must_have_one_port() -> None:
    with pytest.raises(UserError, match="2 ports and none is named 'https'"):
        find_leader(fake_cluster("x", ports=[{"name": "a"}, {"name": "b"}]), "ms", "metrics-sched", "ms", "m")


def test_names() -> None:
    assert service_of_host("metrics-sched.ms.svc") == ("ms", "metrics-sched")
    assert service_of_host("metrics-sched.ms.svc.cluster.local") == ("ms", "metrics-sched")
    assert service_of_host("127.0.0.1") is None and service_of_host("example.com") is None
    assert holds("pod-a_1234", "pod-a") and holds("pod-a", "pod-a") and not holds("pod-ab_1", "pod-a")


def test_a_plain_http_url_gets_no_credentials() -> None:
    args = argparse.Namespace(url="http://127.0.0.1:1", service=None, lease=None, kubeconfig=None, ca_file=None)
    endpoint = connect(args)
    assert endpoint.client.auth is None and endpoint.server_name is None
    with pytest.raises(UserError, match="--service: give NAMESPACE/NAME"):
        connect(argparse.Namespace(url=None, service="nope", lease=None, kubeconfig=None, ca_file=None))


# -- the server as `server:` configures it ------------------------------------------------------------
def test_build_server_serves_https_with_a_self_signed_pair_or_plain_http_when_insecure(tmp_path: Path) -> None:
    kube = KubeConfig(server="https://k", token=StaticToken("scheduler-token"))
    server = build_server(ServerConfig(bind_address="127.0.0.1", cert_dir="certs"), 0, kube,
                          registry=CollectorRegistry(), base_dir=tmp_path)
    try:
        assert server.scheme == "https"
        assert {p.name for p in (tmp_path / "certs").iterdir()} == {"ca.crt", "metrics-sched.crt", "metrics-sched.key"}
    finally:
        server.stop()
    plain = build_server(ServerConfig(bind_address="127.0.0.1", insecure=True), 0, kube,
                         registry=CollectorRegistry(), base_dir=tmp_path)
    try:
        assert plain.scheme == "http"
    finally:
        plain.stop()


def test_unusable_serving_files_are_a_user_error_naming_the_field(tmp_path: Path) -> None:
    kube = KubeConfig(server="https://k", token=StaticToken("scheduler-token"))
    with pytest.raises(UserError, match=r"^server\.tlsCertFile: .*missing\.crt: no such file"):
        build_server(ServerConfig(bind_address="127.0.0.1", tls_cert_file="missing.crt", tls_private_key_file="k"),
                     0, kube, registry=CollectorRegistry(), base_dir=tmp_path)
