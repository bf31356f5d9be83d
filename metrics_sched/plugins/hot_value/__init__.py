"""The HotValue plugin: its class in plugin.py."""

from metrics_sched.plugins.hot_value.plugin import HotValue

__all__ = ["HotValue"]
