"""The ZoneSpread plugin: its class in plugin.py."""

from metrics_sched.plugins.zone_spread.plugin import ZoneSpread

__all__ = ["ZoneSpread"]
