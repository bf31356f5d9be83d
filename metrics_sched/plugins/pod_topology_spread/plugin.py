"""PodTopologySpread: spread matching pods evenly over topology domains, as kube-scheduler's
PodTopologySpread plugin (pkg/scheduler/framework/plugins/podtopologyspread) decides it.

A constraint counts, per domain (a node's value of `topologyKey`), the pods in the pod's namespace that match
its `labelSelector` (plus `matchLabelKeys`: the pod's own values of those keys), leaving out pods being
deleted. Only nodes that have every constraint's key count, and with `nodeAffinityPolicy: Honor` (default)
only nodes matching the pod's nodeSelector/required node affinity, with `nodeTaintsPolicy: Honor` (default
Ignore) only nodes whose taints the pod tolerates.

- Filter (`whenUnsatisfiable: DoNotSchedule`): a node lacking the key is unresolvable; otherwise its
  domain's count, plus 1 if the pod matches its own selector, minus the smallest count over the domains
  (0 when fewer than `minDomains` domains exist) must not exceed `maxSkew`.
- Score (`ScheduleAnyway`, or the cluster defaults when the pod has no constraints): fewer matching pods in
  a node's domains scores higher, each constraint weighted by log(number of domains + 2), as upstream.

Cluster defaults (`defaultingType: System`): hostname maxSkew 3 and zone maxSkew 5, ScheduleAnyway, for a
pod selected by a Service, ReplicationController, ReplicaSet or StatefulSet (their selectors are the
constraints' selector); `defaultingType: List` uses `defaultConstraints` instead.

Vectorised: per-node counts come from the cluster state's incremental index; domain sums are np.bincount
over the topology's integer codes; no loop over nodes or pods in a cycle.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from metrics_sched.framework import (
    SUCCESS,
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
    IncrementalScorer,
    IncrementalScores,
    IntArray,
    LabelSelector,
    NodeTable,
    Normalized,
    PodInfo,
    PodQuery,
    PodRecord,
    PreFilterPlugin,
    PreScorePlugin,
    QueryTerm,
    QueueingHint,
    Reads,
    Requirement,
    ScorePlugin,
    SelectorError,
    StateKey,
    Status,
    pod_required_affinity_mask,
    row_positions,
    tolerated_rows,
)

HOSTNAME = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
ERR_CONSTRAINTS = "node(s) didn't match pod topology spread constraints"
ERR_MISSING_LABEL = "node(s) didn't match pod topology spread constraints (missing required label)"
_MAX_INT32 = 2**31 - 1
_IGNORED = -1.0  # a raw score for nodes left out of scoring (normalised to 0, as upstream's invalidScore)
_EXACT = 2.0**40  # raw scores below this normalise exactly in float64 (100 * 2 * 2**40 < 2**53)

Action = Literal["DoNotSchedule", "ScheduleAnyway"]


@dataclass(frozen=True)
class DefaultConstraint:
    max_skew: int
    topology_key: str
    when_unsatisfiable: Action


SYSTEM_DEFAULTS = (DefaultConstraint(3, HOSTNAME, "ScheduleAnyway"), DefaultConstraint(5, ZONE, "ScheduleAnyway"))


@dataclass(frozen=True)
class Constraint:
    max_skew: int
    topology_key: str
    selector: LabelSelector
    min_domains: int
    honor_node_affinity: bool
    honor_taints: bool


def _policy(value: Any, default: bool) -> bool:
    return default if value is None else value == "Honor"


def parse_constraints(raw: Sequence[Mapping[str, Any]], labels: Mapping[str, str], action: Action) -> list[Constraint]:
    """The pod's constraints with this whenUnsatisfiable (filterTopologySpreadConstraints): matchLabelKeys
    merged as the pod's key=value pairs ahead of the selector's requirements (a nil selector stays nil)."""
    found = []
    for item in raw:
        if item.get("whenUnsatisfiable") != action:
            continue
        selector = LabelSelector.parse(item.get("labelSelector"))
        own = {k: labels[k] for k in item.get("matchLabelKeys") or () if k in labels}
        if own and not selector.nothing:
            selector = selector.adding(Requirement(k, "In", (v,)) for k, v in own.items())
        found.append(Constraint(
            max_skew=int(item.get("maxSkew") or 0), topology_key=str(item.get("topologyKey") or ""),
            selector=selector, min_domains=int(item.get("minDomains") or 1),
            honor_node_affinity=_policy(item.get("nodeAffinityPolicy"), True),
            honor_taints=_policy(item.get("nodeTaintsPolicy"), False)))
    return found


@dataclass
class _ScoreState:
    raw: FloatArray  # per table row: the node's raw score (upstream's Score), _IGNORED for ignored nodes
    rows: IntArray | None = None  # set: `raw` is over these rows only (a batched cycle's candidates), ascending

    def at(self, rows: IntArray) -> FloatArray:
        if self.rows is None:
            scores: FloatArray = self.raw[rows]
            return scores
        positions = np.searchsorted(self.rows, rows)
        if positions.size and (int(positions[-1]) >= self.rows.size or not np.array_equal(self.rows[positions], rows)):
            raise ValueError("PodTopologySpread scored rows its PreScore did not score")
        kept: FloatArray = self.raw[positions]
        return kept


_FILTER = StateKey[list[Constraint]]("PodTopologySpread/filter")
_SCORE = StateKey[_ScoreState]("PodTopologySpread/score")


class PodTopologySpread(PreFilterPlugin, FilterPlugin, PreScorePlugin, ScorePlugin, IncrementalScorer, Batchable):
    name = "PodTopologySpread"
    # Removing pods may even out the skew; a missing topology label it cannot. Not node-local: skew counts the
    # pods of the whole domain.
    resolvable_reasons = frozenset({ERR_CONSTRAINTS})
    normalized = Normalized.COMPLETE  # upstream's integer formula, 0 for ignored nodes
    events = frozenset({ClusterEvent.NODE_ADDED, ClusterEvent.NODE_LABELS, ClusterEvent.NODE_TAINTS,
                        ClusterEvent.POD_ADDED, ClusterEvent.POD_LABELS, ClusterEvent.POD_DELETED})

    def batch_scope(self, pod: PodInfo) -> BatchScope | None:
        """Opportunistic batching: reads matching pods counted per domain over every node, and workloads; nothing
        for a pod without constraints of its own when no default constraints are configured."""
        if (not (pod.raw.get("spec") or {}).get("topologySpreadConstraints")
                and self.args.defaulting_type == "List" and not self.args.default_constraints):
            return BatchScope(Reads.NONE)
        return BatchScope(Reads.CLUSTER)

    @dataclass(frozen=True)
    class Args:
        # Constraints for pods without their own (only with defaultingType: List).
        default_constraints: tuple[DefaultConstraint, ...] = ()
        # System: hostname maxSkew 3 and zone maxSkew 5, ScheduleAnyway; List: default_constraints.
        defaulting_type: Literal["System", "List"] = "System"

        def validate(self) -> None:
            if self.defaulting_type == "System" and self.default_constraints:
                raise ArgsError("defaultConstraints", "must be empty when defaultingType is System")
            seen = set()
            for i, c in enumerate(self.default_constraints):
                if c.max_skew <= 0:
                    raise ArgsError(f"defaultConstraints[{i}].maxSkew", "must be greater than zero")
                if not c.topology_key:
                    raise ArgsError(f"defaultConstraints[{i}].topologyKey", "must not be empty")
                if (c.topology_key, c.when_unsatisfiable) in seen:
                    raise ArgsError(f"defaultConstraints[{i}]", "duplicate topologyKey and whenUnsatisfiable")
                seen.add((c.topology_key, c.when_unsatisfiable))

    args: Args
    # The last PreScore's work, for incremental_scores on the same cycle (pre_score).
    _prepared: tuple[CycleState, _Prepared] | None = None

    def events_to_register(self) -> list[EventHint]:
        return [EventHint(ClusterEvent.NODE_ADDED), EventHint(ClusterEvent.NODE_LABELS),
                EventHint(ClusterEvent.NODE_TAINTS), EventHint(ClusterEvent.POD_LABELS),
                EventHint(ClusterEvent.POD_ADDED, self._after_pod_change),
                EventHint(ClusterEvent.POD_DELETED, self._after_pod_change)]

    def _after_pod_change(self, pod: PodInfo, placed: PodRecord | None) -> QueueingHint:
        """Only a pod of the same namespace that a constraint counts changes the skew (a new one may raise
        the minimum, a deleted one lower a domain)."""
        if placed is None:
            return QueueingHint.QUEUE
        if placed.namespace != pod.namespace:
            return QueueingHint.SKIP
        try:
            constraints = self.constraints(pod, "DoNotSchedule")
        except SelectorError:
            return QueueingHint.SKIP
        return (QueueingHint.QUEUE if any(c.selector.matches(placed.labels) for c in constraints)
                else QueueingHint.SKIP)

    @property
    def _defaults(self) -> tuple[DefaultConstraint, ...]:
        return SYSTEM_DEFAULTS if self.args.defaulting_type == "System" else self.args.default_constraints

    def constraints(self, pod: PodInfo, action: Action) -> list[Constraint]:
        """The pod's own constraints with this action, or the defaults (buildDefaultConstraints) if it has none."""
        own = (pod.raw.get("spec") or {}).get("topologySpreadConstraints") or []
        if own:
            return parse_constraints(own, pod.labels, action)
        defaults = [c for c in self._defaults if c.when_unsatisfiable == action]
        if not defaults:
            return []
        selector = self.handle.cluster.workloads.default_selector(pod.raw)
        if selector.empty:
            return []
        return [Constraint(c.max_skew, c.topology_key, selector, 1, True, False) for c in defaults]

    def _counts(self, pod: PodInfo, selector: LabelSelector, size: int) -> IntArray:
        """Per row, the pods of the pod's namespace the selector matches, not being deleted
        (countPodsMatchSelector; an empty selector counts nothing there)."""
        if selector.empty or selector.nothing:
            return np.zeros(size, dtype=np.int64)
        query = PodQuery((QueryTerm(frozenset({pod.namespace}), selector),), skip_terminating=True)
        return self.handle.cluster.pod_counts(query)[:size]

    def _included(self, pod: PodInfo, table: NodeTable, constraint: Constraint,
                  masks: dict[str, BoolArray]) -> BoolArray:
        """Rows counted for a constraint under its node inclusion policies (masks computed once per cycle)."""
        included = table.present[: table.capacity].copy()
        if constraint.honor_node_affinity and (pod.node_selector or pod.affinity.get("nodeAffinity")):
            if "affinity" not in masks:
                masks["affinity"] = pod_required_affinity_mask(table, pod)
            included &= masks["affinity"]
        if constraint.honor_taints:
            if "taints" not in masks:
                masks["taints"] = tolerated_rows(pod, table)[: table.capacity]
            included &= masks["taints"]
        return included

    # -- filtering -------------------------------------------------------------------------------
    def pre_filter(self, cycle: CycleState, pod: PodInfo) -> Status:
        try:
            constraints = self.constraints(pod, "DoNotSchedule")
        except SelectorError as exc:
            return Status(Code.UNRESOLVABLE, f"parsing pod: {exc}")
        if not constraints:
            return Status(Code.SKIP)
        cycle.write(_FILTER, constraints)
        return SUCCESS

    def filter(self, cycle: CycleState, pod: PodInfo, table: NodeTable) -> Filtered:
        constraints = cycle.get(_FILTER)
        if constraints is None:
            constraints = self.constraints(pod, "DoNotSchedule")
        if not constraints:
            return Filtered.all(table)
        size = table.capacity
        has_all = np.ones(size, dtype=bool)
        for c in constraints:
            has_all &= table.topology(c.topology_key).codes[:size] >= 0
        masks: dict[str, BoolArray] = {}
        # Constraints are checked in order and a row takes the reason of the first one it fails.
        undecided = np.ones(size, dtype=bool)
        missing = np.zeros(size, dtype=bool)
        skewed = np.zeros(size, dtype=bool)
        for c in constraints:
            topology = table.topology(c.topology_key)
            codes = topology.codes[:size]
            counted = has_all & self._included(pod, table, c, masks)
            sums = np.bincount(codes[counted], weights=self._counts(pod, c.selector, size)[counted].astype(np.float64),
                               minlength=topology.size)
            domains = np.bincount(codes[counted], minlength=topology.size) > 0
            lowest = float(sums[domains].min()) if domains.any() else float(_MAX_INT32)
            if int(domains.sum()) < c.min_domains:
                lowest = 0.0
            self_match = 1.0 if c.selector.matches(pod.labels) else 0.0
            match = np.where(codes >= 0, sums[np.maximum(codes, 0)] if sums.size else 0.0, 0.0)
            lacks = undecided & (codes < 0)
            missing |= lacks
            undecided &= ~lacks
            fails = undecided & (match + self_match - lowest > c.max_skew)
            skewed |= fails
            undecided &= ~fails
        return Filtered(undecided, {ERR_MISSING_LABEL: missing, ERR_CONSTRAINTS: skewed})

    # -- scoring ---------------------------------------------------------------------------------
    def pre_score(self, cycle: CycleState, pod: PodInfo, table: NodeTable, rows: IntArray) -> Status:
        # Read before the constraints are (incremental_scores: a workload event landing in between leaves an older
        # generation kept, and the next rescore asks for the selector again).
        generation = self.handle.cluster.workloads.generation
        try:
            constraints = self.constraints(pod, "ScheduleAnyway")
        except SelectorError as exc:
            return Status.error(f"parsing pod: {exc}")
        if not constraints or len(table) == 0:
            return Status(Code.SKIP)
        prepared = _Prepared.of(self, pod, table, rows, constraints, generation)
        # Computed over every row (cheaper than gathering the candidates' at each step); only the candidates'
        # are read, and each is what the same operations give on the candidates alone.
        total = np.zeros(table.capacity, dtype=np.float64)
        for part in prepared.parts:
            if part.sums is None:  # hostname: the node's own count
                credit = prepared.per_row[part.selector]
            else:
                assert part.codes is not None
                credit = np.asarray(part.sums[part.codes], dtype=np.float64)
            total += np.where(part.keyed, credit * part.weight + part.offset, 0.0)
        require_all, has_all = prepared.require_all, prepared.has_all
        # Kept for incremental_scores, which a batch being stored calls next with this cycle (one slot: the arrays
        # of a cycle nobody stores are let go at the next PreScore).
        self._prepared = (cycle, prepared)
        # int64(math.Round(score)): halves away from zero (scores are never negative).
        raw = np.floor(total + 0.5)
        if require_all:
            raw = np.where(has_all, raw, _IGNORED)
        cycle.write(_SCORE, _ScoreState(raw))
        return SUCCESS

    def incremental_scores(self, cycle: CycleState, pod: PodInfo, table: NodeTable,
                           rows: IntArray) -> IncrementalScores | None:
        """Opportunistic batching: the scores kept from per-row counts and per-domain sums (_SpreadScores)."""
        state = cycle.get(_SCORE)
        slot, self._prepared = self._prepared, None
        if state is None:
            return None
        if slot is not None and slot[0] is cycle and np.array_equal(slot[1].rows, rows):
            prepared = slot[1]  # what this cycle's pre_score computed: the counts, domains and sums
        else:
            # Read before the constraints are: a workload event (the watch thread, no state lock) landing in
            # between then leaves an older generation stored, and the next rescore asks for the selector again.
            generation = self.handle.cluster.workloads.generation
            try:
                constraints = self.constraints(pod, "ScheduleAnyway")
            except SelectorError:
                return None
            if not constraints:
                return None
            prepared = _Prepared.of(self, pod, table, rows, constraints, generation)
        kept = _SpreadScores(self, pod, table, prepared)
        # What pre_score computed, rebuilt from the counts: equal, or nothing is kept.
        return kept if np.array_equal(kept.raw(), state.at(rows)) else None

    def score(self, cycle: CycleState, pod: PodInfo, table: NodeTable, rows: IntArray) -> FloatArray:
        state = cycle.get(_SCORE)
        if state is None:
            return np.zeros(rows.shape[0], dtype=np.float64)
        return state.at(rows)

    def normalize(self, scores: FloatArray) -> FloatArray:
        """Upstream NormalizeScore: fewer matches is better, 100 * (max + min - s) / max in integers; ignored
        nodes get 0; all zero gives 100."""
        # The ufuncs' reductions straight (ndarray.min/max go through a Python wrapper: a batched cycle's share).
        lowest = float(np.minimum.reduce(scores)) if scores.size else _IGNORED
        highest = float(np.maximum.reduce(scores)) if scores.size else _IGNORED
        if lowest > _IGNORED and highest < _EXACT:
            # Every node scored (raw scores of scored nodes are never negative) and small: the same integers in
            # floats. 100 * (high + low - s) is exact; the quotient of two integers below 2**53 that is not an
            # integer is at least 1/high from the next one, more than its rounding error, so floor() of the
            # float quotient is the integer division.
            high = max(highest, 0.0)
            if high == 0:
                return np.full(scores.shape, 100.0)
            every = (high + lowest) - scores
            every *= 100.0
            every /= high
            return np.floor(every, out=every)
        valid = scores != _IGNORED
        if not valid.any():
            return np.zeros_like(scores)
        low = float(scores[valid].min())
        high = max(float(scores[valid].max()), 0.0)
        if high == 0:
            return np.where(valid, 100.0, 0.0)
        ints = scores.astype(np.int64)
        normalized = (100 * (int(high) + int(low) - ints)) // int(high)  # integers, as upstream
        return np.where(valid, normalized.astype(np.float64), 0.0)


