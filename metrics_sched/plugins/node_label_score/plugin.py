"""NodeLabelScore: prefer nodes by label values, e.g. disk-type=ssd. Args:

    labelWeights:
      disk-type: {ssd: 100, hdd: 10}   # 0-100 per value; a node without the label scores 0 for that key

A node's score is the mean over the configured keys, so it is already on the 0-100 scale.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from metrics_sched.framework import (
    ArgsError,
    Batchable,
    BatchScope,
    ClusterEvent,
    CycleState,
    FloatArray,
    Handle,
    IntArray,
    NodeTable,
    Normalized,
    PodInfo,
    Reads,
    ScorePlugin,
    unchanged,
)


class NodeLabelScore(ScorePlugin, Batchable):
    name = "NodeLabelScore"
    normalized = Normalized.COMPLETE  # the mean over keys of one 0-100 weight each
    normalize = unchanged  # already 0-100 (see `normalized`): the default's clip would copy them for nothing
    events = frozenset({ClusterEvent.NODE_ADDED, ClusterEvent.NODE_LABELS})

    def batch_scope(self, pod: PodInfo) -> BatchScope | None:
        """Opportunistic batching: reads the node's labels."""
        return BatchScope(Reads.NODE)

    @dataclass(frozen=True)
    class Args:
        label_weights: dict[str, dict[str, float]]

        def validate(self) -> None:
            if not self.label_weights:
                raise ArgsError("labelWeights", "must map label keys to {value: weight 0-100}")
            for key, values in self.label_weights.items():
                if not values:
                    raise ArgsError(f"labelWeights.{key}", "must map label values to a weight 0-100")
                for value, weight in values.items():
                    if not 0 <= weight <= 100:
                        raise ArgsError(f"labelWeights.{key}.{value}", f"must be a number 0-100, got {weight!r}")

    args: Args

    def __init__(self, args: Args, handle: Handle) -> None:
        super().__init__(args, handle)
        self.weights = self.args.label_weights
        self._cache: tuple[int, int, FloatArray] | None = None

    def row_local_scores(self) -> bool:
        return True  # the row's labels

    def score(self, cycle: CycleState, pod: PodInfo, table: NodeTable, rows: IntArray) -> FloatArray:
        if self._cache is None or self._cache[:2] != (table.labels_generation, table.capacity):
            total = np.zeros(table.capacity, dtype=np.float64)
            for key, values in self.weights.items():
                for value, weight in values.items():
                    total += weight * table.label_in(key, [value])
            self._cache = (table.labels_generation, table.capacity, total / len(self.weights))
        result: FloatArray = self._cache[2][rows]
        return result
