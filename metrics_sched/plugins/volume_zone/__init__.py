"""The VolumeZone plugin: its class in plugin.py."""

from metrics_sched.plugins.volume_zone.plugin import VolumeZone

__all__ = ["VolumeZone"]
