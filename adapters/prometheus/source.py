"""PrometheusSource: every configured metric as one instant query per refresh, for all nodes at once."""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import requests

from adapters.http_common import HealthTracker
from adapters.prometheus.client import PrometheusClient, PrometheusUnreachable, QueryError
from adapters.prometheus.config import PrometheusConfig, parse_config
from adapters.prometheus.series import MalformedResult, combined_query, reduce_result
from metrics_sched.ports import FetchResult, NodeDirectory

log = logging.getLogger(__name__)


class PrometheusSource:
    """A MetricSource over the Prometheus HTTP API. `session` replaces the requests session (tests)."""

    def __init__(self, name: str, config: PrometheusConfig, *, session: requests.Session | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self._name = name
        self.config = config
        self._client = PrometheusClient(config, session=session)
        self._queries = {m.name: combined_query(m.query, m.timestamp_query) for m in config.metrics}
        self._health = HealthTracker(clock)
        self._logged_errors: dict[str, str] = {}
        self._pool = ThreadPoolExecutor(max_workers=min(8, max(1, len(config.metrics))),
                                        thread_name_prefix=f"prometheus-{name}")

    @property
    def name(self) -> str:
        return self._name

    @property
    def interval(self) -> float:
        return self.config.interval

    def metrics(self) -> list[str]:
        return [m.name for m in self.config.metrics]

    def query_for(self, metric: str) -> str:
        """The PromQL sent for `metric` (for docs, debugging and the /sources endpoint)."""
        return self._queries[metric]

    def fetch(self, nodes: NodeDirectory) -> FetchResult:
        result = FetchResult(samples=[], dropped={}, errors={})
        dropped: Counter[str] = Counter()
        # The queries of one refresh run side by side: a refresh costs the slowest query, not their sum.
        pending = {m.name: self._pool.submit(self._client.query, self._queries[m.name]) for m in self.config.metrics}
        for metric in self.config.metrics:
            result.queries += 1
            try:
                reduced = reduce_result(metric, pending[metric.name].result(), nodes)
            except PrometheusUnreachable as exc:
                self._health.failure(str(exc))
                log.warning("source %s: %s", self._name, exc)
                raise
            except (QueryError, MalformedResult) as exc:
                result.errors[metric.name] = str(exc)
                continue
            result.samples.extend(reduced.samples)
            result.unmatched_series += reduced.unmatched
            dropped.update(reduced.dropped)
        result.dropped = dict(dropped)
        self._record(result)
        return result

    def _record(self, result: FetchResult) -> None:
        for metric, error in result.errors.items():
            # Log a metric's error when it changes, not every refresh.
            if self._logged_errors.get(metric) != error:
                log.warning("source %s: metric %s: %s", self._name, metric, error)
        for metric in set(self._logged_errors) - set(result.errors):
            log.info("source %s: metric %s recovered", self._name, metric)
        self._logged_errors = dict(result.errors)
        if result.errors and len(result.errors) == len(self.config.metrics):
            self._health.failure(next(iter(result.errors.values())))
        else:
            latest = next(iter(result.errors.values()), None)
            self._health.success(latest)

    def health(self) -> dict[str, Any]:
        return {"type": "prometheus", "url": self.config.url, **self._health.snapshot()}

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._client.close()

    def __repr__(self) -> str:
        return f"PrometheusSource(name={self._name!r}, url={self.config.url!r}, metrics={self.metrics()!r})"


def from_config(name: str, spec: Mapping[str, Any], *, base_dir: Path) -> PrometheusSource:
    """Validates `spec` (see adapters.prometheus.config) and builds the source; raises ConfigError."""
    return PrometheusSource(name, parse_config(spec, base_dir=base_dir))
