"""The InterPodAffinity plugin: its class in plugin.py."""

from metrics_sched.plugins.inter_pod_affinity.plugin import InterPodAffinity

__all__ = ["InterPodAffinity"]
