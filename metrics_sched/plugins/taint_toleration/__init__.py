"""The TaintToleration plugin: its class in plugin.py."""

from metrics_sched.plugins.taint_toleration.plugin import TaintToleration

__all__ = ["TaintToleration"]
