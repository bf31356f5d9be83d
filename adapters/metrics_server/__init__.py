"""Metrics Server (metrics.k8s.io) as a telemetry source: node CPU and memory utilisation.

Configuration fields and defaults: see `adapters.metrics_server.config`.
"""

from adapters.metrics_server.config import MetricsServerConfig, parse_config
from adapters.metrics_server.source import MetricsServerSource, from_config

__all__ = ["MetricsServerConfig", "MetricsServerSource", "from_config", "parse_config"]
