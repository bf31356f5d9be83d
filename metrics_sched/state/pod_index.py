"""Per-node counts of placed pods, kept incrementally, for the inter-pod constraints.

kube-scheduler's InterPodAffinity and PodTopologySpread count, in every cycle, the pods on every node
that match the incoming pod's selectors, and the existing pods whose anti-affinity terms match the
incoming pod. Here both are counts per node row that change only when a pod is placed, assumed,
forgotten or removed, so a cycle reads arrays instead of scanning pods:

- a `PodQuery` (namespaces + label selectors, ANDed) gets a per-row count of the placed pods it matches,
  built by one scan of the placed pods when first asked, then updated on every pod change. Queries are
  few (one per distinct selector being scheduled: the replicas of a Deployment share one) and bounded:
  the least recently used are dropped beyond MAX_QUERIES. A pod change tests only the queries whose
  guard label (an equality every match must carry) the pod has, plus those without a guard.
- the (anti-)affinity terms existing pods carry get a per-row count (summed weights for preferred terms)
  keyed by (kind, term): equal terms of many replicas share one array. An entry goes when its last pod does,
  so memory follows the current cluster, not its history.

Rows are the node table's rows; arrays grow with it and a removed node's row is zeroed.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from metrics_sched.model.affinity import AffinityTerm, PodAffinityTerms, TermKind
from metrics_sched.model.selectors import LabelSelector
from metrics_sched.state.node_table import IntArray

__all__ = ["MAX_QUERIES", "CountedPod", "PodIndex", "PodQuery", "QueryTerm"]

# Each query holds one int64 per node row (80 KB at 10,000 nodes): 256 of them bound the index to ~20 MB
# there, while a query in use (a Deployment being rolled out) stays registered.
MAX_QUERIES = 256


@dataclass(frozen=True)
class QueryTerm:
    namespaces: frozenset[str] | None  # None: every namespace
    selector: LabelSelector

    def matches(self, namespace: str, labels: Mapping[str, str]) -> bool:
        return (self.namespaces is None or namespace in self.namespaces) and self.selector.matches(labels)

    @classmethod
    def of(cls, term: AffinityTerm) -> QueryTerm:
        """An incoming pod's term, its namespaceSelector already resolved to names (AffinityTerm.resolved)."""
        return cls(None if term.any_namespace else term.namespaces, term.selector)


@dataclass(frozen=True)
class PodQuery:
    terms: tuple[QueryTerm, ...]  # a pod counts when it matches every term
    skip_terminating: bool = False  # PodTopologySpread does not count pods being deleted

    def matches(self, pod: CountedPod) -> bool:
        if self.skip_terminating and pod.terminating:
            return False
        return bool(self.terms) and all(t.matches(pod.namespace, pod.labels) for t in self.terms)

    def guard(self) -> tuple[str, str] | None:
        """A (key, value) every matching pod carries, if the selectors imply one."""
        for term in self.terms:
            pairs = term.selector.equalities()
            if pairs:
                return pairs[0]
        return None


class CountedPod(Protocol):
    """What the index needs of a placed pod (the cluster state's PodRecord)."""

    @property
    def namespace(self) -> str: ...

    @property
    def labels(self) -> Mapping[str, str]: ...

    @property
    def terminating(self) -> bool: ...

    @property
    def affinity(self) -> PodAffinityTerms: ...

    @property
    def row(self) -> int | None: ...


def _fit(counts: IntArray, size: int) -> IntArray:
    if counts.shape[0] >= size:
        return counts
    grown = np.zeros(size, dtype=np.int64)
    grown[: counts.shape[0]] = counts
    return grown


@dataclass
class _Carried:
    counts: IntArray
    pods: int = 0


