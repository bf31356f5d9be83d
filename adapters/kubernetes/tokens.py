"""Bearer tokens: fixed ones from a kubeconfig and file-backed ones that rotate, plus the httpx auth flow.

Bound service-account tokens expire (about an hour), and the kubelet rewrites the projected file before
that: a file-backed token is re-read periodically and after a 401. A token's value never appears in a
repr, a log line or an exception message.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Generator
from pathlib import Path
from typing import Protocol

import httpx

from adapters.http_common import SecretFile, SecretFileError

log = logging.getLogger(__name__)

TOKEN_REFRESH_SECONDS = 60.0


class TokenError(ValueError):
    """A token that cannot be read (the message names the file, never the content)."""


class TokenSource(Protocol):
    def token(self) -> str:
        """The current bearer token; "" when the credential is a client certificate alone."""
        ...

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
    """A token file (tokenFile, or the projected service-account token), re-read at most `max_age` apart:
    the adapters' shared SecretFile, under the TokenSource interface."""

    def __init__(self, path: Path, *, max_age: float = TOKEN_REFRESH_SECONDS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.path = path
        try:
            self._secret = SecretFile(path, max_age=max_age, clock=clock, kind="token")
        except SecretFileError as exc:
            raise TokenError(str(exc)) from None

    def token(self) -> str:
        return self._secret.value()

    def refresh(self) -> bool:
        return self._secret.refresh()

    def __repr__(self) -> str:
        return f"FileToken(path={str(self.path)!r})"


class BearerAuth(httpx.Auth):
    """Adds the current token (when there is one) and the SNI name; after a 401, refreshes the credential
    once and retries if it changed.

    sni_hostname: the kubeconfig's tls-server-name. httpcore sends it as SNI and verifies the server's
    certificate against it instead of the URL's host; set per request because httpx has no client-wide
    setting for it, and the auth flow is the one hook every request (watches included) goes through.
    """

    def __init__(self, source: TokenSource | None, *, sni_hostname: str | None = None) -> None:
        self.source = source
        self.sni_hostname = sni_hostname

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        if self.sni_hostname:
            request.extensions = {**request.extensions, "sni_hostname": self.sni_hostname}
        self._authorize(request)
        response = yield request
        if response.status_code == 401 and self.source is not None and self.source.refresh():
            log.info("401 from the API server; retrying once with the refreshed credential")
            self._authorize(request)
            yield request

    def _authorize(self, request: httpx.Request) -> None:
        token = self.source.token() if self.source is not None else ""
        if token:
            request.headers["Authorization"] = f"Bearer {token}"
        else:
            # A client-certificate credential (an exec plugin may return either): no header.
            request.headers.pop("Authorization", None)

    def __repr__(self) -> str:
        return f"BearerAuth({self.source!r})"
