"""ZoneSpread: spread the pods of one owner (ReplicaSet, Job, ...) across zones.

Like kube-scheduler's system-default topology spreading (ScheduleAnyway on zones): a node scores
higher when its zone holds fewer pods of the same controller. Pods without an owner score neutral.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from metrics_sched.framework import (
    Batchable,
    BatchScope,
    ClusterEvent,
    CycleState,
    FloatArray,
    Handle,
    IncrementalScorer,
    IncrementalScores,
    IntArray,
    NodeTable,
    Normalized,
    PodInfo,
    Reads,
    ScorePlugin,
    unchanged,
)

ZONE_LABEL = "topology.kubernetes.io/zone"


class ZoneSpread(ScorePlugin, IncrementalScorer, Batchable):
    name = "ZoneSpread"
    normalized = Normalized.COMPLETE  # 100 * (high - count) / (high - low), or 100
    normalize = unchanged  # already 0-100 (see `normalized`): the default's clip would copy them for nothing
    events = frozenset({ClusterEvent.NODE_ADDED, ClusterEvent.NODE_LABELS, ClusterEvent.POD_DELETED})

    def batch_scope(self, pod: PodInfo) -> BatchScope | None:
        """Opportunistic batching: reads the owner's pods counted per zone over every node (nothing for a pod
        without an owner: it scores 100 everywhere)."""
        return BatchScope(Reads.CLUSTER if pod.owner_key else Reads.NONE)

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

    def incremental_scores(self, cycle: CycleState, pod: PodInfo, table: NodeTable,
                           rows: IntArray) -> IncrementalScores | None:
        """Opportunistic batching: the per-zone sums kept from the owner's per-row counts (_ZoneScores)."""
        if not pod.owner_key:
            return None
        zone_of, zones = self._zone_ids(table)
        return _ZoneScores(self, pod.owner_key, table, rows, zone_of, zones)

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


class _ZoneScores(IncrementalScores):
    """score()'s values over the batch's rows, kept from the owner's per-row counts: a row whose count moved
    moves its zone's sum (integers: exact in float64); the values are computed per zone with score()'s float
    operations, then gathered, so they are score()'s bit for bit."""

    def __init__(self, plugin: ZoneSpread, owner: str, table: NodeTable, rows: IntArray, zone_of: IntArray,
                 zones: int) -> None:
        self.plugin, self.owner, self.size = plugin, owner, table.capacity
        self.zone_of = zone_of
        self.counts = plugin.handle.owner_counts(owner)[: table.capacity].copy()
        self.per_zone = np.asarray(np.bincount(zone_of, weights=self.counts, minlength=zones), dtype=np.float64)
        self.candidate_zone = zone_of[rows]
        self.present = np.flatnonzero(np.bincount(self.candidate_zone, minlength=zones) > 0)
        self.size_rows = rows.shape[0]
        self.labels_generation = table.labels_generation
        # The zones with a candidate, as Python ints: their sums' low and high are read each cycle.
        self.zones_present: list[int] = self.present.tolist()
        # The last per-zone values and the low and high they were computed with: while those stand, only the zones
        # whose sums moved are computed again (None: every zone afresh).
        self.values: FloatArray | None = None
        self.bounds = (0.0, 0.0)

    def rescore(self, cycle: CycleState, pod: PodInfo, table: NodeTable, changed: IntArray) -> FloatArray | None:
        if table.capacity != self.size or table.labels_generation != self.labels_generation:
            return None
        per_zone = self.per_zone
        moved: list[int] = []
        if changed.size:
            now = self.plugin.handle.owner_counts(self.owner)
            if changed.size <= _FEW:
                counts, zone_of = self.counts, self.zone_of
                for row in changed.tolist():  # .item(): Python numbers straight, without numpy scalars
                    fresh: int = now.item(row)
                    delta = fresh - counts.item(row)
                    if delta:
                        counts[row] = fresh
                        zone: int = zone_of.item(row)
                        per_zone[zone] = per_zone.item(zone) + delta  # integers: exact
                        moved.append(zone)
            else:
                fresh_counts = now[changed]
                np.add.at(per_zone, self.zone_of[changed], (fresh_counts - self.counts[changed]).astype(np.float64))
                self.counts[changed] = fresh_counts
                self.values = None
        if len(self.zones_present) <= _FEW:
            seen = [float(per_zone[zone]) for zone in self.zones_present]
            low, high = min(seen), max(seen)
        else:
            present = per_zone[self.present]
            low, high = float(present.min()), float(present.max())
        if high == low:
            self.values = None  # the zones that move meanwhile are not followed
            return np.full(self.size_rows, 100.0)
        # score()'s 100.0 * (high - candidate) / (high - low), per zone then gathered (the same operations on the
        # same values: each element's result does not depend on the others; in Python floats, IEEE doubles too).
        values = self.values
        if values is not None and self.bounds == (low, high):
            for zone in moved:
                values[zone] = 100.0 * (high - per_zone.item(zone)) / (high - low)
        else:
            values = self.values = np.asarray(100.0 * (high - per_zone) / (high - low), dtype=np.float64)
            self.bounds = (low, high)
        scores: FloatArray = values.take(self.candidate_zone, mode="wrap")  # in range: wrap is a plain gather
        return scores


# At most this many changed rows (or zones) are handled one by one in Python floats; more: in numpy.
_FEW = 8
