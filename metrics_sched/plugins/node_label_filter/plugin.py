"""NodeLabelFilter: keep only nodes with the required labels (e.g. role=special) and without the
forbidden ones. Args:

    requiredLabels: {role: special}         # value or list of accepted values
    presentLabels: [gpu-ready]               # must exist, any value
    absentLabels: [maintenance]              # must not exist
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from metrics_sched.framework import (
    ArgsError,
    Batchable,
    BatchScope,
    BoolArray,
    ClusterEvent,
    CycleState,
    Filtered,
    FilterPlugin,
    Handle,
    NodeTable,
    PodInfo,
    Reads,
)


class NodeLabelFilter(FilterPlugin, Batchable):
    name = "NodeLabelFilter"
    node_local = True  # the node's labels
    events = frozenset({ClusterEvent.NODE_ADDED, ClusterEvent.NODE_LABELS})

    def batch_scope(self, pod: PodInfo) -> BatchScope | None:
        """Opportunistic batching: reads the node's labels."""
        return BatchScope(Reads.NODE)

    @dataclass(frozen=True)
    class Args:
        required_labels: dict[str, str | tuple[str, ...]] = field(default_factory=dict)
        present_labels: tuple[str, ...] = ()
        absent_labels: tuple[str, ...] = ()

        def validate(self) -> None:
            if not (self.required_labels or self.present_labels or self.absent_labels):
                raise ArgsError("requiredLabels", "give at least one of requiredLabels, presentLabels, absentLabels")

    args: Args

    def __init__(self, args: Args, handle: Handle) -> None:
        super().__init__(args, handle)
        self.required = {k: [v] if isinstance(v, str) else list(v) for k, v in self.args.required_labels.items()}
        self._cache: tuple[int, int, BoolArray] | None = None

    def filter(self, cycle: CycleState, pod: PodInfo, table: NodeTable) -> Filtered:
        if self._cache is None or self._cache[:2] != (table.labels_generation, table.capacity):
            mask = np.ones(table.capacity, dtype=bool)
            for key, values in self.required.items():
                mask &= table.label_in(key, values)
            for key in self.args.present_labels:
                mask &= table.label_exists(key)
            for key in self.args.absent_labels:
                mask &= ~table.label_exists(key)
            self._cache = (table.labels_generation, table.capacity, mask)
        return Filtered.single(self._cache[2].copy(), "node(s) didn't have the required labels")
