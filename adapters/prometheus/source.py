"""PrometheusSource: every configured metric as one instant query per refresh, for all nodes at once (a metric
kept per device: its node values and its device values from that one query).

The source type `prometheus` (entry point in pyproject.toml); health, backoff and logging of failures
are PolledSource's.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import requests

from adapters.prometheus.client import PrometheusClient, QueryError
from adapters.prometheus.config import MetricSpec, PrometheusConfig, parse_config
from adapters.prometheus.node_names import IndexCache, NodeIndex
from adapters.prometheus.plan import ReducePlan, build_plan
from adapters.prometheus.series import MalformedResult, Reduced, combined_query, recorded_query, reduce_result
from metrics_sched.ports import NodeDirectory
from metrics_sched.telemetry import PolledSource, SourceContext
from metrics_sched.telemetry.batch import BatchedFetchResult, MetricBatch

TYPE = "prometheus"


class PrometheusSource(PolledSource):
    """A source over the Prometheus HTTP API. `session` replaces the requests session (tests)."""

    def __init__(self, name: str, config: PrometheusConfig, *, session: requests.Session | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        super().__init__(name, config.interval, [m.name for m in config.metrics], clock=clock)
        self.config = config
        self.health.extra["url"] = config.url
        self._client = PrometheusClient(config, session=session)
        # Through recording rules a metric's two recorded series by name; raw, the value and timestamp queries.
        self._queries = {m.name: recorded_query(*m.recorded) if m.recorded
                         else combined_query(m.query, m.timestamp_query) for m in config.metrics}
        self._pool = ThreadPoolExecutor(max_workers=min(8, max(1, len(config.metrics))),
                                        thread_name_prefix=f"prometheus-{name}")
        self._node_index = IndexCache()
        # Per metric, the plan of its last answer (adapters.prometheus.plan): each metric is reduced in one
        # pool thread at a time, so each entry has one writer.
        self._plans: dict[str, ReducePlan] = {}

    def query_for(self, metric: str) -> str:
        """The PromQL sent for `metric` (for docs, debugging and the /sources endpoint)."""
        return self._queries[metric]

    def fetch(self, nodes: NodeDirectory) -> BatchedFetchResult:
        result = BatchedFetchResult(samples=[], dropped={}, errors={})
        dropped: Counter[str] = Counter()
        index = self._node_index.index(nodes)
        # The queries of one refresh run side by side, each reduced in its own thread as soon as its answer
        # is in: a refresh costs the slowest query (and its reduction), not their sum.
        pending = {m.name: self._pool.submit(self._query_and_reduce, m, index) for m in self.config.metrics}
        for metric in self.config.metrics:
            result.queries += 1
            try:
                # PrometheusUnreachable propagates: the whole source is down this round.
                reduced = pending[metric.name].result()
            except (QueryError, MalformedResult) as exc:
                result.errors[metric.name] = str(exc)
                continue
            result.batches.append(reduced.batch or _batch(metric.name, reduced))
            if reduced.devices is not None:
                result.device_batches.append(reduced.devices)
            result.unmatched_series += reduced.unmatched
            result.series_matching[metric.name] = reduced.matching()
            dropped.update(reduced.dropped)
        result.dropped = dict(dropped)
        return result

    def _query_and_reduce(self, metric: MetricSpec, index: NodeIndex) -> Reduced:
        answer = self._client.query_answer(self._queries[metric.name])
        vector = answer.vector
        if vector is not None:
            # The same series as last time (the usual refresh): the plan reduces them without label work per
            # series. Other series: a new plan from this answer, for the next refreshes too.
            plan = self._plans.get(metric.name)
            if plan is None or not plan.matches(vector, index):
                plan = build_plan(metric, answer.result(), vector, index)
                if plan is None:
                    self._plans.pop(metric.name, None)
                else:
                    self._plans[metric.name] = plan
            if plan is not None and (reduced := plan.apply(metric, vector)) is not None:
                return reduced
        return reduce_result(metric, answer.result(), index)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._client.close()

    def __repr__(self) -> str:
        return f"PrometheusSource(name={self.name!r}, url={self.config.url!r}, metrics={self.metrics()!r})"


def _batch(metric: str, reduced: Reduced) -> MetricBatch:
    """The samples of a metric reduced the general way (one per node) as one batch, as the plan gives them."""
    samples = reduced.samples
    return MetricBatch.of(metric, [s.node for s in samples], [s.value for s in samples],
                          [s.observed_at for s in samples])


def from_config(name: str, spec: Mapping[str, Any], ctx: SourceContext) -> PrometheusSource:
    """Validates `spec` (see adapters.prometheus.config) and builds the source; raises ConfigError."""
    return PrometheusSource(name, parse_config(spec, base_dir=ctx.base_dir))
