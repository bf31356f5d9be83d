"""Who is asking: a bearer token checked by the API server (TokenReview), the answer cached briefly.

The cache is keyed by the token's SHA-256, so no token is kept in memory longer than its request; positive and
negative answers are both cached (a client retrying a bad token must not turn into a review storm), for a TTL
each, in a bounded cache. A review that could not be made (API server unreachable, 5xx) is never cached and
never lets the request through: the caller answers 503."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from metrics_sched.serving.ttl_cache import TTLCache

MAX_CACHED_TOKENS = 1024


@dataclass(frozen=True)
class User:
    """The authenticated user as the TokenReview returned it: what the SubjectAccessReview asks about."""

    name: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


class ReviewUnavailable(Exception):
    """The API server could not answer a review (unreachable, timed out, an error status): fail closed."""


class TokenReviewer(Protocol):
    def review_token(self, token: str) -> User | None:
        """The token's user, or None when the API server says it is not authenticated. Raises
        ReviewUnavailable when it cannot say."""
        ...


class CachedAuthenticator:
    def __init__(self, reviewer: TokenReviewer, *, ttl: float, max_entries: int = MAX_CACHED_TOKENS,
                 cache: TTLCache[bytes, User | None] | None = None) -> None:
        self._reviewer = reviewer
        self._ttl = ttl
        self._cache: TTLCache[bytes, User | None] = cache if cache is not None else TTLCache(max_entries)

    def authenticate(self, token: str) -> User | None:
        key = hashlib.sha256(token.encode()).digest()
        hit, user = self._cache.get(key)
        if hit:
            return user
        user = self._reviewer.review_token(token)  # ReviewUnavailable propagates: nothing cached
        self._cache.put(key, user, self._ttl)
        return user
