"""What one preemption attempt decided, under a typed cycle-state key: the metrics and the audit read it."""

from __future__ import annotations

from dataclasses import dataclass

from metrics_sched.framework.cycle_state import StateKey

__all__ = ["PREEMPTION", "PreemptionOutcome", "Victim"]


@dataclass(frozen=True)
class Victim:
    key: str  # namespace/name
    priority: int
    pdb_violation: bool


@dataclass(frozen=True)
class PreemptionOutcome:
    """node None: no preemption (`reason` says why). Otherwise the victims taken on `node` and why that node."""

    node: str | None
    victims: tuple[Victim, ...] = ()
    pdb_violations: int = 0
    decided_by: str = ""
    tied: tuple[str, ...] = ()
    candidates: int = 0
    reason: str = ""


PREEMPTION = StateKey[PreemptionOutcome]("DefaultPreemption/outcome")
