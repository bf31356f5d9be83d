"""The Prometheus HTTP API through prometheus-api-client's session, with failures sorted into two kinds.

`PrometheusUnreachable`: no connection at all (refused, DNS, TLS, client certificate refused, proxy,
connect timeout): the whole source is down and the refresh stops. `QueryError`: Prometheus answered but
this query failed (non-200 status, bad PromQL, read timeout, malformed body): only that metric fails.

Transport: prometheus-api-client configures the requests session that is the transport; everything a
real deployment needs goes through their public APIs: static headers (`PrometheusConnect(headers=)`),
the forward proxy (`proxy=`), retries off (`retry=`), the timeout (`timeout=`), and a configured
`requests.Session` (`session=`, "to enable complex HTTP configuration") holding TLS verification
(`verify`), the client certificate (`cert`), an `auth` hook that sets Authorization and the file-backed
headers on every request, and a response hook that turns a non-200 answer into a typed error carrying the
status and Prometheus' `errorType`/`error` (the library's own error for a non-200 answer is an exception
whose only content is its text).

The session never retries (the next refresh is the retry, and a refresh must stay bounded), never follows
redirects, never reads proxies or .netrc from the environment, and always verifies TLS. Each answer is
streamed and bounded (adapters.bounded_answer): at most `maxResponseBytes` are read (an error answer's
first ERROR_BODY_BYTES only), and `timeout` is the whole answer's, from the connect to the last byte (the
session's adapter, adapters.prometheus.watched_adapter, shows the Cutter its sockets).

Decoding: `query` sends exactly what `PrometheusConnect.custom_query` sends (GET, the same session, URL,
headers and timeout) but decodes the body itself instead of the library's `response.json()` (the
standard library's json): at 5,000 nodes an answer is 5,000-10,000 elements and over 1 MB, and every
refresh decodes four of them. A well-formed instant vector is decoded by msgspec straight into typed
`Element`s (shape and types checked in C: the reducer then does no per-element checks); anything else
(a scalar, a native histogram, a label that is not a string) by orjson into plain JSON, which the reducer
checks element by element.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

import msgspec
import orjson
import requests
from prometheus_api_client import PrometheusConnect
from prometheus_api_client.exceptions import PrometheusApiClientException
from requests.auth import AuthBase
from urllib3.exceptions import HTTPError as Urllib3Error
from urllib3.exceptions import MaxRetryError, ReadTimeoutError
from urllib3.util.retry import Retry

from adapters.bounded_answer import (
    BOUNDED_HEADERS,
    CHUNK_BYTES,
    ERROR_BODY_BYTES,
    AnswerTooLate,
    BoundedAnswerError,
    Cutter,
    read_body,
)
from adapters.http_common import Credentials, SecretFile, SourceError, clean_message, describe_error
from adapters.prometheus.config import PrometheusConfig, SecretHeader
from adapters.prometheus.series import Element, RawElement
from adapters.prometheus.watched_adapter import WatchedAdapter

USER_AGENT = "metrics-sched/0.1"
_DETAIL_LIMIT = 200


class PrometheusUnreachable(SourceError):
    pass


class QueryError(Exception):
    """One query failed; the message is scrubbed and short."""


class HTTPStatusError(Exception):
    """A non-200 answer, raised by the session's response hook: the status and a short, unscrubbed detail."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(status, detail)
        self.status = status
        self.detail = detail


class FileWatch:
    """Re-reads a secret file as soon as it changes (inode, size or mtime; a kubelet rotation swaps a
    symlink), so a rotated token is used at the next query rather than up to a minute later."""

    def __init__(self, file: SecretFile) -> None:
        self.file = file
        self._lock = threading.Lock()
        self._seen = self._signature()

    def _signature(self) -> tuple[int, int, int, int] | None:
        try:
            st = os.stat(self.file.path)
        except OSError:
            return None  # mid-swap or gone: SecretFile keeps the previous value
        return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns

    def check(self) -> None:
        signature = self._signature()
        with self._lock:
            if signature is None or signature == self._seen:
                return
            self._seen = signature
        self.file.refresh()


class RequestAuth(AuthBase):
    """Sets Authorization and the file-backed headers on every request, from files re-read on change
    (requests' own auth classes and PrometheusConnect's `headers` hold fixed values)."""

    def __init__(self, credentials: Credentials | None, secret_headers: tuple[SecretHeader, ...]) -> None:
        self.credentials = credentials
        self.secret_headers = secret_headers
        files = [h.file for h in secret_headers]
        if credentials is not None:
            files += [f for f in (credentials.token, credentials.password) if f is not None]
        self._watches = [FileWatch(f) for f in files]

    def __call__(self, request: requests.PreparedRequest) -> requests.PreparedRequest:
        for watch in self._watches:
            watch.check()
        if self.credentials is not None:
            request.headers["Authorization"] = self.credentials.authorization()
        for header in self.secret_headers:
            request.headers[header.name] = header.file.value()
        return request

    def secrets(self) -> list[str]:
        out = self.credentials.secrets() if self.credentials else []
        return out + [h.file.value() for h in self.secret_headers]

    def __repr__(self) -> str:
        kind = self.credentials.kind if self.credentials else None
        return f"RequestAuth(kind={kind!r}, headers={[h.name for h in self.secret_headers]!r})"


