"""The NodeLabelFilter plugin: its class in plugin.py."""

from metrics_sched.plugins.node_label_filter.plugin import NodeLabelFilter

__all__ = ["NodeLabelFilter"]
