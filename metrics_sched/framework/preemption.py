"""What a gang plugin tells a preemption PostFilter: the pods a preemption for this cycle's pod must make room for
too, all of them or none (a gang's other members still to place).

Upstream's DefaultPreemption places one pod; 1.36's GangScheduling (and scheduler-plugins' Coscheduling) keep a
gang all or nothing at Permit, so a preemption that makes room for part of a gang evicts for nothing. A gang
plugin writes PREEMPT_TOGETHER at PreFilter; a preemption plugin that reads it finds victims for every listed pod
in one plan (each placed in the simulation before the next is tried) and takes them only if all fit.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from metrics_sched.framework.cycle_state import StateKey
from metrics_sched.model.podinfo import PodInfo

__all__ = ["PREEMPT_TOGETHER", "PreemptTogether"]


@dataclass(frozen=True)
class PreemptTogether:
    """`group` names the gang in messages; `others()` lists its other members that still need a node, in the
    order they would be scheduled. A callable: computed only when a preemption asks (PreFilter is the hot path).
    `topology_key`: the gang is placed within one domain of this node label (all members on nodes with the same
    value), so the room must be made within one; None: anywhere."""

    group: str
    others: Callable[[], Sequence[PodInfo]]
    topology_key: str | None = None


PREEMPT_TOGETHER = StateKey[PreemptTogether]("framework/preempt-together")
