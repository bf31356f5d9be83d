"""ZoneSpread: spread the pods of one owner (ReplicaSet, Job, ...) across zones.

Like kube-scheduler's system-default topology spreading (ScheduleAnyway on zones): a node scores
higher when its zone holds fewer pods of the same controller. Pods without an owner score neutral.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from metrics_sched.config.errors import ArgsError
from metrics_sched.framework.interfaces import ClusterEvent, CycleState, ScorePlugin
from metrics_sched.podinfo import PodInfo
from metrics_sched.state.node_table import FloatArray, IntArray, NodeTable

ZONE_LABEL = "topology.kubernetes.io/zone"


class ZoneSpread(ScorePlugin):
    name = "ZoneSpread"
    events = frozenset({ClusterEvent.NODE_ADDED, ClusterEvent.NODE_LABELS, ClusterEvent.POD_DELETED})

    def __init__(self, args: Mapping[str, Any], handle: Any) -> None:
        super().__init__(args, handle)
        self.topology_key: str = args.get("topologyKey", ZONE_LABEL)
        self._zones: tuple[int, int, IntArray, int] | None = None

    @classmethod
    def check_args(cls, args: Mapping[str, Any]) -> None:
        for key in args:
            if key != "topologyKey":
                raise ArgsError(key, "unknown field (expected topologyKey)")
        if "topologyKey" in args and not isinstance(args["topologyKey"], str):
            raise ArgsError("topologyKey", "must be a label key")

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
