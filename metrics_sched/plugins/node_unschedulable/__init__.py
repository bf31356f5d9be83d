"""The NodeUnschedulable plugin: its class in plugin.py."""

from metrics_sched.plugins.node_unschedulable.plugin import NodeUnschedulable

__all__ = ["NodeUnschedulable"]
