"""Issue 44, defect 6: a telemetry answer is read within `maxResponseBytes` and within the source's `timeout` for
the whole answer (connect to last byte), for every source: Prometheus (requests), CMDB, metrics.k8s.io and the
Custom Metrics API (httpx). Before, a server dripping one byte every 0.5 s kept a fetch with `timeout: 1s` busy
for 31 s, and a 200 MiB answer was read whole into memory. The servers below are real sockets on loopback."""

from __future__ import annotations

import gzip
import time
import tracemalloc
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import httpx
import pytest

from adapters.bounded_answer import (
    CHUNK_BYTES,
    DEFAULT_MAX_RESPONSE_BYTES,
    AnswerTooLarge,
    AnswerTooLate,
    BoundedAnswerError,
    Cutter,
    get_bounded,
    read_body,
)
from adapters.cmdb import from_config as cmdb_source
from adapters.custom_metrics import from_config as custom_metrics_source
from adapters.metrics_server import from_config as metrics_server_source
from adapters.prometheus.client import PrometheusClient, QueryError
from adapters.prometheus.config import parse_config as parse_prometheus
from metrics_sched.config import ConfigError
from metrics_sched.ports import NodeDirectory
from metrics_sched.telemetry import PolledSource, SourceContext
from tests.local_http import QuietHandler, serving

pytestmark = pytest.mark.unit

NODES = NodeDirectory(names=frozenset({"n1"}), by_internal_ip={}, cpu_allocatable={"n1": 4.0},
                      memory_allocatable={"n1": 2.0**30})
TIMEOUT = 0.5
SLACK = 0.4  # thread wake-ups on a loaded 2-core machine; a dripping answer used to take len(body) x DRIP
DRIP = 0.1
CAP = 256 * 1024
# What reading an endless answer may hold at once: the body up to the cap, a chunk, the HTTP stack's buffers
# (a few receive buffers, the bytearray's growth); 64 MiB were sent.
PEAK_BOUND = CAP + 16 * CHUNK_BYTES


def _server(mode: str) -> type[BaseHTTPRequestHandler]:
    """`drip-body`: headers at once, then the body a byte every DRIP seconds (each read well inside the timeout);
    `drip-headers`: the status line, then header bytes one by one; `endless`: 64 KiB chunks, up to 64 MiB."""

    class Handler(QuietHandler):
        def do_GET(self) -> None:
            try:
                if mode == "drip-body":
                    body = b'{"status": "success", "data": {"result": []}}' + b" " * 200
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self._drip(body)
                elif mode == "drip-headers":
                    self.wfile.write(b"HTTP/1.1 200 OK\r\n")
                    self._drip(b"X-Slow: " + b"x" * 300)
                else:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.end_headers()  # no length: the body ends when the connection does (HTTP/1.0)
                    for _ in range(1024):
                        self.wfile.write(b" " * CHUNK_BYTES)
            except OSError:
                pass  # the client cut the answer off: what is tested

        def _drip(self, data: bytes) -> None:
            for byte in data:
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
                time.sleep(DRIP)

    return Handler


@pytest.fixture(params=["drip-body", "drip-headers"])
def dripping(request: pytest.FixtureRequest) -> Iterator[str]:
    with serving(_server(request.param), name="dripping") as url:
        yield url


@pytest.fixture
def endless() -> Iterator[str]:
    with serving(_server("endless"), name="endless") as url:
        yield url


def _timed(call: Any) -> tuple[float, object]:
    started = time.monotonic()
    try:
        outcome: object = call()
    except Exception as exc:  # noqa: BLE001 - the outcome is what the test looks at
        outcome = exc
    return time.monotonic() - started, outcome


# -- the reader itself ----------------------------------------------------------------------------------------


def test_the_read_stops_one_chunk_past_the_cap() -> None:
    pulled = 0

    def chunks() -> Iterator[bytes]:
        nonlocal pulled
        while True:
            pulled += 1
            yield b"x" * CHUNK_BYTES

    with pytest.raises(AnswerTooLarge, match=f"answer larger than maxResponseBytes \\({CAP} bytes\\)"):
        read_body(chunks(), "", CAP)
    assert pulled == CAP // CHUNK_BYTES + 1


def test_a_gzip_bomb_is_not_inflated_past_the_cap() -> None:
    bomb = gzip.compress(b"\0" * (64 * 2**20))  # 64 MiB of zeros in ~64 KiB
    tracemalloc.start()
    try:
        with pytest.raises(AnswerTooLarge):
            read_body(iter([bomb[i:i + CHUNK_BYTES] for i in range(0, len(bomb), CHUNK_BYTES)]), "gzip", CAP)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * CAP + 2 * len(bomb)
    assert read_body([gzip.compress(b"{}")], "gzip", CAP) == b"{}"
    assert read_body([b"12345"], "identity", 5) == b"12345"
    assert read_body([b"123456"], "", 5, truncate=True) == b"12345"
    with pytest.raises(BoundedAnswerError, match="Content-Encoding 'br'"):
        read_body([b""], "br", CAP)


# -- httpx (CMDB, metrics.k8s.io, Custom Metrics) and requests (Prometheus), over real sockets -----------------


def test_httpx_a_dripping_answer_ends_at_the_deadline(dripping: str) -> None:
    with httpx.Client() as client:
        elapsed, outcome = _timed(lambda: get_bounded(client, dripping, timeout=TIMEOUT, max_bytes=CAP))
    assert isinstance(outcome, AnswerTooLate), outcome
    assert str(outcome) == f"no answer within {TIMEOUT:g}s"
    assert TIMEOUT - 0.05 <= elapsed < TIMEOUT + SLACK


