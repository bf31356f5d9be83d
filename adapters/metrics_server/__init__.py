"""Metrics Server (metrics.k8s.io) as a telemetry source: node CPU and memory utilisation.

The source type `metrics-server` (TYPE and from_config, registered in the `metrics_sched.sources`
entry-point group). Configuration fields and defaults: see `adapters.metrics_server.config`.
"""

from adapters.metrics_server.config import MetricsServerConfig, parse_config
from adapters.metrics_server.source import TYPE, MetricsServerSource, from_config

__all__ = ["TYPE", "MetricsServerConfig", "MetricsServerSource", "from_config", "parse_config"]
