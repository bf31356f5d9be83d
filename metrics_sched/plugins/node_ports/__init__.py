"""The NodePorts plugin: its class in plugin.py."""

from metrics_sched.plugins.node_ports.plugin import NodePorts

__all__ = ["NodePorts"]