def test_httpx_an_endless_answer_is_cut_at_the_cap(endless: str) -> None:
    with httpx.Client() as client:
        tracemalloc.start()
        try:
            elapsed, outcome = _timed(lambda: get_bounded(client, endless, timeout=10, max_bytes=CAP))
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert isinstance(outcome, AnswerTooLarge), outcome
    assert peak < PEAK_BOUND
    assert elapsed < 5


def test_prometheus_a_dripping_answer_fails_its_query_at_the_deadline(dripping: str, tmp_path: Path) -> None:
    client = PrometheusClient(parse_prometheus({"url": dripping, "timeout": f"{TIMEOUT}s",
                                                "metrics": [{"name": "a", "query": "up"}]}, base_dir=tmp_path))
    try:
        elapsed, outcome = _timed(lambda: client.query("up"))
    finally:
        client.close()
    assert isinstance(outcome, QueryError) and str(outcome) == f"no answer within {TIMEOUT:g}s", outcome
    assert elapsed < TIMEOUT + SLACK


def test_prometheus_an_endless_answer_fails_its_query_at_the_cap(endless: str, tmp_path: Path) -> None:
    client = PrometheusClient(parse_prometheus({"url": endless, "timeout": "10s", "maxResponseBytes": CAP,
                                                "metrics": [{"name": "a", "query": "up"}]}, base_dir=tmp_path))
    try:
        tracemalloc.start()
        try:
            _, outcome = _timed(lambda: client.query("up"))
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    finally:
        client.close()
    assert isinstance(outcome, QueryError), outcome
    assert str(outcome) == f"answer larger than maxResponseBytes ({CAP} bytes): cut off"
    assert peak < PEAK_BOUND


def test_a_cut_connection_is_not_reused_for_the_next_query(tmp_path: Path) -> None:
    fast = _server("endless")  # any answer: the point is the pooled connection after a cut
    with serving(fast) as url:
        client = PrometheusClient(parse_prometheus({"url": url, "timeout": "5s", "maxResponseBytes": CAP,
                                                    "metrics": [{"name": "a", "query": "up"}]}, base_dir=tmp_path))
        try:
            for _ in range(3):
                with pytest.raises(QueryError, match="answer larger than maxResponseBytes"):
                    client.query("up")
        finally:
            client.close()


# -- each source: a failed refresh, counted, with the reason in its health -----------------------------------


def _sources(url: str, tmp_path: Path, **extra: Any) -> list[PolledSource]:
    def kube() -> httpx.Client:
        return httpx.Client(base_url=url)

    ctx = SourceContext(tmp_path, kube)
    return [
        metrics_server_source("ms", {"timeout": f"{TIMEOUT}s", **extra}, ctx),
        custom_metrics_source("cm", {"timeout": f"{TIMEOUT}s", "nodeMetrics": [{"name": "power"}], **extra}, ctx),
        cmdb_source("cmdb", {"url": url, "timeout": f"{TIMEOUT}s", "retries": 0, "nodeKey": "name",
                             "fields": {"cost": "cost"}, **extra}, ctx),
    ]


def _health_after_one_poll(source: PolledSource) -> tuple[float, str]:
    try:
        started = time.monotonic()
        result = source.poll(NODES)
        elapsed = time.monotonic() - started
    finally:
        source.close()
    assert result is None or result.errors, result
    assert source.health.attempts == 1 and source.health.consecutive_failures == 1
    return elapsed, source.health.last_error


def test_every_httpx_source_fails_a_dripping_refresh_at_its_timeout(dripping: str, tmp_path: Path) -> None:
    for source in _sources(dripping, tmp_path):
        elapsed, error = _health_after_one_poll(source)
        assert f"no answer within {TIMEOUT:g}s" in error, (source.name, error)
        assert elapsed < TIMEOUT + SLACK, source.name


def test_every_httpx_source_fails_an_oversized_refresh_at_its_cap(endless: str, tmp_path: Path) -> None:
    for source in _sources(endless, tmp_path, maxResponseBytes=CAP, timeout="2s"):
        _, error = _health_after_one_poll(source)
        assert f"answer larger than maxResponseBytes ({CAP} bytes): cut off" in error, (source.name, error)


def test_max_response_bytes_is_validated_with_a_sane_default(tmp_path: Path) -> None:
    spec: dict[str, Any] = {"url": "http://p", "metrics": [{"name": "a", "query": "up"}]}
    assert parse_prometheus(spec, base_dir=tmp_path).max_response_bytes == DEFAULT_MAX_RESPONSE_BYTES == 64 * 2**20
    for bad in (0, 1024, 2**31, "64Mi", 1.5):
        with pytest.raises(ConfigError) as info:
            parse_prometheus({**spec, "maxResponseBytes": bad}, base_dir=tmp_path)
        assert info.value.field == "maxResponseBytes"


def test_the_cutter_shuts_a_socket_given_after_the_deadline() -> None:
    import socket

    left, right = socket.socketpair()
    with left, right, Cutter(0.01) as cutter:
        time.sleep(0.05)
        cutter.watch(left)
        assert left.recv(1) == b""  # shut down: the read returns at once instead of blocking
        with pytest.raises(AnswerTooLate):
            cutter.check()
