"""The ImageLocality plugin: its class in plugin.py."""

from metrics_sched.plugins.image_locality.plugin import ImageLocality

__all__ = ["ImageLocality"]
