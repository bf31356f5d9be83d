"""The NodeAffinity plugin: its class in plugin.py."""

from metrics_sched.plugins.node_affinity.plugin import NodeAffinity

__all__ = ["NodeAffinity"]
