"""Per-metric freshness contract: how old a value may be, and what a missing value means.

- max_age: the measurement itself (its own timestamp) may be at most this old;
- ttl: a value stays usable this long after it was fetched, so a source that goes down degrades
  scoring after ttl instead of at once, and a value never outlives it;
- on_missing: neutral (the term drops out for that node and the other terms are re-weighted),
  deny (the node is filtered out), lowest (the node gets the worst score for the term).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from metrics_sched.config.durations import parse_duration
from metrics_sched.config.errors import ConfigError


class OnMissing(enum.StrEnum):
    NEUTRAL = "neutral"
    DENY = "deny"
    LOWEST = "lowest"


@dataclass(frozen=True)
class FreshnessContract:
    ttl: float = 60.0
    max_age: float = 120.0
    on_missing: OnMissing = OnMissing.NEUTRAL


def parse_contract(data: Mapping[str, Any], field: str) -> FreshnessContract:
    for key in data:
        if key not in ("ttl", "maxAge", "onMissing"):
            raise ConfigError(f"{field}.{key}", "unknown field (expected ttl, maxAge, onMissing)")
    default = FreshnessContract()
    ttl = parse_duration(data.get("ttl", default.ttl), f"{field}.ttl")
    max_age = parse_duration(data.get("maxAge", default.max_age), f"{field}.maxAge")
    raw = data.get("onMissing", default.on_missing.value)
    try:
        on_missing = OnMissing(raw)
    except ValueError:
        raise ConfigError(f"{field}.onMissing", f"must be neutral, deny or lowest, got {raw!r}") from None
    if ttl <= 0 or max_age <= 0:
        raise ConfigError(f"{field}.ttl", "ttl and maxAge must be positive")
    return FreshnessContract(ttl=ttl, max_age=max_age, on_missing=on_missing)
