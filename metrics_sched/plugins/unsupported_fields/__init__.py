"""The UnsupportedFields plugin: its class in plugin.py."""

from metrics_sched.plugins.unsupported_fields.plugin import UnsupportedFields

__all__ = ["UnsupportedFields"]