def raise_for_status(response: requests.Response, *args: object, **kwargs: object) -> requests.Response:
    """Response hook: a non-200 answer becomes HTTPStatusError before its body is decoded."""
    if response.status_code == 200:
        return response
    if response.is_redirect:
        raise HTTPStatusError(response.status_code, "redirects are not followed; set url to the final address")
    detail = ""
    # The answer is streamed: its first ERROR_BODY_BYTES are enough for the message, and all that is read.
    head = read_body(_raw_chunks(response), response.headers.get("Content-Encoding", ""), ERROR_BODY_BYTES,
                     truncate=True)
    try:
        payload = orjson.loads(head)
        if isinstance(payload, dict) and payload.get("error"):
            detail = f"{payload.get('errorType', 'error')}: {payload['error']}"
    except orjson.JSONDecodeError:
        pass
    if not detail:
        detail = head[:_DETAIL_LIMIT].decode("utf-8", "replace").strip() or (response.reason or "")
    raise HTTPStatusError(response.status_code, detail)


def _raw_chunks(response: requests.Response) -> Any:
    """The body as it comes off the wire (decoded by read_body, within its cap)."""
    return response.raw.stream(CHUNK_BYTES, decode_content=False)


def _read_timeout(exc: Exception) -> bool:
    """With retries off, requests reports a read timeout as a ConnectionError around urllib3's MaxRetryError
    (waiting for the headers) or around urllib3's ReadTimeoutError (reading the body)."""
    if isinstance(exc, requests.exceptions.ReadTimeout | ReadTimeoutError):
        return True
    inner = exc.args[0] if exc.args else None
    if isinstance(inner, MaxRetryError):
        inner = inner.reason
    return isinstance(inner, ReadTimeoutError)


class MalformedBody(ValueError):
    """A 200 answer that is not JSON or has no `data.result`."""


class _Data(msgspec.Struct):
    result: list[Element]


class _Body(msgspec.Struct):
    data: _Data


_VECTOR = msgspec.json.Decoder(_Body)


class _RawData(msgspec.Struct):
    result: list[RawElement]


class _RawBody(msgspec.Struct):
    data: _RawData


_RAW_VECTOR = msgspec.json.Decoder(_RawBody)
T = TypeVar("T")


def decode_result(content: bytes) -> object:
    """The `data.result` of an instant query's body: a list of `Element`s when every element is well-formed,
    else plain JSON (orjson); MalformedBody when the body is not JSON or has no `data.result` (what a plain
    result holds is the reducer's to check, element by element)."""
    try:
        return _VECTOR.decode(content).data.result
    except msgspec.ValidationError:
        pass  # JSON, but not all of it a well-formed vector: the plain path below sorts it out
    except msgspec.DecodeError:
        raise MalformedBody("not JSON") from None
    try:
        body = orjson.loads(content)
    except orjson.JSONDecodeError:
        raise MalformedBody("not JSON") from None
    try:
        result: object = body["data"]["result"]
    except (KeyError, TypeError, IndexError):
        raise MalformedBody("no data.result") from None
    return result


