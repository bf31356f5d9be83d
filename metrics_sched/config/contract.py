"""Per-metric freshness contract: how old a value may be, and what a missing value means.

- max_age: the measurement itself (its own timestamp) may be at most this old;
- ttl: a value stays usable this long after it was fetched, so a source that goes down degrades
  scoring after ttl instead of at once, and a value never outlives it;
- on_missing: neutral (the term drops out for that node and the other terms are re-weighted),
  deny (the node is filtered out), lowest (the node gets the worst score for the term).

It lives with the config (the `metrics:` section parses into it) so that telemetry imports config and
never the reverse; `metrics_sched.telemetry` re-exports it for the cache's readers.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from metrics_sched.config.reader import check_keys, mapping, read_choice, read_duration


class OnMissing(enum.StrEnum):
    NEUTRAL = "neutral"
    DENY = "deny"
    LOWEST = "lowest"


@dataclass(frozen=True)
class FreshnessContract:
    ttl: float = 60.0
    max_age: float = 120.0
    on_missing: OnMissing = OnMissing.NEUTRAL


_ON_MISSING = tuple(m.value for m in OnMissing)


def parse_contract(data: Mapping[str, Any] | None, field: str) -> FreshnessContract:
    """`{ttl, maxAge, onMissing}` at `field` (e.g. `metrics.gpu_temperature`); missing keys take the defaults."""
    data = mapping(data, field, optional=True)
    check_keys(data, ("ttl", "maxAge", "onMissing"), field)
    default = FreshnessContract()
    return FreshnessContract(
        ttl=read_duration(data, "ttl", field, default.ttl),
        max_age=read_duration(data, "maxAge", field, default.max_age),
        on_missing=OnMissing(read_choice(data, "onMissing", field, _ON_MISSING, default.on_missing.value)),
    )
