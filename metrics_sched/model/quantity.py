"""Exact parsing of Kubernetes resource quantities ("100m", "1.5Gi", "2e3", "287982098n").

Arithmetic is done on Fractions so "0.1" + "0.2" cpu is exactly 300m. Rounding follows the API:
MilliValue() and Value() round up, so a request is never under-counted.
"""

from __future__ import annotations

import functools
import math
import re
from fractions import Fraction

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"n": Fraction(1, 10**9), "u": Fraction(1, 10**6), "m": Fraction(1, 1000), "": Fraction(1),
            "k": Fraction(10**3), "M": Fraction(10**6), "G": Fraction(10**9), "T": Fraction(10**12),
            "P": Fraction(10**15), "E": Fraction(10**18)}
_QUANTITY = re.compile(
    r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(?:([eE][+-]?[0-9]+)|(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?)$"
)


class QuantityError(ValueError):
    pass


def parse_quantity(value: str | int | float) -> Fraction:
    """A quantity as an exact Fraction of its base unit (cores, bytes, count)."""
    if isinstance(value, bool):
        raise QuantityError(f"quantity must be a string or number, got {value!r}")
    if isinstance(value, int):
        return Fraction(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise QuantityError(f"quantity must be finite, got {value!r}")
        return Fraction(str(value))
    if not isinstance(value, str):
        raise QuantityError(f"quantity must be a string or number, got {type(value).__name__}")
    text = value.strip()
    match = _QUANTITY.match(text)
    if not match:
        raise QuantityError(f"malformed quantity {value!r}")
    number, exponent, suffix = match.groups()
    amount = Fraction(number)
    if exponent:
        power = int(exponent[1:])
        if abs(power) > 30:
            raise QuantityError(f"quantity exponent out of range in {value!r}")
        return amount * Fraction(10) ** power
    suffix = suffix or ""
    if suffix in _BINARY:
        return amount * _BINARY[suffix]
    return amount * _DECIMAL[suffix]


# A cluster uses few distinct quantity strings ("100m", "500Mi", ...) over and over: parse each once.
@functools.lru_cache(maxsize=4096)
def _milli(value: str | int | float) -> int:
    return math.ceil(parse_quantity(value) * 1000)


@functools.lru_cache(maxsize=4096)
def _int(value: str | int | float) -> int:
    return math.ceil(parse_quantity(value))


def to_milli(value: str | int | float) -> int:
    """cpu in millicores (rounded up, like Quantity.MilliValue())."""
    return _milli(value) if not isinstance(value, bool) else _milli.__wrapped__(value)


def to_int(value: str | int | float) -> int:
    """memory/storage/count as an integer (rounded up, like Quantity.Value())."""
    return _int(value) if not isinstance(value, bool) else _int.__wrapped__(value)
