"""The fewest victims on one node (kube-scheduler's SelectVictimsOnNode).

All lower-priority pods on the node are taken away and the filters re-run (`fits`); if the pod fits, victims
are reprieved one by one, those whose taking would violate a PodDisruptionBudget first, each group from the
most important: a reprieved pod stays if the pod still fits with it. `fits(removed)` is a dry run of PreFilter
and Filter in a state without `removed` (ClusterState.simulated): one vectorised filter pass per call, so a
node costs 1 + (number of lower-priority pods on it) passes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from metrics_sched.framework import PodRecord
from metrics_sched.plugins.default_preemption.budgets import split_by_budget

from .disruption_budgets import Budget

__all__ = ["Fits", "more_important_first", "select_victims"]

Fits = Callable[[Sequence[PodRecord]], bool]


def more_important_first(pods: Sequence[PodRecord]) -> list[PodRecord]:
    """Upstream's MoreImportantPod order: higher priority first, then the one running longer (earlier start)."""
    return sorted(pods, key=lambda p: (-p.priority, p.started))


def select_victims(potential: Sequence[PodRecord], budgets: Sequence[Budget], fits: Fits
                   ) -> tuple[list[PodRecord], list[PodRecord]] | None:
    """(victims most important first, those of them whose taking violates a budget), or None when the pod does
    not fit even without every potential victim."""
    if not potential or not fits(potential):
        return None
    ordered = more_important_first(potential)
    violating, fine = split_by_budget(ordered, budgets)
    removed = list(ordered)
    victims: list[PodRecord] = []
    violations: list[PodRecord] = []

    def reprieve(pod: PodRecord) -> bool:
        removed.remove(pod)
        if fits(removed):
            return True
        removed.append(pod)
        victims.append(pod)
        return False

    for pod in violating:
        if not reprieve(pod):
            violations.append(pod)
    for pod in fine:
        reprieve(pod)
    if violating and fine:
        victims = more_important_first(victims)
    return victims, violations
