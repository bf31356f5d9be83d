"""The check every request passes before its handler runs: an always-allowed path (the probes) goes through
as is; any other needs a bearer token the API server authenticates (else 401) and a SubjectAccessReview that
allows `get` on its path (else 403). A review the API server cannot answer fails closed (503), counted, never
open.

Through the API server's proxy (`kubectl metrics-sched explain`: /api/v1/namespaces/NS/pods/https:POD:PORT/proxy/...)
the caller's Authorization header never arrives: the API server authenticates it, removes it (apiserver
filters/authentication.go: `req.Header.Del("Authorization")`) and connects to the pod as itself, with no client
certificate and no user identity on the request. So the client sends the same bearer token a second time in
X-Metrics-Sched-Authorization, which the API server passes on as any other header; it is used only when there is
no Authorization header and goes through the same TokenReview and SubjectAccessReview, so it opens nothing a direct
request with that token would not (docs/observability.md, "Through the API server")."""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence

from prometheus_client import CollectorRegistry, Counter

from metrics_sched.serving.authn import CachedAuthenticator, ReviewUnavailable
from metrics_sched.serving.authz import CachedAuthorizer

log = logging.getLogger(__name__)

PROXIED_AUTHORIZATION_HEADER = "X-Metrics-Sched-Authorization"

# kube-scheduler's --authorization-always-allow-paths default: the kubelet's probes carry no token.
DEFAULT_ALWAYS_ALLOW_PATHS = ("/healthz", "/readyz", "/livez")
RESULTS = ("always_allowed", "allowed", "unauthenticated", "forbidden", "authentication_unavailable",
           "authorization_unavailable")


class Refusal:
    """Why a request is not served: its status and the line the client reads."""

    __slots__ = ("message", "status")

    def __init__(self, status: int, message: str) -> None:
        self.status = status
        self.message = message


def path_allowed(path: str, patterns: Collection[str]) -> bool:
    """Upstream's matching: a pattern is a path, or a prefix ending in `*` (`/debug/*`)."""
    for pattern in patterns:
        if pattern.endswith("*"):
            if path.startswith(pattern[:-1]):
                return True
        elif path == pattern:
            return True
    return False


def credentials(authorization: str | None, proxied: str | None) -> str | None:
    """The header to authenticate with: Authorization, else (a request through the API server's proxy, which
    consumed it) X-Metrics-Sched-Authorization."""
    return authorization if authorization else proxied


def bearer_token(authorization: str | None) -> str | None:
    """The token of an `Authorization: Bearer <token>` header (scheme case-insensitive), else None."""
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


class RequestGate:
    def __init__(self, authenticator: CachedAuthenticator, authorizer: CachedAuthorizer, *,
                 always_allow_paths: Sequence[str] = DEFAULT_ALWAYS_ALLOW_PATHS,
                 registry: CollectorRegistry | None = None) -> None:
        self._authenticator = authenticator
        self._authorizer = authorizer
        self._always = tuple(always_allow_paths)
        self._results = Counter("metrics_sched_http_requests_checked",
                                "Requests to the scheduler's HTTPS endpoints by the result of authentication and "
                                "authorization (*_unavailable: the API server could not review; answered 503).",
                                ["result"], registry=registry)
        for result in RESULTS:
            self._results.labels(result)

    def check(self, verb: str, path: str, authorization: str | None) -> Refusal | None:
        """None when the request may be served; else the refusal to answer with."""
        if path_allowed(path, self._always):
            self._results.labels("always_allowed").inc()
            return None
        token = bearer_token(authorization)
        if token is None:
            self._results.labels("unauthenticated").inc()
            return Refusal(401, "Unauthorized: a bearer token is required")
        try:
            user = self._authenticator.authenticate(token)
        except ReviewUnavailable as exc:
            self._results.labels("authentication_unavailable").inc()
            log.warning("http: cannot authenticate a request for %s: %s", path, exc)
            return Refusal(503, "authentication unavailable: the API server cannot review the token")
        if user is None:
            self._results.labels("unauthenticated").inc()
            return Refusal(401, "Unauthorized: the token was not accepted")
        try:
            decision = self._authorizer.authorize(user, verb, path)
        except ReviewUnavailable as exc:
            self._results.labels("authorization_unavailable").inc()
            log.warning("http: cannot authorize %s for %s: %s", path, user.name, exc)
            return Refusal(503, "authorization unavailable: the API server cannot review the request")
        if not decision.allowed:
            self._results.labels("forbidden").inc()
            reason = f": {decision.reason}" if decision.reason else ""
            return Refusal(403, f'Forbidden: user "{user.name}" cannot {verb} path "{path}"{reason}')
        self._results.labels("allowed").inc()
        return None
