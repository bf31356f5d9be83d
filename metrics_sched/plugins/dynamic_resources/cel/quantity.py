"""Kubernetes resource quantities as CEL selectors see them (apimachinery's `resource.ParseQuantity`).

The core has an exact quantity parser (metrics_sched.model.quantity), but plugins reach the core only through
metrics_sched.framework, which does not export it; and CEL needs upstream's own rules, which that parser does not
follow: the scanner's two error texts ("quantities must match the regular expression ...", "unable to parse
quantity's suffix"), values below a nano-unit rounded *up* (away from zero), binary-suffixed values capped at
2^63-1 and no cap on decimal ones. Values are exact Fractions: 80Gi in nano-units does not fit a CEL int.
"""

from __future__ import annotations

import functools
from fractions import Fraction

__all__ = [
    "MAX_INT64",
    "QuantityError",
    "canonical",
    "from_canonical",
    "is_int64",
    "parse_quantity",
]

MAX_INT64 = 2**63 - 1
MIN_INT64 = -(2**63)

_SPLIT_RE = "^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"
_ERR_FORMAT = f"quantities must match the regular expression '{_SPLIT_RE}'"
_ERR_NUMERIC = "unable to parse numeric part of quantity"
_ERR_SUFFIX = "unable to parse quantity's suffix"

_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_SUFFIX_CHARS = frozenset("eEinumkKMGTP")
_DIGITS = frozenset("0123456789")
_NANO = Fraction(1, 10**9)
# A decimal exponent beyond this would build an integer of millions of digits (upstream keeps a scale instead);
# no resource comes near it, so such a selector fails instead of stalling the scheduler.
_MAX_EXPONENT = 10_000


class QuantityError(ValueError):
    """A string that upstream's ParseQuantity rejects; the message is upstream's."""


def _scan(text: str) -> tuple[bool, str, str, str, str]:
    """parseQuantityString: (positive, value, numerator, denominator, suffix) or QuantityError(format)."""
    positive = True
    pos = 0
    end = len(text)
    if pos < end and text[0] in "+-":
        positive = text[0] == "+"
        pos += 1
    while True:
        if pos >= end:
            return positive, "0", "0", "", ""
        if text[pos] != "0":
            break
        pos += 1
    start = pos
    while pos < end and text[pos] in _DIGITS:
        pos += 1
    num = text[start:pos] or "0"
    if pos >= end:
        return positive, text, num, "", ""
    denom = ""
    if text[pos] == ".":
        pos += 1
        start = pos
        while pos < end and text[pos] in _DIGITS:
            pos += 1
        denom = text[start:pos]
        if pos >= end:
            return positive, text, num, denom, ""
    value = text[:pos]
    suffix_start = pos
    while pos < end and text[pos] in _SUFFIX_CHARS:
        pos += 1
    if pos >= end:
        return positive, value, num, denom, text[suffix_start:]
    if text[pos] in "+-":
        pos += 1
    while pos < end and text[pos] in _DIGITS:
        pos += 1
    if pos < end:
        raise QuantityError(_ERR_FORMAT)
    return positive, value, num, denom, text[suffix_start:]


def _interpret(suffix: str) -> tuple[int, int, bool] | None:
    """quantitySuffixer.interpret: (base, exponent, binary) or None."""
    if suffix in _DECIMAL:
        return 10, _DECIMAL[suffix], False
    if suffix in _BINARY:
        return 2, _BINARY[suffix], True
    if len(suffix) > 1 and suffix[0] in "eE":
        digits = suffix[1:]
        body = digits[1:] if digits[0] in "+-" else digits
        if body and all(c in _DIGITS for c in body):
            return 10, int(digits), False
    return None


@functools.lru_cache(maxsize=4096)
def parse_quantity(text: str) -> Fraction:
    """The exact value of `text` as upstream's ParseQuantity computes it, or QuantityError with its message."""
    if not text:
        raise QuantityError(_ERR_FORMAT)
    if text == "0":
        return Fraction(0)
    positive, value, num, denom, suffix = _scan(text)
    interpreted = _interpret(suffix)
    if interpreted is None:
        raise QuantityError(_ERR_SUFFIX)
    base, exponent, binary = interpreted
    # Upstream's fast path (an int64 mantissa at a scale of at least nano) reads the scanned digits only; the
    # slow path parses the numeric text with inf.Dec's SetString, which refuses one without digits ("-.").
    # So "Ki" and "." are 0 upstream, and ".e-10" is ErrNumeric.
    if binary:
        precision = 15 - len(num) - (exponent * 3) // 10 - 1 if not denom else -1
        fast = precision >= 0 and not denom
    else:
        fast = 18 - len(num) - len(denom) >= 0 and exponent - len(denom) >= -9
    if not fast and not any(c in _DIGITS for c in value):
        raise QuantityError(_ERR_NUMERIC)
    if abs(exponent) > _MAX_EXPONENT:
        raise QuantityError(_ERR_NUMERIC)
    amount = Fraction(int(num + denom), 10 ** len(denom))
    if base == 2:
        amount *= 2**exponent
    else:
        amount *= Fraction(10) ** exponent
    # Below a nano-unit: rounded up to the next nano-unit (the fast path never needs it; the slow path
    # rounds the magnitude with inf.RoundUp), binary values capped at the int64 maximum.
    if (amount / _NANO).denominator != 1:
        amount = Fraction(-((-amount.numerator * 10**9) // amount.denominator), 10**9)
    if binary and amount > MAX_INT64:
        amount = Fraction(MAX_INT64)
    return amount if positive else -amount


def is_int64(value: Fraction) -> bool:
    """Whether `asInteger()` succeeds (an integral value within int64)."""
    return value.denominator == 1 and MIN_INT64 <= value.numerator <= MAX_INT64


def canonical(value: Fraction) -> str:
    """The one text per value carried in the CEL Quantity message, so that message equality is value equality
    (upstream: quantity("200M") == quantity("0.2G"))."""
    return str(value)


@functools.lru_cache(maxsize=4096)
def from_canonical(text: str) -> Fraction:
    return Fraction(text)
