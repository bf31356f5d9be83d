"""May this pod preempt others now (kube-scheduler's PodEligibleToPreemptOthers)."""

from __future__ import annotations

from collections.abc import Iterable

from metrics_sched.framework import PodInfo, PodRecord

__all__ = ["NEVER", "TERMINATING", "eligible_to_preempt", "preemption_policy"]

NEVER = "not eligible due to preemptionPolicy=Never."
TERMINATING = "not eligible due to a terminating pod on the nominated node."


def preemption_policy(pod: PodInfo) -> str:
    return str((pod.raw.get("spec") or {}).get("preemptionPolicy") or "PreemptLowerPriority")


def eligible_to_preempt(pod: PodInfo, nominated_pods: Iterable[PodRecord] | None,
                        nominated_unresolvable: bool) -> str | None:
    """None if the pod may preempt, else why not. `nominated_pods`: the pods on the node the pod is already
    nominated to (None: not nominated). While a lower-priority pod there is still leaving because the scheduler
    preempted it, the pod waits for it rather than preempting more, unless its filters now reject that node
    outright (`nominated_unresolvable`)."""
    if preemption_policy(pod) == "Never":
        return NEVER
    if nominated_pods is None or nominated_unresolvable:
        return None
    for other in nominated_pods:
        if other.priority < pod.priority and other.terminating and other.preempted:
            return TERMINATING
    return None
