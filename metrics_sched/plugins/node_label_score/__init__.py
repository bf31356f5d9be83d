"""The NodeLabelScore plugin: its class in plugin.py."""

from metrics_sched.plugins.node_label_score.plugin import NodeLabelScore

__all__ = ["NodeLabelScore"]
