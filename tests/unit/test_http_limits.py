"""The HTTP endpoints cannot exhaust the process (issue 14, item 8): /decisions pages with a capped limit
and refuses bad parameters with 400; a client that sends half a request, or holds connections open, cannot
hold threads for long or make more of them."""

from __future__ import annotations

import dataclasses
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest

from metrics_sched.audit import DecisionRing, build_record
from metrics_sched.serving import decisions as serving_decisions
from metrics_sched.serving.decisions import MAX_LIMIT, decisions
from metrics_sched.serving.http_server import HTTPServer
from metrics_sched.serving.route import text
from metrics_sched.serving.status import MAX_VALUES_NODES, SchedulerEndpoints
from tests.polling import poll
from tests.unit.fakes import node, pod
from tests.unit.test_telemetry_scoring import make


@pytest.fixture(scope="module")
def ring() -> DecisionRing:
    scheduler, api, _ = make()
    scheduler.handlers.on_node_event("ADDED", node("n"))
    api.add_pod(pod("p"))
    result = scheduler.schedule_one(timeout=1)
    assert result is not None
    record = build_record(result, scheduler.state.table, config_hash="h")
    ring = DecisionRing(2_000)
    for i in range(1_500):
        ring.add(dataclasses.replace(record, id=i + 1))
    return ring


