"""KubeClient.send and .request on its WriteLane (stdlib keep-alive connections), against a loopback HTTP/1.1 server:
headers and body, connection reuse and expiry, error statuses, 401 and 429 handling, timeouts."""

from __future__ import annotations

import contextlib
import http.client
import http.server
import io
import json
import socket
import ssl
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from adapters.kubernetes.client import KubeClient
from adapters.kubernetes.config import KubeConfig
from adapters.kubernetes.tokens import FileToken, StaticToken, TokenSource
from adapters.kubernetes.write_lane import IDLE_EXPIRY_SECONDS, LaneError, WriteLane, _Response, _TLSConnection
from devcluster.certs import generate_pki
from metrics_sched.ports import ApiError
from tests import local_http
from tests.polling import poll

pytestmark = pytest.mark.unit

SECRET = "s3cr3t-token-value-0123456789"


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    connection: int  # which connection (1, 2, ...) carried it


@dataclass
class Reply:
    status: int = 201
    body: dict[str, object] = field(default_factory=lambda: {"kind": "Status"})
    headers: dict[str, str] = field(default_factory=dict)
    close_after: bool = False  # the server drops the connection after answering, without saying so


Answer = Callable[[Seen], Reply]


CLOSED: set[int] = set()  # connections the loopback server has closed (its handler finished), by number


