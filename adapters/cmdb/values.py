"""Strict JSON and the numbers in it.

Python's json module accepts the non-standard tokens NaN, Infinity and -Infinity (and turns 1e999 into
inf); a buggy producer emits them. They are kept as markers so the one value is refused and counted,
not the whole document.

Speed: a page is parsed by orjson first (several times the standard library's speed; at 5,000 nodes a
refresh is megabytes). orjson is strict RFC 8259 and refuses exactly the documents that need care here
(NaN/Infinity tokens, numbers that overflow a double, lone surrogates): those are parsed again by the
standard library as before. Both agree on everything else (big integers come out as the same float once
to_number converts them).
"""

from __future__ import annotations

import json
import math

import orjson


class NonFinite:
    """Where the document said NaN, Infinity or -Infinity."""

    __slots__ = ("token",)

    def __init__(self, token: str) -> None:
        self.token = token

    def __repr__(self) -> str:
        return f"NonFinite({self.token})"


def loads_strict(data: bytes) -> object:
    """Raises ValueError (incl. JSONDecodeError, UnicodeDecodeError) for anything that is not JSON."""
    try:
        fast: object = orjson.loads(data)
    except orjson.JSONDecodeError:
        pass  # not strict JSON: the standard library says why, or keeps NaN/Infinity as markers
    else:
        return fast
    try:
        doc: object = json.loads(data, parse_constant=NonFinite)
    except RecursionError:
        raise ValueError("document nested too deeply") from None
    return doc


def to_number(raw: object) -> tuple[float | None, str | None]:
    """(value, None) or (None, reason). Booleans are 1.0/0.0; numeric strings are accepted because some
    CMDBs (ServiceNow) send every field as a string."""
    if type(raw) is float:  # the common case first
        return (raw, None) if math.isfinite(raw) else _finite(raw)
    if raw is None:
        return None, "missing"
    if isinstance(raw, bool):
        return (1.0 if raw else 0.0), None
    if isinstance(raw, NonFinite):
        return None, "nan" if raw.token == "NaN" else "inf"
    if isinstance(raw, int):
        try:
            return float(raw), None
        except OverflowError:
            return None, "inf"
    if isinstance(raw, float):
        return _finite(raw)
    if isinstance(raw, str):
        text = raw.strip().lower()
        if text in ("true", "false"):
            return (1.0 if text == "true" else 0.0), None
        try:
            return _finite(float(text))
        except ValueError:
            return None, "malformed"
    return None, "malformed"


def _finite(value: float) -> tuple[float | None, str | None]:
    if math.isnan(value):
        return None, "nan"
    if math.isinf(value):
        return None, "inf"
    return value, None
