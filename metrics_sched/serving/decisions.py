"""/decisions: the ring's records as JSON, newest first, filtered by kind (placement | eviction; both when not
given), pod, node, owner and time, paged by id. Each record says its `kind`.

`limit` is capped (MAX_LIMIT): an answer is at most a few megabytes, rendered and sent in chunks, never
built whole; when more records match, `next` is the id to pass as `before` for the following page.

Rendering holds the GIL, and the soak bench saw four clients polling `limit=1000` cut scheduling from ~350
to ~23 decisions/s. So one answer renders at a time (a request waits for its turn, up to RENDER_WAIT
seconds, then gets 503: a client spinning on 503s would cost more than waiting), and a render rests as long
as each chunk took: the endpoint never takes more than about half of the interpreter, whatever clients do.

`format=jsonl` exports the matching records as JSON Lines, one record a line, oldest first (the input of
`metrics-sched replay`): its `limit` defaults to, and is capped at, the ring's size, so one request takes the
whole ring; it streams under the same render slot and rests.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator, Mapping

from metrics_sched.audit.record import KINDS, EvictionRecord, Kind, StoredDecision
from metrics_sched.audit.ring import DecisionRing
from metrics_sched.serving.route import BadRequest, Query, Response, check_params, float_param, int_param, param

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000
_CHUNK = 50  # records per write

PARAMS = ("kind", "pod", "node", "owner", "since", "before", "limit", "format")
FORMATS = ("json", "jsonl")
BUSY = "other /decisions answers are being rendered; retry in a few seconds\n"
RENDER_WAIT = 10.0  # seconds a request waits for its turn to render

_rendering = threading.BoundedSemaphore(1)


def decisions(ring: DecisionRing, query: Query) -> Response:
    """The /decisions route; a bad parameter raises BadRequest (400)."""
    check_params(query, PARAMS)
    jsonl = _format(query) == "jsonl"
    # Above the cap is not an error: like a Kubernetes LIST's limit, the answer says where to go on.
    limit = (min(int_param(query, "limit", minimum=1) or ring.size, ring.size) if jsonl
             else min(int_param(query, "limit", minimum=1) or DEFAULT_LIMIT, MAX_LIMIT))
    records = ring.select(pod=param(query, "pod"), node=param(query, "node"), since=float_param(query, "since"),
                          before=int_param(query, "before", minimum=1), limit=limit + 1, kind=_kind(query),
                          owner=param(query, "owner"))
    more = len(records) > limit
    records = records[:limit]
    head = {"count": len(records), "ring_size": ring.size, "held": len(ring), "limit": limit,
            "next": records[-1].id if more else None}
    if not _rendering.acquire(timeout=RENDER_WAIT):
        return 503, "text/plain", BUSY.encode()
    if jsonl:
        return 200, "application/jsonl", _released(_render_lines(records[::-1]))
    return 200, "application/json", _released(_render(head, records))


def _format(query: Query) -> str:
    value = param(query, "format") or "json"
    if value not in FORMATS:
        raise BadRequest(f"format: must be one of {', '.join(FORMATS)}, got {value!r}")
    return value


def _kind(query: Query) -> Kind | None:
    value = param(query, "kind")
    if value is None:
        return None
    for kind in KINDS:
        if kind == value:
            return kind
    raise BadRequest(f"kind: must be one of {', '.join(KINDS)}, got {value!r}")


class _released:  # noqa: N801 - used like a generator function
    """The chunks, then the render slot given back once: at the end, on an error, or when the answer is
    dropped unread (the client went away before the first chunk: a generator's `finally` would never run)."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks: Iterator[bytes] | None = chunks

    def __iter__(self) -> Iterator[bytes]:
        return self

    def __next__(self) -> bytes:
        if self._chunks is None:
            raise StopIteration
        try:
            return next(self._chunks)
        except BaseException:
            self._release()
            raise

    def _release(self) -> None:
        if self._chunks is not None:
            self._chunks = None
            _rendering.release()

    def __del__(self) -> None:
        self._release()


def _render(head: Mapping[str, object], records: list[StoredDecision | EvictionRecord]) -> Iterator[bytes]:
    yield json.dumps(head)[:-1].encode() + b', "decisions": ['
    for start in range(0, len(records), _CHUNK):
        started = time.perf_counter()
        batch = records[start:start + _CHUNK]
        sep = b", " if start else b""
        yield sep + b", ".join(json.dumps(r.as_dict()).encode() for r in batch)
        time.sleep(time.perf_counter() - started)  # at most half the interpreter: scheduling goes on
    yield b"]}"


def _render_lines(records: list[StoredDecision | EvictionRecord]) -> Iterator[bytes]:
    for start in range(0, len(records), _CHUNK):
        started = time.perf_counter()
        yield b"".join(json.dumps(r.as_dict()).encode() + b"\n" for r in records[start:start + _CHUNK])
        time.sleep(time.perf_counter() - started)  # as _render: at most half the interpreter


__all__ = ["DEFAULT_LIMIT", "FORMATS", "MAX_LIMIT", "PARAMS", "RENDER_WAIT", "decisions"]
