"""GETs to the CMDB: bounded answers, tenacity retries on transient failures, strict JSON, no leaks.

Each answer is read within `timeout` (connect to last byte) and `maxResponseBytes` (adapters.bounded_answer).
Retried (jittered exponential backoff): connection errors, timeouts (a late answer too) and 5xx. Never
retried: 4xx (the same request will fail the same way), an answer past the size cap (it would be as large
again) and 3xx (redirects are not followed: a redirect could carry the Authorization header elsewhere; the
error names the target so the URL can be fixed).
"""

from __future__ import annotations

import ssl
import time
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from pathlib import Path

import httpx
from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential, wait_random

from adapters.bounded_answer import AnswerTooLate, BoundedAnswerError, get_bounded
from adapters.cmdb.values import loads_strict
from adapters.http_common import Credentials, SourceError, clean_message, describe_error

USER_AGENT = "metrics-sched/0.1"


class Unreachable(SourceError):
    """No usable answer after the retries: connection errors, timeouts, 5xx."""


class BadReply(Exception):
    """The server answered, but not with a usable page (3xx/4xx, not JSON)."""

    def __init__(self, message: str, *, malformed: bool = False) -> None:
        super().__init__(message)
        self.malformed = malformed


class _ServerError(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status


@dataclass(frozen=True)
class Page:
    body: object
    next_link: str | None  # the Link header's rel="next" target, if any
    received_at: float  # unix seconds


class HeaderAuth(httpx.Auth):
    """Sets Authorization per request from files re-read on rotation."""

    def __init__(self, credentials: Credentials) -> None:
        self.credentials = credentials

    def auth_flow(self, request: httpx.Request) -> Generator[httpx.Request, httpx.Response, None]:
        request.headers["Authorization"] = self.credentials.authorization()
        yield request

    def __repr__(self) -> str:
        return f"HeaderAuth(kind={self.credentials.kind!r})"


class CmdbHttp:
    def __init__(self, *, timeout: float, retries: int, credentials: Credentials | None, ca_file: Path | None,
                 max_bytes: int, transport: httpx.BaseTransport | None = None,
                 sleep: Callable[[float], None] = time.sleep, wall_clock: Callable[[], float] = time.time) -> None:
        self.retries = retries
        self._timeout = timeout
        self._max_bytes = max_bytes
        self._credentials = credentials
        self._sleep = sleep
        self._wall_clock = wall_clock
        verify: ssl.SSLContext | bool = ssl.create_default_context(cafile=str(ca_file)) if ca_file else True
        self._client = httpx.Client(
            auth=HeaderAuth(credentials) if credentials else None,
            verify=verify,
            timeout=httpx.Timeout(timeout),
            headers={"Accept": "application/json", "User-Agent": USER_AGENT},
            trust_env=False,  # no proxies or certificate bundles picked up from the environment
            follow_redirects=False,
            transport=transport,
        )

    def secrets(self) -> list[str]:
        return self._credentials.secrets() if self._credentials else []

    def get(self, url: str, params: Mapping[str, str]) -> Page:
        # httpx would replace the URL's own query with `params`; merge them so both count.
        target = httpx.URL(url).copy_merge_params(dict(params)) if params else httpx.URL(url)
        retrying = Retrying(
            stop=stop_after_attempt(self.retries + 1),
            # 0.25 s doubling to 2 s, plus up to 0.25 s of jitter so many schedulers do not retry in step.
            wait=wait_exponential(multiplier=0.25, max=2.0) + wait_random(0, 0.25),
            retry=retry_if_exception_type((httpx.TransportError, _ServerError, AnswerTooLate)),
            sleep=self._sleep,
            reraise=True,
        )
        attempts = self.retries + 1
        try:
            resp = retrying(self._once, target)
        except httpx.TransportError as exc:
            raise Unreachable(self._message(f"GET {target}: {describe_error(exc)} ({attempts} attempts)")) from None
        except _ServerError as exc:
            raise Unreachable(self._message(f"GET {target}: HTTP {exc.status} ({attempts} attempts)")) from None
        except AnswerTooLate as exc:
            raise Unreachable(self._message(f"GET {target}: {exc} ({attempts} attempts)")) from None
        except BoundedAnswerError as exc:
            raise BadReply(self._message(f"GET {target}: {exc}")) from None
        received_at = self._wall_clock()
        if resp.is_redirect:
            location = resp.headers.get("Location", "?")
            raise BadReply(self._message(f"GET {target}: HTTP {resp.status_code} redirect to {location}; "
                                         "configure the final URL (redirects are not followed)"))
        if resp.status_code != 200:
            raise BadReply(self._message(f"GET {target}: HTTP {resp.status_code}: {resp.text[:200]}"))
        try:
            body = loads_strict(resp.content)
        except ValueError as exc:
            raise BadReply(self._message(f"GET {target}: malformed JSON: {exc}"), malformed=True) from None
        next_link = resp.links.get("next", {}).get("url")
        return Page(body=body, next_link=next_link or None, received_at=received_at)

    def _once(self, target: httpx.URL) -> httpx.Response:
        resp = get_bounded(self._client, target, timeout=self._timeout, max_bytes=self._max_bytes)
        if resp.status_code >= 500:
            raise _ServerError(resp.status_code)
        return resp

    def _message(self, text: str) -> str:
        return clean_message(text, self.secrets())

    def close(self) -> None:
        self._client.close()
