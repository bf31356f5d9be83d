"""KubeClient: raw-JSON HTTP access to the API server, with errors as metrics_sched.ports.ApiError.

Two connection pools: long-lived LIST/WATCH streams get their own, so a slow list or a dozen idle
watches can never take a connection the bind loop is waiting for (and vice versa). Leader election uses a
client of its own (`lease_client`): a renewal must never wait behind binds and reports for a connection.

A client built with a WriteFence sends a write (any method but GET) only while the fence is open: checked
after the rate limiter's wait and again once a connection is in hand, just before the first byte goes
out; once out, the write's whole exchange is bounded by the fence's timeout.

Every exchange with the API server (each retry its own, as client-go counts them) is told to the client's
request_observer (metrics_sched.ports.RequestObserver: the core's rest_client_* metrics), if it has one.
"""

from __future__ import annotations

import contextlib
import functools
import http.client
import logging
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx
import orjson

from adapters.kubernetes.config import KubeConfig
from adapters.kubernetes.rate_limit import TokenBucket
from adapters.kubernetes.write_lane import LaneError, LaneReply, WriteLane, shutdown_socket
from metrics_sched.ports import ApiError, RequestObserver

log = logging.getLogger(__name__)

USER_AGENT = "metrics-sched/0.1"
JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
# A write refused with 429 and a Retry-After (API Priority and Fairness sheds it before any processing, so
# sending it again is safe) is retried after the wait, as client-go does; bounded so a bind never outlives its
# purpose: at most this many retries, each wait capped.
MAX_WRITE_RETRIES = 3
MAX_RETRY_AFTER_SECONDS = 10.0


class WatchTimeout(ApiError):
    """Nothing arrived on a watch within the client read timeout: the connection may be silently dead."""


class Fenced(ApiError):
    """A write refused before any byte of it was sent: the fence was closed (leadership about to go)."""


@dataclass(frozen=True)
class WriteFence:
    """may_start: whether a write may start now. timeout: the longest a started write may take, sending and
    waiting for the answer together (half each: the answer of a write is one small read)."""

    may_start: Callable[[], bool]
    timeout: float


# httpcore's trace event just before a request's first byte is written (the connection is in hand).
_SENDING = frozenset({"http11.send_request_headers.started", "http2.send_request_headers.started"})


R = TypeVar("R")  # an answer of either transport (httpx.Response, LaneReply)