@dataclass
class PodIndex:
    capacity: int
    _queries: OrderedDict[PodQuery, IntArray] = field(default_factory=OrderedDict)
    _guarded: dict[tuple[str, str], set[PodQuery]] = field(default_factory=dict)
    _unguarded: set[PodQuery] = field(default_factory=set)
    _carried: dict[TermKind, dict[AffinityTerm, _Carried]] = field(
        default_factory=lambda: {kind: {} for kind in TermKind})
    # Changes whenever a count of a carried term does (a pod with terms placed or gone, a node cleared): what
    # a pod without terms of its own reads of inter-pod affinity (opportunistic batching's token).
    carried_generation: int = 0

    # -- updates ---------------------------------------------------------------------------------
    def resize(self, capacity: int) -> None:
        self.capacity = max(self.capacity, capacity)

    def account(self, pod: CountedPod, row: int, sign: int) -> None:
        """A placed pod arrives on (sign 1) or leaves (sign -1) `row`."""
        self.resize(row + 1)
        if self._queries:
            for query in self._candidates(pod.labels):
                if query.matches(pod):
                    counts = self._queries[query] = _fit(self._queries[query], self.capacity)
                    counts[row] += sign
        if not pod.affinity:  # most pods carry no term: nothing more to count
            return
        self.carried_generation += 1
        for kind, term, weight in pod.affinity.carried():
            by_term = self._carried[kind]
            entry = by_term.get(term)
            if entry is None:
                if sign < 0:
                    continue
                entry = by_term[term] = _Carried(np.zeros(self.capacity, dtype=np.int64))
            entry.counts = _fit(entry.counts, self.capacity)
            entry.counts[row] += sign * weight
            entry.pods += sign
            if entry.pods <= 0:
                del by_term[term]

    def clear_row(self, row: int) -> None:
        """A node left: nothing counts there any more (its pods are re-accounted if it comes back)."""
        for counts in self._queries.values():
            if row < counts.shape[0]:
                counts[row] = 0
        for by_term in self._carried.values():
            for entry in by_term.values():
                if row < entry.counts.shape[0]:
                    entry.counts[row] = 0
        self.carried_generation += 1

    def _candidates(self, labels: Mapping[str, str]) -> list[PodQuery]:
        found = list(self._unguarded)
        if self._guarded:
            for pair in labels.items():
                hits = self._guarded.get(pair)
                if hits:
                    found.extend(hits)
        return found

    # -- reads -----------------------------------------------------------------------------------
    def counts(self, query: PodQuery, placed: Iterable[CountedPod]) -> IntArray:
        """Per-row count of the placed pods `query` matches (registered on first use by one scan of
        `placed`). The array is the index's own: read it, do not change it."""
        counts = self._queries.get(query)
        if counts is None:
            counts = np.zeros(self.capacity, dtype=np.int64)
            for pod in placed:
                if pod.row is not None and query.matches(pod):
                    counts[pod.row] += 1
            self._register(query, counts)
        else:
            self._queries.move_to_end(query)
        if counts.shape[0] < self.capacity:
            counts = self._queries[query] = _fit(counts, self.capacity)
        return counts

    def _register(self, query: PodQuery, counts: IntArray) -> None:
        self._queries[query] = counts
        guard = query.guard()
        if guard is None:
            self._unguarded.add(query)
        else:
            self._guarded.setdefault(guard, set()).add(query)
        while len(self._queries) > MAX_QUERIES:
            old, _ = self._queries.popitem(last=False)
            self._forget(old)

    def _forget(self, query: PodQuery) -> None:
        guard = query.guard()
        if guard is None:
            self._unguarded.discard(query)
            return
        hits = self._guarded.get(guard)
        if hits is not None:
            hits.discard(query)
            if not hits:
                del self._guarded[guard]

    def carried(self, kind: TermKind) -> list[tuple[AffinityTerm, IntArray]]:
        """Each distinct term of this kind the placed pods carry, with its per-row count (or summed weight)."""
        entries = self._carried[kind]
        for entry in entries.values():
            if entry.counts.shape[0] < self.capacity:  # grown once and kept, not copied on every read
                entry.counts = _fit(entry.counts, self.capacity)
        return [(term, entry.counts) for term, entry in entries.items()]

    def has_carried(self, kind: TermKind) -> bool:
        return bool(self._carried[kind])

    def __len__(self) -> int:
        return len(self._queries)
