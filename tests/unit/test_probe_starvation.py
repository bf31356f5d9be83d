"""The kubelet's probes are answered whatever other clients hold open (issue 44, defect 7).

Before: every connection held one of 16 slots from its accept through its TLS handshake (up to 10 s) to its
answer; 16 idle TCP connections made three probes in a row fail. Now connections waiting for their request give
way to newer ones (per client first), a handshake has 2 s, and only requests other than the probes share the
16 answering slots."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from metrics_sched.serving import ServingCertificate
from metrics_sched.serving.connections import MAX_PER_CLIENT
from metrics_sched.serving.http_server import HTTPServer
from metrics_sched.serving.route import text
from metrics_sched.serving.self_signed import generate
from tests.polling import poll

PROBE_TIMEOUT = 3.0  # the chart's timeoutSeconds for both probes


@contextmanager
def serving(tmp_path: Path | None = None, **options: Any) -> Iterator[HTTPServer]:
    """A server with the probes and /ok; HTTPS (a generated pair) when `tmp_path` is given."""
    tls = None
    if tmp_path is not None:
        pair = generate(tmp_path / "certs", ["127.0.0.1"])
        tls = ServingCertificate(pair.cert_file, pair.key_file).context
    server = HTTPServer("127.0.0.1", 0, tls=tls, **options)
    for path in ("/healthz", "/readyz", "/ok"):
        server.route(path, lambda _: text(200, "ok\n"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


def probe(server: HTTPServer, path: str = "/healthz") -> int:
    """One probe as the kubelet makes it: a new connection, the certificate not checked, 3 s in all."""
    with httpx.Client(verify=False, timeout=PROBE_TIMEOUT, trust_env=False) as client:  # as the kubelet
        return client.get(f"{server.scheme}://127.0.0.1:{server.port}{path}").status_code


def idle(server: HTTPServer, count: int, source: str = "127.0.0.1") -> list[socket.socket]:
    """`count` TCP connections that send nothing (no TLS handshake, no request)."""
    return [socket.create_connection(("127.0.0.1", server.port), timeout=5, source_address=(source, 0))
            for _ in range(count)]


def closed_by_server(sock: socket.socket, within: float = 5.0) -> bool:
    sock.settimeout(within)
    try:
        return sock.recv(1024) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def test_sixteen_idle_connections_do_not_fail_three_probes_in_a_row(tmp_path: Path) -> None:
    """The issue's reproduction, with the server's defaults: 16 idle TCP connections on the HTTPS port (from 16
    pods), then three probes, each answered within the probe's timeout."""
    with serving(tmp_path) as server:
        held = [sock for i in range(2, 18) for sock in idle(server, 1, f"127.0.0.{i}")]
        poll(lambda: len(server.limits) == 16, 5, "the 16 idle connections admitted")
        started = time.monotonic()
        assert [probe(server, "/healthz"), probe(server, "/readyz"), probe(server, "/healthz")] == [200, 200, 200]
        assert time.monotonic() - started < PROBE_TIMEOUT
        for sock in held:
            sock.close()


def test_idle_connections_from_many_addresses_beyond_every_cap_do_not_starve_probes(tmp_path: Path) -> None:
    # No timeout cuts the idle connections off during the test: only giving way makes room.
    with serving(tmp_path, handshake_timeout=60, request_timeout=60) as server:
        # 40 sources of 3 each: 120 connections, beyond the 64 in all; the oldest give way to the newest.
        held = [sock for i in range(2, 42) for sock in idle(server, 3, f"127.0.0.{i}")]
        poll(lambda: server.limits.evicted == 120 - 64, 5, "the 56 oldest connections displaced")
        assert len(server.limits) == 64
        assert [probe(server) for _ in range(3)] == [200, 200, 200]
        assert closed_by_server(held[0])  # the oldest gave way
        for sock in held:
            sock.close()