class KubeClient:
    def __init__(
        self,
        config: KubeConfig,
        *,
        max_connections: int = 16,
        qps: float | None = None,
        burst: int | None = None,
        request_timeout: float = 30.0,
        list_timeout: float = 120.0,
        connect_timeout: float = 5.0,
        watch_read_timeout: float = 60.0,
        # Each watched resource holds one connection for its watch (14 with the storage objects), and a relist
        # needs one more while the old watch closes: too few, and a watch waits for a connection forever.
        max_watch_connections: int = 24,
        user_agent: str = USER_AGENT,
        write_fence: WriteFence | None = None,
        transport: httpx.BaseTransport | None = None,
        watch_transport: httpx.BaseTransport | None = None,
        max_write_retries: int = MAX_WRITE_RETRIES,
        sleep: Callable[[float], None] = time.sleep,
        write_lane: bool = True,
        request_observer: RequestObserver | None = None,
    ) -> None:
        """max_connections: the request pool (set it to the bind concurrency). qps/burst: client-side
        limit on that pool, unlimited when qps is None (burst defaults to 2 x qps). write_fence: see the
        module. transport (and optionally a separate watch_transport) replaces the network, for tests.
        max_write_retries: how often a write refused with 429 + Retry-After is sent again (rate-limited writes
        only: a lease renewal keeps its own cadence). write_lane: request() and send() go through the WriteLane
        (see adapters/kubernetes/write_lane.py) unless a test transport or a proxy is configured; False keeps them
        on httpx (for A/B measurements)."""
        self.config = config
        self.write_fence = write_fence
        self.request_timeout = request_timeout
        self.list_timeout = list_timeout
        self.connect_timeout = connect_timeout
        self.watch_read_timeout = watch_read_timeout
        self.limiter = TokenBucket(qps, burst or max(1, int(2 * qps))) if qps else None
        self.max_watch_connections = max_watch_connections
        self.max_write_retries = max_write_retries
        self._sleep = sleep
        self.retried_after_429 = 0
        self._observer = request_observer
        self._host = httpx.URL(config.server).netloc.decode("ascii")
        # Only built for real connections: a test transport needs no CA on disk.
        tls = config.ssl_context() if transport is None else None
        headers = {"Accept": JSON, "User-Agent": user_agent}
        common: dict[str, Any] = {"base_url": config.server, "headers": headers, "auth": config.auth(),
                                  "trust_env": False, "follow_redirects": False}
        if config.proxy and transport is None:
            common["proxy"] = config.proxy
        self._http = httpx.Client(
            **common,
            verify=tls or True,
            transport=transport,
            timeout=httpx.Timeout(request_timeout, connect=connect_timeout),
            limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections),
        )
        self._watch_http = httpx.Client(
            **common,
            verify=tls or True,
            transport=watch_transport or transport,
            timeout=httpx.Timeout(list_timeout, connect=connect_timeout, read=watch_read_timeout),
            limits=httpx.Limits(max_connections=max_watch_connections,
                                max_keepalive_connections=max_watch_connections),
        )
        self._lane: WriteLane | None = None
        if write_lane and transport is None and not config.proxy:
            self._lane = WriteLane(config.server, context=tls, token=config.token,
                                   tls_server_name=config.tls_server_name, max_connections=max_connections,
                                   connect_timeout=connect_timeout, pool_timeout=request_timeout,
                                   user_agent=user_agent, accept=JSON)

    def close(self) -> None:
        if self._lane is not None:
            self._lane.close()
        self._http.close()
        self._watch_http.close()

    def __enter__(self) -> KubeClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"KubeClient(server={self.config.server!r})"

    # -- requests --------------------------------------------------------------------------------
    def request(self, method: str, path: str, body: Any = None, *, params: Mapping[str, str] | None = None,
                content_type: str = JSON, rate_limited: bool = True) -> dict[str, Any]:
        """One call on the request pool; the response body decoded as a JSON object. Raises ApiError.

        rate_limited=False skips the QPS bucket: for lease renewals, which must not queue behind a burst of
        binds (kube-scheduler gives leader election its own client for the same reason)."""
        if self._lane is not None:
            reply = self._lane_call(self._lane, method, path, body, params, content_type, limited=rate_limited,
                                    retry_429=True, keep_body=True)
            return _decode_body(method, path, reply.status_code, reply.content)
        response = self._call(self._http, method, path, body, params, content_type, limited=rate_limited)
        return _decode(method, path, response)

    def send(self, method: str, path: str, body: Any = None, *, params: Mapping[str, str] | None = None,
             content_type: str = JSON, rate_limited: bool = True, retry_429: bool = True) -> int:
        """Like request() but only the status code: for writes whose reply nobody needs to parse.

        retry_429=False returns a 429 to the caller at once, for calls where it is an answer rather than load
        shedding (an eviction a PodDisruptionBudget refuses)."""
        if self._lane is None:
            return self._call(self._http, method, path, body, params, content_type, limited=rate_limited,
                              retry_429=retry_429).status_code
        return self._lane_call(self._lane, method, path, body, params, content_type, limited=rate_limited,
                               retry_429=retry_429, keep_body=False).status_code

    def list(self, path: str, params: Mapping[str, str]) -> dict[str, Any]:
        """One LIST page, on the watch pool (big, slow, and not subject to the write rate limit)."""
        response = self._call(self._watch_http, "GET", path, None, params, JSON, limited=False,
                              timeout=httpx.Timeout(self.list_timeout, connect=self.connect_timeout))
        return _decode("GET", path, response)

    @contextlib.contextmanager
    def watch(self, path: str, params: Mapping[str, str], *, read_timeout: float | None = None,
              ) -> Iterator[WatchStream]:
        """Opens a watch stream (HTTP errors, including 410 Gone, raise ApiError before it is yielded)."""
        read = read_timeout if read_timeout is not None else self.watch_read_timeout
        if self._lane is not None:
            # On an http.client connection of its own (see write_lane.py): httpx's streaming layers (httpcore, h11)
            # cost more CPU per watch event than decoding the event's JSON.
            try:
                stream = self._lane.open_stream(path, {**params, "watch": "true"}, read_timeout=read)
            except LaneError as exc:
                self._observe("GET", None, None)
                raise ApiError(None, self._scrub(f"WATCH {path}: {exc.kind}: {exc}"), reason=exc.kind) from exc
            self._observe("GET", stream.status, None)
            try:
                if stream.status >= 400:
                    try:
                        body = stream.read_all()
                    except (OSError, http.client.HTTPException) as exc:
                        raise self._transport_error("WATCH", path, exc) from exc
                    raise self._error("WATCH", path, stream.status, body, stream.reason)
                yield WatchStream(stream.chunks(), path, stream.shutdown, timeouts=(TimeoutError,),
                                  failures=(OSError, http.client.HTTPException))
            finally:
                stream.close()
            return
        timeout = httpx.Timeout(self.list_timeout, connect=self.connect_timeout, read=read)
        request = self._watch_http.build_request("GET", path, params={**params, "watch": "true"}, timeout=timeout)
        try:
            response = self._watch_http.send(request, stream=True)
        except httpx.HTTPError as exc:
            self._observe("GET", None, None)
            raise self._transport_error("WATCH", path, exc) from exc
        self._observe("GET", response.status_code, None)
        try:
            if response.status_code >= 400:
                try:
                    response.read()
                except httpx.HTTPError as exc:
                    raise self._transport_error("WATCH", path, exc) from exc
                raise self._status_error("WATCH", path, response)
            yield WatchStream(response.iter_bytes(), path, functools.partial(_shutdown, response),
                              timeouts=(httpx.ReadTimeout,), failures=(httpx.HTTPError, httpx.StreamError))
        finally:
            response.close()

    # -- internals -------------------------------------------------------------------------------
    def _call(self, http: httpx.Client, method: str, path: str, body: Any, params: Mapping[str, str] | None,
              content_type: str, *, limited: bool, timeout: httpx.Timeout | None = None,
              retry_429: bool = True) -> httpx.Response:
        headers = {}
        content = None
        if body is not None:
            content = orjson.dumps(body)
            headers["Content-Type"] = content_type
        response = self._after_429s(
            method, path, limited and retry_429,
            lambda: self._send_once(http, method, path, content, headers, params, limited=limited, timeout=timeout),
            _retry_after)
        if response.status_code >= 400:
            raise self._status_error(method, path, response)
        return response

    def _after_429s(self, method: str, path: str, retry: bool, send: Callable[[], R],
                    wait_of: Callable[[R], float | None]) -> R:
        """send(), sent again while it answers 429 with a usable Retry-After (writes on the rate-limited pool only,
        at most max_write_retries times); the last answer."""
        retries = self.max_write_retries if retry and method != "GET" else 0
        attempt = 0
        while True:
            answer = send()
            wait = wait_of(answer) if attempt < retries else None
            if wait is None:
                return answer
            log.info("%s %s: 429 Too Many Requests, retrying in %.1fs (Retry-After)", method, path, wait)
            self.retried_after_429 += 1
            self._sleep(wait)
            attempt += 1

    def _send_once(self, http: httpx.Client, method: str, path: str, content: bytes | None, headers: dict[str, str],
                   params: Mapping[str, str] | None, *, limited: bool, timeout: httpx.Timeout | None,
                   ) -> httpx.Response:
        if limited and self.limiter is not None:
            self.limiter.acquire()
        extensions: dict[str, Any] = {}
        fence = self.write_fence if method != "GET" else None
        if fence is not None:
            # The token bucket may have slept: look again now, and once more when the bytes go out.
            if not fence.may_start():
                raise Fenced(None, f"{method} {path}: not sent (write fence closed)", reason="Fenced")
            extensions["trace"] = _fence_trace(fence, method, path)
            half = fence.timeout / 2
            timeout = httpx.Timeout(half, connect=self.connect_timeout, pool=self.request_timeout)
        started = time.monotonic()
        try:
            response = http.request(method, path, content=content, params=params, headers=headers,
                                    timeout=timeout if timeout is not None else httpx.USE_CLIENT_DEFAULT,
                                    extensions=extensions or None)
        except httpx.HTTPError as exc:
            self._observe(method, None, time.monotonic() - started)
            raise self._transport_error(method, path, exc) from exc
        self._observe(method, response.status_code, time.monotonic() - started)
        return response

    def _lane_call(self, lane: WriteLane, method: str, path: str, body: Any, params: Mapping[str, str] | None,
                   content_type: str, *, limited: bool, retry_429: bool, keep_body: bool) -> LaneReply:
        """As _call, on the lane."""
        content = orjson.dumps(body) if body is not None else None
        reply = self._after_429s(
            method, path, limited and retry_429,
            lambda: self._lane_once(lane, method, path, content, content_type, params, limited=limited,
                                    keep_body=keep_body),
            lambda answer: _retry_after_value(answer.status_code, answer.retry_after))
        if reply.status_code >= 400:
            raise self._error(method, path, reply.status_code, reply.content, reply.reason_phrase)
        return reply

    def _lane_once(self, lane: WriteLane, method: str, path: str, content: bytes | None, content_type: str,
                   params: Mapping[str, str] | None, *, limited: bool, keep_body: bool) -> LaneReply:
        """As _send_once, on the write lane: the fence's first look after the rate limiter, its last once a
        connection is in hand, and the exchange bounded by its timeout."""
        if limited and self.limiter is not None:
            self.limiter.acquire()
        fence = self.write_fence if method != "GET" else None
        timeout = self.request_timeout
        last_look: Callable[[], None] | None = None
        if fence is not None:
            if not fence.may_start():
                raise Fenced(None, f"{method} {path}: not sent (write fence closed)", reason="Fenced")
            timeout = fence.timeout / 2

            def last_look() -> None:
                if not fence.may_start():
                    raise Fenced(None, f"{method} {path}: not sent (write fence closed)", reason="Fenced")

        started = time.monotonic()
        try:
            reply = lane.send(method, path, content, content_type, params, timeout=timeout, before_send=last_look,
                              keep_body=keep_body)
        except LaneError as exc:
            self._observe(method, None, time.monotonic() - started)
            raise ApiError(None, self._scrub(f"{method} {path}: {exc.kind}: {exc}"), reason=exc.kind) from exc
        self._observe(method, reply.status_code, time.monotonic() - started)
        return reply

    def _observe(self, method: str, status: int | None, seconds: float | None) -> None:
        """One exchange to the observer: status None when no reply came (client-go's "<error>")."""
        if self._observer is not None:
            self._observer.observe_request(method, self._host, "<error>" if status is None else str(status),
                                           seconds)

    def _status_error(self, method: str, path: str, response: httpx.Response) -> ApiError:
        return self._error(method, path, response.status_code, response.content, response.reason_phrase)

    def _error(self, method: str, path: str, status_code: int, content: bytes, reason_phrase: str) -> ApiError:
        message, reason = "", ""
        try:
            status = orjson.loads(content)
        except orjson.JSONDecodeError:
            message = content[:300].decode(errors="replace")
        else:
            if isinstance(status, dict):
                message, reason = str(status.get("message", "")), str(status.get("reason", ""))
        return ApiError(status_code, self._scrub(f"{method} {path}: {message or reason_phrase}"), reason=reason)

    def _transport_error(self, method: str, path: str, exc: Exception) -> ApiError:
        return ApiError(None, self._scrub(f"{method} {path}: {type(exc).__name__}: {exc}"), reason=type(exc).__name__)

    def _scrub(self, text: str) -> str:
        # Server messages can echo request content back; a token must not leak through one. (A token of a
        # few characters would match ordinary words and is no secret anyway: leave the message intact.)
        if self.config.token is not None:
            with contextlib.suppress(Exception):
                token = self.config.token.token()
                if len(token) >= 8 and token in text:
                    text = text.replace(token, "<redacted>")
        return text


