"""CmdbSource: per-node values from a JSON inventory or cost API, mapped declaratively.

Outcomes of a refresh: unreachable (after retries) or circuit open -> raises SourceError, the source is
down; answered but unusable (4xx, malformed JSON, wrong shape) -> every metric gets the error; otherwise
samples, with refused values counted by reason. Both failures count towards the circuit breaker.
"""

from __future__ import annotations

import logging
import math
import time
from collections import Counter
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import httpx

from adapters.cmdb.breaker import CircuitBreaker
from adapters.cmdb.config import CmdbConfig, FieldSpec, parse_config
from adapters.cmdb.http_client import BadReply, CmdbHttp
from adapters.cmdb.pages import Collected, collect
from adapters.cmdb.paths import MISSING, ShapeError, lookup
from adapters.cmdb.values import to_number
from adapters.http_common import HealthTracker, SourceError, clean_message, parse_rfc3339
from metrics_sched.ports import FetchResult, NodeDirectory, Sample

log = logging.getLogger(__name__)


class CircuitOpen(SourceError):
    pass


class CmdbSource:
    """A MetricSource over a JSON API. `transport` replaces the network (tests); `clock` drives the circuit
    breaker, `wall_clock` stamps samples, `sleep` is the retry backoff's."""

    def __init__(self, name: str, config: CmdbConfig, *, transport: httpx.BaseTransport | None = None,
                 clock: Callable[[], float] = time.monotonic, wall_clock: Callable[[], float] = time.time,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self._name = name
        self.config = config
        self._http = CmdbHttp(timeout=config.timeout, retries=config.retries, credentials=config.credentials,
                              ca_file=config.ca_file, transport=transport, sleep=sleep, wall_clock=wall_clock)
        self.breaker = CircuitBreaker(failure_threshold=config.breaker.failure_threshold,
                                      cool_down=config.breaker.cool_down,
                                      max_cool_down=config.breaker.max_cool_down, clock=clock)
        self._health = HealthTracker(wall_clock)
        self._pages = 0
        self._truncated = False

    @property
    def name(self) -> str:
        return self._name

    @property
    def interval(self) -> float:
        return self.config.interval

    def metrics(self) -> list[str]:
        return list(self.config.fields)

    def fetch(self, nodes: NodeDirectory) -> FetchResult:
        if not self.breaker.allow():
            raise CircuitOpen(f"circuit open after {self.config.breaker.failure_threshold} consecutive failed "
                              f"refreshes; next attempt in {self.breaker.retry_in():.0f}s")
        try:
            collected = collect(self._http.get, self.config)
        except SourceError as exc:
            self._failed(str(exc))
            raise
        except (BadReply, ShapeError) as exc:
            message = clean_message(str(exc), self._http.secrets())
            self._failed(message)
            malformed = isinstance(exc, BadReply) and exc.malformed
            return FetchResult(samples=[], dropped={"malformed": 1} if malformed else {},
                               errors=dict.fromkeys(self.metrics(), message), queries=1)
        result = self._samples(collected, nodes)
        self._pages, self._truncated = collected.pages, collected.truncated
        if collected.truncated:
            log.warning("source %s: stopped at maxPages=%d; nodes on later pages are missing this round",
                        self._name, self.config.max_pages)
        self.breaker.record_success()
        self._health.success()
        return result

    def _failed(self, message: str) -> None:
        self.breaker.record_failure()
        self._health.failure(message)
        log.warning("source %s: %s (circuit %s)", self._name, message, self.breaker.state)

    def _samples(self, collected: Collected, nodes: NodeDirectory) -> FetchResult:
        result = FetchResult(samples=[], dropped={}, errors={}, queries=collected.pages)
        dropped: Counter[str] = Counter()
        seen: set[str] = set()
        for item, received_at in collected.items:
            if not isinstance(item, Mapping):
                dropped["malformed"] += 1
                continue
            if any(lookup(item, path) != expected for path, expected in self.config.match.items()):
                continue
            node = self._node(item, nodes, result, dropped)
            if node is None:
                continue
            if node in seen:
                dropped["duplicate"] += 1
                continue
            seen.add(node)
            observed_at = self._observed_at(item, received_at)
            if observed_at is None:
                dropped["bad_timestamp"] += 1
                continue
            for metric, spec in self.config.fields.items():
                value = _field_value(item, spec, dropped)
                if value is not None:
                    result.samples.append(Sample(metric=metric, node=node, value=value, observed_at=observed_at))
        result.dropped = dict(dropped)
        return result

    def _node(self, item: Mapping[str, Any], nodes: NodeDirectory, result: FetchResult,
              dropped: Counter[str]) -> str | None:
        key = lookup(item, self.config.node_key)
        if not isinstance(key, str) or not key.strip():
            result.unmatched_series += 1
            dropped["no_node_key"] += 1
            return None
        key = key.strip()
        for candidate in (key, key.lower()):
            if candidate in nodes.names:
                return candidate
        result.unmatched_series += 1
        dropped["unknown_node"] += 1
        return None

    def _observed_at(self, item: Mapping[str, Any], received_at: float) -> float | None:
        if self.config.timestamp_path is None:
            return received_at
        raw = lookup(item, self.config.timestamp_path)
        if isinstance(raw, str):
            try:
                return parse_rfc3339(raw)
            except ValueError:
                return None
        value, reason = to_number(raw) if not isinstance(raw, bool) else (None, "malformed")
        return value if reason is None else None

    def health(self) -> dict[str, Any]:
        return {"type": "cmdb", "url": self.config.url, **self._health.snapshot(),
                "circuit": self.breaker.snapshot(), "pages": self._pages, "truncated": self._truncated}

    def close(self) -> None:
        self._http.close()

    def __repr__(self) -> str:
        return f"CmdbSource(name={self._name!r}, url={self.config.url!r}, metrics={self.metrics()!r})"


def _field_value(item: Mapping[str, Any], spec: FieldSpec, dropped: Counter[str]) -> float | None:
    value, reason = _number_at(item, spec.path)
    if value is not None and value < 0 and not spec.allow_negative:
        value, reason = None, "negative"
    if value is not None and spec.divide_by is not None:
        divisor, _ = _number_at(item, spec.divide_by)
        if divisor is None or divisor <= 0:
            value, reason = None, "bad_divisor"
        else:
            value /= divisor
    if value is not None:
        value *= spec.scale
        if math.isfinite(value):
            return value
        reason = "inf"
    dropped[reason or "malformed"] += 1
    return None


def _number_at(item: Mapping[str, Any], path: tuple[str, ...]) -> tuple[float | None, str | None]:
    raw = lookup(item, path)
    return to_number(None if raw is MISSING else raw)


def from_config(name: str, spec: Mapping[str, Any], *, base_dir: Path) -> CmdbSource:
    """Validates `spec` (see adapters.cmdb.config) and builds the source; raises ConfigError."""
    return CmdbSource(name, parse_config(spec, base_dir=base_dir))
