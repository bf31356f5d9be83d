"""Which victims taking would violate a PodDisruptionBudget (kube-scheduler's filterPodsWithPDBViolation)."""

from __future__ import annotations

from collections.abc import Sequence

from metrics_sched.framework import PodRecord

from .disruption_budgets import Budget

__all__ = ["split_by_budget"]


def split_by_budget(pods: Sequence[PodRecord], budgets: Sequence[Budget]
                    ) -> tuple[list[PodRecord], list[PodRecord]]:
    """(violating, non-violating), each in the order given. Each matching budget's disruptionsAllowed is spent
    pod by pod; a pod whose taking drives one below zero violates it. A pod the API server already lists in
    the budget's disruptedPods does not spend it again."""
    allowed = [b.allowed for b in budgets]
    violating: list[PodRecord] = []
    fine: list[PodRecord] = []
    for pod in pods:
        violated = False
        if pod.labels:  # a pod without labels matches no budget
            for i, budget in enumerate(budgets):
                if not budget.selects(pod.namespace, pod.labels) or pod.name in budget.disrupted:
                    continue
                allowed[i] -= 1
                if allowed[i] < 0:
                    violated = True
        (violating if violated else fine).append(pod)
    return violating, fine
