"""The NodeResourcesBalancedAllocation plugin: its class in plugin.py."""

from metrics_sched.plugins.node_resources_balanced_allocation.plugin import NodeResourcesBalancedAllocation

__all__ = ["NodeResourcesBalancedAllocation"]
