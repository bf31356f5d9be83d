"""Cost: cheaper nodes score higher. Args (defaults):

    metric: node_hourly_cost        # $/h, from OpenCost or the CMDB
    perResource: null               # e.g. nvidia.com/gpu: compare price per GPU instead of per node
    normalization: {method: minmax} # or {method: range, min: 0, max: 40}
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from metrics_sched.framework import MetricScorePlugin, MetricTerm, Normalization, Scale


class Cost(MetricScorePlugin):
    name = "Cost"

    @dataclass(frozen=True)
    class Args:
        metric: str = "node_hourly_cost"
        per_resource: str | None = None
        normalization: Normalization = field(default_factory=Normalization)

        def validate(self) -> None:
            self.normalization.check(Scale())

    args: Args

    def make_terms(self) -> Sequence[MetricTerm]:
        # A price is what it is: the in-flight ledger estimates load, not cost.
        return (MetricTerm(self.args.metric, "lower", self.args.normalization.scale(Scale()),
                           per_resource=self.args.per_resource, ledger=False),)
