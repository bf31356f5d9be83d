"""ZoneSpread: spread the pods of one owner (ReplicaSet, Job, ...) across zones.

Like kube-scheduler's system-default topology spreading (ScheduleAnyway on zones): a node scores
higher when its zone holds fewer pods of the same controller. Pods without an owner score neutral.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from metrics_sched.framework import ClusterEvent, CycleState, Handle, Normalized, ScorePlugin, unchanged
from metrics_sched.framework.signature import BatchScope, Reads
from metrics_sched.model.podinfo import PodInfo
from metrics_sched.state.node_table import FloatArray, IntArray, NodeTable

ZONE_LABEL = "topology.kubernetes.io/zone"


class ZoneSpread(ScorePlugin):
    name = "ZoneSpread"
    normalized = Normalized.COMPLETE  # 100 * (high - count) / (high - low), or 100
    normalize = unchanged  # already 0-100 (see `normalized`): the default's clip would copy them for nothing
    events = frozenset({ClusterEvent.NODE_ADDED, ClusterEvent.NODE_LABELS, ClusterEvent.POD_DELETED})

    def batch_scope(self, pod: PodInfo) -> BatchScope | None:
        """Opportunistic batching: reads the owner's pods counted per zone over every node."""
        return BatchScope(Reads.CLUSTER)

    @dataclass(frozen=True)
    class Args:
        topology_key: str = ZONE_LABEL

    args: Args

    def __init__(self, args: Args, handle: Handle) -> None:
        super().__init__(args, handle)
        self.topology_key = self.args.topology_key
        self._zones: tuple[int, int, IntArray, int] | None = None

    def _zone_ids(self, table: NodeTable) -> tuple[IntArray, int]:
        if self._zones is None or self._zones[:2] != (table.labels_generation, table.capacity):
            column = table.label_column(self.topology_key)
            keys = np.array(["" if v is None else str(v) for v in column], dtype=object)
            _, inverse = np.unique(keys, return_inverse=True)
            self._zones = (table.labels_generation, table.capacity, inverse.astype(np.int64), int(inverse.max()) + 1)
        return self._zones[2], self._zones[3]

    def score(self, cycle: CycleState, pod: PodInfo, table: NodeTable, rows: IntArray) -> FloatArray:
        if not pod.owner_key:
            return np.full(rows.shape[0], 100.0)
        zone_of, zones = self._zone_ids(table)
        counts = self.handle.owner_counts(pod.owner_key)[: table.capacity]
        per_zone = np.bincount(zone_of, weights=counts, minlength=zones)
        candidate = per_zone[zone_of[rows]]
        low, high = float(candidate.min()), float(candidate.max())
        if high == low:
            return np.full(rows.shape[0], 100.0)
        return np.asarray(100.0 * (high - candidate) / (high - low), dtype=np.float64)
