"""Which nodes are persistently bad: per rule, a metric's FRESH value above a threshold (or above the cluster's
quantile of the fresh values) at every tick for `for_seconds`.

Evaluation is one numpy expression per rule over the NodeTable's rows. The only per-node Python state is the
streak start of each node currently above, rebuilt every tick from the nodes above now: a node that drops
below, goes stale or missing, or leaves the table is forgotten at once (memory follows the current streaks).
A metric whose values are all stale (its source is down) makes nothing bad.
"""

from __future__ import annotations

import numpy as np

from metrics_sched.framework.handle import MetricReader
from metrics_sched.rebalance.model import BadNode, NodeRule, RuleKind
from metrics_sched.rebalance.wording import duration, number
from metrics_sched.state.node_table import NodeTable

__all__ = ["Detector", "describe"]


class Detector:
    def __init__(self, rules: tuple[NodeRule, ...]) -> None:
        self.rules = rules
        # Per rule (by position: names need not be unique): node -> when its current streak began.
        self._streaks: list[dict[str, float]] = [{} for _ in rules]
        # Rule name -> the value above which it flagged a node at the last tick (a quantile rule's of that tick);
        # absent: no fresh value at all. The simulation refuses a target a move would push above it.
        self.limits: dict[str, float] = {}

    def observe(self, table: NodeTable, metrics: MetricReader, now: float) -> list[tuple[NodeRule, BadNode]]:
        """One tick: updates every streak and returns the nodes bad now with their rule, in rule order (hold the
        cluster lock)."""
        present = table.present[: table.capacity]
        bad: list[tuple[NodeRule, BadNode]] = []
        self.limits = {}
        for i, rule in enumerate(self.rules):
            column = metrics.column(rule.metric, table)
            fresh = column.fresh & present
            if not fresh.any():
                self._streaks[i] = {}  # nothing measured (a dead source): every streak ends, none starts
                continue
            values = column.values
            limit = (float(np.quantile(values[fresh], rule.quantile)) if rule.kind == RuleKind.QUANTILE
                     else rule.threshold)
            self.limits[rule.name] = limit
            with np.errstate(invalid="ignore"):
                rows = np.flatnonzero(fresh & (values > limit))
            previous = self._streaks[i]
            names = table.names_of(rows)
            streaks = {name: previous.get(name, now) for name in names}
            self._streaks[i] = streaks
            for row, name in zip(rows.tolist(), names, strict=True):
                since = streaks[name]
                if now - since >= rule.for_seconds:
                    bad.append((rule, BadNode(name, rule.name, rule.metric, float(values[row]), limit, since)))
        return bad

    def streaking(self) -> int:
        """Nodes in a streak (bad or not yet), over all rules: what the detector holds in memory."""
        return sum(len(s) for s in self._streaks)


def describe(bad: BadNode, rule: NodeRule, now: float) -> str:
    """The node's case in an audit record's words: "gpu_temperature 91.0 > 85 for 6m"."""
    if rule.kind == RuleKind.QUANTILE:
        limit = f"{number(bad.threshold)} (cluster p{rule.quantile * 100:g})"
    else:
        limit = f"{bad.threshold:g}"  # as configured
    return f"{bad.metric} {number(bad.value)} > {limit} for {duration(now - bad.since)}"
