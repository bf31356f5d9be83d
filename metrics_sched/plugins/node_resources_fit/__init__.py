"""The NodeResourcesFit plugin: its class in plugin.py."""

from metrics_sched.plugins.node_resources_fit.plugin import NodeResourcesFit

__all__ = ["NodeResourcesFit"]