@contextmanager
def serving(**options: Any) -> Iterator[HTTPServer]:
    server = HTTPServer("127.0.0.1", 0, **options)
    server.route("/ok", lambda _: text(200, "ok\n"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def server(ring: DecisionRing) -> Iterator[HTTPServer]:
    with serving(request_timeout=0.3) as server:
        server.route("/decisions", lambda query: decisions(ring, query))
        yield server


CLIENT = httpx.Client(timeout=5, trust_env=False)


def get(server: HTTPServer, path: str, **params: str) -> httpx.Response:
    return CLIENT.get(f"http://127.0.0.1:{server.port}{path}", params=params)


def test_decisions_limit_defaults_to_100_is_capped_and_pages_on(server: HTTPServer) -> None:
    body = get(server, "/decisions").json()
    assert body["count"] == body["limit"] == 100 and body["held"] == 1_500
    body = get(server, "/decisions", limit="100000").json()
    assert body["count"] == body["limit"] == MAX_LIMIT
    ids = [d["id"] for d in body["decisions"]]
    assert body["next"] == ids[-1]
    seen = list(ids)
    while body["next"] is not None:
        body = get(server, "/decisions", limit="100000", before=str(body["next"])).json()
        seen += [d["id"] for d in body["decisions"]]
    assert len(seen) == len(set(seen)) == 1_500 and seen == sorted(seen, reverse=True)


@pytest.mark.parametrize("params", [
    {"limit": "abc"}, {"limit": "0"}, {"limit": "-5"}, {"limit": ""}, {"since": "nan"}, {"since": "yesterday"},
    {"before": "x"}, {"limt": "10"},
], ids=lambda p: "&".join(f"{k}={v}" for k, v in p.items()))
def test_bad_decisions_parameters_answer_400_naming_the_parameter(server: HTTPServer, params: dict[str, str]) -> None:
    response = get(server, "/decisions", **params)
    assert response.status_code == 400
    assert next(iter(params)) in response.text


def test_a_repeated_parameter_answers_400(server: HTTPServer) -> None:
    response = CLIENT.get(f"http://127.0.0.1:{server.port}/decisions?pod=a/b&pod=c/d")
    assert response.status_code == 400 and "pod" in response.text


def test_values_and_sources_refuse_bad_parameters() -> None:
    scheduler, _, _ = make()
    app = SchedulerEndpoints(config=None, scheduler=scheduler, elector=None)  # type: ignore[arg-type]
    with serving() as server:
        server.route("/values", app.values)
        server.route("/sources", app.sources)
        assert get(server, "/values", node="n").status_code == 200
        too_many = "&".join(f"node=n{i}" for i in range(MAX_VALUES_NODES + 1))
        response = CLIENT.get(f"http://127.0.0.1:{server.port}/values?{too_many}")
        assert response.status_code == 400 and "node" in response.text
        assert get(server, "/values", nod="n").status_code == 400
        assert get(server, "/sources").status_code == 200
        assert get(server, "/sources", verbose="1").status_code == 400


def connect(server: HTTPServer) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=5)
    return sock


def closed_by_server(sock: socket.socket) -> bool:
    try:
        return sock.recv(1024) == b""
    except ConnectionResetError:
        return True


def test_a_client_trickling_half_a_request_is_cut_off(server: HTTPServer) -> None:
    """A byte every 50 ms never lets a per-read timeout fire; the request's own deadline (0.3 s) does."""
    sock = connect(server)
    sock.settimeout(0.05)
    request = b"GET /ok HTTP/1.0\r\nX-Slow: " + b"a" * 1000
    cut_off = False
    started = time.monotonic()
    for byte in request:
        try:
            sock.sendall(bytes([byte]))
            if sock.recv(1024) == b"":
                cut_off = True
                break
        except TimeoutError:
            continue  # nothing from the server yet: keep trickling
        except (ConnectionResetError, BrokenPipeError):
            cut_off = True
            break
    sock.close()
    assert cut_off, f"the server still read the request after {time.monotonic() - started:.1f}s"
    assert get(server, "/ok").status_code == 200


def test_connections_beyond_the_cap_while_all_are_answered_are_refused_at_once_and_served_again_after() -> None:
    """Idle connections give way to new ones (test_probe_starvation.py); connections being answered do not: with
    both of the 2 allowed being answered, a third is refused with 503 from the accepting thread."""
    release = threading.Event()
    entered = threading.Semaphore(0)

    def slow(_: Any) -> Any:
        entered.release()
        release.wait(10)
        return text(200, "slow\n")

    with serving(max_connections=2, request_timeout=60) as server:
        server.route("/slow", slow)
        callers = [threading.Thread(target=lambda: get(server, "/slow")) for _ in range(2)]
        for caller in callers:
            caller.start()
        try:
            for _ in callers:
                assert entered.acquire(timeout=5)
            assert _status(server) == 503
            assert server.limits.refused >= 1
        finally:
            release.set()
            for caller in callers:
                caller.join(10)
        poll(lambda: _status(server) == 200, 5, "the endpoints served again once the answers were taken")


def test_idle_connections_are_cut_off_at_the_request_deadline(server: HTTPServer) -> None:
    sock = connect(server)
    assert closed_by_server(sock)  # within the client's 5 s timeout: the server's 0.3 s deadline fired
    sock.close()


def _answer(server: HTTPServer) -> bytes:
    with connect(server) as sock:
        sock.sendall(b"GET /ok HTTP/1.0\r\n\r\n")
        chunks = []
        while chunk := sock.recv(4096):
            chunks.append(chunk)
        return b"".join(chunks)


def _status(server: HTTPServer) -> int:
    answer = _answer(server)
    return int(answer.split(b" ", 2)[1]) if answer else 0


def test_one_decisions_answer_is_rendered_at_a_time(ring: DecisionRing, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rendering holds the GIL: a second request while one renders is refused at once (503), and the slot comes
    back when the first answer ends, fails, or is dropped unread."""
    monkeypatch.setattr(serving_decisions, "RENDER_WAIT", 0.01)
    status, _, first = decisions(ring, {"limit": ["5"]})
    assert status == 200
    assert decisions(ring, {})[0] == 503  # waited its turn (briefly here), then refused
    chunks = iter(first)
    next(chunks)
    assert decisions(ring, {})[0] == 503
    assert b"".join(chunks).endswith(b"]}")  # the first answer ends: the slot is free
    status, _, unread = decisions(ring, {})
    assert status == 200
    del unread  # dropped before its first chunk (the client went away): freed too
    assert decisions(ring, {})[0] == 200
