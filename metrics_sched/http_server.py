"""A small HTTP server for the scheduler's endpoints: /healthz, /readyz, /metrics, /decisions, /sources, /values.

Handlers are registered by path; each returns (status, content type, body). Runs in daemon threads
and never touches the scheduling hot path except through the thread-safe reads handlers make.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

log = logging.getLogger(__name__)

Response = tuple[int, str, bytes]
Route = Callable[[dict[str, list[str]]], Response]


def text(status: int, body: str) -> Response:
    return status, "text/plain; charset=utf-8", body.encode()


class HTTPServer:
    def __init__(self, host: str, port: int) -> None:
        self.routes: dict[str, Route] = {}
        routes = self.routes

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                parts = urlsplit(self.path)
                route = routes.get(parts.path.rstrip("/") or "/")
                if route is None:
                    status, content_type, body = text(404, f"no such path: {parts.path}\n")
                else:
                    try:
                        status, content_type, body = route(parse_qs(parts.query))
                    except Exception as exc:  # a failing handler answers 500, never crashes the server
                        log.exception("handler for %s failed", parts.path)
                        status, content_type, body = text(500, f"internal error: {type(exc).__name__}\n")
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - signature is fixed
                log.debug("http: " + format, *args)

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
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
        self._server.shutdown()
        self._server.server_close()
