"""The PrioritySort plugin: its class in plugin.py."""

from metrics_sched.plugins.priority_sort.plugin import PrioritySort

__all__ = ["PrioritySort"]
