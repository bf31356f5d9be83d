"""Go-style durations as in KubeSchedulerConfiguration ("15s", "1m30s", "500ms") or plain seconds."""

from __future__ import annotations

import re

from metrics_sched.config.errors import ConfigError
from metrics_sched.config.numbers import finite_number, shown

__all__ = ["MAX_DURATION_SECONDS", "parse_duration"]

_PART = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
# No interval, timeout, TTL or cooldown of a scheduler is longer than a year; anything longer is a typo, and
# every duration ends up in a timer or a socket timeout, which refuse (OverflowError) values past ~292 years.
MAX_DURATION_SECONDS = 366 * 86400.0


def parse_duration(value: object, field: str) -> float:
    """Seconds in [0, MAX_DURATION_SECONDS]: never NaN or infinite (which pass every range comparison)."""
    if isinstance(value, bool):
        raise ConfigError(field, f"must be a duration like '15s', got {shown(value)}")
    if isinstance(value, int | float):
        seconds = finite_number(value, field)
    elif isinstance(value, str) and value:
        text = value.strip()
        pos, seconds = 0, 0.0
        for match in _PART.finditer(text):
            if match.start() != pos:
                break
            seconds += float(match.group(1)) * _UNITS[match.group(2)]  # "999...9s" is float("inf"): see below
            pos = match.end()
        if pos != len(text) or pos == 0:
            raise ConfigError(field, f"must be a duration like '15s' or '1m30s', got {shown(value)}")
    else:
        raise ConfigError(field, f"must be a duration like '15s', got {shown(value)}")
    # `not <=` so that NaN (every comparison False) is refused too.
    if not seconds >= 0:
        raise ConfigError(field, f"must not be negative, got {shown(value)}")
    if not seconds <= MAX_DURATION_SECONDS:
        raise ConfigError(field, f"must be at most {MAX_DURATION_SECONDS / 86400:g} days, got {shown(value)}")
    return seconds
