"""InterPodAffinity: required and preferred pod affinity and anti-affinity, as kube-scheduler's
InterPodAffinity plugin (pkg/scheduler/framework/plugins/interpodaffinity) decides them.

Filter, for a candidate node (its value of each term's topologyKey names its domain):

- the pod's required affinity: the node has every term's key and each term's domain holds a pod that
  matches ALL the terms; if no such pod exists anywhere (on a node with one of the keys) and the pod
  matches its own terms, the first pod of such a group may go to any node with every key;
- the pod's required anti-affinity: no term's domain holds a pod matching that term;
- symmetry: no placed pod whose required anti-affinity term matches this pod is in that term's domain.

Score: for each domain, the summed weights of the pod's preferred terms its pods match (anti-affinity
negative), of placed pods' preferred terms that match this pod, and `hardPodAffinityWeight` for each placed
pod's required affinity term that matches this pod; a node gets the sum over its domains, min-max normalised.

The incoming pod's namespaceSelector is resolved to namespace names at each cycle (a namespace watch);
placed pods' namespaceSelectors are matched against the incoming pod's namespace labels. Pods assumed
by this scheduler count at once: 50 anti-affine replicas in one burst never share a node.

Vectorised: the matching pods per node come from the cluster state's incremental per-row counts
(`ClusterState.pod_counts`, `carried_terms`); a domain's total is one np.bincount over the topology's codes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from metrics_sched.framework import (
    SUCCESS,
    AffinityTerm,
    ArgsError,
    Batchable,
    BatchScope,
    BoolArray,
    ClusterEvent,
    Code,
    CycleState,
    EventHint,
    Filtered,
    FilterPlugin,
    FloatArray,
    IntArray,
    NodeTable,
    Normalized,
    PodAffinityTerms,
    PodInfo,
    PodQuery,
    PodRecord,
    PreFilterPlugin,
    PreScorePlugin,
    QueryTerm,
    QueueingHint,
    Reads,
    ScorePlugin,
    SelectorError,
    StateKey,
    Status,
    TermKind,
    parse_affinity,
)

ERR_EXISTING_ANTI_AFFINITY = "node(s) didn't satisfy existing pods anti-affinity rules"
ERR_AFFINITY = "node(s) didn't match pod affinity rules"
ERR_ANTI_AFFINITY = "node(s) didn't match pod anti-affinity rules"


@dataclass
class _FilterState:
    affinity: tuple[AffinityTerm, ...]  # the pod's required terms, namespaceSelectors resolved
    anti_affinity: tuple[AffinityTerm, ...]
    existing_anti: list[tuple[str, IntArray]]  # (topology key, per-row count) of placed pods' terms matching it
    self_match: bool  # the pod matches all its own required affinity terms


@dataclass
class _ScoreState:
    # topology key -> per-row weight (placed pods' weights, summed per row); domains are summed at score time.
    by_key: dict[str, list[FloatArray]] = field(default_factory=dict)


_FILTER = StateKey[_FilterState]("InterPodAffinity/filter")
_SCORE = StateKey[_ScoreState]("InterPodAffinity/score")
_TERMS = StateKey[PodAffinityTerms]("InterPodAffinity/terms")


def _domain_sums(codes: IntArray, size: int, per_row: IntArray | FloatArray) -> FloatArray:
    """Per domain, the sum of `per_row` over the rows in it (rows lacking the key, code -1, left out)."""
    has = codes >= 0
    sums = np.bincount(codes[has], weights=per_row[has].astype(np.float64), minlength=size)
    return np.asarray(sums, dtype=np.float64)


def _lands(table: NodeTable, key: str, per_row: IntArray | FloatArray) -> bool:
    """Whether some counted pod is on a node with `key`: upstream only records (key, value) pairs of such
    nodes, and with none recorded it skips (PreFilter) or scores nothing (PreScore)."""
    size = min(table.capacity, per_row.shape[0])
    return bool(np.any((per_row[:size] != 0) & (table.topology(key).codes[:size] >= 0)))


def _at(codes: IntArray, sums: FloatArray) -> FloatArray:
    """Each row's domain value (0 where the row lacks the key)."""
    if sums.size == 0:
        return np.zeros(codes.shape[0], dtype=np.float64)
    values: FloatArray = np.where(codes >= 0, sums[np.maximum(codes, 0)], 0.0)
    return values


