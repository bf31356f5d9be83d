"""NodeAffinity: spec.nodeSelector and required node affinity filter; preferred terms score.

Masks depend only on labels, so they are cached per (pod's selector, table labels generation):
the replicas of one Deployment reuse the same mask until some node's labels change.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from typing import Any

import numpy as np

from metrics_sched.framework import (
    Batchable,
    BatchScope,
    BoolArray,
    ClusterEvent,
    CycleState,
    EventHint,
    Filtered,
    FilterPlugin,
    FloatArray,
    Handle,
    IntArray,
    NoArgs,
    NodeRecord,
    NodeTable,
    Normalized,
    PodInfo,
    QueueingHint,
    Reads,
    ScorePlugin,
    max_normalize,
    selector_mask,
    term_mask,
)

_CACHE_SIZE = 256


class NodeAffinity(FilterPlugin, ScorePlugin, Batchable):
    name = "NodeAffinity"
    node_local = True  # the node's labels and name
    normalized = Normalized.COMPLETE  # max_normalize of non-negative weight sums
    normalize_by_top = True  # max_normalize
    events = frozenset({ClusterEvent.NODE_ADDED, ClusterEvent.NODE_LABELS})

    def batch_scope(self, pod: PodInfo) -> BatchScope | None:
        """Opportunistic batching: reads the node's labels."""
        return BatchScope(Reads.NODE)

    def __init__(self, args: NoArgs, handle: Handle) -> None:
        super().__init__(args, handle)
        self._masks: OrderedDict[tuple[str, int, int], BoolArray] = OrderedDict()

    def events_to_register(self) -> list[EventHint]:
        return [EventHint(ClusterEvent.NODE_ADDED, self._matches), EventHint(ClusterEvent.NODE_LABELS, self._matches)]

    @staticmethod
    def _matches(pod: PodInfo, node: NodeRecord | None) -> QueueingHint:
        """A node whose labels miss the pod's nodeSelector cannot help it (required affinity terms: try)."""
        if node is None or all(node.labels.get(k) == v for k, v in pod.node_selector.items()):
            return QueueingHint.QUEUE
        return QueueingHint.SKIP

    def _cached(self, kind: str, spec: Any, table: NodeTable, compute: Any) -> Any:
        key = (kind + json.dumps(spec, sort_keys=True), table.labels_generation, table.capacity)
        hit = self._masks.get(key)
        if hit is None:
            hit = compute()
            self._masks[key] = hit
            if len(self._masks) > _CACHE_SIZE:
                self._masks.popitem(last=False)
        else:
            self._masks.move_to_end(key)
        return hit

    def filter(self, cycle: CycleState, pod: PodInfo, table: NodeTable) -> Filtered:
        required = ((pod.affinity.get("nodeAffinity") or {})
                    .get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms")
        if not pod.node_selector and not required:
            return Filtered(np.ones(table.capacity, dtype=bool))

        def compute() -> BoolArray:
            mask = selector_mask(table, pod.node_selector)
            if required:
                any_term = np.zeros(table.capacity, dtype=bool)
                for term in required:
                    any_term |= term_mask(table, term)
                mask &= any_term
            return mask

        mask: BoolArray = self._cached("f", [pod.node_selector, required], table, compute)
        return Filtered.single(mask.copy(), "node(s) didn't match Pod's node affinity/selector")

    def row_local_scores(self) -> bool:
        return True  # the row's labels

    def score(self, cycle: CycleState, pod: PodInfo, table: NodeTable, rows: IntArray) -> FloatArray:
        preferred = (pod.affinity.get("nodeAffinity") or {}).get(
            "preferredDuringSchedulingIgnoredDuringExecution") or []
        if not preferred:
            return np.zeros(rows.shape[0], dtype=np.float64)

        def compute() -> FloatArray:
            total = np.zeros(table.capacity, dtype=np.float64)
            for item in preferred:
                total += float(item.get("weight", 0)) * term_mask(table, item.get("preference") or {})
            return total

        totals: FloatArray = self._cached("s", preferred, table, compute)
        result: FloatArray = totals[rows]
        return result

    def normalize(self, scores: FloatArray) -> FloatArray:
        return max_normalize(scores)
