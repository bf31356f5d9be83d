"""The VolumeBinding plugin: its class in plugin.py."""

from metrics_sched.plugins.volume_binding.plugin import VolumeBinding

__all__ = ["VolumeBinding"]