def test_one_client_holds_at_most_its_own_cap(tmp_path: Path) -> None:
    with serving(tmp_path, handshake_timeout=60, request_timeout=60) as server:
        extra = 12
        held = idle(server, MAX_PER_CLIENT + extra, "127.0.0.2")
        poll(lambda: server.limits.evicted == extra, 5, f"the client's {extra} oldest connections displaced")
        assert len(server.limits) == MAX_PER_CLIENT
        assert probe(server) == 200
        for sock in held:
            sock.close()


def test_a_client_beyond_its_own_cap_displaces_its_own_oldest_connection_not_anothers() -> None:
    with serving(per_client=2, max_connections=100) as server:
        other = idle(server, 1, "127.0.0.2")
        mine = idle(server, 3, "127.0.0.3")
        assert closed_by_server(mine[0])  # the client's third displaced its own first
        assert not closed_by_server(other[0], within=0.3)  # another client's connection stays
        assert not closed_by_server(mine[2], within=0.3)
        for sock in other + mine:
            sock.close()


def test_a_tls_handshake_that_never_comes_is_cut_off_at_the_handshake_timeout(tmp_path: Path) -> None:
    with serving(tmp_path, handshake_timeout=0.3, request_timeout=60) as server:
        [sock] = idle(server, 1)
        started = time.monotonic()
        assert closed_by_server(sock)
        assert time.monotonic() - started < 2.0  # the handshake's 0.3 s, not the request's 60 s
        sock.close()


@pytest.fixture
def blocking_route() -> Iterator[tuple[threading.Event, list[int]]]:
    release = threading.Event()
    yield release, []
    release.set()


def test_requests_beyond_the_answering_slots_are_refused_while_probes_are_answered(
        blocking_route: tuple[threading.Event, list[int]]) -> None:
    release, statuses = blocking_route
    entered = threading.Semaphore(0)

    def slow(_: Any) -> Any:
        entered.release()
        release.wait(10)
        return text(200, "slow\n")

    with serving(max_threads=2, max_connections=3) as server:
        server.route("/slow", slow)

        def call() -> None:
            statuses.append(httpx.get(f"http://127.0.0.1:{server.port}/slow", timeout=15, trust_env=False).status_code)

        callers = [threading.Thread(target=call) for _ in range(2)]
        for caller in callers:
            caller.start()
        for _ in callers:
            assert entered.acquire(timeout=5)
        # Both answering slots are taken: another request is refused at once; a probe is answered.
        assert httpx.get(f"http://127.0.0.1:{server.port}/ok", timeout=5, trust_env=False).status_code == 503
        assert probe(server) == 200
        # Connections being answered never give way: at the cap of 3, with 2 answering and 1 idle, the idle one
        # gives way to the probe; with 3 answering, a new connection would be refused.
        held = idle(server, 1)
        assert probe(server, "/readyz") == 200
        assert closed_by_server(held[0])
        release.set()
        for caller in callers:
            caller.join(10)
        assert statuses == [200, 200]
        assert httpx.get(f"http://127.0.0.1:{server.port}/ok", timeout=5, trust_env=False).status_code == 200


def test_a_half_sent_request_gives_way_at_the_cap_and_a_whole_one_is_answered() -> None:
    with serving(max_connections=2) as server:
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
            sock.sendall(b"GET /ok HTTP/1.0\r\n")  # the request line only: still waiting for its request
            held = idle(server, 1)
            poll(lambda: len(server.limits) == 2, 5, "both connections admitted")
            assert probe(server) == 200  # the oldest waiting one (the half request) gave way
            assert closed_by_server(sock)
            held[0].close()
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
            sock.sendall(b"GET /ok HTTP/1.0\r\n\r\n")
            answer = b""
            while chunk := sock.recv(4096):
                answer += chunk
            assert answer.startswith(b"HTTP/1.0 200")


def test_a_plain_http_client_on_the_https_port_fails_its_handshake_and_the_server_keeps_serving(
        tmp_path: Path) -> None:
    with serving(tmp_path) as server:
        with pytest.raises(httpx.HTTPError):
            httpx.get(f"http://127.0.0.1:{server.port}/healthz", timeout=3, trust_env=False)
        assert probe(server) == 200
        poll(lambda: len(server.limits) == 0, 5, "both connections released")