class WatchStream:
    """The events of one open watch, decoded line by line from its transport's bytes."""

    def __init__(self, chunks: Iterator[bytes], path: str, shutdown: Callable[[], None], *,
                 timeouts: tuple[type[BaseException], ...], failures: tuple[type[BaseException], ...]) -> None:
        """chunks: the body's bytes as they arrive; shutdown: wakes a reader blocked on the connection (abort);
        timeouts: the transport's errors for a read timeout, failures: its other errors."""
        self._chunks = chunks
        self._path = path
        self._shutdown = shutdown
        self._timeouts = timeouts
        self._failures = failures
        self._aborted = False
        self.malformed = 0  # lines that were not a JSON object: skipped (the reflector counts them)

    def events(self) -> Iterator[dict[str, Any]]:
        """Yields watch events until the server ends the stream; returns quietly after abort().

        Lines are split and decoded as bytes (orjson): httpx's iter_lines would first decode every chunk to
        text and split it again, which cost as much as the JSON itself."""
        pending: list[bytes] = []  # the start of a line whose end has not arrived yet
        try:
            for chunk in self._chunks:
                if b"\n" not in chunk:
                    pending.append(chunk)
                    continue
                if pending:
                    pending.append(chunk)
                    chunk = b"".join(pending)
                    pending.clear()
                *lines, rest = chunk.split(b"\n")
                if rest:
                    pending.append(rest)
                for line in lines:
                    if line.strip() and (event := self._event(line)) is not None:
                        yield event
            tail = b"".join(pending)
            if tail.strip() and (event := self._event(tail)) is not None:
                yield event
        except self._timeouts as exc:
            if not self._aborted:
                raise WatchTimeout(None, f"WATCH {self._path}: no data within the read timeout") from exc
        except self._failures as exc:
            if not self._aborted:
                raise ApiError(None, f"WATCH {self._path}: {type(exc).__name__}: {exc}") from exc

    def _event(self, line: bytes) -> dict[str, Any] | None:
        """The line's event, or None (counted, logged) when it is not a JSON object: one bad line must not
        end the watch, whose next lines are fine."""
        try:
            event = orjson.loads(line)
        except orjson.JSONDecodeError:
            event = None
        if not isinstance(event, dict):
            self.malformed += 1
            log.warning("WATCH %s: dropping a malformed event line (%d bytes)", self._path, len(line))
            return None
        return event

    def abort(self) -> None:
        """Ends the stream from another thread. Closing alone would leave the reader blocked in recv()
        until the read timeout; shutting the socket down wakes it at once."""
        self._aborted = True
        self._shutdown()


