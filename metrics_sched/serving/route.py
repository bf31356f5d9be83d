"""What a route of the scheduler's HTTP server is: a handler given the parsed query that returns (status, content
type, body), the body as bytes or as an iterator of chunks (streamed, so a large answer is never held whole).

A handler raises BadRequest for a bad parameter (answered 400); the query-parameter checks here are the ones every
handler shares. The server itself is serving/http_server.py.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterator

Query = dict[str, list[str]]
Body = bytes | Iterator[bytes]
Response = tuple[int, str, Body]
Route = Callable[[Query], Response]


class BadRequest(ValueError):
    """A bad query parameter: answered 400 with the message."""


def text(status: int, body: str) -> Response:
    return status, "text/plain; charset=utf-8", body.encode()


def check_params(query: Query, known: Collection[str], *, repeatable: Collection[str] = ()) -> None:
    """Refuses a parameter not in `known` (a typo must not silently widen the answer), or given twice unless
    it is `repeatable`."""
    for key, values in query.items():
        if key not in known:
            expected = f"expected one of: {', '.join(sorted(known))}" if known else "this path takes none"
            raise BadRequest(f"unknown parameter {key!r} ({expected})")
        if len(values) > 1 and key not in repeatable:
            raise BadRequest(f"parameter {key!r} given more than once")


def param(query: Query, key: str) -> str | None:
    values = query.get(key)
    return values[0] if values else None


def int_param(query: Query, key: str, *, minimum: int, maximum: int | None = None) -> int | None:
    """An integer within [minimum, maximum], or None when absent."""
    value = param(query, key)
    if value is None:
        return None
    try:
        number = int(value)
    except ValueError:
        raise BadRequest(f"{key}: must be an integer, got {value!r}") from None
    if number < minimum or (maximum is not None and number > maximum):
        bounds = f"between {minimum} and {maximum}" if maximum is not None else f">= {minimum}"
        raise BadRequest(f"{key}: must be {bounds}, got {number}")
    return number


def float_param(query: Query, key: str) -> float | None:
    """A finite number, or None when absent."""
    value = param(query, key)
    if value is None:
        return None
    try:
        number = float(value)
    except ValueError:
        raise BadRequest(f"{key}: must be a number, got {value!r}") from None
    if not math.isfinite(number):
        raise BadRequest(f"{key}: must be finite, got {value!r}")
    return number


__all__ = ["BadRequest", "Body", "Query", "Response", "Route", "check_params", "float_param", "int_param", "param",
           "text"]
