"""resource.Quantity as the allocator needs it: exact values in nano units and Go's canonical string.

Upstream parses every quantity of a slice or claim with `resource.ParseQuantity` (rounding the magnitude up to
nano precision), compares and adds them exactly, and writes `consumedCapacity` values that the API server stores
in canonical form (`Quantity.String()` / `CanonicalizeBytes`). A value here is an `int` of nano units, which is
exact for every quantity Kubernetes accepts, plus the format its suffix implies (the canonical string depends
on it: "1536Mi" versus "1610612736").
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal, localcontext
from typing import Final

__all__ = ["BINARY_SI", "DECIMAL_EXPONENT", "DECIMAL_SI", "NANO", "Quantity", "QuantityError", "ceil_units"]

NANO: Final = 10**9
BINARY_SI: Final = "BinarySI"
DECIMAL_SI: Final = "DecimalSI"
DECIMAL_EXPONENT: Final = "DecimalExponent"

_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_DECIMAL_SUFFIX = {exp: suffix for suffix, exp in _DECIMAL.items()}
_BINARY_SUFFIX = {exp // 10: suffix for suffix, exp in _BINARY.items()}
# <signedNumber><suffix>, suffix one of the SI ones or e/E followed by a signed integer (apimachinery's grammar).
_SYNTAX = re.compile(r"([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))((?:[eE][+-]?[0-9]+)|Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]?)\Z")


class QuantityError(ValueError):
    """A string that resource.ParseQuantity refuses (the API server never stores one)."""


def ceil_units(nanos: int) -> int:
    """Quantity.Value(): the value in whole units, rounded up (upstream's step arithmetic uses it)."""
    return -((-nanos) // NANO)


@dataclass(frozen=True, slots=True)
class Quantity:
    nanos: int
    fmt: str = DECIMAL_SI

    @classmethod
    def parse(cls, text: object) -> Quantity:
        if isinstance(text, bool) or not isinstance(text, str | int):
            raise QuantityError(f"quantities must match the regular expression: {text!r}")
        raw = str(text).strip()
        match = _SYNTAX.match(raw)
        if match is None:
            raise QuantityError(f"quantities must match the regular expression "
                                f"'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$': {raw!r}")
        number, suffix = match.groups()
        if suffix in _BINARY:
            fmt, scaled = BINARY_SI, Decimal(number) * (Decimal(2) ** _BINARY[suffix])
        elif suffix[:1] in ("e", "E"):
            fmt, scaled = DECIMAL_EXPONENT, Decimal(number).scaleb(int(suffix[1:]))
        else:
            fmt, scaled = DECIMAL_SI, Decimal(number).scaleb(_DECIMAL[suffix])
        with localcontext() as ctx:
            ctx.prec = max(60, len(raw) + 30)
            exact = scaled * NANO
            magnitude = int(abs(exact).to_integral_value(rounding="ROUND_CEILING"))
        nanos = -magnitude if exact < 0 else magnitude
        if fmt == BINARY_SI and 0 < nanos < NANO:
            fmt = DECIMAL_SI  # ParseQuantity: a binary value below 1 is shown as a decimal one
        return cls(nanos, fmt)

    @classmethod
    def from_int(cls, value: int, fmt: str = BINARY_SI) -> Quantity:
        """resource.NewQuantity(value, format)."""
        return cls(value * NANO, fmt)

    def __str__(self) -> str:
        return self.canonical()

    def canonical(self) -> str:
        """Quantity.String() of a parsed or computed value (CanonicalizeBytes)."""
        nanos = self.nanos
        if nanos == 0:
            return "0"
        fmt = self.fmt
        if fmt == BINARY_SI and (-1024 * NANO < nanos < 1024 * NANO or nanos % NANO):
            fmt = DECIMAL_SI  # small or fractional binary values are written as decimal ones
        if fmt == BINARY_SI:
            amount, exponent = _strip(nanos // NANO, 1024)
            return f"{amount}{_BINARY_SUFFIX.get(exponent, '')}"
        amount, exponent = _strip(nanos, 10)
        exponent -= 9
        shift = exponent % 3  # down to a multiple of three, as AsCanonicalBytes does
        amount *= 10**shift
        exponent -= shift
        if fmt == DECIMAL_EXPONENT:
            return f"{amount}e{exponent}" if exponent else str(amount)
        return f"{amount}{_DECIMAL_SUFFIX.get(exponent, '')}"


def _strip(value: int, base: int) -> tuple[int, int]:
    """removeInt64Factors: move factors of `base` into an exponent, keeping the sign."""
    negative = value < 0
    result, times = abs(value), 0
    while result >= base and result % base == 0:
        result //= base
        times += 1
    return (-result if negative else result), times
