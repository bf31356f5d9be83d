"""The DefaultPreemption plugin: its class in plugin.py; beside it, its library (batch, budgets, candidates,
eligibility, executor, outcome, selection, victims)."""

from metrics_sched.plugins.default_preemption.plugin import DefaultPreemption

__all__ = ["DefaultPreemption"]
