"""A small HTTP server for the scheduler's endpoints: /healthz, /readyz, /metrics, /decisions, /sources, /values.

Handlers are registered by path; each returns (status, content type, body), the body as bytes or as an
iterator of chunks, streamed so a large answer is never held whole. Runs in daemon threads and never touches
the scheduling hot path except through the thread-safe reads handlers make.

With `tls` (a provider of the current server context: the certificate may be rotated) every connection is
TLS, its handshake done in the connection's own thread within the request deadline; with `guard` every request
is checked (authenticated, authorized) before its handler runs, and a refusal is answered instead (401, 403,
503). Without either it is plain HTTP for anyone: the config allows that only on a loopback address.

Any pod can reach the port, so a client must not be able to exhaust the process, nor starve the kubelet's
probes (issue 44: 16 idle connections made three probes in a row fail):
- connections: at most `max_connections` open, `per_client` from one address; at the cap, the one that has waited
  longest for its request gives way to the new one (connections.py); a TLS handshake must end within
  `handshake_timeout`, the whole request arrive within `request_timeout` (a client sending half a request, or a
  byte a second, is cut off), its answer be taken within `response_timeout`;
- requests: the probe paths (`probe_paths`, cheap reads) are always answered; at most `max_threads` other requests
  are answered at once (one more is answered 503 at once).
A handler raises BadRequest for a bad parameter (400).
"""

from __future__ import annotations

import io
import logging
import socket
import ssl
import sys
import threading
import time
from collections.abc import Callable, Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol
from urllib.parse import parse_qs, urlsplit

from metrics_sched.serving.connections import MAX_CONNECTIONS, MAX_PER_CLIENT, ConnectionLimits, Ticket
from metrics_sched.serving.gate import (
    DEFAULT_ALWAYS_ALLOW_PATHS,
    PROXIED_AUTHORIZATION_HEADER,
    Refusal,
    credentials,
)
from metrics_sched.serving.route import BadRequest, Body, Route, text

log = logging.getLogger(__name__)

MAX_THREADS = 16  # requests other than the probes answered at once
HANDSHAKE_TIMEOUT = 2.0  # seconds for a TLS handshake (a kubelet's, on the node, takes milliseconds)
REQUEST_TIMEOUT = 10.0  # seconds for the handshake, the request line and headers, in total
RESPONSE_TIMEOUT = 30.0  # seconds for the client to take the whole answer


class Guard(Protocol):
    def check(self, verb: str, path: str, authorization: str | None) -> Refusal | None: ...


