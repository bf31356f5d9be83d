"""The NodeName plugin: its class in plugin.py."""

from metrics_sched.plugins.node_name.plugin import NodeName

__all__ = ["NodeName"]
