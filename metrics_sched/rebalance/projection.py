"""What a target node would read once the pod moved there: the pod's share of its node's metrics, moved.

The scheduler's what-if (simulation.py) scores the other nodes as they read now, without the pod, and the
pod's own node with it. A pod whose own load makes its node bad would then look better anywhere else, and
once there make that node bad in turn: a→b→a every cooldown (issue 44, defect 4). So before a move the
pod's share of each rule's metric goes with it, and a target the rules would then flag is refused.

The pod's share of a metric, per the in-flight ledger's estimates (metric -> (resource, factor), the
profile's InFlightLedger args or its defaults):
  - estimated from its requests: factor * requested / the node's allocatable of the resource (what the
    ledger adds for a pod just placed);
  - for a metric that reads zero on an idle node and adds up over its pods (load, utilisation): at least its
    part of what its node reads now, split by the node's requests of the resource (a pod using more than it
    asked for carries its real load with it).
On the target the share scales by the two nodes' allocatable (load per CPU on a node twice as big is half).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from metrics_sched.framework.handle import MetricReader
from metrics_sched.framework.runtime import Framework
from metrics_sched.model.podinfo import PodInfo
from metrics_sched.plugins.in_flight_ledger.plugin import DEFAULT_ESTIMATES, InFlightLedger
from metrics_sched.rebalance.model import NodeRule
from metrics_sched.rebalance.wording import number
from metrics_sched.state.node_table import NodeTable

__all__ = ["ADDITIVE", "Projection", "estimates"]

# Metrics that read zero on an idle node and are the sum of their pods' parts.
ADDITIVE = frozenset({"node_cpu_utilisation", "node_load_per_cpu", "gpu_utilisation"})


def estimates(framework: Framework) -> Mapping[str, tuple[str, float]]:
    """metric -> (resource, factor): the profile's InFlightLedger estimates, else the ledger's defaults."""
    for plugin in framework.reserves:
        if isinstance(plugin, InFlightLedger):
            return plugin.estimates
    return {metric: (e.resource, e.factor) for metric, e in DEFAULT_ESTIMATES.items()}


@dataclass(frozen=True)
class Projection:
    """The rules' metrics with the pod moved from `here` (a row) to a target row: refuses a target a rule would
    then flag. `limits` are the rules' limits at this tick (a quantile rule's as the detector computed it)."""

    rules: tuple[NodeRule, ...]
    limits: Mapping[str, float]  # rule name -> the value above which it flags a node now
    estimates: Mapping[str, tuple[str, float]]

    def refusal(self, pod: PodInfo, table: NodeTable, metrics: MetricReader, here: int, target: int,
                already: Mapping[str, float] | None = None) -> str | None:
        """Why the rules would flag `target` with the pod on it ("overloaded node_load_per_cpu 0.3 -> 2.1 > 1.5"),
        or None (hold the cluster lock). `already`: metric -> what other pods of the same move (a gang's members
        placed before this one) bring to `target` on top of what it reads."""
        for rule in self.rules:
            limit = self.limits.get(rule.name)
            if limit is None:
                continue  # no fresh value anywhere at this tick: the rule flags nothing
            column = metrics.column(rule.metric, table)
            if not column.fresh[target]:
                continue  # a node without a fresh value is never flagged
            now = float(column.values[target])
            after = (now + (already or {}).get(rule.metric, 0.0)
                     + self._share(rule.metric, pod, table, column.values, bool(column.fresh[here]), here, target))
            if after > limit:
                return f"{rule.name} {rule.metric} {number(now)} -> {number(after)} > {number(limit)}"
        return None

    def shares(self, pod: PodInfo, table: NodeTable, metrics: MetricReader, here: int, target: int
               ) -> dict[str, float]:
        """metric -> what the pod brings to `target` of each rule's metric (for `refusal`'s `already`)."""
        out: dict[str, float] = {}
        for metric in {rule.metric for rule in self.rules}:
            column = metrics.column(metric, table)
            out[metric] = self._share(metric, pod, table, column.values, bool(column.fresh[here]), here, target)
        return out

    def _share(self, metric: str, pod: PodInfo, table: NodeTable, values: np.ndarray, fresh_here: bool, here: int,
               target: int) -> float:
        estimate = self.estimates.get(metric)
        if estimate is None:
            return 0.0  # a metric the pod does not move (cost, a node's own state)
        resource, factor = estimate
        col = table.resource_index.get(resource)
        requested = pod.requests.get(resource, 0)
        if col is None or not requested:
            return 0.0
        at_target = float(table.allocatable[target, col])
        if at_target <= 0:
            return 0.0
        share = factor * requested / at_target
        if metric in ADDITIVE and fresh_here:
            on_here = float(table.requested[here, col])
            measured = float(values[here])
            if on_here > 0 and measured > 0:
                # Its part of what its node reads, in the target's units (per unit of the resource).
                part = measured * min(1.0, requested / on_here) * float(table.allocatable[here, col]) / at_target
                share = max(share, part)
        return share
