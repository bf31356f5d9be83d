"""The authenticated endpoint's parts: the review caches, the gate's answers (401/403/503/200), TLS with a
generated and a file pair (reloaded on change) on a real socket, and the `server:` config section."""

from __future__ import annotations

import shutil
import ssl
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from metrics_sched.config import ConfigError
from metrics_sched.config.loader import parse_config
from metrics_sched.plugins import in_tree_registry
from metrics_sched.serving import (
    CachedAuthenticator,
    CachedAuthorizer,
    Decision,
    RequestGate,
    ReviewUnavailable,
    ServingCertificate,
    TLSFilesError,
    User,
)
from metrics_sched.serving.gate import bearer_token, path_allowed
from metrics_sched.serving.http_server import HTTPServer
from metrics_sched.serving.route import text
from metrics_sched.serving.self_signed import generate
from metrics_sched.serving.ttl_cache import TTLCache
from tests.polling import poll

pytestmark = pytest.mark.unit

CATALOG = in_tree_registry(third_party=False).catalog()
READER = User("reader", uid="u1", groups=("team",))
NOBODY = User("nobody")


def trust(ca: Path) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(ca))


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class FakeReviews:
    """Tokens "reader" and "nobody" authenticate; only the reader may get /metrics and /decisions."""

    def __init__(self) -> None:
        self.token_calls = 0
        self.access_calls = 0
        self.down = False

    def review_token(self, token: str) -> User | None:
        self.token_calls += 1
        if self.down:
            raise ReviewUnavailable("no route to the API server")
        return {"reader": READER, "nobody": NOBODY}.get(token)

    def review_access(self, user: User, verb: str, path: str) -> Decision:
        self.access_calls += 1
        if self.down:
            raise ReviewUnavailable("no route to the API server")
        allowed = user == READER and verb == "get" and path in ("/metrics", "/decisions")
        return Decision(allowed, "" if allowed else "no RBAC rule")


def gate_for(reviews: FakeReviews, clock: Clock | None = None, ttl: float = 10.0) -> RequestGate:
    clock = clock or Clock()
    return RequestGate(CachedAuthenticator(reviews, ttl=ttl, cache=TTLCache(16, clock=clock)),
                       CachedAuthorizer(reviews, allowed_ttl=ttl, denied_ttl=ttl / 2, cache=TTLCache(16, clock=clock)))


# -- caches -------------------------------------------------------------------------------------------
def test_ttl_cache_expires_and_evicts_the_least_recently_used() -> None:
    clock = Clock()
    cache: TTLCache[str, int] = TTLCache(2, clock=clock)
    cache.put("a", 1, 5)
    cache.put("b", 2, 5)
    assert cache.get("a") == (True, 1)  # a is now the most recently used
    cache.put("c", 3, 5)
    assert cache.get("b") == (False, None) and cache.get("a") == (True, 1) and len(cache) == 2
    clock.now = 5
    assert cache.get("a") == (False, None)
    cache.put("d", 4, 0)  # TTL 0: not cached
    assert cache.get("d") == (False, None)


def test_token_answers_are_cached_both_ways_for_the_ttl_but_an_outage_never() -> None:
    clock, reviews = Clock(), FakeReviews()
    authn = CachedAuthenticator(reviews, ttl=10, cache=TTLCache(16, clock=clock))
    assert authn.authenticate("reader") == READER
    assert authn.authenticate("bogus") is None
    assert authn.authenticate("reader") == READER and authn.authenticate("bogus") is None
    assert reviews.token_calls == 2
    clock.now = 10
    assert authn.authenticate("bogus") is None
    assert reviews.token_calls == 3
    reviews.down = True
    for _ in range(2):
        with pytest.raises(ReviewUnavailable):
            authn.authenticate("nobody")
    assert reviews.token_calls == 5  # each tried again: an outage's answer is not cached


def test_access_answers_are_cached_for_their_own_ttls() -> None:
    clock, reviews = Clock(), FakeReviews()
    authz = CachedAuthorizer(reviews, allowed_ttl=10, denied_ttl=2, cache=TTLCache(16, clock=clock))
    assert authz.authorize(READER, "get", "/metrics").allowed
    assert not authz.authorize(NOBODY, "get", "/metrics").allowed
    clock.now = 3  # the denial expired, the grant did not
    authz.authorize(READER, "get", "/metrics")
    authz.authorize(NOBODY, "get", "/metrics")
    assert reviews.access_calls == 3
    # Another path or another user (same name, other groups) is another question.
    authz.authorize(READER, "get", "/values")
    authz.authorize(User("reader", uid="u1", groups=("admins",)), "get", "/metrics")
    assert reviews.access_calls == 5


