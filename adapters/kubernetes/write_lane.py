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
bind (DefaultBinder's re-read) finds a warm connection as it did on httpx's pool. A watch opens a connection of
its own here (open_stream: never pooled, closed with the stream): every pod costs a few watch events, and
httpx's streaming layers cost more CPU per event than decoding it. LISTs stay on httpx (long bodies, on a pool of
their own); so does everything of a client configured with a proxy (httpx speaks the kubeconfig's proxy-url;
http.client's tunnel would be a second implementation) or with a test transport.
"""

from __future__ import annotations

import contextlib
import http.client
import re
import select
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any
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


# http.client's own limits on a response head.
_MAX_LINE = 65536
_MAX_HEADERS = 100
# What http.client refuses in a request target (control characters and spaces) and in a header value (a line
# break not followed by whitespace: a header injected into the request).
_BAD_TARGET = re.compile("[\x00-\x20\x7f]").search
_BAD_VALUE = re.compile("\n(?![ \t])|\r(?![ \t\n])").search
# Methods whose request carries a Content-Length even without a body (as http.client sends them).
_BODY_METHODS = frozenset({"PATCH", "POST", "PUT"})


class _Headers:
    """A response's header fields by lower-cased name: what http.client reads of them (get, get_all), without
    the email package's parser and policy objects, which cost more CPU per write than the rest of the exchange's
    parsing (the API server's replies are plain HTTP/1.1 heads: no folded lines, no encoded words)."""

    __slots__ = ("_fields",)

    def __init__(self, lines: list[bytes]) -> None:
        self._fields: dict[str, list[str]] = {}
        for line in lines:
            name, colon, value = line.decode("iso-8859-1").partition(":")
            if colon:
                self._fields.setdefault(name.strip().lower(), []).append(value.strip())

    def get(self, name: str, default: str | None = None) -> str | None:
        values = self._fields.get(name.lower())
        return values[0] if values else default

    def get_all(self, name: str, failobj: list[str] | None = None) -> list[str] | None:
        return self._fields.get(name.lower()) or failobj

    def items(self) -> list[tuple[str, str]]:
        return [(name, value) for name, values in self._fields.items() for value in values]


class _Response(http.client.HTTPResponse):
    """http.client's response with the head read by _Headers (see there); the body, chunked or not, and the
    connection's reuse are http.client's own. begin() is HTTPResponse.begin's logic with that one change."""

    def begin(self) -> None:
        if self.headers is not None:
            return
        head = _buffered_head(self.fp)
        if head is not None:
            version, status, reason, lines = head
        else:
            while True:
                version, status, reason = self._read_status()
                lines = _read_head(self.fp)
                # An informational reply (100 Continue, 103 Early Hints: RFC 9110 15.2) comes before the final one
                # and is passed over, as urllib3 and Go's client do (http.client passes over 100 alone and would
                # take a 103 for the answer). 101 ends the exchange: nothing here asks to switch protocols.
                if not 100 <= status < 200 or status == http.client.SWITCHING_PROTOCOLS:
                    break
        self.code = self.status = status
        self.reason = reason.strip()
        if version in ("HTTP/1.0", "HTTP/0.9"):
            self.version = 10
        elif version.startswith("HTTP/1."):
            self.version = 11
        else:
            raise http.client.UnknownProtocol(version)
        self.headers = self.msg = _Headers(lines)
        encoding = self.headers.get("transfer-encoding")
        self.chunked = bool(encoding and encoding.lower() == "chunked")
        self.chunk_left = None
        self.will_close = self._check_close()
        self.length = None
        length = self.headers.get("content-length")
        if length and not self.chunked:
            try:
                self.length = int(length)
            except ValueError:
                self.length = None
            else:
                if self.length < 0:
                    self.length = None
        if status in (http.client.NO_CONTENT, http.client.NOT_MODIFIED) or 100 <= status < 200 \
                or self._method == "HEAD":
            self.length = 0
        if not self.will_close and not self.chunked and self.length is None:
            self.will_close = True


def _buffered_head(fp: Any) -> tuple[str, int, str, list[bytes]] | None:
    """The status line and header lines of a response whose whole head has arrived (the usual case: the API
    server's short replies come in one segment), read out of the buffer at once instead of a readline() per line;
    None, with nothing consumed, for anything else (more to wait for, a 100 Continue, bare line feeds, anything
    malformed): http.client's path then reads it, and raises what it raises."""
    data = fp.peek(_MAX_LINE)  # what is buffered (one read if nothing was); never consumed here
    end = data.find(b"\r\n\r\n")
    if end < 0:
        return None
    head = data[:end]
    if head.count(b"\n") != head.count(b"\r\n"):
        return None
    status_line, _, fields = head.partition(b"\r\n")
    parts = status_line.decode("iso-8859-1").split(None, 2)
    if (len(parts) < 2 or not parts[0].startswith("HTTP/") or len(parts[1]) != 3 or not parts[1].isascii()
            or not parts[1].isdigit()):  # isdigit() alone takes superscripts, which int() refuses
        return None
    status = int(parts[1])
    lines = fields.split(b"\r\n") if fields else []
    if status < 200 or len(lines) > _MAX_HEADERS:  # 1xx (begin() passes over them), or too many fields
        return None
    fp.read(end + 4)
    return parts[0], status, parts[2] if len(parts) == 3 else "", lines


def _read_head(fp: Any) -> list[bytes]:
    """The header lines of a response, up to the empty line (http.client's limits)."""
    lines: list[bytes] = []
    while True:
        line = fp.readline(_MAX_LINE + 1)
        if len(line) > _MAX_LINE:
            raise http.client.LineTooLong("header line")
        if line in (b"\r\n", b"\n", b""):
            return lines
        lines.append(line)
        if len(lines) > _MAX_HEADERS:
            raise http.client.HTTPException(f"got more than {_MAX_HEADERS} headers")


class _PlainConnection(http.client.HTTPConnection):
    response_class = _Response


class _TLSConnection(http.client.HTTPConnection):
    """HTTPS with the SNI and certificate name chosen apart from the host (kubeconfig tls-server-name)."""

    default_port = 443
    response_class = _Response

    def __init__(self, host: str, port: int | None, *, timeout: float, context: ssl.SSLContext,
                 server_name: str, session: ssl.SSLSession | None = None) -> None:
        super().__init__(host, port, timeout=timeout)
        self._context = context
        self._server_name = server_name
        self._session = session

    def connect(self) -> None:
        super().connect()  # TCP, with TCP_NODELAY
        # An earlier connection's session, when there is one, is offered for resumption: the server may resume it
        # (no certificate to send, sign and verify again: about half the handshake's CPU on our side) or
        # answer with a full handshake, verified as always.
        self.sock = self._context.wrap_socket(self.sock, server_hostname=self._server_name, session=self._session)


class LaneStream:
    """A reply read as it arrives (a watch), on a connection of its own, closed with the stream."""

    def __init__(self, connection: http.client.HTTPConnection, response: _Response) -> None:
        self._connection = connection
        self._response = response
        self.status = response.status
        self.reason = response.reason

    def chunks(self, size: int = 65_536) -> Iterator[bytes]:
        """The body's bytes as they arrive (chunked transfer decoded), until the server ends it. Raises OSError
        (TimeoutError when nothing arrived within the read timeout) or http.client.HTTPException."""
        read = self._response.read1
        while chunk := read(size):
            yield chunk

    def read_all(self) -> bytes:
        return self._response.read()

    def shutdown(self) -> None:
        """Wakes a reader blocked in recv() at once (from another thread); close() alone would not."""
        shutdown_socket(self._connection.sock)

    def close(self) -> None:
        self._response.close()
        self._connection.close()


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
        host = url.hostname
        if ":" in host:  # an IPv6 address's zone is written "%25zone" in a URL (RFC 6874); the socket takes "%zone"
            host = host.replace("%25", "%", 1)
        self._host = host
        # The port always given: http.client reads a host without one as "host:port", and an IPv6 address's last
        # group as its port ("::1" would be host "::", port 1).
        self._port = url.port if url.port is not None else (443 if self._https else 80)
        self._prefix = url.path.rstrip("/")  # a server URL may carry a path (a proxy in front of the API)
        self._context = context
        self._server_name = tls_server_name or host.partition("%")[0]  # a certificate names the address, no zone
        self._token = token
        self._connect_timeout = connect_timeout
        self._pool_timeout = pool_timeout
        self._headers = {"Accept": accept, "User-Agent": user_agent}
        for name, value in self._headers.items():
            if _BAD_VALUE(value):
                raise ValueError(f"invalid {name} header value {value!r}")
        self._host_header = _host_header(url.hostname, url.port, 443 if self._https else 80)
        self._clock = clock
        self._slots = threading.BoundedSemaphore(max_connections)
        self._lock = threading.Lock()
        self._idle: list[tuple[http.client.HTTPConnection, float]] = []  # most recently used last
        self._closed = False
        # The TLS session of the last connection opened, offered to the next one (a burst opens dozens at once).
        self._session: ssl.SSLSession | None = None

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

    def open_stream(self, path: str, params: Mapping[str, str] | None, *, read_timeout: float) -> LaneStream:
        """A GET whose reply is read as it arrives (a watch), on a new connection that is never pooled (it stays
        busy for the stream's life) and is closed with the stream; retried once after a 401 with a refreshed
        token, as send(). Raises LaneError."""
        target = self._prefix + path + (f"?{urlencode(params)}" if params else "")
        for attempt in range(2):
            headers = self._authorized(dict(self._headers))
            connection: http.client.HTTPConnection | None = None
            try:
                connection = self._connect()
                assert connection.sock is not None
                connection.sock.settimeout(read_timeout)
                connection.request("GET", target, headers=headers)
                response = connection.getresponse()
            except (OSError, http.client.HTTPException) as exc:
                if connection is not None:
                    connection.close()
                kind = "Timeout" if isinstance(exc, TimeoutError) else type(exc).__name__
                raise LaneError(str(exc) or kind, kind=kind, sent=connection is not None) from exc
            assert isinstance(response, _Response)
            if response.status == 401 and attempt == 0 and self._token is not None and self._token.refresh():
                connection.close()
                continue
            return LaneStream(connection, response)
        raise AssertionError("unreachable")

    def _authorized(self, headers: dict[str, str]) -> dict[str, str]:
        """`headers` with the bearer token as it is now (none for a client-certificate credential)."""
        token = self._token.token() if self._token is not None else ""
        if token:
            headers["Authorization"] = f"Bearer {token}"
        else:
            headers.pop("Authorization", None)
        return headers

    def _exchange(self, method: str, target: str, content: bytes | None, headers: dict[str, str], timeout: float,
                  before_send: Callable[[], None] | None, keep_body: bool) -> LaneReply:
        self._authorized(headers)
        try:
            request = self._head(method, target, headers, content)
        except ValueError as exc:  # refused before any connection: nothing was sent
            raise LaneError(str(exc), kind="InvalidRequest", sent=False) from exc
        if not self._slots.acquire(timeout=self._pool_timeout):
            raise LaneError(f"no connection free within {self._pool_timeout:g}s", kind="PoolTimeout", sent=False)
        connection: http.client.HTTPConnection | None = None
        sent = fresh = False
        response: _Response | None = None
        try:
            connection = self._take()
            if connection is None:
                connection, fresh = self._connect(), True
            if before_send is not None:
                before_send()
            sock = connection.sock
            assert sock is not None
            sock.settimeout(timeout)
            sent = True
            # The head and the body in one write (one TLS record), as http.client would frame them (its request()
            # sends them apart, and builds the head one validated header at a time: a third of a write's CPU).
            sock.sendall(request if content is None else request + content)
            response = _Response(sock, method=method)
            response.begin()
            body = response.read()
            if fresh:
                self._remember(sock)
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
            if connection is not None:  # failed or refused part-way: its state is unknown
                # The response's reader holds the socket open (makefile): closed first, or the connection would
                # stay open after a timeout, and a write the network still holds could land after the fence closed.
                if response is not None:
                    response.close()
                connection.close()
            self._slots.release()

    def _head(self, method: str, target: str, headers: Mapping[str, str], content: bytes | None) -> bytes:
        """The request line and header block as http.client.HTTPConnection.request writes them for these arguments
        (Host, Accept-Encoding: identity, the headers in order, Content-Length), with its checks (ValueError)."""
        if _BAD_TARGET(target) or not target.isascii():
            raise ValueError(f"invalid request target {target!r}: control characters, spaces or non-ASCII")
        lines = [f"{method} {target} HTTP/1.1", f"Host: {self._host_header}", "Accept-Encoding: identity"]
        if content is not None:
            lines.append(f"Content-Length: {len(content)}")
        elif method.upper() in _BODY_METHODS:
            lines.append("Content-Length: 0")
        for name, value in headers.items():
            if _BAD_VALUE(value):
                raise ValueError(f"invalid {name} header value")  # not shown: it may be the token
            lines.append(f"{name}: {value}")
        lines += ("", "")
        return "\r\n".join(lines).encode("latin-1")

    def _remember(self, sock: socket.socket) -> None:
        """Keeps a new connection's TLS session once it has answered (TLS 1.3 sends its tickets after the
        handshake: with the first reply they have arrived)."""
        session = sock.session if isinstance(sock, ssl.SSLSocket) else None
        if session is not None and session.has_ticket:
            self._session = session

    def _connect(self) -> http.client.HTTPConnection:
        connection: http.client.HTTPConnection
        if self._https:
            assert self._context is not None
            connection = _TLSConnection(self._host, self._port, timeout=self._connect_timeout,
                                        context=self._context, server_name=self._server_name, session=self._session)
        else:
            connection = _PlainConnection(self._host, self._port, timeout=self._connect_timeout)
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


def _host_header(host: str, port: int | None, default_port: int) -> str:
    """The Host header http.client sends to (host, port): an IPv6 address in brackets without its zone, the port
    unless default."""
    shown = host.encode("idna").decode("ascii") if not host.isascii() else host
    if ":" in shown:
        shown = f"[{shown.partition('%')[0]}]"
    return shown if port is None or port == default_port else f"{shown}:{port}"


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


def shutdown_socket(sock: object) -> bool:
    """Shuts a connection's socket down so a reader blocked in recv() (another thread) wakes at once; False when
    `sock` is not a socket (nothing done)."""
    if not isinstance(sock, socket.socket):
        return False
    with contextlib.suppress(OSError):
        # The plain-socket method: SSLSocket.shutdown would also drop the SSL object under the reader.
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    return True
