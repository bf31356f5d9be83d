"""The rebalancer's configuration and its answers, as plain typed values (the contract between its parts).

config/ parses the `rebalance:` section into RebalanceConfig; the Rebalancer (rebalancer.py) turns each tick
into EvictionVerdicts; the wiring (cli/, app) carries them out through the Evictor port and records them.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

# The configuration types live in the config layer (the loader builds them and must not import this package,
# see tests/unit/test_import_layering.py); they are re-exported here as part of the contract.
from metrics_sched.config.model import EvictionLimits, NodeRule, RebalanceConfig, RuleKind

__all__ = ["BadNode", "EvictionLimits", "EvictionVerdict", "NodeRule", "RebalanceConfig", "RuleKind", "Verdict"]


@dataclass(frozen=True)
class BadNode:
    node: str
    rule: str  # NodeRule.name
    metric: str
    value: float
    threshold: float  # the rule's threshold, or the cluster quantile it was compared with
    since: float  # unix seconds: when the streak began


class Verdict(enum.StrEnum):
    EVICTED = "evicted"
    PLANNED = "planned"  # dry run: would have evicted
    BLOCKED = "blocked"  # the Eviction API answered 429 (a PodDisruptionBudget): skipped, not retried this tick
    SKIPPED = "skipped"  # limits, cooldown, no better node, never-evict rules
    GONE = "gone"  # 404: the pod left meanwhile
    ERROR = "error"


@dataclass(frozen=True)
class EvictionVerdict:
    """One pod considered on a bad node, with why and where it would go (the audit record's content)."""

    pod: str  # namespace/name
    uid: str
    owner: str | None  # the controller's key (kind/namespace/name), for cooldown and for explain's follow-up
    node: str  # where it is
    rule: str  # why the node is bad
    verdict: Verdict
    reason: str  # human words: "gpu_temperature_max 91 > 85 for 6m; node-3 scores 72 vs 40 here (+32)"
    target: str | None = None  # the node the simulation would place it on
    gain: float | None = None  # target's total minus the current node's
    priority: int = 0
    # The gang (namespace/name) moved whole with this pod (rebalance.gangs: whole): the runner evicts its members
    # together, all or none.
    gang: str | None = None
