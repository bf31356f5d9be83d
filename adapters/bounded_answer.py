"""Telemetry answers read within a size cap and a deadline, whatever the server does.

A telemetry server's answer is outside input: one that drips a byte every half second kept a fetch with
`timeout: 1s` busy for 31 s (a timeout per read is no bound on the whole), and a 200 MiB answer raised the
scheduler's RSS from 19 to ~655 MiB; every replica polls, so one bad answer could take them all down.

- The cap (`maxResponseBytes`, per source): the body is read in chunks of CHUNK_BYTES and decoded here
  (gzip is the only encoding offered, decompressed with a bounded output), and the read stops as soon as it
  passes the cap: at most cap + one chunk is ever held. An error answer's body is read only up to
  ERROR_BODY_BYTES.
- The deadline (the source's `timeout`): for the whole answer, connect + headers + body. A `Cutter` arms a
  timer; when it fires it shuts down the sockets of the answer being read, so a read blocked on a dripping
  server returns at once, and the answer fails as too late. The sockets reach it from the HTTP client:
  httpx's `trace` extension (each bounded request opens its own connection, `Connection: close`, so the
  socket is known from the connect on) and, for requests, the Prometheus client's connection classes
  (`adapters.prometheus.watched_adapter`), which hand every socket they connect or reuse to `current()`.

Both failures are a failed fetch of that answer (a whole source's or one query's, as the source decides):
counted, shown in the source's health with the reason, degrading scoring, never stopping binding.
"""

from __future__ import annotations

import contextlib
import contextvars
import socket
import threading
import zlib
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import httpx

from metrics_sched.config.reader import read_int

__all__ = [
    "BOUNDED_HEADERS", "CHUNK_BYTES", "DEFAULT_MAX_RESPONSE_BYTES", "ERROR_BODY_BYTES", "MAX_RESPONSE_BYTES_RANGE",
    "AnswerTooLarge", "AnswerTooLate", "BoundedAnswerError", "Cutter", "current", "get_bounded", "read_body",
    "read_max_response_bytes",
]

# 5,000 nodes x 8 GPUs is a Prometheus answer of a few MB, a metrics.k8s.io list of ~10 MB: room for growth,
# and still a bound every replica can afford.
DEFAULT_MAX_RESPONSE_BYTES = 64 * 2**20
MAX_RESPONSE_BYTES_RANGE = (4096, 2**30)
CHUNK_BYTES = 64 * 1024
ERROR_BODY_BYTES = 64 * 1024  # an error answer is read for its message only
# gzip only: its output is decompressed here with a bound; a server must not pick an encoding we cannot bound.
BOUNDED_HEADERS = {"Accept-Encoding": "gzip"}


class BoundedAnswerError(Exception):
    """An answer refused while it was read; the message says why in a few words (no secret can be in it)."""


class AnswerTooLarge(BoundedAnswerError):
    def __init__(self, limit: int) -> None:
        super().__init__(f"answer larger than maxResponseBytes ({limit} bytes): cut off")


class AnswerTooLate(BoundedAnswerError):
    def __init__(self, seconds: float) -> None:
        # The words of a read timeout: for the operator it is one thing, the timeout (connect to last byte).
        super().__init__(f"no answer within {seconds:g}s")


def read_max_response_bytes(spec: Mapping[str, Any], where: str = "") -> int:
    """`maxResponseBytes` of a source's spec: an integer of bytes, DEFAULT_MAX_RESPONSE_BYTES when absent."""
    low, high = MAX_RESPONSE_BYTES_RANGE
    return read_int(spec, "maxResponseBytes", where, DEFAULT_MAX_RESPONSE_BYTES, minimum=low, maximum=high)


# -- the deadline ------------------------------------------------------------------------------------------

_CURRENT: contextvars.ContextVar[Cutter | None] = contextvars.ContextVar("bounded_answer_cutter", default=None)


def current() -> Cutter | None:
    """The Cutter of the answer this thread is reading, for connection classes that see its sockets."""
    return _CURRENT.get()


