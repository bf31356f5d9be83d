"""The one node to preempt on (kube-scheduler's pickOneNodeForPreemption), then the profile's score.

Upstream's criteria, in order, each keeping the nodes with the best value: fewest PDB violations, lowest
highest-victim priority, smallest sum of victim priorities, fewest victims, latest start among the
highest-priority victims. Upstream takes the first of those still tied (map order: arbitrary); here the tie
goes to the node the profile scores best (cooler, cheaper: its telemetry terms), then the first.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from metrics_sched.plugins.default_preemption.candidates import Candidate

__all__ = ["CRITERIA", "Pick", "pick_one_node"]

# (name for the decision record, value to maximise)
CRITERIA: tuple[tuple[str, Callable[[Candidate], float]], ...] = (
    ("fewest PDB violations", lambda c: -c.pdb_violations),
    ("lowest highest victim priority", lambda c: -c.highest_priority),
    ("smallest sum of victim priorities", lambda c: -c.priority_sum),
    ("fewest victims", lambda c: -len(c.victims)),
    ("latest start of the highest-priority victims", lambda c: c.earliest_start_of_highest),
)


@dataclass(frozen=True)
class Pick:
    candidate: Candidate
    decided_by: str  # the criterion that singled it out, or how the tie was broken
    tied: tuple[str, ...]  # the nodes still tied after upstream's criteria (incl. the chosen one)


def pick_one_node(candidates: Sequence[Candidate], scores: Callable[[Sequence[Candidate]], Mapping[str, float]]
                  ) -> Pick:
    """`scores` is asked only when upstream's criteria leave a tie: node -> the profile's total score."""
    if not candidates:
        raise ValueError("no candidates")
    if len(candidates) == 1:
        return Pick(candidates[0], "the only candidate", (candidates[0].node,))
    remaining = list(candidates)
    for name, value in CRITERIA:
        best = max(value(c) for c in remaining)
        remaining = [c for c in remaining if value(c) == best]
        if len(remaining) == 1:
            return Pick(remaining[0], name, (remaining[0].node,))
    tied = tuple(c.node for c in remaining)
    by_node = scores(remaining)
    scored = [c for c in remaining if by_node.get(c.node) is not None]
    if scored:
        top = max(by_node[c.node] for c in scored)
        chosen = next(c for c in scored if by_node[c.node] == top)
        return Pick(chosen, f"tied on kube-scheduler's criteria; the profile's score prefers it ({top:.1f})", tied)
    return Pick(remaining[0], "tied on kube-scheduler's criteria and unscored: the first", tied)
