"""Prometheus as a telemetry source: one instant query per metric per refresh, ages from timestamp().

The source type `prometheus` (TYPE and from_config, registered in the `metrics_sched.sources` entry-point
group). Configuration fields and defaults: see `adapters.prometheus.config`; presets:
`adapters.prometheus.presets`.
"""

from adapters.prometheus.config import MetricSpec, PrometheusConfig, parse_config
from adapters.prometheus.presets import PRESETS, Preset
from adapters.prometheus.source import TYPE, PrometheusSource, from_config

__all__ = ["PRESETS", "TYPE", "MetricSpec", "Preset", "PrometheusConfig", "PrometheusSource", "from_config",
           "parse_config"]
