"""The CustomMetric plugin: its class in plugin.py."""

from metrics_sched.plugins.custom_metric.plugin import CustomMetric

__all__ = ["CustomMetric"]