class Answer:
    """A 200 answer's body for the reducers: `vector`, the well-formed instant vector with each series' labels
    left as raw JSON (what the reduce plan compares, adapters.prometheus.plan: half the decoding, and a
    comparison of bytes instead of dicts), None for anything else; `result()`, the body as `decode_result`
    gives it (the general way), decoded when first asked for."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self._result: object = None
        self._decoded = False
        try:
            self.vector: list[RawElement] | None = _RAW_VECTOR.decode(body).data.result
        except msgspec.ValidationError:
            self.vector = None
            self.result()  # MalformedBody now, in the client, when there is no data.result
        except msgspec.DecodeError:
            raise MalformedBody("not JSON") from None

    def result(self) -> object:
        if not self._decoded:
            self._result, self._decoded = decode_result(self.body), True
        return self._result


class PrometheusClient:
    def __init__(self, config: PrometheusConfig, *, session: requests.Session | None = None) -> None:
        self.url = config.url
        self.timeout = config.timeout
        self.max_bytes = config.max_response_bytes
        session = session or requests.Session()
        session.trust_env = False
        session.verify = str(config.ca_file) if config.ca_file else True
        if config.client_certificate is not None:
            session.cert = (str(config.client_certificate.cert_file), str(config.client_certificate.key_file))
        self._auth = RequestAuth(config.credentials, config.secret_headers)
        session.auth = self._auth
        session.headers["User-Agent"] = USER_AGENT
        session.hooks["response"].append(raise_for_status)
        self._session = session
        no_retries = Retry(total=0, connect=0, read=0, status=0, redirect=0, raise_on_status=False)
        proxies = {"http": config.proxy_url, "https": config.proxy_url} if config.proxy_url else None
        # PrometheusConnect is typed Any (the package resolves it lazily); query() below is the typed edge.
        self._headers = dict(config.headers) or None
        self._prom: Any = PrometheusConnect(url=config.url, headers=self._headers, session=session,
                                            proxy=proxies, retry=no_retries, timeout=config.timeout)
        # PrometheusConnect mounted requests' HTTPAdapter with these retries on its URL; the same, watched.
        session.mount(self._prom.url, WatchedAdapter(max_retries=no_retries))
        self._query_url = f"{self._prom.url}/api/v1/query"
        self._sent_headers = {**(self._headers or {}), **BOUNDED_HEADERS}

    def secrets(self) -> list[str]:
        return self._auth.secrets()

    def query(self, promql: str) -> object:
        """The `data.result` of an instant query (see `decode_result`)."""
        return self._request(promql, decode_result)

    def query_answer(self, promql: str) -> Answer:
        """An instant query's answer, for the reduce plan or the general way (see Answer)."""
        return self._request(promql, Answer)

    def query_range(self, promql: str, start: float, end: float, step: float) -> list[dict[str, Any]]:
        """A range query's `data.result` (a matrix: per series its labels and [time, "value"] pairs), through
        prometheus-api-client's custom_query_range on the configured session (TLS, auth, headers, proxy). For the
        operator's `sources --history`, never the hot path: its answer is read whole, without the instant queries'
        size cap."""
        try:
            result: list[dict[str, Any]] = self._prom.custom_query_range(
                query=promql, start_time=datetime.fromtimestamp(start, UTC), end_time=datetime.fromtimestamp(end, UTC),
                step=f"{step:g}s")
        except PrometheusApiClientException as exc:  # a status its own code checks (the hook raises first)
            raise QueryError(clean_message(str(exc), self.secrets())) from None
        except Exception as exc:
            self._raise_typed(exc)
            raise
        return result

    def _request(self, promql: str, decode: Callable[[bytes], T]) -> T:
        cutter = Cutter(self.timeout)
        try:
            return decode(self._body(promql, cutter))
        except Exception as exc:
            if cutter.cut:  # whatever the cut made the transport say: the answer was late
                raise QueryError(str(AnswerTooLate(self.timeout))) from None
            self._raise_typed(exc)
            raise

    def _body(self, promql: str, cutter: Cutter) -> bytes:
        """The answer's body within the cap and the deadline. custom_query's own request (GET, the same session
        PrometheusConnect configured with the proxy and no-retry adapter, the same headers and timeout), streamed;
        only the reading and decoding differ (module docstring)."""
        with cutter:
            response = self._session.get(self._query_url, params={"query": promql}, headers=self._sent_headers,
                                         timeout=self.timeout, stream=True)
            with response:
                if response.status_code != 200:  # the response hook raised for every other status already
                    raise HTTPStatusError(response.status_code, response.reason or "")
                return read_body(_raw_chunks(response), response.headers.get("Content-Encoding", ""), self.max_bytes,
                                 cutter)

    def _raise_typed(self, exc: Exception) -> None:
        """`exc` as this client's QueryError or PrometheusUnreachable (returns for anything else)."""
        if isinstance(exc, HTTPStatusError):
            raise QueryError(clean_message(f"HTTP {exc.status}: {exc.detail}", self.secrets())) from None
        if isinstance(exc, BoundedAnswerError):
            raise QueryError(str(exc)) from None
        if isinstance(exc, requests.exceptions.ReadTimeout | requests.exceptions.ConnectionError | ReadTimeoutError):
            if _read_timeout(exc):
                raise QueryError(f"no answer within {self.timeout:g}s") from None
            # Refused, DNS, TLS, client certificate refused, connect timeout, proxy: nothing can be asked of
            # this Prometheus now.
            raise PrometheusUnreachable(f"Prometheus at {self.url} unreachable: {self._cause(exc)}") from None
        if isinstance(exc, MalformedBody):
            raise QueryError(f"malformed response: {exc}") from None
        if isinstance(exc, requests.exceptions.RequestException | Urllib3Error):
            raise QueryError(self._cause(exc)) from None
        if isinstance(exc, KeyError | TypeError | ValueError):
            raise QueryError(f"malformed response: {describe_error(exc, self.secrets(), limit=120)}") from None

    def _cause(self, exc: Exception) -> str:
        # requests wraps urllib3's MaxRetryError, whose text repeats the whole query URL; its reason is the point.
        inner = exc.args[0] if exc.args else None
        if isinstance(inner, MaxRetryError) and inner.reason is not None:
            return describe_error(inner.reason, self.secrets())
        return describe_error(exc, self.secrets())

    def close(self) -> None:
        self._prom.close()
