"""client-go's REST client metrics, fed by the Kubernetes adapter through ports.RequestObserver:
`rest_client_requests_total{code,method,host}` (every reply, watches included; code "<error>" when none came) and
`rest_client_request_duration_seconds{verb,host}` (requests other than watches), with client-go's names, labels and
buckets (k8s.io/component-base/metrics/prometheus/restclient), so dashboards and alerts written for
kube-scheduler's API traffic read ours.

The client is built before the scheduler's registry (the core needs it first): this collector keeps its own
registry and is registered in the scheduler's as one Collector (SchedulerMetrics.registry.register)."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from metrics_sched.observability.children import Children

# client-go's request latency buckets.
REQUEST_DURATION_BUCKETS = (0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0)

__all__ = ["REQUEST_DURATION_BUCKETS", "RestClientMetrics"]


class RestClientMetrics(Collector):
    """A ports.RequestObserver that is also a prometheus Collector."""

    def __init__(self) -> None:
        self._registry = CollectorRegistry(auto_describe=True)
        self._requests = Children(Counter("rest_client_requests", "Number of HTTP requests, partitioned by status "
                                          "code, method, and host.", ["code", "method", "host"],
                                          registry=self._registry))
        self._duration = Children(Histogram("rest_client_request_duration_seconds", "Request latency in seconds. "
                                            "Broken down by verb, and host.", ["verb", "host"],
                                            buckets=REQUEST_DURATION_BUCKETS, registry=self._registry))

    def observe_request(self, method: str, host: str, code: str, seconds: float | None) -> None:
        self._requests(code, method, host).inc()
        if seconds is not None:
            self._duration(method, host).observe(seconds)

    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterable[Metric]:
        return self._registry.collect()
