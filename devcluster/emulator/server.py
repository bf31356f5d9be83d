"""The HTTP server: stdlib ThreadingHTTPServer, one daemon thread per connection, HTTP/1.1 keep-alive.

`serve()` builds a ready-to-run server (port 0 picks a free port) so tests can run it in-process:

    server = serve(port=0, seed=7)
    server.start()            # serve_forever on a daemon thread
    ... EmulatorControl(server.url) ...
    server.close()
"""

from __future__ import annotations

import logging
import ssl
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from devcluster.emulator import control_routes, custom_metrics, data_routes, metrics_api
from devcluster.emulator.errors import RequestError
from devcluster.emulator.exposition import RenderOptions
from devcluster.emulator.routing import Request, Response, resolve
from devcluster.emulator.state import Emulator

ROUTES = data_routes.ROUTES + control_routes.ROUTES + custom_metrics.ROUTES + metrics_api.ROUTES
MAX_BODY_BYTES = 64 * 2**20
log = logging.getLogger(__name__)


def dispatch(emulator: Emulator, request: Request) -> Response:
    try:
        found, request.params = resolve(ROUTES, request.method, request.path)
    except RequestError as exc:
        emulator.count("unrouted")
        return Response.json({"error": exc.message}, exc.status)
    emulator.count(found.name)
    try:
        return found.handler(emulator, request)
    except RequestError as exc:
        return Response.json({"error": exc.message}, exc.status)
    except Exception as exc:
        log.exception("%s %s failed", request.method, request.path)
        return Response.json({"error": f"internal error: {exc!r}"}, 500)


class _Handler(BaseHTTPRequestHandler):
    server: EmulatorServer
    protocol_version = "HTTP/1.1"  # keep-alive: Prometheus and httpx reuse connections
    # Headers and body go out in separate writes; with Nagle on, keep-alive clients wait ~40 ms for
    # the delayed ACK on every request.
    disable_nagle_algorithm = True
    timeout = 300  # drop idle keep-alive connections eventually

    def do_GET(self) -> None:
        self._handle()

    def do_POST(self) -> None:
        self._handle()

    def do_PUT(self) -> None:
        self._handle()

    def do_PATCH(self) -> None:
        self._handle()

    def do_DELETE(self) -> None:
        self._handle()

    def _handle(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY_BYTES:
            self._send(Response.json({"error": "body too large"}, 413))
            self.close_connection = True
            return
        body = self.rfile.read(length) if length else b""
        url = urlsplit(self.path)
        scheme = self.server.scheme
        host = self.headers.get("Host") or self.server.url.removeprefix(f"{scheme}://")
        request = Request(
            method=self.command, path=url.path, query=parse_qs(url.query, keep_blank_values=True),
            headers={k.lower(): v for k, v in self.headers.items()}, body=body, base_url=f"{scheme}://{host}",
        )
        self._send(dispatch(self.server.emulator, request))

    def _send(self, response: Response) -> None:
        try:
            self.send_response(response.status)
            self.send_header("Content-Type", response.content_type)
            self.send_header("Content-Length", str(len(response.body)))
            self.end_headers()
            self.wfile.write(response.body)
        except (BrokenPipeError, ConnectionResetError):
            # The client gave up (e.g. its timeout beat an injected delay): nothing to tell it.
            self.close_connection = True

    def log_message(self, message_format: str, *args: object) -> None:
        # Access logs at debug level: Prometheus scrapes would drown everything else on stderr.
        log.debug("%s " + message_format, self.address_string(), *args)


class EmulatorServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], emulator: Emulator, *,
                 tls: ssl.SSLContext | None = None) -> None:
        super().__init__(address, _Handler)
        self.emulator = emulator
        self.scheme = "https" if tls is not None else "http"
        if tls is not None:
            # The handshake happens on the first read, in the connection's own thread: a slow client
            # cannot hold up accept().
            self.socket = tls.wrap_socket(self.socket, server_side=True, do_handshake_on_connect=False)
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"{self.scheme}://{host if isinstance(host, str) else host.decode()}:{port}"

    def start(self) -> EmulatorServer:
        """serve_forever() on a daemon thread."""
        # A short poll interval only makes shutdown() (and so close()) prompt.
        self._thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="emulator-http", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        if self._thread is not None:
            self.shutdown()
            self._thread.join(timeout=10)
            self._thread = None
        self.server_close()

    def __enter__(self) -> EmulatorServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def serve(
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    seed: int = 0,
    cmdb_token: str | None = None,
    options: RenderOptions | None = None,
    clock: Callable[[], float] = time.time,
) -> EmulatorServer:
    """Builds the server (bound, not yet serving). cmdb_token=None leaves the CMDB unauthenticated."""
    emulator = Emulator(seed, options=options, cmdb_token=cmdb_token, clock=clock)
    return EmulatorServer((host, port), emulator)


def serve_tls(emulator: Emulator, host: str, port: int, cert_file: Path, key_file: Path) -> EmulatorServer:
    """A second, HTTPS listener on the same state (bound, not yet serving): what the apiserver's aggregation
    layer proxies the Custom Metrics APIs and metrics.k8s.io to (it only speaks TLS to an APIService's backend)."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert_file, key_file)
    return EmulatorServer((host, port), emulator, tls=context)
