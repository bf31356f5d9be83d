"""The PodTopologySpread plugin: its class in plugin.py."""

from metrics_sched.plugins.pod_topology_spread.plugin import PodTopologySpread

__all__ = ["PodTopologySpread"]
