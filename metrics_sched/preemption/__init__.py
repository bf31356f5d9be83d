"""Preemption, after kube-scheduler's DefaultPreemption (pkg/scheduler/framework/preemption and the plugin).

    eligibility  may the pod preempt at all (preemptionPolicy, victims of an earlier preemption still leaving)
    budgets      which victims a PodDisruptionBudget forbids to take now (filterPodsWithPDBViolation)
    victims      the fewest victims on one node, by a dry run that re-runs the filters (SelectVictimsOnNode)
    candidates   which nodes to dry-run, and how many (minCandidateNodesPercentage / Absolute)
    selection    the one node to preempt on (pickOneNodeForPreemption, then the profile's score)
    executor     the API side effects, off the scheduling thread (prepareCandidateAsync)

The DefaultPreemption plugin (metrics_sched.plugins.default_preemption) ties them together.
"""

from metrics_sched.preemption.budgets import split_by_budget
from metrics_sched.preemption.candidates import Candidate, candidate_count
from metrics_sched.preemption.eligibility import eligible_to_preempt
from metrics_sched.preemption.executor import PreemptionExecutor
from metrics_sched.preemption.selection import Pick, pick_one_node
from metrics_sched.preemption.victims import more_important_first, select_victims

__all__ = [
    "Candidate",
    "Pick",
    "PreemptionExecutor",
    "candidate_count",
    "eligible_to_preempt",
    "more_important_first",
    "pick_one_node",
    "select_victims",
    "split_by_budget",
]