def _shutdown(response: httpx.Response) -> None:
    """abort() of a stream on httpx: its socket shut down (or, on a test transport, the response closed)."""
    stream = response.extensions.get("network_stream")
    if not shutdown_socket(stream.get_extra_info("socket") if stream is not None else None):
        response.close()


def lease_client(config: KubeConfig, *, request_timeout: float, transport: httpx.BaseTransport | None = None,
                 request_observer: RequestObserver | None = None) -> KubeClient:
    """The client for leader election alone: its own small pool, no rate limit, timeouts within the renew
    deadline (kube-scheduler builds its leader-election client the same way)."""
    return KubeClient(config, max_connections=2, max_watch_connections=1, request_timeout=request_timeout,
                      connect_timeout=min(request_timeout, 5.0), user_agent=f"{USER_AGENT} leader-election",
                      transport=transport, request_observer=request_observer)


def _fence_trace(fence: WriteFence, method: str, path: str) -> Callable[[str, dict[str, Any]], None]:
    def trace(event: str, _: dict[str, Any]) -> None:
        # Waiting for a pooled connection and connecting can take seconds: the last look before sending.
        if event in _SENDING and not fence.may_start():
            raise Fenced(None, f"{method} {path}: not sent (write fence closed)", reason="Fenced")

    return trace


def _retry_after(response: httpx.Response) -> float | None:
    """The wait a 429 asks for (delta-seconds), capped; None: not a 429 or no usable Retry-After (client-go
    too only retries when the server says when)."""
    return _retry_after_value(response.status_code, response.headers.get("Retry-After"))


def _retry_after_value(status_code: int, header: str | None) -> float | None:
    if status_code != 429:
        return None
    try:
        seconds = float(header or "")
    except ValueError:
        return None
    return min(max(seconds, 0.0), MAX_RETRY_AFTER_SECONDS)


def _decode(method: str, path: str, response: httpx.Response) -> dict[str, Any]:
    return _decode_body(method, path, response.status_code, response.content)


def _decode_body(method: str, path: str, status_code: int, content: bytes) -> dict[str, Any]:
    try:
        body = orjson.loads(content)
    except orjson.JSONDecodeError:
        raise ApiError(status_code, f"{method} {path}: the reply is not JSON") from None
    if not isinstance(body, dict):
        raise ApiError(status_code, f"{method} {path}: the reply is not a JSON object")
    return body
