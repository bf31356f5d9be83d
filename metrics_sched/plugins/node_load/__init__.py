"""The NodeLoad plugin: its class in plugin.py."""

from metrics_sched.plugins.node_load.plugin import NodeLoad

__all__ = ["NodeLoad"]
