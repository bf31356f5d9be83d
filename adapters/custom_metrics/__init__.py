"""The Custom Metrics API (custom.metrics.k8s.io, external.metrics.k8s.io) as a telemetry source.

The source type `custom-metrics` (TYPE and from_config, registered in the `metrics_sched.sources`
entry-point group). Configuration fields and defaults: see `adapters.custom_metrics.config`.
"""

from adapters.custom_metrics.config import CustomMetricsConfig, ExternalMetric, NodeMetric, parse_config
from adapters.custom_metrics.source import TYPE, CustomMetricsSource, from_config

__all__ = ["TYPE", "CustomMetricsConfig", "CustomMetricsSource", "ExternalMetric", "NodeMetric", "from_config",
           "parse_config"]