class InterPodAffinity(PreFilterPlugin, FilterPlugin, PreScorePlugin, ScorePlugin, Batchable):
    name = "InterPodAffinity"
    # Removing pods may lift an anti-affinity rule (the pod's or an existing pod's), never bring an affinity
    # match; not node-local: a rule's topology domain spans nodes.
    resolvable_reasons = frozenset({ERR_EXISTING_ANTI_AFFINITY, ERR_ANTI_AFFINITY})
    normalized = Normalized.COMPLETE  # min-max to 0-100 of finite sums
    # Pods coming and going change the counts; node labels change the domains; namespace labels what a
    # namespaceSelector selects.
    events = frozenset({ClusterEvent.NODE_ADDED, ClusterEvent.NODE_LABELS, ClusterEvent.POD_ADDED,
                        ClusterEvent.POD_LABELS, ClusterEvent.POD_DELETED, ClusterEvent.NAMESPACE_LABELS})

    def batch_scope(self, pod: PodInfo) -> BatchScope | None:
        """Opportunistic batching: a pod with terms of its own reads matching pods per domain over every node; one
        without reads only the terms placed pods carry (their counts and namespaces: a token) and node labels."""
        affinity = pod.affinity
        if affinity.get("podAffinity") or affinity.get("podAntiAffinity"):
            return BatchScope(Reads.CLUSTER)
        cluster = self.handle.cluster
        return BatchScope(Reads.NODE, token=lambda: (cluster.pod_index.carried_generation,
                                                     cluster.namespaces.generation))

    @dataclass(frozen=True)
    class Args:
        # The score a placed pod's *required* affinity term adds when it matches the incoming pod (0-100).
        hard_pod_affinity_weight: int = 1
        # Score only by the incoming pod's own preferred terms (faster; placed pods' preferences are ignored).
        ignore_preferred_terms_of_existing_pods: bool = False

        def validate(self) -> None:
            if not 0 <= self.hard_pod_affinity_weight <= 100:
                raise ArgsError("hardPodAffinityWeight", "must be in the range 0-100")

    args: Args

    def events_to_register(self) -> list[EventHint]:
        return [EventHint(ClusterEvent.NODE_ADDED), EventHint(ClusterEvent.NODE_LABELS),
                EventHint(ClusterEvent.POD_LABELS), EventHint(ClusterEvent.NAMESPACE_LABELS),
                EventHint(ClusterEvent.POD_ADDED, self._after_pod_added),
                EventHint(ClusterEvent.POD_DELETED, self._after_pod_deleted)]

    def _selects(self, terms: tuple[AffinityTerm, ...], placed: PodRecord) -> bool:
        labels = self.handle.cluster.namespaces.labels(placed.namespace)
        return any(t.matches(placed.namespace, placed.labels, labels) for t in terms)

    def _after_pod_added(self, pod: PodInfo, placed: PodRecord | None) -> QueueingHint:
        """Only a new pod matching the pod's required affinity may satisfy it (upstream's
        isSchedulableAfterPodChange); anti-affinity can only get worse."""
        try:
            terms = parse_affinity(pod.raw).required_affinity
        except SelectorError:
            return QueueingHint.SKIP
        if placed is None or (terms and self._selects(terms, placed)):
            return QueueingHint.QUEUE
        return QueueingHint.SKIP

    def _after_pod_deleted(self, pod: PodInfo, released: PodRecord | None) -> QueueingHint:
        """A deleted pod helps if it matched the pod's anti-affinity or its own anti-affinity matched the pod."""
        if released is None:
            return QueueingHint.QUEUE
        try:
            anti = parse_affinity(pod.raw).required_anti_affinity
        except SelectorError:
            return QueueingHint.SKIP
        if anti and self._selects(anti, released):
            return QueueingHint.QUEUE
        labels = self.handle.cluster.namespaces.labels(pod.namespace)
        if any(t.matches(pod.namespace, pod.labels, labels) for t in released.affinity.required_anti_affinity):
            return QueueingHint.QUEUE
        return QueueingHint.SKIP

    # -- helpers ---------------------------------------------------------------------------------
    def _terms(self, cycle: CycleState, pod: PodInfo) -> PodAffinityTerms:
        terms = cycle.get(_TERMS)
        if terms is None:
            terms = parse_affinity(pod.raw)
            cycle.write(_TERMS, terms)
        return terms

    def _resolved(self, term: AffinityTerm) -> AffinityTerm:
        selector = term.namespace_selector
        if selector.empty or selector.nothing:
            return term
        return term.resolved(self.handle.cluster.namespaces.matching(selector))

    def _counts(self, *terms: AffinityTerm) -> IntArray:
        return self.handle.cluster.pod_counts(PodQuery(tuple(QueryTerm.of(t) for t in terms)))

    def _matching_carried(self, kind: TermKind, pod: PodInfo) -> list[tuple[AffinityTerm, IntArray]]:
        if not self.handle.cluster.pod_index.has_carried(kind):  # the common case: no placed pod has such terms
            return []
        namespace_labels = self.handle.cluster.namespaces.labels(pod.namespace)
        return [(term, counts) for term, counts in self.handle.cluster.carried_terms(kind)
                if term.matches(pod.namespace, pod.labels, namespace_labels)]

    # -- filtering -------------------------------------------------------------------------------
    def pre_filter(self, cycle: CycleState, pod: PodInfo) -> Status:
        try:
            terms = self._terms(cycle, pod)
        except SelectorError as exc:
            return Status(Code.UNRESOLVABLE, f"parsing pod: {exc}")
        table = self.handle.table
        existing = [(term.topology_key, counts)
                    for term, counts in self._matching_carried(TermKind.REQUIRED_ANTI_AFFINITY, pod)
                    if _lands(table, term.topology_key, counts)]
        if not existing and not terms.required_affinity and not terms.required_anti_affinity:
            return Status(Code.SKIP)
        affinity = tuple(self._resolved(t) for t in terms.required_affinity)
        self_match = bool(affinity) and all(t.matches(pod.namespace, pod.labels, None) for t in affinity)
        cycle.write(_FILTER, _FilterState(affinity, tuple(self._resolved(t) for t in terms.required_anti_affinity),
                                          existing, self_match))
        return SUCCESS

    def filter(self, cycle: CycleState, pod: PodInfo, table: NodeTable) -> Filtered:
        state = cycle.get(_FILTER)
        if state is None:  # PreFilter skipped it (nothing constrains this pod) or is not enabled
            if cycle.get(_TERMS) is None:
                self.pre_filter(cycle, pod)
                state = cycle.get(_FILTER)
            if state is None:
                return Filtered.all(table)
        size = table.capacity
        affinity_ok = self._affinity_rows(state, table)
        anti_ok = np.ones(size, dtype=bool)
        for term in state.anti_affinity:
            topology = table.topology(term.topology_key)
            codes = topology.codes[:size]
            anti_ok &= _at(codes, _domain_sums(codes, topology.size, self._counts(term)[:size])) <= 0
        existing_ok = np.ones(size, dtype=bool)
        for key, counts in state.existing_anti:
            topology = table.topology(key)
            codes = topology.codes[:size]
            existing_ok &= _at(codes, _domain_sums(codes, topology.size, counts[:size])) <= 0
        # The first failing rule names the reason, in kube-scheduler's order.
        return Filtered(affinity_ok & anti_ok & existing_ok, {
            ERR_AFFINITY: ~affinity_ok,
            ERR_ANTI_AFFINITY: affinity_ok & ~anti_ok,
            ERR_EXISTING_ANTI_AFFINITY: affinity_ok & anti_ok & ~existing_ok,
        })

    def _affinity_rows(self, state: _FilterState, table: NodeTable) -> BoolArray:
        size = table.capacity
        if not state.affinity:
            return np.ones(size, dtype=bool)
        counts = self._counts(*state.affinity)[:size]
        has_all = np.ones(size, dtype=bool)
        pods_exist = np.ones(size, dtype=bool)
        any_pair = False
        for term in state.affinity:
            topology = table.topology(term.topology_key)
            codes = topology.codes[:size]
            has_all &= codes >= 0
            sums = _domain_sums(codes, topology.size, counts)
            any_pair = any_pair or bool((sums > 0).any())
            pods_exist &= _at(codes, sums) > 0
        if not any_pair and state.self_match:
            return has_all  # the first pod of a group with affinity to itself
        return has_all & pods_exist

    # -- scoring ---------------------------------------------------------------------------------
    def pre_score(self, cycle: CycleState, pod: PodInfo, table: NodeTable, rows: IntArray) -> Status:
        try:
            terms = self._terms(cycle, pod)
        except SelectorError as exc:
            return Status.error(f"parsing pod: {exc}")
        has_preferences = bool(terms.preferred_affinity or terms.preferred_anti_affinity)
        if self.args.ignore_preferred_terms_of_existing_pods and not has_preferences:
            return Status(Code.SKIP)
        state = _ScoreState()

        def add(key: str, per_row: FloatArray) -> None:
            if _lands(table, key, per_row):
                state.by_key.setdefault(key, []).append(per_row)

        size = table.capacity
        for weighted, sign in ((terms.preferred_affinity, 1.0), (terms.preferred_anti_affinity, -1.0)):
            for item in weighted:
                term = self._resolved(item.term)
                add(term.topology_key, sign * item.weight * self._counts(term)[:size].astype(np.float64))
        existing: list[tuple[TermKind, float]] = [(TermKind.PREFERRED_AFFINITY, 1.0),
                                                  (TermKind.PREFERRED_ANTI_AFFINITY, -1.0)]
        if self.args.hard_pod_affinity_weight > 0:
            existing.append((TermKind.REQUIRED_AFFINITY, float(self.args.hard_pod_affinity_weight)))
        for kind, factor in existing:
            for term, counts in self._matching_carried(kind, pod):
                add(term.topology_key, factor * counts[:size].astype(np.float64))
        if not state.by_key:
            return Status(Code.SKIP)
        cycle.write(_SCORE, state)
        return SUCCESS

    def score(self, cycle: CycleState, pod: PodInfo, table: NodeTable, rows: IntArray) -> FloatArray:
        state = cycle.get(_SCORE)
        total = np.zeros(rows.shape[0], dtype=np.float64)
        if state is None:
            return total
        size = table.capacity
        for key, parts in state.by_key.items():
            topology = table.topology(key)
            codes = topology.codes[:size]
            sums = _domain_sums(codes, topology.size, np.sum(parts, axis=0))
            total += _at(codes[rows], sums)
        return total

    def normalize(self, scores: FloatArray) -> FloatArray:
        """kube's NormalizeScore: min-max to 0-100, truncated; all equal scores give 0."""
        if scores.size == 0:
            return scores
        low, high = float(scores.min()), float(scores.max())
        if high - low <= 0:
            return np.zeros_like(scores)
        normalized: FloatArray = np.trunc(100.0 * ((scores - low) / (high - low)))
        return normalized


