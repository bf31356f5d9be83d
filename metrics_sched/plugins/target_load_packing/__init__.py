"""The TargetLoadPacking plugin: its class in plugin.py."""

from metrics_sched.plugins.target_load_packing.plugin import TargetLoadPacking

__all__ = ["TargetLoadPacking"]