# -- the gate -----------------------------------------------------------------------------------------
@pytest.mark.parametrize(("path", "authorization", "status"), [
    ("/healthz", None, None),
    ("/livez", "Bearer bogus", None),  # an always-allowed path does not even look at the token
    ("/metrics", None, 401),
    ("/metrics", "Basic cmVhZGVyOg==", 401),
    ("/metrics", "Bearer ", 401),
    ("/metrics", "Bearer bogus", 401),
    ("/metrics", "Bearer nobody", 403),
    ("/values", "Bearer reader", 403),
    ("/metrics", "bearer reader", None),
    ("/decisions", "Bearer reader", None),
])
def test_gate_answers(path: str, authorization: str | None, status: int | None) -> None:
    refusal = gate_for(FakeReviews()).check("get", path, authorization)
    assert (refusal.status if refusal else None) == status


def test_gate_fails_closed_when_the_api_server_cannot_review() -> None:
    reviews = FakeReviews()
    gate = gate_for(reviews)
    reviews.down = True
    refusal = gate.check("get", "/metrics", "Bearer reader")
    assert refusal is not None and refusal.status == 503
    reviews.down = False
    assert gate.check("get", "/metrics", "Bearer reader") is None  # the token and this path are cached now
    reviews.down = True
    assert gate.check("get", "/metrics", "Bearer reader") is None
    refusal = gate.check("get", "/decisions", "Bearer reader")  # the token is known, the path is not
    assert refusal is not None and refusal.status == 503 and "authorization" in refusal.message


def test_path_patterns_and_bearer_parsing() -> None:
    assert path_allowed("/debug/pprof/heap", ["/debug/*"]) and not path_allowed("/debugger", ["/debug/*"])
    assert path_allowed("/healthz", ["/healthz"]) and not path_allowed("/healthz/x", ["/healthz"])
    assert bearer_token("Bearer  abc ") == "abc"
    assert bearer_token("Token abc") is None and bearer_token(None) is None


# -- TLS on a real socket ---------------------------------------------------------------------------
@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[HTTPServer, Path, ServingCertificate]]:
    pair = generate(tmp_path / "certs", ["127.0.0.1", "localhost"])
    certificate = ServingCertificate(pair.cert_file, pair.key_file, check_interval=0)
    server = HTTPServer("127.0.0.1", 0, tls=certificate.context, guard=gate_for(FakeReviews()))
    server.route("/healthz", lambda _: text(200, "ok\n"))
    server.route("/metrics", lambda _: text(200, "metrics\n"))
    server.start()
    try:
        yield server, pair.ca_file, certificate
    finally:
        server.stop()


def test_https_with_a_generated_pair_authenticates_and_authorizes(
        served: tuple[HTTPServer, Path, ServingCertificate]) -> None:
    server, ca, _ = served
    url = f"https://127.0.0.1:{server.port}"
    with httpx.Client(verify=trust(ca), timeout=5) as http:
        assert http.get(f"{url}/healthz").status_code == 200
        assert http.get(f"{url}/metrics").status_code == 401
        assert http.get(f"{url}/metrics", headers={"Authorization": "Bearer nobody"}).status_code == 403
        ok = http.get(f"{url}/metrics", headers={"Authorization": "Bearer reader"})
        assert (ok.status_code, ok.text) == (200, "metrics\n")
        assert http.get(f"{url}/nope", headers={"Authorization": "Bearer reader"}).status_code == 403
    with pytest.raises(httpx.ConnectError):  # the system trust store does not know the generated CA
        httpx.get(f"{url}/healthz", timeout=5)
    with pytest.raises(httpx.HTTPError):  # plain HTTP on the TLS port: the handshake fails, nothing is served
        httpx.get(f"http://127.0.0.1:{server.port}/healthz", timeout=5)
    with httpx.Client(verify=trust(ca), timeout=5) as http:  # and the server still serves
        assert http.get(f"{url}/healthz").status_code == 200


def test_through_the_api_server_proxy_the_token_comes_in_its_own_header(
        served: tuple[HTTPServer, Path, ServingCertificate]) -> None:
    """The API server consumes Authorization before proxying: X-Metrics-Sched-Authorization carries the token to
    the same reviews (no token there is still 401, a token without the permission still 403)."""
    server, ca, _ = served
    url = f"https://127.0.0.1:{server.port}/metrics"
    with httpx.Client(verify=trust(ca), timeout=5) as http:
        ok = http.get(url, headers={"X-Metrics-Sched-Authorization": "Bearer reader"})
        assert (ok.status_code, ok.text) == (200, "metrics\n")
        assert http.get(url, headers={"X-Metrics-Sched-Authorization": "Bearer nobody"}).status_code == 403
        assert http.get(url, headers={"X-Metrics-Sched-Authorization": "reader"}).status_code == 401
        # Authorization, when there, is what counts: the other header cannot lift a refusal.
        assert http.get(url, headers={"Authorization": "Bearer nobody",
                                      "X-Metrics-Sched-Authorization": "Bearer reader"}).status_code == 403


