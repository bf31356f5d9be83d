"""The NodeVolumeLimits plugin: its class in plugin.py."""

from metrics_sched.plugins.node_volume_limits.plugin import NodeVolumeLimits

__all__ = ["NodeVolumeLimits"]
