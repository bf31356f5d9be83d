"""WriteLane: KubeClient's request pool (binds, events, status patches, and the reads and writes whose reply
is parsed) on keep-alive stdlib http.client connections of a pool of our own.

Why not httpx for these: every bound pod costs two such writes (the Binding and its Scheduled event), and
httpx's per-request machinery (URL and header models, auth flow generator, event hooks, the httpcore pool
and h11 state machine under it) cost 1.2 CPU-ms per write on the dev cluster, against 0.4 ms for the same
POST on an http.client connection (bench/http_write_bench.py) - more than the scheduling cycle of a pod at
500 nodes. http.client still does the HTTP/1.1 framing and parsing; this module only keeps the connections
(bounded, idle ones expired or dropped when the server closed them) and adds what KubeClient's httpx path
adds: the bearer token (refreshed and retried once after a 401, as BearerAuth does), the kubeconfig's
tls-server-name as SNI and verified name, timeouts, and the write fence's last look once a connection is in
hand, before the first byte goes out. All of KubeClient.request/send share it, so a read right after a failed
bind (DefaultBinder's re-read) finds a warm connection as it did on httpx's pool. LISTs and watches stay on
httpx (long streamed bodies on a pool of their own); so does everything of a client configured
with a proxy (httpx speaks the kubeconfig's proxy-url; http.client's tunnel would be a second implementation)
or with a test transport.
"""

from __future__ import annotations

import http.client
import select
import ssl
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from urllib.parse import urlencode, urlsplit

from adapters.kubernetes.tokens import TokenSource

# A connection idle longer than this is closed rather than reused: the API server (and any load balancer in
# front of it) may drop idle connections, and a write sent on a dropped one fails ambiguously.
IDLE_EXPIRY_SECONDS = 30.0


class LaneError(Exception):
    """The write did not get an answer (connect, send or read failed, or timed out): its outcome is unknown
    unless `sent` is False."""

    def __init__(self, message: str, *, kind: str, sent: bool) -> None:
        super().__init__(message)
        self.kind = kind
        self.sent = sent


@dataclass(frozen=True, slots=True)
class LaneReply:
    status_code: int
    reason_phrase: str
    retry_after: str | None
    content: bytes  # the body of an error reply (a Status), or of any reply when asked for; else empty


class _TLSConnection(http.client.HTTPConnection):
    """HTTPS with the SNI and certificate name chosen apart from the host (kubeconfig tls-server-name)."""

    default_port = 443

    def __init__(self, host: str, port: int | None, *, timeout: float, context: ssl.SSLContext,
                 server_name: str) -> None:
        super().__init__(host, port, timeout=timeout)
        self._context = context
        self._server_name = server_name

    def connect(self) -> None:
        super().connect()  # TCP, with TCP_NODELAY
        self.sock = self._context.wrap_socket(self.sock, server_hostname=self._server_name)


