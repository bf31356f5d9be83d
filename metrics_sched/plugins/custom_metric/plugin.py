"""CustomMetric: any configured metric as a score term, with a direction and an optional hard limit.

    metrics:
    - metric: gpu_utilisation
      direction: lower            # lower | higher is better
      weight: 1                   # relative weight among this plugin's metrics
      normalization: {method: range, min: 0, max: 100}
      filterAbove: 95             # optional: nodes above take no pod (filterBelow likewise)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from metrics_sched.framework import (
    ArgsError,
    Direction,
    MetricScorePlugin,
    MetricTerm,
    Normalization,
    Scale,
)


@dataclass(frozen=True)
class CustomTerm:
    metric: str
    direction: Direction = "lower"
    weight: float = 1.0
    normalization: Normalization = field(default_factory=Normalization)
    filter_above: float | None = None
    filter_below: float | None = None

    def validate(self) -> None:
        if self.weight <= 0:
            raise ArgsError("weight", "must be > 0")
        self.normalization.check(Scale())

    def term(self) -> MetricTerm:
        return MetricTerm(self.metric, self.direction, self.normalization.scale(Scale()), self.weight,
                          self.filter_above, self.filter_below)


class CustomMetric(MetricScorePlugin):
    name = "CustomMetric"

    @dataclass(frozen=True)
    class Args:
        metrics: tuple[CustomTerm, ...]

        def validate(self) -> None:
            if not self.metrics:
                raise ArgsError("metrics", "must be a non-empty list of {metric, direction, ...}")

    args: Args

    def make_terms(self) -> Sequence[MetricTerm]:
        return [t.term() for t in self.args.metrics]
