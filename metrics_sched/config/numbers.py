"""The one rule for every number a config holds: finite and within what the code that uses it can hold.

YAML gives `.nan`, `.inf` and integers of any size; NaN passes every range check written as a comparison
(`nan < 1` and `nan > 1` are both False) and ends in a timer or a socket timeout that refuses it, or spins.
Every reader of `metrics_sched.config.reader` (numbers, integers, durations) goes through here.
"""

from __future__ import annotations

import math

from metrics_sched.config.errors import ConfigError

__all__ = ["INT_RANGE", "finite_number", "integer_in_range", "shown"]

# What a Kubernetes int64 field holds (and numpy, and every C timer): a larger integer is a typo.
INT_RANGE = (-(2**63), 2**63 - 1)


def finite_number(value: int | float, field: str) -> float:
    """`value` as a float, refusing NaN, the infinities and integers too large for a float."""
    try:
        number = float(value)
    except OverflowError:
        raise ConfigError(field, f"must be a finite number, got {shown(value)}") from None
    if not math.isfinite(number):
        raise ConfigError(field, f"must be a finite number, got {value!r}")
    return number


def integer_in_range(value: int, field: str) -> int:
    """`value`, refusing integers outside INT_RANGE (YAML reads `1e400`-sized integers without complaint)."""
    if not INT_RANGE[0] <= value <= INT_RANGE[1]:
        raise ConfigError(field, f"must be within a 64-bit integer's range, got {shown(value)}")
    return value


def shown(value: object) -> str:
    """`value` for an error message, bounded: str() of an integer past 4300 digits raises (Python's limit
    against quadratic conversions), and a 400-digit duration string is not worth repeating in full."""
    if isinstance(value, int) and value.bit_length() > 128:
        return f"an integer of {value.bit_length()} bits"
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:40]}... ({len(text)} characters)"
