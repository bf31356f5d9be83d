"""KubeClient over httpx.MockTransport: errors as ApiError, 401 handling, rate limiting, token secrecy."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from adapters.kubernetes.client import KubeClient
from adapters.kubernetes.config import KubeConfig
from adapters.kubernetes.rate_limit import TokenBucket
from adapters.kubernetes.tokens import FileToken, StaticToken
from metrics_sched.ports import ApiError

pytestmark = pytest.mark.unit

SECRET = "s3cr3t-token-value-0123456789"
Handler = Callable[[httpx.Request], httpx.Response]


def make_client(handler: Handler, token: StaticToken | FileToken | None = None, **kwargs: Any) -> KubeClient:
    config = KubeConfig(server="https://kube.test", token=token or StaticToken(SECRET))
    return KubeClient(config, transport=httpx.MockTransport(handler), **kwargs)


def status(code: int, reason: str, message: str) -> httpx.Response:
    return httpx.Response(code, json={"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                      "code": code, "reason": reason, "message": message})


def test_requests_carry_the_bearer_token_and_json_body() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(201, json={"kind": "Thing"})

    with make_client(handler) as client:
        assert client.request("POST", "/api/v1/things", {"a": 1}) == {"kind": "Thing"}
        assert client.send("PATCH", "/api/v1/things/x", {"b": 2}, content_type="application/merge-patch+json") == 201
    assert seen[0].headers["Authorization"] == f"Bearer {SECRET}"
    assert json.loads(seen[0].content) == {"a": 1}
    assert seen[0].headers["Content-Type"] == "application/json"
    assert seen[1].headers["Content-Type"] == "application/merge-patch+json"
    assert SECRET not in repr(client)


@pytest.mark.parametrize(("code", "reason", "flags"), [
    (409, "Conflict", {"conflict": True, "not_found": False, "ambiguous": False}),
    (404, "NotFound", {"conflict": False, "not_found": True, "ambiguous": False}),
    (500, "InternalError", {"conflict": False, "not_found": False, "ambiguous": True}),
    (422, "Invalid", {"conflict": False, "not_found": False, "ambiguous": False}),
])
def test_error_statuses_become_api_errors_with_the_status_message(code: int, reason: str,
                                                                  flags: dict[str, bool]) -> None:
    with make_client(lambda r: status(code, reason, f"pods \"p\" {reason.lower()}")) as client, \
            pytest.raises(ApiError) as info:
        client.request("GET", "/api/v1/namespaces/ns/pods/p")
    error = info.value
    assert error.status == code and error.reason == reason
    assert error.message == f"GET /api/v1/namespaces/ns/pods/p: pods \"p\" {reason.lower()}"
    assert {"conflict": error.conflict, "not_found": error.not_found, "ambiguous": error.ambiguous} == flags


def test_a_non_json_error_body_is_kept_short() -> None:
    with make_client(lambda r: httpx.Response(503, text="upstream down " * 100)) as client, \
            pytest.raises(ApiError) as info:
        client.send("POST", "/x", {})
    assert info.value.status == 503 and len(info.value.message) < 350


@pytest.mark.parametrize("exc", [httpx.ConnectError("connection refused"), httpx.ReadTimeout("timed out"),
                                 httpx.RemoteProtocolError("peer closed connection")])
def test_transport_errors_have_no_status(exc: Exception) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise exc

    with make_client(handler) as client, pytest.raises(ApiError) as info:
        client.send("POST", "/api/v1/namespaces/ns/pods/p/binding", {})
    assert info.value.status is None and info.value.ambiguous
    assert type(exc).__name__ in str(info.value)
    assert SECRET not in str(info.value)


def test_a_token_echoed_by_the_server_is_scrubbed_from_the_error() -> None:
    with make_client(lambda r: status(400, "BadRequest", f"bad header Bearer {SECRET}")) as client, \
            pytest.raises(ApiError) as info:
        client.request("GET", "/x")
    assert SECRET not in str(info.value) and "<redacted>" in info.value.message


def test_a_401_rereads_the_token_file_and_retries_once(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("old")
    token = FileToken(path)
    valid = {"new"}
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers["Authorization"])
        if request.headers["Authorization"].removeprefix("Bearer ") in valid:
            return httpx.Response(200, json={})
        return status(401, "Unauthorized", "Unauthorized")

    with make_client(handler, token=token) as client:
        path.write_text("new")  # rotated before the 60 s re-read is due
        assert client.request("GET", "/x") == {}
        assert seen == ["Bearer old", "Bearer new"]
        # Rejected with a token that did not change: no retry loop, just the 401.
        valid.clear()
        seen.clear()
        with pytest.raises(ApiError) as info:
            client.request("GET", "/x")
        assert info.value.status == 401 and seen == ["Bearer new"]


def test_a_static_token_is_not_retried_on_401() -> None:
    calls: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        return status(401, "Unauthorized", "Unauthorized")

    with make_client(handler) as client, pytest.raises(ApiError):
        client.request("GET", "/x")
    assert len(calls) == 1


def test_token_bucket_allows_a_burst_then_paces_at_qps() -> None:
    now = [0.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    bucket = TokenBucket(10.0, 3, clock=lambda: now[0], sleep=sleep)
    assert [bucket.acquire() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.acquire() == pytest.approx(0.1)
    assert bucket.acquire() == pytest.approx(0.1)
    now[0] += 10.0  # idle time refills up to the burst only
    assert [bucket.acquire() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.acquire() == pytest.approx(0.1)


def test_writes_go_through_the_rate_limiter_and_lists_do_not() -> None:
    slept: list[float] = []
    with make_client(lambda r: httpx.Response(200, json={}), qps=1.0, burst=5) as client:
        assert client.limiter is not None
        client.limiter = TokenBucket(1.0, 5, clock=lambda: 0.0, sleep=slept.append)
        for _ in range(5):
            client.send("POST", "/x", {})
        for _ in range(50):
            client.list("/api/v1/pods", {"limit": "500"})
        assert slept == []
        client.send("POST", "/x", {})
        assert slept == [pytest.approx(1.0)]
    with make_client(lambda r: httpx.Response(200, json={})) as unlimited:
        assert unlimited.limiter is None


def test_every_exchange_is_told_to_the_request_observer_as_client_go_counts_it() -> None:
    """rest_client_* (metrics_sched.ports.RequestObserver): method, host, code ("<error>" without a reply) and the
    seconds it took; each 429 retry is its own exchange; a watch is counted without a duration."""
    from metrics_sched.observability.rest_client import RestClientMetrics

    seen: list[tuple[str, str, str, float | None]] = []

    class Observer:
        def observe_request(self, method: str, host: str, code: str, seconds: float | None) -> None:
            seen.append((method, host, code, seconds))

    replies = iter([httpx.Response(200, json={"kind": "Node"}),
                    httpx.Response(429, headers={"Retry-After": "0"}, json={}),
                    httpx.Response(201, json={}),
                    httpx.Response(404, json={"kind": "Status", "message": "nope"}),
                    httpx.Response(200, content=b"")])

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/api/v1/boom":
            raise httpx.ConnectError("refused", request=request)
        return next(replies)

    client = make_client(handler, request_observer=Observer(), sleep=lambda _: None)
    client.request("GET", "/api/v1/nodes/a")
    client.send("POST", "/api/v1/namespaces/d/pods/p/binding", {"kind": "Binding"})
    with pytest.raises(ApiError):
        client.request("GET", "/api/v1/nodes/missing")
    with pytest.raises(ApiError):
        client.request("GET", "/api/v1/boom")
    with client.watch("/api/v1/pods", {}):
        pass
    assert [(m, h, c) for m, h, c, _ in seen] == [
        ("GET", "kube.test", "200"), ("POST", "kube.test", "429"), ("POST", "kube.test", "201"),
        ("GET", "kube.test", "404"), ("GET", "kube.test", "<error>"), ("GET", "kube.test", "200")]
    assert all(s is not None and s >= 0 for *_, s in seen[:-1]) and seen[-1][3] is None

    metrics = RestClientMetrics()
    for method, host, code, seconds in seen:
        metrics.observe_request(method, host, code, seconds)
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in metrics.collect() for s in f.samples}
    assert samples[("rest_client_requests_total", (("code", "201"), ("host", "kube.test"), ("method", "POST")))] == 1
    assert samples[("rest_client_requests_total", (("code", "<error>"), ("host", "kube.test"),
                                                   ("method", "GET")))] == 1
    # Five exchanges with a duration: the watch has none.
    assert samples[("rest_client_request_duration_seconds_count", (("host", "kube.test"), ("verb", "GET")))] == 3
    assert samples[("rest_client_request_duration_seconds_count", (("host", "kube.test"), ("verb", "POST")))] == 2
