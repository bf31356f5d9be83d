"""The Coscheduling plugin: its class in plugin.py; beside it, its library (metrics, placement, status, tracker)."""

from metrics_sched.plugins.coscheduling.plugin import Coscheduling

__all__ = ["Coscheduling"]
