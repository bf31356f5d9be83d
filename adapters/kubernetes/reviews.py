"""Delegated authentication and authorization for the scheduler's HTTPS endpoints, as kube-scheduler does it:
a TokenReview asks the API server whose bearer token a request carries, a SubjectAccessReview whether that user
may `get` the non-resource URL asked for (RBAC `nonResourceURLs`). The scheduler's ServiceAccount needs
`create` on both (deploy/clusterrole.yaml).

Implements metrics_sched.serving's TokenReviewer and AccessReviewer; the caching is the core's. Any answer
other than a review (no connection, a timeout, a 4xx/5xx status: the scheduler is not allowed to review, the
API server is down) raises ReviewUnavailable, so the request is refused (503), never let through. The token is
sent in the review's body only: it is never logged nor put in an error message."""

from __future__ import annotations

from typing import Any

from adapters.kubernetes.client import KubeClient
from adapters.kubernetes.config import KubeConfig
from metrics_sched.ports import ApiError
from metrics_sched.serving import Decision, ReviewUnavailable, User

TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
# A review answers in milliseconds; a client waiting on a slow one holds one of the server's 16 threads.
REQUEST_TIMEOUT = 5.0
USER_AGENT = "metrics-sched/reviews"


class KubeReviews:
    def __init__(self, client: KubeClient) -> None:
        self._client = client

    @classmethod
    def from_config(cls, config: KubeConfig, *, max_connections: int = 4) -> KubeReviews:
        """Its own small pool: reviews never wait behind binds, nor binds behind reviews."""
        return cls(KubeClient(config, max_connections=max_connections, max_watch_connections=1,
                              request_timeout=REQUEST_TIMEOUT, connect_timeout=REQUEST_TIMEOUT,
                              user_agent=USER_AGENT))

    def close(self) -> None:
        self._client.close()

    def review_token(self, token: str) -> User | None:
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}}
        status = self._create(TOKEN_REVIEWS, body, "TokenReview")
        if not status.get("authenticated"):
            return None
        user = status.get("user") or {}
        extra = {str(k): tuple(str(x) for x in v or ()) for k, v in (user.get("extra") or {}).items()}
        return User(name=str(user.get("username", "")), uid=str(user.get("uid", "")),
                    groups=tuple(str(g) for g in user.get("groups") or ()), extra=extra)

    def review_access(self, user: User, verb: str, path: str) -> Decision:
        spec: dict[str, Any] = {"user": user.name, "groups": list(user.groups),
                                "nonResourceAttributes": {"path": path, "verb": verb}}
        if user.uid:
            spec["uid"] = user.uid
        if user.extra:
            spec["extra"] = {k: list(v) for k, v in user.extra.items()}
        body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}
        status = self._create(ACCESS_REVIEWS, body, "SubjectAccessReview")
        allowed = bool(status.get("allowed")) and not status.get("denied")
        return Decision(allowed=allowed, reason=str(status.get("reason") or ""))

    def _create(self, path: str, body: dict[str, Any], kind: str) -> dict[str, Any]:
        try:
            answer = self._client.request("POST", path, body)
        except ApiError as exc:
            # exc's message names the method, path and the API server's status message: no token in it.
            raise ReviewUnavailable(f"{kind}: {exc}") from None
        status = answer.get("status")
        if not isinstance(status, dict):
            raise ReviewUnavailable(f"{kind}: the answer has no status")
        # status.error (TokenReview) and status.evaluationError (SubjectAccessReview) come with a "no" that
        # stands: an invalid token is reported as an error, and upstream denies on an evaluation error too.
        return status