def test_a_rotated_pair_is_served_to_new_connections_without_a_restart(
        served: tuple[HTTPServer, Path, ServingCertificate], tmp_path: Path) -> None:
    server, old_ca, certificate = served
    url = f"https://127.0.0.1:{server.port}/healthz"
    new = generate(tmp_path / "new", ["127.0.0.1"])
    # A half-written rotation (a certificate without its key) keeps the old pair serving.
    shutil.copyfile(new.cert_file, certificate.cert_file)
    assert httpx.get(url, verify=trust(old_ca), timeout=5).status_code == 200
    shutil.copyfile(new.key_file, certificate.key_file)

    def new_served() -> bool:
        try:
            return httpx.get(url, verify=trust(new.ca_file), timeout=5).status_code == 200
        except httpx.ConnectError:
            return False

    poll(new_served, 10, "the rotated certificate served")
    assert certificate.reloads == 1
    with pytest.raises(httpx.ConnectError):
        httpx.get(url, verify=trust(old_ca), timeout=5)


def test_a_generated_pair_in_a_cert_dir_is_reused(tmp_path: Path) -> None:
    first = generate(tmp_path, ["localhost"])
    content = first.cert_file.read_bytes()
    assert generate(tmp_path, ["localhost"]).cert_file.read_bytes() == content
    assert oct(first.key_file.stat().st_mode & 0o777) == "0o600"
    context = ssl.create_default_context(cafile=str(first.ca_file))
    assert context.cert_store_stats()["x509_ca"] == 1


def test_unusable_files_are_refused_by_name(tmp_path: Path) -> None:
    pair = generate(tmp_path, ["localhost"])
    with pytest.raises(TLSFilesError, match="no such file"):
        ServingCertificate(tmp_path / "missing.crt", pair.key_file)
    other = generate(tmp_path / "other", ["localhost"])
    with pytest.raises(TLSFilesError, match="not a matching PEM certificate and key"):
        ServingCertificate(pair.cert_file, other.key_file)


# -- the config section -----------------------------------------------------------------------------
def config(server: object) -> dict[str, object]:
    return {"apiVersion": "metrics-sched.io/v1alpha1", "kind": "MetricsSchedulerConfiguration",
            "profiles": [{"schedulerName": "t"}], "server": server}


def test_server_defaults_are_kube_schedulers() -> None:
    server = parse_config(config(None), CATALOG).server
    assert (server.port, server.insecure, server.always_allow_paths) == (10259, False,
                                                                          ("/healthz", "/readyz", "/livez"))
    assert (server.token_cache_ttl, server.authorized_cache_ttl, server.unauthorized_cache_ttl) == (10, 10, 10)
    loose = parse_config(config({"insecure": True, "bindAddress": "0.0.0.0", "allowInsecureNonLoopback": True}),
                         CATALOG).server
    assert loose.insecure and loose.bind_address == "0.0.0.0"
    assert parse_config(config({"insecure": True, "bindAddress": "::1"}), CATALOG).server.insecure
    assert parse_config(config({"authorizationAlwaysAllowPaths": []}), CATALOG).server.always_allow_paths == ()


@pytest.mark.parametrize(("server", "field"), [
    ({"insecure": True}, "server.bindAddress"),  # 0.0.0.0 by default
    ({"insecure": True, "bindAddress": "10.0.0.1"}, "server.bindAddress"),
    ({"allowInsecureNonLoopback": True}, "server.allowInsecureNonLoopback"),
    ({"insecure": True, "bindAddress": "127.0.0.1", "tlsCertFile": "a", "tlsPrivateKeyFile": "b"},
     "server.tlsCertFile"),
    ({"tlsCertFile": "a"}, "server.tlsPrivateKeyFile"),
    ({"tlsPrivateKeyFile": "b"}, "server.tlsCertFile"),
    ({"authorizationAlwaysAllowPaths": ["healthz"]}, "server.authorizationAlwaysAllowPaths[0]"),
    ({"authorizationAlwaysAllowPaths": ["/a/*/b"]}, "server.authorizationAlwaysAllowPaths[0]"),
    ({"authenticationTokenCacheTTL": "2h"}, "server.authenticationTokenCacheTTL"),
    ({"insecure": "yes"}, "server.insecure"),
    ({"tls": {}}, "server.tls"),
])
def test_invalid_server_sections_name_the_field(server: dict[str, object], field: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(config(server), CATALOG)
    assert caught.value.field == field, caught.value