@dataclass
class _Part:
    """One constraint's pieces of pre_score's raw score, over every table row."""

    selector: int  # index into _Prepared.selectors
    keyed: BoolArray  # the row has the constraint's key
    offset: float  # maxSkew - 1
    weight: float  # log(domains + 2); hostname: log(scored rows + 2)
    # Constraints on other keys (None for hostname): `missing` is the "" domain rows without the key stand in,
    # `codes` the domain with it, `counted` the rows counted, `sums` the per-domain sums of their counts.
    missing: int = 0
    codes: IntArray | None = None
    counted: BoolArray | None = None
    sums: FloatArray | None = None


@dataclass
class _Prepared:
    """What pre_score computes before it sums: the counts per selector and each constraint's part. A batch being
    stored keeps its scores from these (_SpreadScores), so the full cycle's work is not done twice."""

    constraints: list[Constraint]
    generation: int  # the workloads' generation, read before the constraints were derived
    rows: IntArray  # the candidates scored
    require_all: bool  # nodes must have every key (not the system defaults)
    has_all: BoolArray
    selectors: list[LabelSelector]
    counts: list[IntArray]  # per selector, as _counts gives them (never written to)
    per_row: list[FloatArray]  # the same in floats
    parts: list[_Part]

    @classmethod
    def of(cls, plugin: PodTopologySpread, pod: PodInfo, table: NodeTable, rows: IntArray,
           constraints: list[Constraint], generation: int) -> _Prepared:
        size = table.capacity
        own = bool((pod.raw.get("spec") or {}).get("topologySpreadConstraints"))
        # Nodes must have every key unless the constraints are the system defaults: then a node without a
        # zone label still gets hostname spreading.
        require_all = own or plugin.args.defaulting_type != "System"
        has_all = np.ones(size, dtype=bool)
        for c in constraints:
            has_all &= table.topology(c.topology_key).codes[:size] >= 0
        scored = rows[has_all[rows]] if require_all else rows
        masks: dict[str, BoolArray] = {}
        index_of: dict[LabelSelector, int] = {}  # the defaults share one selector
        selectors: list[LabelSelector] = []
        counts: list[IntArray] = []
        per_row: list[FloatArray] = []
        parts: list[_Part] = []
        for c in constraints:
            index = index_of.get(c.selector)
            if index is None:
                index = index_of[c.selector] = len(selectors)
                selectors.append(c.selector)
                counts.append(plugin._counts(pod, c.selector, size))
                per_row.append(counts[index].astype(np.float64))
            topology = table.topology(c.topology_key)
            codes_all = topology.codes[:size]
            keyed = codes_all >= 0
            offset = float(c.max_skew - 1)
            if c.topology_key == HOSTNAME:
                parts.append(_Part(index, keyed, offset, float(np.log(scored.shape[0] + 2))))
                continue
            # A node without the key stands in the "" domain here (upstream reads its value as ""), though it
            # earns no credit for this constraint.
            missing = topology.size
            codes = np.where(keyed, codes_all, missing)
            domains = np.zeros(missing + 1, dtype=bool)
            domains[codes[scored]] = True
            counted = plugin._included(pod, table, c, masks) & domains[codes]
            if require_all:
                counted &= has_all
            sums = np.asarray(np.bincount(codes[counted], weights=per_row[index][counted], minlength=missing + 1),
                              dtype=np.float64)
            parts.append(_Part(index, keyed, offset, float(np.log(int(domains.sum()) + 2)), missing,
                               codes, counted, sums))
        return cls(constraints, generation, rows, require_all, has_all, selectors, counts, per_row, parts)


