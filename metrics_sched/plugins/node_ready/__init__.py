"""The NodeReady plugin: its class in plugin.py."""

from metrics_sched.plugins.node_ready.plugin import NodeReady

__all__ = ["NodeReady"]
