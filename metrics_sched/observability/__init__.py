"""Prometheus metrics of the scheduler (kube-scheduler's names, plus metrics_sched_*)."""

from metrics_sched.observability.metrics import SchedulerMetrics

__all__ = ["SchedulerMetrics"]