@dataclass
class _Kept:
    """One constraint's share of the raw score over the batch's rows: its credit times its weight plus
    maxSkew - 1 (0 on rows without its key)."""

    selector: int  # index into _SpreadScores.counts
    weight: float
    offset: float  # maxSkew - 1
    keyed: BoolArray  # per table row: the row has the constraint's key
    part: FloatArray  # hostname: per batch row, kept up to date
    # Constraints on other keys: each table row's domain (`missing` for rows without the key, which count in the
    # "" domain), the rows counted, the per-domain sums of their counts, each domain's share (sums * weight +
    # offset, then a 0 for rows without the key) and each batch row's domain in it (`missing + 1` for rows
    # without the key).
    codes: IntArray | None = None
    counted: BoolArray | None = None
    sums: FloatArray | None = None
    shares: FloatArray | None = None
    gather: IntArray | None = None
    candidates: IntArray | None = None  # per domain: the scored candidates in it (the weight counts the domains)


# At most this many changed rows are followed one by one (Python floats on each); more: the same in numpy.
_FEW = 8


class _SpreadScores(IncrementalScores):
    """pre_score's raw scores over the batch's rows, kept from the matching pods' per-row counts: a row whose
    count moved changes its hostname part and its domain's sum; the domain parts are then a gather. Every sum
    is of integer counts (exact in float64), and each row's value is the same float operations in the same
    order as pre_score's (a float64 product then a sum, rounded alike in numpy and in Python), so the scores are
    pre_score's bit for bit."""

    def __init__(self, plugin: PodTopologySpread, pod: PodInfo, table: NodeTable, prepared: _Prepared) -> None:
        self.plugin = plugin
        self.constraints = constraints = prepared.constraints
        self.rows = rows = prepared.rows
        size = self.size = table.capacity
        self.position = row_positions(rows, size)
        own = bool((pod.raw.get("spec") or {}).get("topologySpreadConstraints"))
        # The pod's own constraints are its template's (the batch's: the same for every pod it serves); the
        # defaults are the configured ones with the workloads' selector for the pod, which may change: asked
        # again when the workloads or what the selector is built from (namespace, labels, controller) changed.
        self.selector = None if own else constraints[0].selector
        # The workloads' generation as read before `constraints` were derived (never a later one).
        self.selected = (prepared.generation, _selected_by(pod))
        has_all = prepared.has_all
        # Rows scored _IGNORED (None: none is).
        self.ignored: BoolArray | None = (~has_all[rows] if prepared.require_all and not has_all[rows].all()
                                          else None)
        # per selector: what _counts asks (None: it counts nothing), and the counts, kept up to date from here on
        self.queries: list[PodQuery | None] = [
            None if selector.empty or selector.nothing else
            PodQuery((QueryTerm(frozenset({pod.namespace}), selector),), skip_terminating=True)
            for selector in prepared.selectors]
        self.counts: list[IntArray] = [counts.copy() for counts in prepared.counts]
        self.kept: list[_Kept] = []
        for part in prepared.parts:
            if part.sums is None:
                kept_part = _hostname_part(part.keyed, prepared.per_row[part.selector][rows], rows, part.weight,
                                           part.offset)
                self.kept.append(_Kept(part.selector, part.weight, part.offset, part.keyed, kept_part))
                continue
            assert part.codes is not None and part.counted is not None
            sums = part.sums.copy()
            gather = np.where(part.keyed, part.codes, part.missing + 1)[rows]
            shares = np.append(sums * part.weight + part.offset, 0.0)
            scored = rows if self.ignored is None else rows[~self.ignored]
            candidates = np.bincount(part.codes[scored], minlength=part.missing + 1)
            self.kept.append(_Kept(part.selector, part.weight, part.offset, part.keyed, np.zeros(0), part.codes,
                                   part.counted, sums, shares, gather, candidates))

    def narrowed(self, table: NodeTable, keep: BoolArray, rows: IntArray,
                 position: IntArray) -> _SpreadScores | None:
        """Over fewer candidates, in place: the hostname weight counts the scored candidates (its parts computed
        again); a domain constraint keeps its sums while every domain still has a scored candidate (its weight
        counts them), else None (prepared afresh)."""
        if table.capacity != self.size:
            return None
        ignored = self.ignored[keep] if self.ignored is not None else None
        gone = (self.rows[~keep] if self.ignored is None else self.rows[~keep & ~self.ignored]).tolist()
        scored = rows.shape[0] - (int(np.count_nonzero(ignored)) if ignored is not None else 0)
        for kept in self.kept:
            if kept.sums is None:
                kept.weight = float(np.log(scored + 2))
                kept.part = _hostname_part(kept.keyed, self.counts[kept.selector][rows].astype(np.float64), rows,
                                           kept.weight, kept.offset)
                continue
            assert kept.codes is not None and kept.gather is not None and kept.candidates is not None
            for row in gone:
                domain = int(kept.codes[row])
                kept.candidates[domain] -= 1
                if kept.candidates[domain] <= 0:
                    return None  # a domain lost its last scored candidate: fewer domains, another weight
            kept.gather = kept.gather[keep]
        self.rows, self.position = rows, position
        self.ignored = ignored if ignored is not None and ignored.any() else None
        return self

    def raw(self) -> FloatArray:
        """pre_score's raw scores of the batch's rows from the kept counts: a new array."""
        total: FloatArray | None = None
        for kept in self.kept:
            if kept.shares is None:
                part = kept.part
            else:
                assert kept.gather is not None
                # sums[codes] * weight + offset per row is the same done per domain, then gathered.
                part = kept.shares.take(kept.gather)
            # pre_score adds them to zeros in this order (0 + part is part; a + b is b + a, bit for bit)
            if total is None:
                total = part
            elif part is kept.part:
                total = total + part if total is self.kept[0].part else np.add(total, part, out=total)
            else:
                total = np.add(part, total, out=part)
        assert total is not None
        # A new array, never a kept part: `total` is one only when the first constraint's part is all there is
        # (or nothing was added to it).
        total = total + 0.5 if total is self.kept[0].part else np.add(total, 0.5, out=total)
        raw: FloatArray = np.floor(total, out=total)
        if self.ignored is not None:
            raw[self.ignored] = _IGNORED
        return raw

    def rescore(self, cycle: CycleState, pod: PodInfo, table: NodeTable, changed: IntArray) -> FloatArray | None:
        if table.capacity != self.size:
            return None
        if self.selector is not None:
            workloads = self.plugin.handle.cluster.workloads
            selected = (workloads.generation, _selected_by(pod))
            if selected != self.selected:
                if workloads.default_selector(pod.raw) != self.selector:
                    return None  # e.g. a Service now selects the pod: other constraints, other counts
                self.selected = selected
        if changed.size:
            cluster = self.plugin.handle.cluster
            for index, query in enumerate(self.queries):
                if query is None:
                    continue  # counts nothing, ever
                now = cluster.pod_counts(query)
                if changed.size <= _FEW:
                    self._follow(index, now, changed.tolist())
                else:
                    self._sweep(index, now, changed)
        raw = self.raw()
        cycle.write(_SCORE, _ScoreState(raw, self.rows))
        return raw

    def _follow(self, index: int, now: IntArray, changed: list[int]) -> None:
        """The counts of a few changed rows, one by one."""
        before = self.counts[index]
        for row in changed:
            fresh = int(now[row])
            delta = fresh - int(before[row])
            if not delta:
                continue
            before[row] = fresh
            for kept in self.kept:
                if kept.selector != index:
                    continue
                if kept.sums is None:
                    position = int(self.position[row])
                    if position >= 0:
                        kept.part[position] = float(fresh) * kept.weight + kept.offset if kept.keyed[row] else 0.0
                else:
                    assert kept.codes is not None and kept.counted is not None and kept.shares is not None
                    if kept.counted[row]:
                        domain = int(kept.codes[row])
                        total = float(kept.sums[domain]) + delta  # integers: exact
                        kept.sums[domain] = total
                        kept.shares[domain] = total * kept.weight + kept.offset

    def _sweep(self, index: int, now: IntArray, changed: IntArray) -> None:
        """The counts of many changed rows, in numpy."""
        before = self.counts[index]
        fresh = now[changed]
        differ = fresh != before[changed]
        if not differ.any():
            return
        moved, fresh = changed[differ], fresh[differ]
        delta = (fresh - before[moved]).astype(np.float64)
        before[moved] = fresh
        positions = self.position[moved]
        candidate = positions >= 0
        for kept in self.kept:
            if kept.selector != index:
                continue
            if kept.sums is None:
                mine = moved[candidate]
                kept.part[positions[candidate]] = np.where(
                    kept.keyed[mine], fresh[candidate].astype(np.float64) * kept.weight + kept.offset, 0.0)
            else:
                assert kept.codes is not None and kept.counted is not None and kept.shares is not None
                counted = kept.counted[moved]
                np.add.at(kept.sums, kept.codes[moved[counted]], delta[counted])
                kept.shares[:-1] = kept.sums * kept.weight + kept.offset


def _hostname_part(keyed: BoolArray, counts: FloatArray, rows: IntArray, weight: float, offset: float) -> FloatArray:
    """A hostname constraint's share of the raw score over `rows` (`counts`: theirs): each row's count times the
    weight plus maxSkew - 1, 0 on rows without the key (pre_score's operations on those rows)."""
    part: FloatArray = np.where(keyed[rows], counts * weight + offset, 0.0)
    return part


def _selected_by(pod: PodInfo) -> tuple[str, Any, Any]:
    """What of the pod a default selector is built from besides the workloads: its namespace, labels and
    controller reference (compared by value)."""
    metadata = pod.raw.get("metadata") or {}
    return pod.namespace, metadata.get("labels"), metadata.get("ownerReferences")
