"""Prometheus as a telemetry source: one instant query per metric per refresh, ages from timestamp().

Configuration fields and defaults: see `adapters.prometheus.config`; presets: `adapters.prometheus.presets`.
"""

from adapters.prometheus.config import MetricSpec, PrometheusConfig, parse_config
from adapters.prometheus.presets import PRESETS, Preset
from adapters.prometheus.source import PrometheusSource, from_config

__all__ = ["PRESETS", "MetricSpec", "Preset", "PrometheusConfig", "PrometheusSource", "from_config", "parse_config"]