class _DeadlineReader(io.RawIOBase):
    """The socket's input with one deadline for the whole request: a socket timeout alone restarts with
    every byte received, so a client sending a byte at a time would hold its thread forever."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self._sock = sock
        self.deadline = deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("request not received in time")
        self._sock.settimeout(remaining)
        return self._sock.recv_into(buffer)


ServeConnection = Callable[[socket.socket, Any, "_Server", Ticket], object]


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    # socketserver's backlog is 5: a burst of connections overflows it and a probe's connection then waits for
    # the kernel's retransmission (1 s, then 3 s): past the probe's timeout. Accepting is cheap; the cap is ours.
    request_queue_size = 128

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], serve: ServeConnection,
                 limits: ConnectionLimits, tls: bool) -> None:
        self.limits = limits
        self.tls = tls
        self._serve_connection = serve
        super().__init__(address, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        ticket = self.limits.admit(request, str(client_address[0]))
        if ticket is None:
            self._refuse(request)
            return
        try:
            thread = threading.Thread(target=self._serve, args=(request, client_address, ticket), daemon=True)
            thread.start()
        except BaseException:
            self.shutdown_request(request)
            self.limits.release(ticket)
            raise

    def _serve(self, request: Any, client_address: Any, ticket: Ticket) -> None:
        """As ThreadingMixIn's thread, with the connection's ticket released once it is closed."""
        try:
            self._serve_connection(request, client_address, self, ticket)
        except Exception:  # noqa: BLE001 - as socketserver's own thread: logged by handle_error, never raised
            self.handle_error(request, client_address)
        finally:
            self.shutdown_request(request)
            self.limits.release(ticket)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A failed TLS handshake (a plain-HTTP client, one that does not trust the certificate) or a client gone:
        # the client's problem, not a traceback on stderr.
        exc = sys.exc_info()[1]
        if isinstance(exc, OSError):
            log.debug("http: connection from %s failed: %s", client_address, exc)
            return
        log.exception("http: serving %s failed", client_address)

    def _refuse(self, request: socket.socket) -> None:
        # From the accepting thread, so never blocking: the answer fits the socket's send buffer or is lost.
        log.warning("http: %d connections being answered, refusing one", self.limits.max_connections)
        if self.tls:  # no handshake from this thread: the connection is closed unanswered
            self.shutdown_request(request)
            return
        try:
            request.setblocking(False)
            request.send(b"HTTP/1.0 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n"
                         b"Connection: close\r\nRetry-After: 1\r\n\r\nbusy\n")
        except OSError:
            pass
        self.shutdown_request(request)


class HTTPServer:
    def __init__(self, host: str, port: int, *, max_threads: int = MAX_THREADS,
                 max_connections: int = MAX_CONNECTIONS, per_client: int = MAX_PER_CLIENT,
                 handshake_timeout: float = HANDSHAKE_TIMEOUT, request_timeout: float = REQUEST_TIMEOUT,
                 response_timeout: float = RESPONSE_TIMEOUT, probe_paths: Iterable[str] = DEFAULT_ALWAYS_ALLOW_PATHS,
                 tls: Callable[[], ssl.SSLContext] | None = None, guard: Guard | None = None) -> None:
        self.routes: dict[str, Route] = {}
        routes = self.routes
        probes = frozenset(probe_paths)
        slots = threading.BoundedSemaphore(max_threads)
        self.limits = limits = ConnectionLimits(max_connections, per_client)

        class Handler(BaseHTTPRequestHandler):
            def __init__(self, request: Any, client_address: Any, server: _Server, ticket: Ticket) -> None:
                self.ticket = ticket
                super().__init__(request, client_address, server)

            def setup(self) -> None:
                deadline = time.monotonic() + request_timeout
                if tls is not None:
                    self.request.settimeout(min(handshake_timeout, request_timeout))
                    self.request = tls().wrap_socket(self.request, server_side=True)  # the handshake
                super().setup()
                self.rfile.close()  # the socket's own file: replaced by one with the request's deadline
                self.rfile = io.BufferedReader(_DeadlineReader(self.connection, deadline))

            def parse_request(self) -> bool:
                # The request is here: the connection no longer gives way to newer ones (unless it just did).
                if not super().parse_request():
                    return False
                if not limits.answering(self.ticket):
                    self.close_connection = True
                    return False
                return True

            def finish(self) -> None:
                try:
                    super().finish()
                finally:
                    if tls is not None:  # the server closes the plain socket, which the TLS one took over
                        self.request.close()

            def do_GET(self) -> None:
                deadline = time.monotonic() + response_timeout
                parts = urlsplit(self.path)
                path = parts.path.rstrip("/") or "/"
                if path in probes:
                    self._answer(path, parts.query, deadline)
                    return
                if not slots.acquire(blocking=False):
                    log.warning("http: %d requests being answered, refusing one for %s", max_threads, path)
                    self._send(*text(503, "busy\n"), deadline, path, retry=True)
                    return
                try:
                    self._answer(path, parts.query, deadline)
                finally:
                    slots.release()

            def _answer(self, path: str, query: str, deadline: float) -> None:
                route = routes.get(path)
                authorization = credentials(self.headers.get("Authorization"),
                                            self.headers.get(PROXIED_AUTHORIZATION_HEADER))
                refusal = guard.check("get", path, authorization) if guard is not None else None
                if refusal is not None:
                    status, content_type, body = text(refusal.status, f"{refusal.message}\n")
                elif route is None:
                    status, content_type, body = text(404, f"no such path: {path}\n")
                else:
                    try:
                        status, content_type, body = route(parse_qs(query, keep_blank_values=True))
                    except BadRequest as exc:
                        status, content_type, body = text(400, f"{exc}\n")
                    except Exception as exc:  # a failing handler answers 500, never crashes the server
                        log.exception("handler for %s failed", path)
                        status, content_type, body = text(500, f"internal error: {type(exc).__name__}\n")
                self._send(status, content_type, body, deadline, path)

            def _send(self, status: int, content_type: str, body: Body, deadline: float, path: str, *,
                      retry: bool = False) -> None:
                self.connection.settimeout(max(0.001, deadline - time.monotonic()))
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                if retry:
                    self.send_header("Retry-After", "1")
                if isinstance(body, bytes):
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                # Streamed: no length, the end of the connection ends the body (HTTP/1.0).
                self.send_header("Connection", "close")
                self.end_headers()
                try:
                    for chunk in body:
                        remaining = deadline - time.monotonic()
                        if remaining <= 0:
                            raise TimeoutError("response not taken in time")  # handle_one_request drops the client
                        self.connection.settimeout(remaining)
                        self.wfile.write(chunk)
                except (BrokenPipeError, ConnectionResetError):
                    log.debug("http: client of %s went away", path)

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - signature is fixed
                log.debug("http: " + format, *args)

        self._server = _Server((host, port), Handler, Handler, limits, tls is not None)
        self.scheme = "https" if tls is not None else "http"
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def route(self, path: str, handler: Route) -> None:
        self.routes[path] = handler

    def start(self) -> None:
        self._thread = threading.Thread(target=self._server.serve_forever, name="http", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:  # shutdown() waits for serve_forever, forever if it never ran
            self._server.shutdown()
        self._server.server_close()


__all__ = ["HANDSHAKE_TIMEOUT", "MAX_THREADS", "REQUEST_TIMEOUT", "RESPONSE_TIMEOUT", "Guard", "HTTPServer"]
