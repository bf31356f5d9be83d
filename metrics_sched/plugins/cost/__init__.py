"""The Cost plugin: its class in plugin.py."""

from metrics_sched.plugins.cost.plugin import Cost

__all__ = ["Cost"]
