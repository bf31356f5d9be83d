"""The rebalancer: finds persistently bad nodes (hot, loaded, expensive) from the telemetry cache, picks the
pods worth moving off them by simulating the scheduler's own choice, and returns verdicts within the limits.

    model.py       the contract: config, BadNode, EvictionVerdict, Verdict
    detector.py    streaks of fresh values above a threshold or the cluster's quantile
    victims.py     which pods may be moved at all
    simulation.py  the what-if: where would the scheduler put it, how much better
    projection.py  what a target would read with the pod's share of the rules' metrics moved onto it
    gang.py        a gang moved whole (gangs: whole): its members read, its placement simulated as one
    limits.py      per-tick budgets, cooldowns and back-offs
    rebalancer.py  one tick, and what the caller's evictions did
"""

from metrics_sched.rebalance.model import (
    BadNode,
    EvictionLimits,
    EvictionVerdict,
    NodeRule,
    RebalanceConfig,
    RuleKind,
    Verdict,
)
from metrics_sched.rebalance.rebalancer import Rebalancer
from metrics_sched.rebalance.simulation import PodReader

__all__ = ["BadNode", "EvictionLimits", "EvictionVerdict", "NodeRule", "PodReader", "RebalanceConfig", "Rebalancer",
           "RuleKind", "Verdict"]