class Cutter:
    """The deadline of one answer: `with cutter:` arms it; at the deadline the watched sockets are shut down."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.cut = False
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._timer: threading.Timer | None = None
        self._token: contextvars.Token[Cutter | None] | None = None

    def __enter__(self) -> Cutter:
        self._timer = threading.Timer(self.seconds, self._cut)
        self._timer.daemon = True
        self._timer.start()
        self._token = _CURRENT.set(self)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._timer is not None and self._token is not None
        self._timer.cancel()
        _CURRENT.reset(self._token)

    def watch(self, sock: object) -> None:
        """Shut `sock` down at the deadline (at once when it has passed already)."""
        if not isinstance(sock, socket.socket):
            return
        with self._lock:
            if not self.cut:
                self._sockets.append(sock)
                return
        _shut(sock)

    def trace(self, event: str, info: Mapping[str, Any]) -> None:
        """httpx's (httpcore's) `trace` extension: the stream of each new connection (TCP, then TLS)."""
        if event.endswith(".complete"):
            self.watch_stream(info.get("return_value"))

    def watch_stream(self, stream: object) -> None:
        """An httpcore network stream's socket (`get_extra_info("socket")`, also the response's
        `network_stream` extension)."""
        get_extra_info = getattr(stream, "get_extra_info", None)
        if callable(get_extra_info):
            self.watch(get_extra_info("socket"))

    def check(self) -> None:
        if self.cut:
            raise AnswerTooLate(self.seconds)

    def _cut(self) -> None:
        with self._lock:
            self.cut = True
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            _shut(sock)


def _shut(sock: socket.socket) -> None:
    # shutdown, not close: it wakes a recv blocked in another thread (close would not), and the fd stays the
    # client's to close. The plain socket's method on an SSLSocket too: the TLS object stays the reader's.
    # OSError: closed already, or a socket detached by the TLS wrap (its TLS socket is watched too).
    with contextlib.suppress(OSError):
        socket.socket.shutdown(sock, socket.SHUT_RDWR)


# -- the cap -----------------------------------------------------------------------------------------------


def read_body(chunks: Iterable[bytes], encoding: str, limit: int, cutter: Cutter | None = None, *,
              truncate: bool = False) -> bytes:
    """The decoded body from its raw chunks: AnswerTooLarge past `limit` decoded bytes (with `truncate`, the
    first `limit` bytes instead), AnswerTooLate once `cutter` has fired, BoundedAnswerError for an encoding
    other than identity or gzip."""
    encoding = encoding.strip().lower()
    if encoding not in ("", "identity", "gzip", "x-gzip"):
        raise BoundedAnswerError(f"answer in Content-Encoding {encoding[:40]!r}, which was not asked for")
    gzip = zlib.decompressobj(16 + zlib.MAX_WBITS) if encoding in ("gzip", "x-gzip") else None
    body = bytearray()
    for chunk in chunks:
        if cutter is not None:
            cutter.check()
        for piece in _decoded(gzip, chunk, limit - len(body)):
            body += piece
            if len(body) > limit:
                if truncate:
                    return bytes(body[:limit])
                raise AnswerTooLarge(limit)
    if cutter is not None:
        cutter.check()
    return bytes(body)


def _decoded(gzip: Any, chunk: bytes, room: int) -> Iterator[bytes]:
    """`chunk` decoded, in pieces of at most room + 1 bytes, so a small compressed chunk that inflates to
    gigabytes is never inflated past the cap (the caller stops at the first piece that passes it)."""
    if gzip is None:
        yield chunk
        return
    data = chunk
    while data and not gzip.eof:
        piece = gzip.decompress(data, max(room, 0) + 1)
        room -= len(piece)
        yield piece
        data = gzip.unconsumed_tail


# -- httpx ---------------------------------------------------------------------------------------------------

_DECODED_AWAY = frozenset({"content-encoding", "content-length", "transfer-encoding"})


def get_bounded(client: httpx.Client, url: str | httpx.URL, *, timeout: float, max_bytes: int,
                params: Mapping[str, str] | None = None, headers: Mapping[str, str] | None = None) -> httpx.Response:
    """GET `url`: a read Response whose body is at most `max_bytes` (ERROR_BODY_BYTES, truncated, for a status
    other than 200), within `timeout` seconds from the connect to the last byte. AnswerTooLarge/AnswerTooLate
    (or a BoundedAnswerError), or httpx's own errors (refused, DNS, TLS, a read timeout)."""
    # Connection: close: the request gets a connection of its own, whose socket the trace hands the Cutter from
    # the connect on (a pooled connection's socket is not known before its headers arrive).
    sent = {**(headers or {}), **BOUNDED_HEADERS, "Connection": "close"}
    with Cutter(timeout) as cutter:
        try:
            with client.stream("GET", url, params=params, headers=sent, timeout=timeout,
                               extensions={"trace": cutter.trace}) as resp:
                cutter.watch_stream(resp.extensions.get("network_stream"))
                ok = resp.status_code == 200
                chunks, encoding = _raw(resp)
                body = read_body(chunks, encoding, max_bytes if ok else ERROR_BODY_BYTES, cutter, truncate=not ok)
        except httpx.HTTPError:
            cutter.check()  # the error is the cut's doing: say so
            raise
    kept = [(k, v) for k, v in resp.headers.multi_items() if k.lower() not in _DECODED_AWAY]
    return httpx.Response(resp.status_code, headers=kept, content=body, request=resp.request)


def _raw(resp: httpx.Response) -> tuple[Iterable[bytes], str]:
    """The body's raw chunks and their encoding; an in-memory answer (a MockTransport's) is already decoded."""
    if resp.is_stream_consumed:
        return (resp.content,), ""
    return resp.iter_raw(CHUNK_BYTES), resp.headers.get("Content-Encoding", "")
