"""CmdbSource: per-node values from a JSON inventory or cost API, mapped declaratively.

Outcomes of a refresh: unreachable (after retries) -> raises SourceError, the source is down; answered
but unusable (4xx, malformed JSON, wrong shape) -> every metric gets the error; otherwise samples, with
refused values counted by reason. Both failures count towards the circuit breaker, which PolledSource
drives (no request while it is open) and shows in the source's health.

The source type `cmdb` (entry point in pyproject.toml).
"""

from __future__ import annotations

import logging
import math
import time
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

import httpx

from adapters.cmdb.config import CmdbConfig, FieldSpec, parse_config
from adapters.cmdb.http_client import BadReply, CmdbHttp
from adapters.cmdb.pages import Collected, collect
from adapters.cmdb.paths import MISSING, ShapeError, lookup
from adapters.cmdb.values import to_number
from adapters.http_common import clean_message, parse_rfc3339
from metrics_sched.ports import FetchResult, NodeDirectory
from metrics_sched.telemetry import CircuitBreaker, PolledSource, SourceContext
from metrics_sched.telemetry.batch import BatchedFetchResult, MetricBatch

log = logging.getLogger(__name__)

TYPE = "cmdb"


class CmdbSource(PolledSource):
    """A source over a JSON API. `transport` replaces the network (tests); `clock` drives the circuit
    breaker, `wall_clock` stamps samples and health, `sleep` is the retry backoff's."""

    def __init__(self, name: str, config: CmdbConfig, *, transport: httpx.BaseTransport | None = None,
                 clock: Callable[[], float] = time.monotonic, wall_clock: Callable[[], float] = time.time,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        breaker = CircuitBreaker(failure_threshold=config.breaker.failure_threshold,
                                 cool_down=config.breaker.cool_down,
                                 max_cool_down=config.breaker.max_cool_down, clock=clock)
        super().__init__(name, config.interval, list(config.fields), breaker=breaker, clock=wall_clock)
        self.config = config
        self._http = CmdbHttp(timeout=config.timeout, retries=config.retries, credentials=config.credentials,
                              ca_file=config.ca_file, max_bytes=config.max_response_bytes, transport=transport,
                              sleep=sleep, wall_clock=wall_clock)
        self.health.extra.update(url=config.url, pages=0, truncated=False)

    def fetch(self, nodes: NodeDirectory) -> FetchResult:
        try:
            # SourceError (unreachable after retries) propagates: the whole source is down this round.
            collected = collect(self._http.get, self.config)
        except (BadReply, ShapeError) as exc:
            message = clean_message(str(exc), self._http.secrets())
            malformed = isinstance(exc, BadReply) and exc.malformed
            return FetchResult(samples=[], dropped={"malformed": 1} if malformed else {},
                               errors=dict.fromkeys(self.metrics(), message), queries=1)
        result = self._samples(collected, nodes)
        self.health.extra.update(pages=collected.pages, truncated=collected.truncated)
        if collected.truncated:
            log.warning("source %s: stopped at maxPages=%d; nodes on later pages are missing this round",
                        self.name, self.config.max_pages)
        return result

    def _samples(self, collected: Collected, nodes: NodeDirectory) -> BatchedFetchResult:
        """One batch per field (each node once: a later item of a node already seen is a duplicate)."""
        result = BatchedFetchResult(samples=[], dropped={}, errors={}, queries=collected.pages)
        dropped: Counter[str] = Counter()
        seen: set[str] = set()
        fields = list(self.config.fields.items())
        columns: dict[str, tuple[list[str], list[float], list[float]]] = {m: ([], [], []) for m, _ in fields}
        for item, received_at in collected.items:
            if type(item) is not dict and not isinstance(item, Mapping):
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
            for metric, spec in fields:
                value = _field_value(item, spec, dropped)
                if value is not None:
                    names, values, stamps = columns[metric]
                    names.append(node)
                    values.append(value)
                    stamps.append(observed_at)
        result.batches = [MetricBatch.of(metric, *column) for metric, column in columns.items() if column[0]]
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

    def close(self) -> None:
        self._http.close()

    def __repr__(self) -> str:
        return f"CmdbSource(name={self.name!r}, url={self.config.url!r}, metrics={self.metrics()!r})"


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


def from_config(name: str, spec: Mapping[str, Any], ctx: SourceContext) -> CmdbSource:
    """Validates `spec` (see adapters.cmdb.config) and builds the source; raises ConfigError."""
    return CmdbSource(name, parse_config(spec, base_dir=ctx.base_dir))
