"""The metrics Coscheduling reports through its Handle's events (the exporter registers them by their declaration).

How long each attempt of a gang took, from its first member's reservation to its quorum (outcome "scheduled") or
to its failure (the failure's reason); and the failed attempts by reason (timeout, member_unschedulable, no_domain,
member_rejected). Every reason and outcome is shown from the start: the dashboard's panels read "none", not "no
data".
"""

from __future__ import annotations

from metrics_sched.framework import MetricKind, PluginMetric
from metrics_sched.plugins.coscheduling.tracker import FAILURE_REASONS, SCHEDULED

__all__ = ["GANG_FAILURES", "GANG_WAIT"]

GANG_WAIT = PluginMetric(
    "metrics_sched_gang_wait_duration_seconds", "Time a gang's attempt held its members at Permit, by how it ended.",
    MetricKind.HISTOGRAM, ("outcome",), buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 900),
    shown=tuple((outcome,) for outcome in (*FAILURE_REASONS, SCHEDULED)))
GANG_FAILURES = PluginMetric(
    "metrics_sched_gang_timeouts", "Failed gang attempts (all members rejected together), by reason.",
    MetricKind.COUNTER, ("reason",), shown=tuple((reason,) for reason in FAILURE_REASONS))
