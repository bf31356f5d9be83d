"""Small HTTP(S) servers on loopback for tests that need a real socket (fake Prometheus, an API server that says
401, the tenant proxy): one way to answer and one way to run them, instead of a copy in each test module."""

from __future__ import annotations

import ssl
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

__all__ = ["QuietHandler", "serving"]


class QuietHandler(BaseHTTPRequestHandler):
    """A request handler that logs nothing (pytest shows what a test asserts) and answers in one call."""

    def reply(self, status: int, body: bytes, headers: Mapping[str, str] | None = None) -> None:
        self.send_response(status)
        for name, value in (headers or {"Content-Type": "application/json"}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the signature is http.server's
        pass


@contextmanager
def serving(handler: type[BaseHTTPRequestHandler], context: ssl.SSLContext | None = None,
            name: str = "local-http") -> Iterator[str]:
    """Serves `handler` on 127.0.0.1 (TLS with `context`) until the block ends; yields the base URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    if context is not None:
        server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, name=name, daemon=True)
    thread.start()
    try:
        yield f"{'https' if context is not None else 'http'}://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
