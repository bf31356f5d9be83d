"""NodeLabelScore: prefer nodes by label values, e.g. disk-type=ssd. Args:

    labelWeights:
      disk-type: {ssd: 100, hdd: 10}   # 0-100 per value; a node without the label scores 0 for that key

A node's score is the mean over the configured keys, so it is already on the 0-100 scale.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from metrics_sched.config.errors import ArgsError
from metrics_sched.framework.interfaces import ClusterEvent, CycleState, ScorePlugin
from metrics_sched.podinfo import PodInfo
from metrics_sched.state.node_table import FloatArray, IntArray, NodeTable


class NodeLabelScore(ScorePlugin):
    name = "NodeLabelScore"
    events = frozenset({ClusterEvent.NODE_ADDED, ClusterEvent.NODE_LABELS})

    def __init__(self, args: Mapping[str, Any], handle: Any) -> None:
        super().__init__(args, handle)
        self.weights: dict[str, dict[str, float]] = {
            key: {value: float(w) for value, w in values.items()} for key, values in args["labelWeights"].items()
        }
        self._cache: tuple[int, int, FloatArray] | None = None

    @classmethod
    def check_args(cls, args: Mapping[str, Any]) -> None:
        for key in args:
            if key != "labelWeights":
                raise ArgsError(key, "unknown field (expected labelWeights)")
        weights = args.get("labelWeights")
        if not isinstance(weights, Mapping) or not weights:
            raise ArgsError("labelWeights", "must map label keys to {value: weight 0-100}")
        for key, values in weights.items():
            if not isinstance(values, Mapping) or not values:
                raise ArgsError(f"labelWeights.{key}", "must map label values to a weight 0-100")
            for value, weight in values.items():
                if isinstance(weight, bool) or not isinstance(weight, int | float) or not 0 <= weight <= 100:
                    raise ArgsError(f"labelWeights.{key}.{value}", f"must be a number 0-100, got {weight!r}")

    def score(self, cycle: CycleState, pod: PodInfo, table: NodeTable, rows: IntArray) -> FloatArray:
        if self._cache is None or self._cache[:2] != (table.labels_generation, table.capacity):
            total = np.zeros(table.capacity, dtype=np.float64)
            for key, values in self.weights.items():
                for value, weight in values.items():
                    total += weight * table.label_in(key, [value])
            self._cache = (table.labels_generation, table.capacity, total / len(self.weights))
        result: FloatArray = self._cache[2][rows]
        return result
