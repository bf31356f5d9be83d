"""The LoadRiskBalancing plugin: its class in plugin.py."""

from metrics_sched.plugins.load_risk_balancing.plugin import LoadRiskBalancing

__all__ = ["LoadRiskBalancing"]
