"""Bearer tokens: fixed ones from a kubeconfig and file-backed ones that rotate, plus the httpx auth flow.

Bound service-account tokens expire (about an hour), and the kubelet rewrites the projected file before
that: a file-backed token is re-read periodically and after a 401. A token's value never appears in a
repr, a log line or an exception message.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Protocol

import httpx

log = logging.getLogger(__name__)

TOKEN_REFRESH_SECONDS = 60.0


class TokenError(ValueError):
    """A token that cannot be read (the message names the file, never the content)."""


class TokenSource(Protocol):
    def token(self) -> str: ...

    def refresh(self) -> bool:
        """Re-reads the token now; True when it changed (worth retrying a request refused with 401)."""
        ...


class StaticToken:
    """A token written into the kubeconfig itself: nothing to re-read."""

    def __init__(self, value: str) -> None:
        if not value.strip():
            raise TokenError("the kubeconfig user has an empty token")
        self._value = value.strip()

    def token(self) -> str:
        return self._value

    def refresh(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "StaticToken(<redacted>)"


class FileToken:
    """A token file (tokenFile, or the projected service-account token), re-read at most `max_age` apart."""

    def __init__(self, path: Path, *, max_age: float = TOKEN_REFRESH_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.path = path
        self._max_age = max_age
        self._clock = clock
        self._lock = threading.Lock()
        # Read eagerly so a missing or empty file is a load-time error, not a first-request surprise.
        self._value = self._read()
        self._read_at = clock()

    def _read(self) -> str:
        try:
            value = self.path.read_text().strip()
        except OSError as exc:
            raise TokenError(f"cannot read token file {self.path}: {exc.strerror or type(exc).__name__}") from None
        if not value:
            raise TokenError(f"token file {self.path} is empty")
        return value

    def token(self) -> str:
        with self._lock:
            if self._clock() - self._read_at >= self._max_age:
                self._reload_locked()
            return self._value

    def refresh(self) -> bool:
        with self._lock:
            before = self._value
            self._reload_locked()
            return self._value != before

    def _reload_locked(self) -> None:
        self._read_at = self._clock()
        try:
            self._value = self._read()
        except TokenError as exc:
            # The kubelet swaps the file through a symlink; a failed read mid-swap should not drop a
            # token that may still be valid for minutes.
            log.warning("keeping the previous token: %s", exc)

    def __repr__(self) -> str:
        return f"FileToken(path={str(self.path)!r})"


class BearerAuth(httpx.Auth):
    """Adds the current token; after a 401, re-reads it once and retries if it changed."""

    def __init__(self, source: TokenSource) -> None:
        self.source = source

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        request.headers["Authorization"] = f"Bearer {self.source.token()}"
        response = yield request
        if response.status_code == 401 and self.source.refresh():
            log.info("401 from the API server; retrying once with the re-read token")
            request.headers["Authorization"] = f"Bearer {self.source.token()}"
            yield request

    def __repr__(self) -> str:
        return f"BearerAuth({self.source!r})"