@contextlib.contextmanager
def loopback(answer: Answer) -> Iterator[tuple[str, list[Seen]]]:
    seen: list[Seen] = []
    connections = iter(range(1, 1_000))
    CLOSED.clear()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive

        def setup(self) -> None:
            super().setup()
            self.number = next(connections)

        def finish(self) -> None:
            super().finish()
            self.connection.close()  # what the server does next anyway: closed before it is reported
            CLOSED.add(self.number)

        def _any(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            request = Seen(self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body,
                           self.number)
            seen.append(request)
            reply = answer(request)
            payload = json.dumps(reply.body).encode()
            self.send_response(reply.status)
            for name, value in {"Content-Type": "application/json", **reply.headers}.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
            self.wfile.flush()
            if reply.close_after:
                self.close_connection = True

        do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _any

        def log_message(self, *args: object) -> None:
            pass

    with serving(Handler) as url:
        yield url, seen


class _QuietServer(http.server.ThreadingHTTPServer):
    """Says nothing of a client that hung up before its answer was written (the tests whose client times out on
    purpose): socketserver prints each such BrokenPipeError's traceback into the test run's output."""

    def handle_error(self, request: socket.socket | tuple[bytes, socket.socket], client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


@contextlib.contextmanager
def serving(handler: type[http.server.BaseHTTPRequestHandler]) -> Iterator[str]:
    """A threaded loopback HTTP server with `handler`, its URL while it serves."""
    server = _QuietServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def client(url: str, token: TokenSource | None = None, **kwargs: object) -> KubeClient:
    return KubeClient(KubeConfig(server=url, token=token or StaticToken(SECRET)), **kwargs)  # type: ignore[arg-type]


def test_writes_carry_token_body_and_headers_and_reuse_one_connection() -> None:
    with loopback(lambda r: Reply()) as (url, seen), client(url) as kube:
        assert kube.send("POST", "/api/v1/namespaces/a/pods/p/binding", {"kind": "Binding"}) == 201
        assert kube.send("PATCH", "/api/v1/namespaces/a/pods/p/status", {"status": {}},
                         content_type="application/strategic-merge-patch+json", params={"x": "1 2"}) == 201
    first, second = seen
    assert (first.method, first.path, json.loads(first.body)) == ("POST", "/api/v1/namespaces/a/pods/p/binding",
                                                                  {"kind": "Binding"})
    assert first.headers["authorization"] == f"Bearer {SECRET}"
    assert first.headers["content-type"] == "application/json"
    assert first.headers["accept"] == "application/json"
    assert first.headers["user-agent"].startswith("metrics-sched")
    assert (second.method, second.path) == ("PATCH", "/api/v1/namespaces/a/pods/p/status?x=1+2")
    assert second.headers["content-type"] == "application/strategic-merge-patch+json"
    assert first.connection == second.connection  # kept alive


def test_reads_share_the_lane_and_return_the_decoded_reply() -> None:
    """A read right after a write (DefaultBinder re-reads a pod after a failed bind) finds its connection warm."""
    def answer(request: Seen) -> Reply:
        return Reply(200, {"kind": "Pod", "metadata": {"name": "p"}}) if request.method == "GET" else Reply()

    with loopback(answer) as (url, seen), client(url) as kube:
        assert kube.send("POST", "/api/v1/namespaces/a/pods/p/binding", {}) == 201
        assert kube.request("GET", "/api/v1/namespaces/a/pods/p") == {"kind": "Pod", "metadata": {"name": "p"}}
    assert [(s.method, s.connection) for s in seen] == [("POST", 1), ("GET", 1)]
    assert seen[1].body == b"" and "content-type" not in seen[1].headers


def test_a_connection_the_server_dropped_while_idle_is_not_reused() -> None:
    with loopback(lambda r: Reply(close_after=r.connection == 1)) as (url, seen), client(url) as kube:
        assert kube.send("POST", "/a", {}) == 201
        poll(lambda: 1 in CLOSED, 5, "the server closing the idle connection")
        # Sent on the dropped connection, this write would fail with its outcome unknown.
        assert kube.send("POST", "/b", {}) == 201
    assert [s.connection for s in seen] == [1, 2]


def test_an_idle_connection_expires() -> None:
    now = [0.0]
    with loopback(lambda r: Reply()) as (url, seen):
        lane = WriteLane(url, context=None, token=None, tls_server_name=None, max_connections=2,
                         connect_timeout=5, pool_timeout=5, user_agent="t", accept="application/json",
                         clock=lambda: now[0])
        lane.send("POST", "/a", b"{}", "application/json", None, timeout=5)
        now[0] += IDLE_EXPIRY_SECONDS - 1
        lane.send("POST", "/b", b"{}", "application/json", None, timeout=5)
        now[0] += IDLE_EXPIRY_SECONDS + 1
        lane.send("POST", "/c", b"{}", "application/json", None, timeout=5)
        lane.close()
    assert [s.connection for s in seen] == [1, 1, 2]


def test_error_statuses_become_api_errors_with_the_status_message_and_no_token() -> None:
    def answer(request: Seen) -> Reply:
        return Reply(409, {"kind": "Status", "reason": "Conflict", "message": f"token {SECRET} echoed"})

    with loopback(answer) as (url, _), client(url) as kube, pytest.raises(ApiError) as raised:
        kube.send("POST", "/api/v1/namespaces/a/pods/p/binding", {})
    assert raised.value.status == 409 and raised.value.conflict and raised.value.reason == "Conflict"
    assert SECRET not in str(raised.value) and "<redacted>" in str(raised.value)


def test_a_401_rereads_the_token_file_and_retries_once(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("old")
    valid = {"new"}

    def answer(request: Seen) -> Reply:
        ok = request.headers["authorization"].removeprefix("Bearer ") in valid
        return Reply() if ok else Reply(401, {"kind": "Status", "reason": "Unauthorized"})

    with loopback(answer) as (url, seen), client(url, FileToken(path)) as kube:
        path.write_text("new")
        assert kube.send("POST", "/a", {}) == 201
        assert [s.headers["authorization"] for s in seen] == ["Bearer old", "Bearer new"]
        valid.clear()
        with pytest.raises(ApiError) as raised:
            kube.send("POST", "/a", {})
    assert raised.value.status == 401 and len(seen) == 3  # the token did not change: no second try


def test_a_429_with_retry_after_is_sent_again_after_the_wait() -> None:
    slept: list[float] = []
    answers = iter([Reply(429, {"kind": "Status"}, {"Retry-After": "2"}), Reply()])
    with loopback(lambda r: next(answers)) as (url, seen), client(url, sleep=slept.append) as kube:
        assert kube.send("POST", "/a", {}) == 201
        assert kube.retried_after_429 == 1
    assert slept == [2.0] and len(seen) == 2


def test_no_answer_within_the_timeout_is_an_ambiguous_error() -> None:
    release = threading.Event()

    def answer(request: Seen) -> Reply:
        release.wait(10)
        return Reply()

    with loopback(answer) as (url, _):
        lane = WriteLane(url, context=None, token=None, tls_server_name=None, max_connections=1,
                         connect_timeout=5, pool_timeout=5, user_agent="t", accept="application/json")
        with pytest.raises(LaneError) as raised:
            lane.send("POST", "/a", b"{}", "application/json", None, timeout=0.1)
        release.set()
        lane.close()
    assert raised.value.kind == "Timeout" and raised.value.sent


def test_a_write_that_timed_out_closes_its_connection_at_once() -> None:
    """The write fence bounds when a write may start, not when the network delivers it: a write that got no answer in
    time must leave no open connection behind (a proxy or a slow network could still deliver it later, after the
    lease moved; tests/e2e/test_split_brain.py). The server sees the connection end as soon as the write gives up,
    while the error (and everything the attempt made) is still held."""
    listener = socket.create_server(("127.0.0.1", 0))
    ended = threading.Event()

    def serve() -> None:
        client, _ = listener.accept()
        while client.recv(65536):  # the request (in as many pieces as it comes), never answered
            pass
        ended.set()  # the client closed its end
        client.close()

    threading.Thread(target=serve, daemon=True).start()
    try:
        lane = WriteLane(f"http://127.0.0.1:{listener.getsockname()[1]}", context=None, token=None,
                         tls_server_name=None, max_connections=1, connect_timeout=5, pool_timeout=5, user_agent="t",
                         accept="application/json")
        with pytest.raises(LaneError) as raised:
            lane.send("POST", "/a", b"{}", "application/json", None, timeout=0.1)
        assert raised.value.kind == "Timeout" and raised.value.sent
        assert ended.wait(5), "the connection of the timed-out write is still open"
    finally:
        listener.close()


def test_a_refused_connection_is_an_ambiguous_api_error() -> None:
    with loopback(lambda r: Reply()) as (url, _):
        pass  # the server is gone: its port refuses connections
    with client(url) as kube, pytest.raises(ApiError) as raised:
        kube.send("POST", "/a", {})
    assert raised.value.status is None and raised.value.ambiguous


class _Wire:
    """A socket whose reply is these bytes (what http.client's response reads through makefile)."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def makefile(self, mode: str) -> io.BufferedReader:
        return io.BufferedReader(io.BytesIO(self.data))


def _reply(data: bytes, method: str = "POST") -> http.client.HTTPResponse:
    response = _Response(_Wire(data), method=method)  # type: ignore[arg-type]
    response.begin()
    return response


def test_the_lanes_response_head_reads_as_http_clients_own() -> None:
    """The lane parses response heads without the email package: the same status, fields, framing and reuse."""
    chunked = _reply(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Type: application/json\r\n"
                     b"Warning: 299 - \"a\"\r\nwarning: 299 - \"b\"\r\nTransfer-Encoding: chunked\r\n\r\n"
                     b"3\r\n{\"a\r\n4\r\n\":1}\r\n0\r\n\r\n")
    assert (chunked.status, chunked.reason, chunked.will_close) == (201, "Created", False)
    assert chunked.getheader("content-type") == "application/json"
    assert chunked.getheader("Warning") == '299 - "a", 299 - "b"'
    assert chunked.getheader("Retry-After") is None
    assert chunked.read() == b'{"a":1}'
    closing = _reply(b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 2\r\nConnection: close\r\n"
                     b"Content-Length: 2\r\n\r\n{}")
    assert (closing.status, closing.getheader("Retry-After"), closing.will_close) == (429, "2", True)
    assert closing.read() == b"{}"
    unframed = _reply(b"HTTP/1.1 200 OK\r\n\r\n")  # neither a length nor chunks: the body ends with the connection
    assert unframed.will_close
    assert _reply(b"HTTP/1.1 204 No Content\r\n\r\n").length == 0
    with pytest.raises(http.client.LineTooLong):
        _reply(b"HTTP/1.1 200 OK\r\nX: " + b"a" * 70_000 + b"\r\n\r\n")


@contextlib.contextmanager
def watch_server(events: list[bytes], status: int = 200, hold: threading.Event | None = None,
                 ) -> Iterator[tuple[str, list[str]]]:
    """A loopback server answering GETs with a chunked stream: each item of `events` is one chunk (lines may
    span chunks), then, with `hold`, nothing until it is set."""
    paths: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            paths.append(self.path)
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for chunk in events:
                self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                self.wfile.flush()
            if hold is not None:
                hold.wait(10)
            self.wfile.write(b"0\r\n\r\n")
            self.close_connection = True

        def log_message(self, *args: object) -> None:
            pass

    with serving(Handler) as url:
        try:
            yield url, paths
        finally:
            if hold is not None:
                hold.set()  # before the shutdown, which waits for the handler holding the stream


def test_a_watch_streams_its_events_over_the_lane_whatever_the_chunking() -> None:
    first = json.dumps({"type": "ADDED", "object": {"metadata": {"name": "a"}}}).encode()
    second = json.dumps({"type": "MODIFIED", "object": {"metadata": {"name": "b"}}}).encode()
    chunks = [first[:10], first[10:] + b"\n" + second[:5], second[5:] + b"\n"]
    with watch_server(chunks) as (url, paths), client(url) as kube, \
            kube.watch("/api/v1/pods", {"resourceVersion": "7"}) as stream:
        events = list(stream.events())
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "a"), ("MODIFIED", "b")]
    assert paths == ["/api/v1/pods?resourceVersion=7&watch=true"]


def test_a_watch_refused_is_an_api_error_with_the_status() -> None:
    gone = json.dumps({"kind": "Status", "code": 410, "reason": "Expired", "message": "too old resource version"})
    with watch_server([gone.encode()], status=410) as (url, _), client(url) as kube, \
            pytest.raises(ApiError) as caught, kube.watch("/api/v1/pods", {}):
        pass
    assert caught.value.status == 410 and "too old resource version" in str(caught.value)


def test_a_silent_watch_times_out_and_an_aborted_one_ends_quietly() -> None:
    from adapters.kubernetes.client import WatchTimeout

    line = json.dumps({"type": "ADDED", "object": {}}).encode() + b"\n"
    hold = threading.Event()
    with watch_server([line], hold=hold) as (url, _), client(url) as kube:
        with pytest.raises(WatchTimeout), kube.watch("/api/v1/pods", {}, read_timeout=0.2) as stream:
            list(stream.events())
        with kube.watch("/api/v1/pods", {}, read_timeout=30) as stream:
            events = stream.events()
            assert next(events)["type"] == "ADDED"
            threading.Timer(0.1, stream.abort).start()
            assert list(events) == []  # woken at once by abort(), well before the read timeout


class _Capture:
    """A socket that keeps what is sent on it (http.client's request() writes through sendall)."""

    def __init__(self) -> None:
        self.sent = b""

    def sendall(self, data: bytes) -> None:
        self.sent += bytes(data)


@pytest.mark.parametrize("server", ["http://127.0.0.1:6443", "https://api.example:443", "https://[::1]:8443/prefix",
                                    "http://localhost", "http://[fe80::1%25eth0]:6443", "https://[::1]/prefix",
                                    "http://[::1]"])
def test_a_request_is_framed_as_http_client_frames_it(server: str) -> None:
    """The lane writes the head and body in one write: the same bytes http.client's request() sends in two."""
    lane = WriteLane(server, context=None if server.startswith("http:") else ssl.create_default_context(),
                     token=StaticToken(SECRET), tls_server_name=None, max_connections=1, connect_timeout=1,
                     pool_timeout=1, user_agent="metrics-sched/test", accept="application/json")
    requests = [("POST", "/api/v1/namespaces/a/pods/p/binding", b'{"kind":"Binding"}', "application/json"),
                ("PATCH", "/api/v1/namespaces/a/pods/p/status?x=1+2", b"{}", "application/merge-patch+json"),
                ("GET", "/api/v1/namespaces/a/pods/p", None, ""), ("DELETE", "/api/v1/namespaces/a/pods/p", None, ""),
                ("POST", "/apis/events.k8s.io/v1/namespaces/a/events", None, ""),
                ("post", "/apis/events.k8s.io/v1/namespaces/a/events", None, "")]  # a body's length, any case
    url = urlsplit(server)
    # http.client given the port (without one it reads an IPv6 address's last group as the port: see the next test)
    port = url.port or (80 if url.scheme == "http" else 443)
    for method, target, body, content_type in requests:
        headers = dict(lane._headers)
        if body is not None:
            headers["Content-Type"] = content_type
        lane._authorized(headers)
        connection_class = http.client.HTTPConnection if url.scheme == "http" else _TLSConnection
        if connection_class is _TLSConnection:
            reference = _TLSConnection(url.hostname or "", port, timeout=1, context=None,  # type: ignore[arg-type]
                                       server_name="")
        else:
            reference = http.client.HTTPConnection(url.hostname or "", port, timeout=1)
        wire = _Capture()
        reference.sock = wire  # type: ignore[assignment]
        reference.request(method, target, body=body, headers=headers)
        head = lane._head(method, target, headers, body)
        assert head + (body or b"") == wire.sent, (method, target)


@pytest.mark.parametrize(("server", "address"), [
    ("http://[::1]", ("::1", 80)), ("https://[::1]", ("::1", 443)), ("https://[fe80::1%25eth0]", ("fe80::1%eth0", 443)),
    ("https://[::1]:6443", ("::1", 6443)), ("http://localhost", ("localhost", 80)),
    ("https://10.0.0.1", ("10.0.0.1", 443))])
def test_a_server_url_without_a_port_connects_to_the_schemes_port(server: str, address: tuple[str, int],
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """An IPv6 address without a port is not read as "host:port" (http.client alone would connect to [::]:1)."""
    dialled: list[tuple[str, int]] = []

    def create_connection(target: tuple[str, int], *args: object, **kwargs: object) -> socket.socket:
        dialled.append(target)
        raise ConnectionRefusedError("not dialled in this test")

    monkeypatch.setattr(socket, "create_connection", create_connection)
    lane = WriteLane(server, context=None if server.startswith("http:") else ssl.create_default_context(),
                     token=None, tls_server_name=None, max_connections=1, connect_timeout=1, pool_timeout=1,
                     user_agent="metrics-sched/test", accept="application/json")
    with pytest.raises(ConnectionRefusedError):
        lane._connect()
    assert dialled == [address]


@pytest.mark.parametrize(("target", "header"), [("/a b", ""), ("/a\r\nX: y", ""), ("/caf\u00e9", ""),
                                                ("/a", "x\r\nInjected: 1")])
def test_a_request_http_client_would_refuse_is_refused_unsent(target: str, header: str) -> None:
    token = StaticToken(header or SECRET)
    lane = WriteLane("http://127.0.0.1:1", context=None, token=token, tls_server_name=None, max_connections=1,
                     connect_timeout=1, pool_timeout=1, user_agent="metrics-sched/test", accept="application/json")
    with pytest.raises(LaneError) as raised:
        lane.send("POST", target, b"{}", "application/json", None, timeout=1)
    assert (raised.value.kind, raised.value.sent) == ("InvalidRequest", False)
    assert SECRET not in str(raised.value) and "Injected" not in str(raised.value)


class _Trickle:
    """A socket whose reply arrives in pieces of `size` bytes (one recv each), as TCP may deliver it."""

    def __init__(self, data: bytes, size: int) -> None:
        self.data, self.size = data, size

    def makefile(self, mode: str) -> io.BufferedReader:
        pieces = [self.data[i:i + self.size] for i in range(0, len(self.data), self.size)]

        class Raw(io.RawIOBase):
            def readable(self) -> bool:
                return True

            def readinto(self, buffer: Any) -> int:
                if not pieces:
                    return 0
                piece = pieces.pop(0)
                buffer[: len(piece)] = piece
                return len(piece)

        return io.BufferedReader(Raw())


@pytest.mark.parametrize("size", [1, 7, 40, 1 << 16])
def test_a_response_head_reads_the_same_however_it_arrives(size: int) -> None:
    """Whole in the buffer (read out at once) or in pieces (http.client's line by line): the same response."""
    replies = [b"HTTP/1.1 201 Created\r\nAudit-Id: 1\r\nContent-Type: application/json\r\nWarning: a\r\n"
               b"warning: b\r\nContent-Length: 2\r\n\r\n{}",
               b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 2\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
               b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
               b"2\r\n{}\r\n0\r\n\r\n",
               b"HTTP/1.1 103 Early Hints\r\nLink: </a>; rel=preload\r\n\r\nHTTP/1.1 100 Continue\r\n\r\n"
               b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\n{}",
               b"HTTP/1.1 200 OK\nContent-Length: 2\nX-Bare: lf\n\n{}",  # bare line feeds: http.client's reading
               b"HTTP/1.1 204\r\n\r\n"]
    for data in replies:
        response = _Response(_Trickle(data, size), method="POST")  # type: ignore[arg-type]
        response.begin()
        whole = _reply(data)
        assert (response.status, response.reason, response.will_close, response.length, response.chunked) == (
            whole.status, whole.reason, whole.will_close, whole.length, whole.chunked)
        assert response.headers.items() == whole.headers.items()
        assert response.read() == whole.read()
    early = _reply(b"HTTP/1.1 103 Early Hints\r\nLink: </a>; rel=preload\r\n\r\nHTTP/1.1 201 Created\r\n"
                   b"Content-Length: 2\r\n\r\n{}")  # an informational reply is passed over, not the answer
    assert (early.status, early.getheader("Link"), early.read()) == (201, None, b"{}")
    switching = _reply(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\n\r\n")  # the end of the exchange
    assert (switching.status, switching.length) == (101, 0)
    with pytest.raises(http.client.BadStatusLine):
        _reply(b"HTPT/1.1 200 OK\r\n\r\n")
    with pytest.raises(http.client.BadStatusLine):  # digits to str.isdigit(), not to int()
        _reply("HTTP/1.1 2\u00b3\u00b9 OK\r\n\r\n".encode("latin-1"))


def test_a_new_tls_connection_offers_the_last_session_and_still_verifies(tmp_path: Path) -> None:
    """Each connection the server closes is replaced by one that resumes the last TLS session (no certificate sent,
    signed and verified again); the first is a full, verified handshake, and a lane that does not trust the server's
    CA is refused whatever sessions exist."""
    pki = generate_pki(tmp_path / "pki")
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_context.load_cert_chain(pki.serving_cert, pki.serving_key)
    reused: list[bool] = []

    class Handler(local_http.QuietHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            reused.append(self.connection.session_reused)  # type: ignore[attr-defined]
            self.close_connection = True
            self.reply(201, b"{}", {"Content-Type": "application/json", "Connection": "close"})

    def lane(context: ssl.SSLContext, url: str) -> WriteLane:
        return WriteLane(url, context=context, token=None, tls_server_name=None, max_connections=1,
                         connect_timeout=5, pool_timeout=5, user_agent="metrics-sched/test", accept="application/json")

    with local_http.serving(Handler, server_context) as url:
        trusting = lane(ssl.create_default_context(cafile=str(pki.ca_cert)), url)
        for _ in range(3):
            assert trusting.send("POST", "/a", b"{}", "application/json", None, timeout=5).status_code == 201
        assert reused == [False, True, True]
        with pytest.raises(LaneError) as refused:
            lane(ssl.create_default_context(), url).send("POST", "/a", b"{}", "application/json", None, timeout=5)
        assert refused.value.kind == "SSLCertVerificationError"
