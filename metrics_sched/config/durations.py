"""Go-style durations as in KubeSchedulerConfiguration ("15s", "1m30s", "500ms") or plain seconds."""

from __future__ import annotations

import re

from metrics_sched.config.errors import ConfigError

_PART = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(value: object, field: str) -> float:
    if isinstance(value, bool):
        raise ConfigError(field, f"must be a duration like '15s', got {value!r}")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str) and value:
        text = value.strip()
        pos, seconds = 0, 0.0
        for match in _PART.finditer(text):
            if match.start() != pos:
                break
            seconds += float(match.group(1)) * _UNITS[match.group(2)]
            pos = match.end()
        if pos != len(text) or pos == 0:
            raise ConfigError(field, f"must be a duration like '15s' or '1m30s', got {value!r}")
    else:
        raise ConfigError(field, f"must be a duration like '15s', got {value!r}")
    if seconds < 0:
        raise ConfigError(field, f"must not be negative, got {value!r}")
    return seconds
