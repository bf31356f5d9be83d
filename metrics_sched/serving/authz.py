"""May this user GET this path: a SubjectAccessReview on the non-resource URL (`get /metrics`), as
kube-scheduler authorizes its endpoints, so RBAC (a ClusterRole with `nonResourceURLs`) decides who reads
what. Allowed and denied answers are cached for their own TTLs; an unavailable review is never cached."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from metrics_sched.serving.authn import User
from metrics_sched.serving.ttl_cache import TTLCache

MAX_CACHED_DECISIONS = 1024


@dataclass(frozen=True)
class Decision:
    allowed: bool
    reason: str = ""  # the authorizer's, for the 403 body (RBAC says nothing when it denies)


class AccessReviewer(Protocol):
    def review_access(self, user: User, verb: str, path: str) -> Decision:
        """Raises ReviewUnavailable when the API server cannot answer."""
        ...


def _key(user: User, verb: str, path: str) -> tuple[object, ...]:
    extra = tuple(sorted((k, tuple(v)) for k, v in user.extra.items()))
    return user.name, user.uid, tuple(sorted(user.groups)), extra, verb, path


class CachedAuthorizer:
    def __init__(self, reviewer: AccessReviewer, *, allowed_ttl: float, denied_ttl: float,
                 max_entries: int = MAX_CACHED_DECISIONS,
                 cache: TTLCache[tuple[object, ...], Decision] | None = None) -> None:
        self._reviewer = reviewer
        self._allowed_ttl = allowed_ttl
        self._denied_ttl = denied_ttl
        self._cache: TTLCache[tuple[object, ...], Decision] = (
            cache if cache is not None else TTLCache(max_entries))

    def authorize(self, user: User, verb: str, path: str) -> Decision:
        key = _key(user, verb, path)
        hit, decision = self._cache.get(key)
        if hit and decision is not None:
            return decision
        decision = self._reviewer.review_access(user, verb, path)
        self._cache.put(key, decision, self._allowed_ttl if decision.allowed else self._denied_ttl)
        return decision
