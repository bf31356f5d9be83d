"""PolledSource: the base of every telemetry source. A source implements `fetch`; this owns the rest.

What the base does, so that no source repeats it: its name, interval and metric names; the health
bookkeeping of every refresh (attempt, success, failure, error text, consecutive failures); the backoff
after failures (exponential, or an optional circuit breaker's cool-down); logging a failure when it
starts or changes (not on every refresh) and its recovery. The MetricCache calls `poll` from the
source's own thread and waits `next_delay()` between polls; nothing here runs on the scheduling path.
"""

from __future__ import annotations

import abc
import logging
import time
from collections.abc import Callable, Sequence

from metrics_sched.ports import FetchResult, NodeDirectory
from metrics_sched.telemetry.breaker import CircuitBreaker
from metrics_sched.telemetry.health import SourceHealth

log = logging.getLogger(__name__)

# After failures the next refresh waits interval * 2^(failures-1), capped at this many intervals (and at
# MAX_BACKOFF_SECONDS): a source that is down is asked less often, one that comes back is seen soon.
MAX_BACKOFF_INTERVALS = 4
MAX_BACKOFF_SECONDS = 300.0


class PolledSource(abc.ABC):
    """A telemetry source refreshed every `interval` seconds in the background.

    Subclasses implement `fetch` (and `close` when they hold connections). `fetch` must not raise for
    a per-metric failure (report it in FetchResult.errors); it may raise for a whole-source failure, and
    the exception's text is shown in /sources and logged, so it must carry no secret.
    """

    def __init__(self, name: str, interval: float, metrics: Sequence[str], *,
                 breaker: CircuitBreaker | None = None, max_backoff: float | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self._name = name
        self._interval = interval
        self._metrics = list(metrics)
        self.breaker = breaker
        cap = min(MAX_BACKOFF_INTERVALS * interval, MAX_BACKOFF_SECONDS) if max_backoff is None else max_backoff
        self.max_backoff = max(interval, cap)
        self._clock = clock
        self.health = SourceHealth(name, interval, list(self._metrics))
        self._logged_failure = ""
        self._logged_errors: dict[str, str] = {}

    @property
    def name(self) -> str:
        return self._name

    @property
    def interval(self) -> float:
        """Seconds between refreshes while the source is healthy."""
        return self._interval

    def metrics(self) -> list[str]:
        """The metric names this source provides."""
        return list(self._metrics)

    @abc.abstractmethod
    def fetch(self, nodes: NodeDirectory) -> FetchResult:
        """One refresh of every metric; may block (bounded by the source's own timeouts)."""

    def close(self) -> None:  # noqa: B027 - an optional hook: most sources hold nothing to release
        """Releases connections and threads; the default holds none."""

    # -- what the cache calls --------------------------------------------------------------------
    def poll(self, nodes: NodeDirectory) -> FetchResult | None:
        """One refresh with its bookkeeping; the result, or None when the source delivered nothing."""
        health = self.health
        now = self._clock()
        if self.breaker is not None and not self.breaker.allow():
            # Not an attempt: the breaker keeps the source alone until its cool-down is over.
            health.up = False
            health.count_error("circuit_open")
            self._finish(now)
            return None
        health.last_attempt = now
        health.attempts += 1
        started = time.monotonic()
        try:
            result = self.fetch(nodes)
        except Exception as exc:  # noqa: BLE001 - a failing source degrades scoring, never stops binding
            health.last_duration = time.monotonic() - started
            text = str(exc).strip()
            health.record_failure(now, f"{type(exc).__name__}: {text}" if text else type(exc).__name__,
                                  type(exc).__name__)
            if self.breaker is not None:
                self.breaker.record_failure()
            self._log_failure()
            self._finish(now)
            return None
        health.last_duration = time.monotonic() - started
        ok = health.record_result(now, result)
        if self.breaker is not None:
            if ok:
                self.breaker.record_success()
            else:
                self.breaker.record_failure()
        if ok:
            self._log_recovery()
            self._log_metric_errors(result.errors)
        else:
            self._log_failure()  # names every metric's error already
            self._logged_errors = dict(result.errors)
        self._finish(now)
        return result

    def next_delay(self) -> float:
        """Seconds from the start of the last refresh to the next: the interval, longer after failures.

        Without a breaker the n-th consecutive failure waits interval * 2^(n-1), up to max_backoff. With
        one, the breaker is the backoff (its cool-down is what the source's config asked for): the
        interval while it is closed, until it lets a probe through while it is open."""
        if self.breaker is not None:
            return self.breaker.retry_in() if self.breaker.state == "open" else self._interval
        failures = self.health.consecutive_failures
        if failures == 0:
            return self._interval
        return min(self._interval * 2.0 ** min(failures - 1, 30), self.max_backoff)

    def _finish(self, now: float) -> None:
        if self.breaker is not None:
            self.health.breaker = self.breaker.status(now)
        self.health.next_attempt = now + self.next_delay()

    # -- logging: on change, not on every refresh -------------------------------------------------
    def _log_failure(self) -> None:
        health = self.health
        if health.last_error != self._logged_failure:
            breaker = f" (circuit {self.breaker.state})" if self.breaker is not None else ""
            log.warning("source %s failed: %s%s; next attempt in %.0fs", self._name, health.last_error, breaker,
                        self.next_delay())
            self._logged_failure = health.last_error

    def _log_recovery(self) -> None:
        if self._logged_failure:
            log.info("source %s recovered", self._name)
            self._logged_failure = ""

    def _log_metric_errors(self, errors: dict[str, str]) -> None:
        for metric, error in errors.items():
            if self._logged_errors.get(metric) != error:
                log.warning("source %s: metric %s: %s", self._name, metric, error)
        for metric in set(self._logged_errors) - set(errors):
            log.info("source %s: metric %s recovered", self._name, metric)
        self._logged_errors = dict(errors)
