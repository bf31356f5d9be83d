"""Preemption candidates: a node and the victims that make room there (kube-scheduler's Candidate)."""

from __future__ import annotations

from dataclasses import dataclass

from metrics_sched.framework import PodRecord

__all__ = ["Candidate", "candidate_count"]


@dataclass(frozen=True)
class Candidate:
    node: str
    row: int
    victims: tuple[PodRecord, ...]  # most important first (priority, then the longest running)
    violating: frozenset[str] = frozenset()  # uids of the victims whose taking violates a PodDisruptionBudget

    @property
    def pdb_violations(self) -> int:
        return len(self.violating)

    @property
    def highest_priority(self) -> int:
        return self.victims[0].priority if self.victims else -(2**31)

    @property
    def priority_sum(self) -> int:
        # Each priority shifted by MaxInt32+1, as upstream, so negative priorities still count as "more".
        return sum(v.priority + 2**31 for v in self.victims)

    @property
    def earliest_start_of_highest(self) -> float:
        """The earliest start among the victims of the highest priority (upstream's GetEarliestPodStartTime)."""
        top = self.highest_priority
        return min((v.started for v in self.victims if v.priority == top), default=float("-inf"))


def candidate_count(nodes: int, min_percentage: int, min_absolute: int) -> int:
    """How many candidates the dry run looks for (calculateNumCandidates): the percentage of the potential nodes,
    at least the absolute number, at most all of them."""
    wanted = nodes * min_percentage // 100
    return min(max(wanted, min_absolute), nodes)
