"""The one health model of telemetry sources: what /sources, `metrics_sched_source_*` and the logs show.

A PolledSource keeps its SourceHealth up to date on every refresh (attempts, successes, failures,
backoff, circuit breaker); the MetricCache adds what only it knows (coverage, values it refused).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from metrics_sched.ports import FetchResult, SeriesMatching

BreakerState = Literal["closed", "open", "half_open"]
ERROR_TEXT_LIMIT = 500


@dataclass(frozen=True)
class BreakerStatus:
    """A circuit breaker as the health model shows it."""

    state: BreakerState
    consecutive_failures: int
    cool_down: float  # seconds the breaker stays open the next (or this) time it opens
    opened: int  # times it has opened
    reopens_at: float | None  # unix time an open breaker lets the next probe through; None unless open


@dataclass
class SourceHealth:
    name: str
    interval: float
    metrics: list[str]
    up: bool = False
    last_success: float | None = None  # unix time
    last_failure: float | None = None
    last_attempt: float | None = None
    attempts: int = 0  # fetches made (a refresh skipped by an open circuit breaker is none)
    next_attempt: float | None = None  # unix time of the next refresh (later than interval after failures)
    last_duration: float = 0.0
    consecutive_failures: int = 0
    last_error: str = ""  # already scrubbed by the source: it is shown and logged as is
    queries: int = 0
    dropped: dict[str, int] = field(default_factory=dict)
    errors_by_reason: dict[str, int] = field(default_factory=dict)
    unmatched_series: int = 0
    clamped: int = 0  # samples stamped after they were fetched (clock skew): the cache used the fetch time
    coverage: dict[str, float] = field(default_factory=dict)  # metric -> share of nodes with a fresh value
    devices: dict[str, int] = field(default_factory=dict)  # per-device metric -> devices with a fresh value
    # metric -> how its series found their nodes in its latest answered query (rule counts, unmatched label sets)
    series_matching: dict[str, SeriesMatching] = field(default_factory=dict)
    breaker: BreakerStatus | None = None  # set by a source with a circuit breaker
    extra: dict[str, Any] = field(default_factory=dict)  # source-specific facts (pages read, truncated, ...)

    def count_error(self, reason: str) -> None:
        self.errors_by_reason[reason] = self.errors_by_reason.get(reason, 0) + 1

    def record_failure(self, at: float, error: str, reason: str) -> None:
        """A refresh that delivered nothing (the source raised, or its circuit is open)."""
        self.up = False
        self.last_failure = at
        self.consecutive_failures += 1
        self.last_error = error[:ERROR_TEXT_LIMIT]
        self.count_error(reason)

    def record_result(self, at: float, result: FetchResult) -> bool:
        """A refresh that returned; it counts as a success unless every metric failed. Returns that."""
        self.queries += result.queries
        self.unmatched_series = result.unmatched_series
        # A metric whose query failed this round keeps its last report: the failure shows in last_error.
        self.series_matching.update(result.series_matching)
        for reason, count in result.dropped.items():
            self.dropped[reason] = self.dropped.get(reason, 0) + count
        for _ in result.errors:
            self.count_error("metric_error")
        # The latest per-metric errors stay visible even when the refresh as a whole counts as a success.
        self.last_error = "; ".join(f"{m}: {e}" for m, e in result.errors.items())[:ERROR_TEXT_LIMIT]
        self.up = not self.metrics or len(result.errors) < len(self.metrics)
        if self.up:
            self.last_success = at
            self.consecutive_failures = 0
        else:
            self.last_failure = at
            self.consecutive_failures += 1
        return self.up

    def as_dict(self, now: float | None = None) -> dict[str, Any]:
        """JSON-ready; with `now` (unix time) also the ages a reader wants (last_success_age, reopens_in)."""
        # Copies: the source's thread may update the counters while this is serialised elsewhere.
        out: dict[str, Any] = {
            key: dict(value) if isinstance(value, dict) else list(value) if isinstance(value, list) else value
            for key, value in vars(self).items()
        }
        breaker = self.breaker
        breaker_dict = asdict(breaker) if breaker is not None else None
        if now is not None:
            out["last_success_age"] = None if self.last_success is None else round(now - self.last_success, 3)
            if breaker_dict is not None and breaker is not None and breaker.reopens_at is not None:
                breaker_dict["reopens_in"] = round(max(0.0, breaker.reopens_at - now), 3)
        out["breaker"] = breaker_dict
        out["series_matching"] = {
            metric: {"matched": dict(m.matched), "unmatched": m.unmatched,
                     "unmatched_examples": [dict(labels) for labels in m.unmatched_examples]}
            for metric, m in out["series_matching"].items()
        }
        return out
