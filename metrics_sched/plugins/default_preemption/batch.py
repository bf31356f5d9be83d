"""The fewest victims on every candidate node at once, when the pod's filters are node-local.

SelectVictimsOnNode's dry runs on one node do not change any other node's verdict when every filter in play
reads only the node's own pods (resources, ports, volume counts, taints, labels...): then one filter pass can
try a step of the reprieve on all nodes together. Pass 0 takes every node's lower-priority pods away; pass i
gives each node back its i-th victim in reprieve order (budget-violating first, each group from the most
important) and keeps it if the pod still fits there. Each node ends with exactly the victims the one-node
algorithm (victims.py) gives it, in 1 + (most lower-priority pods on a node) passes
instead of that per node. Filters that look across nodes (inter-pod rules, topology spread, a claim held
elsewhere) need the one-node runs: the plugin chooses.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence

from metrics_sched.framework import ClusterState, Filtered, PodRecord
from metrics_sched.plugins.default_preemption.budgets import split_by_budget
from metrics_sched.plugins.default_preemption.disruption_budgets import Budget
from metrics_sched.plugins.default_preemption.victims import more_important_first

__all__ = ["Selected", "select_victims_everywhere"]

# Per row: (victims most important first, those whose taking violates a budget), or the reasons it cannot fit.
Selected = tuple[list[PodRecord], list[PodRecord]] | list[str]


def select_victims_everywhere(state: ClusterState, potential: Mapping[int, Sequence[PodRecord]],
                              budgets: Sequence[Budget], held: Sequence[tuple[PodRecord, int]],
                              verdict: Callable[[], Filtered | None]) -> dict[int, Selected]:
    """`verdict()`: the filters over all rows in the cluster state as it is when called. Under the state's lock,
    the lower-priority pods are taken away once (and `held`, the nominated pods, counted); each step then counts
    only the pods it tries to give back, so a step costs one filter pass and O(nodes) bookkeeping."""
    plans: dict[int, list[PodRecord]] = {}
    violating_of: dict[int, set[str]] = {}
    for row, pods in potential.items():
        violating, fine = split_by_budget(more_important_first(pods), budgets)
        plans[row] = violating + fine
        violating_of[row] = {p.uid for p in violating}
    out: dict[int, Selected] = {}
    with state.lock, contextlib.ExitStack() as kept:
        kept.enter_context(state.simulated(removed=[p for plan in plans.values() for p in plan], added=held))
        first = verdict()
        if first is None:
            return {row: [] for row in plans}
        active = [row for row in plans if first.feasible[row]]
        for row in plans:
            if not first.feasible[row]:
                out[row] = [reason for reason, rows in first.reasons.items() if rows[row]]
        victims: dict[int, list[PodRecord]] = {row: [] for row in active}
        for step in range(max((len(plans[row]) for row in active), default=0)):
            trying = [(plans[row][step], row) for row in active if step < len(plans[row])]
            with state.simulated(added=trying):
                answer = verdict()
            back = [(pod, row) for pod, row in trying if answer is not None and answer.feasible[row]]
            for pod, row in trying:
                if answer is None or not answer.feasible[row]:
                    victims[row].append(pod)
            kept.enter_context(state.simulated(added=back))  # reprieved: counted again for the next steps
    for row in active:
        taken = victims[row]
        violating = [p for p in taken if p.uid in violating_of[row]]
        if violating and len(violating) < len(taken):
            taken = more_important_first(taken)
        out[row] = (taken, violating)
    return out