class WriteLane:
    def __init__(self, server: str, *, context: ssl.SSLContext | None, token: TokenSource | None,
                 tls_server_name: str | None, max_connections: int, connect_timeout: float,
                 pool_timeout: float, user_agent: str, accept: str,
                 clock: Callable[[], float] = time.monotonic) -> None:
        url = urlsplit(server)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"the write lane needs an http(s) server URL, not {server!r}")
        if url.scheme == "https" and context is None:
            raise ValueError("an https server needs a TLS context")
        self._https = url.scheme == "https"
        self._host = url.hostname
        self._port = url.port
        self._prefix = url.path.rstrip("/")  # a server URL may carry a path (a proxy in front of the API)
        self._context = context
        self._server_name = tls_server_name or url.hostname
        self._token = token
        self._connect_timeout = connect_timeout
        self._pool_timeout = pool_timeout
        self._headers = {"Accept": accept, "User-Agent": user_agent}
        self._clock = clock
        self._slots = threading.BoundedSemaphore(max_connections)
        self._lock = threading.Lock()
        self._idle: list[tuple[http.client.HTTPConnection, float]] = []  # most recently used last
        self._closed = False

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for connection, _ in idle:
            connection.close()

    def send(self, method: str, path: str, content: bytes | None, content_type: str,
             params: Mapping[str, str] | None, *, timeout: float,
             before_send: Callable[[], None] | None = None, keep_body: bool = False) -> LaneReply:
        """One request; the reply's status (and an error reply's body, or any reply's with keep_body). before_send
        runs once a connection is in hand, just before the first byte goes out (it may raise to stop the write).
        Raises LaneError."""
        target = self._prefix + path + (f"?{urlencode(params)}" if params else "")
        headers = dict(self._headers)
        if content is not None:
            headers["Content-Type"] = content_type
        reply = self._exchange(method, target, content, headers, timeout, before_send, keep_body)
        if reply.status_code == 401 and self._token is not None and self._token.refresh():
            # As BearerAuth: the credential was rotated under us; one retry with the new one.
            reply = self._exchange(method, target, content, headers, timeout, before_send, keep_body)
        return reply

    def _exchange(self, method: str, target: str, content: bytes | None, headers: dict[str, str], timeout: float,
                  before_send: Callable[[], None] | None, keep_body: bool) -> LaneReply:
        token = self._token.token() if self._token is not None else ""
        if token:
            headers["Authorization"] = f"Bearer {token}"
        else:
            headers.pop("Authorization", None)  # a client-certificate credential
        if not self._slots.acquire(timeout=self._pool_timeout):
            raise LaneError(f"no connection free within {self._pool_timeout:g}s", kind="PoolTimeout", sent=False)
        connection: http.client.HTTPConnection | None = None
        sent = False
        try:
            connection = self._take()
            if connection is None:
                connection = self._connect()
            if before_send is not None:
                before_send()
            assert connection.sock is not None
            connection.sock.settimeout(timeout)
            sent = True
            connection.request(method, target, body=content, headers=headers)
            response = connection.getresponse()
            body = response.read()
            reply = LaneReply(response.status, response.reason, response.getheader("Retry-After"),
                              body if keep_body or response.status >= 400 else b"")
            if response.will_close:
                connection.close()
            else:
                self._give_back(connection)
            connection = None
            return reply
        except (OSError, http.client.HTTPException) as exc:
            kind = "Timeout" if isinstance(exc, TimeoutError) else type(exc).__name__
            raise LaneError(str(exc) or kind, kind=kind, sent=sent) from exc
        finally:
            if connection is not None:
                connection.close()  # failed or refused part-way: its state is unknown
            self._slots.release()

    def _connect(self) -> http.client.HTTPConnection:
        connection: http.client.HTTPConnection
        if self._https:
            assert self._context is not None
            connection = _TLSConnection(self._host, self._port, timeout=self._connect_timeout,
                                        context=self._context, server_name=self._server_name)
        else:
            connection = http.client.HTTPConnection(self._host, self._port, timeout=self._connect_timeout)
        connection.connect()
        return connection

    def _take(self) -> http.client.HTTPConnection | None:
        """The most recently used idle connection still worth using, or None."""
        now = self._clock()
        while True:
            with self._lock:
                if not self._idle:
                    return None
                connection, last_used = self._idle.pop()
            if now - last_used <= IDLE_EXPIRY_SECONDS and not _closed_by_peer(connection):
                return connection
            connection.close()

    def _give_back(self, connection: http.client.HTTPConnection) -> None:
        with self._lock:
            if not self._closed:
                self._idle.append((connection, self._clock()))
                return
        connection.close()


def _closed_by_peer(connection: http.client.HTTPConnection) -> bool:
    """An idle keep-alive connection that is readable has been closed by the server (or sent something
    unasked): either way it cannot carry a request (httpcore makes the same check before reusing one)."""
    sock = connection.sock
    if sock is None:
        return True
    try:
        poller = select.poll()  # not select.select: it fails on descriptors above 1,023
        poller.register(sock, select.POLLIN)
        return bool(poller.poll(0))
    except (OSError, ValueError):
        return True

