"""HotValue: a penalty for nodes that just received pods their telemetry cannot show yet, after Crane's dynamic
scheduler "hot value" (gocrane/crane, docs/tutorials/dynamic-scheduler-plugin.md: "the load of the nodes can not
increase immediately after the pod is created ... Hot Value represents the scheduling frequency of the node in
recent times, and the final priority of the node is the final score minus the Hot Value").

Built on the in-flight ledger: a pod placed on a node counts while it is younger than a policy's `timeRange` and
no sample of `metric` measured after its placement has come in (the ledger's own notion of "telemetry shows it").
hot = sum over policies of (such pods within timeRange) / count; score = 100 - penalty * hot, clipped to 0-100.
Where the ledger's estimates lower a node's metrics' scores by the pods' requests, this lowers it by their number:
a burst of small pods, each too small to move the estimate, still spreads. Args (defaults):

    metric: node_cpu_utilisation      # the ledger column whose samples cover a placement
    policies:
    - {timeRange: 5m, count: 5}
    - {timeRange: 1m, count: 2}
    penalty: 10                       # points per unit of hot value
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from metrics_sched.framework import (
    ArgsError,
    CycleState,
    FloatArray,
    IntArray,
    NodeTable,
    Normalized,
    PodInfo,
    ScorePlugin,
    unchanged,
)

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0}


def seconds(text: str) -> float:
    """`90s`, `5m`, `1h` in seconds (ArgsError-free: validate() checks first)."""
    return float(text[:-1]) * _UNITS[text[-1]]


@dataclass(frozen=True)
class HotPolicy:
    time_range: str = "5m"
    count: int = 5

    def validate(self) -> None:
        if not (len(self.time_range) > 1 and self.time_range[-1] in _UNITS and self.time_range[:-1].isdigit()
                and int(self.time_range[:-1]) > 0):
            raise ArgsError("timeRange", f"must be a duration like 5m, got {self.time_range!r}")
        if self.count < 1:
            raise ArgsError("count", "must be at least 1")


class HotValue(ScorePlugin):
    name = "HotValue"
    normalized = Normalized.COMPLETE  # clipped to 0-100 on every row
    events = frozenset()  # a score: it never rejects a pod

    @dataclass(frozen=True)
    class Args:
        metric: str = "node_cpu_utilisation"
        policies: tuple[HotPolicy, ...] = (HotPolicy("5m", 5), HotPolicy("1m", 2))
        penalty: float = 10.0

        def validate(self) -> None:
            if not self.policies:
                raise ArgsError("policies", "must hold at least one {timeRange, count}")
            for i, policy in enumerate(self.policies):
                try:
                    policy.validate()
                except ArgsError as exc:
                    raise ArgsError(f"policies[{i}].{exc.field}", exc.message) from None
            if not self.penalty >= 0:
                raise ArgsError("penalty", "must be >= 0")

    args: Args

    def hot_values(self, table: NodeTable) -> FloatArray:
        """Per row of the table: the node's hot value now."""
        observed_at = self.handle.metrics.column(self.args.metric, table).observed_at
        hot = np.zeros(table.capacity)
        ledger = self.handle.ledger
        if not len(ledger):
            return hot
        for policy in self.args.policies:
            hot += ledger.recent_counts(self.args.metric, table, observed_at, seconds(policy.time_range)) / policy.count
        return hot

    def score(self, cycle: CycleState, pod: PodInfo, table: NodeTable, rows: IntArray) -> FloatArray:
        scores: FloatArray = np.clip(100.0 - self.args.penalty * self.hot_values(table)[rows], 0.0, 100.0)
        return scores

    normalize = unchanged  # score() is already on 0-100
