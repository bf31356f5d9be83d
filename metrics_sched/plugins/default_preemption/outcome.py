"""What one preemption attempt decided, under a typed cycle-state key (its explanation and the tests read it), and
the metrics DefaultPreemption reports through its Handle's events: kube-scheduler's names, every PostFilter run of
the plugin an attempt and the victims of each preemption (its buckets: 1, 2, 4, ... 32)."""

from __future__ import annotations

from dataclasses import dataclass

from metrics_sched.framework import MetricKind, PluginMetric, StateKey

__all__ = ["PREEMPTION", "PREEMPTION_ATTEMPTS", "PREEMPTION_VICTIMS", "PreemptionOutcome", "Victim"]


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

PREEMPTION_ATTEMPTS = PluginMetric("scheduler_preemption_attempts",
                                   "Total preemption attempts in the cluster till now.", MetricKind.COUNTER)
PREEMPTION_VICTIMS = PluginMetric("scheduler_preemption_victims", "Number of selected preemption victims.",
                                  MetricKind.HISTOGRAM, buckets=tuple(2**i for i in range(6)))
