"""The DefaultBinder plugin: its class in plugin.py."""

from metrics_sched.plugins.default_binder.plugin import DefaultBinder

__all__ = ["DefaultBinder"]
