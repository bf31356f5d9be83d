"""DecisionRecord: why a pod went where it went (or nowhere), built once from the cycle's own arrays.

Sinks (log line, /decisions ring, pod annotation, Scheduled event, Prometheus metrics) only read
the record; none of them recomputes a score. The ring keeps each record as a StoredDecision: the same
content in a few flat fields (one float array for every number of the candidates, the term layout
shared between records), about a sixth of the objects' size, so 10,000 of them cost megabytes, not
a hundred or more.

The rebalancer's verdicts go to the same ring as EvictionRecords (`kind` "eviction"; a placement's is
"placement"): a class constant each, so the kind costs no memory per record.
"""

from __future__ import annotations

import itertools
import math
import operator
import sys
import time
from array import array
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar, Literal

import numpy as np

from metrics_sched.framework.cycle_state import EXPLANATIONS
from metrics_sched.framework.interfaces import BindOutcomeKind
from metrics_sched.framework.runtime import CycleResult
from metrics_sched.framework.status import Code
from metrics_sched.state.cluster_state import disruption
from metrics_sched.state.node_table import NodeTable

_ids = itertools.count(1)  # one sequence for placements and evictions: ids order the ring's records

Kind = Literal["placement", "eviction"]
KINDS: tuple[Kind, ...] = ("placement", "eviction")


def _finite(value: float) -> float | None:
    return None if value is None or not math.isfinite(value) else round(float(value), 4)


@dataclass
class RawValue:
    metric: str
    value: float | None  # the sample as the source measured it
    age_seconds: float | None
    sources: list[str]
    in_flight: float | None = None  # what the ledger added for pods placed since that sample


@dataclass
class TermDetail:
    plugin: str
    weight: int
    normalized: float | None  # 0-100, None = no value (the term dropped out for this node)
    raw: float | None
    metrics: list[RawValue] = field(default_factory=list)


@dataclass
class Candidate:
    node: str
    total: float
    rank: int
    terms: list[TermDetail]


@dataclass
class DecisionRecord:
    id: int
    time: float
    pod: str
    uid: str
    profile: str
    config_hash: str
    # scheduled | waiting | unschedulable | error | shadow (a shadow profile's verdict: nothing bound). A placement's
    # ("scheduled", "waiting") is rewritten when its bind ends (bind_verdict): a refused bind is not a placement.
    result: str
    node: str | None
    message: str
    nodes_total: int
    feasible: int
    rejections: dict[str, int]
    candidates: list[Candidate]
    margin: float | None  # winner's total minus the runner-up's
    duration_ms: float
    attempts: int
    nominated_node: str | None = None  # PostFilter's pick when nothing fit (e.g. where preemption would make room)
    bind: str | None = None  # outcome of the bind (BindOutcomeKind), filled in when it ends; None: not ended (yet)
    bind_ms: float | None = None
    # What plugins said in their own words (e.g. "pvc data-0: PV pv-7 is in zone-b"), from the cycle's EXPLANATIONS.
    notes: list[str] = field(default_factory=list)
    # The pod's controller as kind/namespace/name: explain follows an evicted pod to its replacement by it.
    owner: str | None = None
    kind: ClassVar[Kind] = "placement"

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, **asdict(self)}

    def summary(self) -> str:
        """One line for the pod's Scheduled event."""
        if self.node is None or not self.candidates:
            return self.message
        winner = self.candidates[0]
        parts = [f"score {winner.total:.1f}"]
        for term in winner.terms:
            if term.normalized is None:
                parts.append(f"{term.plugin} n/a")
                continue
            detail = ", ".join(f"{m.metric}={m.value:g}" for m in term.metrics if m.value is not None)
            parts.append(f"{term.plugin} {term.normalized:.0f}" + (f" ({detail})" if detail else ""))
        margin = f"; margin {self.margin:.1f} over runner-up" if self.margin is not None else ""
        return f"{'; '.join(parts)}{margin}; {self.feasible}/{self.nodes_total} nodes feasible"


def build_record(result: CycleResult, table: NodeTable, *, config_hash: str, top: int = 5,
                 now: float | None = None, shadow: bool = False) -> DecisionRecord:
    return build_stored(result, table, config_hash=config_hash, top=top, now=now, shadow=shadow).to_record()



def build_stored(result: CycleResult, table: NodeTable, *, config_hash: str, top: int = 5,
                 now: float | None = None, shadow: bool = False) -> StoredDecision:
    """The record of a cycle as the ring keeps it, packed straight from the matrix its numbers were gathered into.
    No object per candidate, term or metric is made: the scheduler's own sinks (ring, summary, metrics) read the
    packed form, and a DecisionRecord is built from it only when one is asked for (to_record(): /decisions
    clients, explain, replay), which at hundreds of decisions per second was most of the audit's cost."""
    now = time.time() if now is None else now
    placed = result.node is not None and result.status.code in (Code.SUCCESS, Code.WAIT)
    if shadow:
        outcome = "shadow"  # `node` is where it would have gone (None: nowhere, `message` says why)
    elif placed and result.status.code == Code.WAIT:
        outcome = "waiting"  # assumed and held at Permit; the bind outcome tells how it ended
    elif placed:
        outcome = "scheduled"
    elif result.status.code == Code.ERROR:
        outcome = "error"
    else:
        outcome = "unschedulable"
    nodes: tuple[str, ...] = ()
    packed: array[float] = array("d")
    layout: Layout = ()
    # A pod Reserve or Permit turned down keeps its ranking: the record shows what it was denied.
    margin = None
    rows = result.feasible_rows
    total = result.total
    if total.size:
        order, nan = _top_positions(total, top)
        if total.size > 1:
            # The two largest: the first two of the ranking (ties included), or a partition when it holds one; NaN
            # when a total is (a partition ranks NaN highest: what the margin always was then).
            if nan:
                margin = math.nan
            elif order.size > 1:
                margin = round(total[order[0]].item() - total[order[1]].item(), 4)
            else:
                second, first = np.partition(total, total.size - 2)[-2:].tolist()
                margin = round(first - second, 4)
        if result.row is not None:
            winner_pos = _position(rows, result.row)
            if order[0] != winner_pos:
                order = np.concatenate([[winner_pos], order[order != winner_pos]])
        order = order[:top]
        # Every number of the candidates is gathered into one matrix (a column per term score and metric field,
        # evidence over all rows), rounded and converted at once: indexing and rounding numpy scalars one by one
        # was most of the audit's cost per cycle.
        chosen = rows[order]
        missing = _nans(chosen.size)  # a metric without an in-flight part: None for every candidate
        columns: list[np.ndarray[Any, Any]] = [total[order]]
        for term in result.terms:
            columns += (term.normalized[order], term.raw[order])
            for e in term.evidence:
                columns += (e.values[chosen], now - e.observed_at[chosen],
                            e.in_flight.take(chosen) if e.in_flight is not None else missing)
        # One row per candidate: its total, then every column, as computed: StoredDecision rounds them when they
        # are read (most records are never read). np.array stacks the columns in C (np.vstack's Python-level
        # atleast_2d pass over ~30 columns was a fifth of the record's cost); tobytes() writes the transpose in
        # C order.
        packed.frombytes(np.array(columns, dtype=np.float64).T.tobytes())
        nodes = tuple(table.name(row) for row in chosen.tolist())
        layout = tuple((t.plugin, t.weight, tuple((e.metric, tuple(e.sources)) for e in t.evidence))
                       for t in result.terms)
    timings = sum(map(_SECONDS, result.timings))
    return StoredDecision.of(
        decision_id=next(_ids), time=now, pod=result.pod.key, uid=result.pod.uid, profile=result.profile,
        config_hash=config_hash, result=outcome, node=result.node if placed else None,
        message=(f"would have bound to {result.node} (shadow)" if shadow and placed
                 else f"held at Permit on {result.node}: {result.status.reason}" if outcome == "waiting"
                 else f"binding to {result.node}" if placed else result.message()),
        nodes_total=result.nodes_total, feasible=int(rows.size), rejections=tuple(result.rejections.items()),
        nodes=nodes, values=packed, layout=layout, margin=margin, duration_ms=round(timings * 1000, 3),
        attempts=result.pod.attempts, nominated_node=result.nominated_node, notes=_notes(result),
        owner=_owner(result),
    )


_SECONDS = operator.itemgetter(2)  # of a cycle's timing (plugin, point, seconds, status)

_BOUND = frozenset({BindOutcomeKind.BOUND, BindOutcomeKind.ALREADY_BOUND})


def bind_verdict(kind: BindOutcomeKind, node: str | None, detail: str) -> tuple[str, str]:
    """A placement's result and message once its bind has ended: "scheduled" only when the pod is bound; a bind
    (or Permit wait) turned down is "unschedulable", any other outcome "error", as the scheduling-attempt metric
    counts them (kube-scheduler's labels). The message says what happened to the bind, in the words of its status."""
    if kind in _BOUND:
        return "scheduled", f"bound to {node}"
    said = f": {detail}" if detail else ""
    if kind == BindOutcomeKind.REJECTED:
        return "unschedulable", f"bind to {node} rejected{said}"
    if kind == BindOutcomeKind.ERROR:
        return "error", f"bind to {node} failed{said}"
    return "error", f"bind to {node} not done ({kind}){said}"


def _top_positions(total: np.ndarray[Any, Any], top: int) -> tuple[np.ndarray[Any, Any], bool]:
    """Positions of the `top` highest totals, highest first, ties in position order: what a stable argsort of
    -total begins with, without sorting every feasible node (nor negating it: one pass over it less); and whether a
    total is NaN (read off the sort or partition it makes: both rank NaN highest)."""
    if total.size <= top:
        order = np.argsort(-total, kind="stable")
        last = total.item(int(order[-1]))
        return order, last != last
    partitioned = np.partition(total, total.size - top)
    kth = partitioned[total.size - top]  # the top-th highest
    within = np.flatnonzero(total >= kth)  # the top ones and any tied with the last of them, in position order
    if within.size < top:  # a NaN among the highest (a partition puts NaN last, an argsort of -total too)
        negated = -total
        within = np.flatnonzero(negated <= np.partition(negated, top - 1)[top - 1])
    # NaN ranks above every number in a partition: any there is among the top (its order there undefined).
    highest = partitioned[total.size - top:].tolist()  # `top` floats: compared in Python, no numpy calls
    return within[np.argsort(-total[within], kind="stable")], any(value != value for value in highest)


def _position(rows: np.ndarray[Any, Any], row: int) -> int:
    """Where `row` is among the candidates' rows (ascending, as the filters give them: a binary search)."""
    at = int(np.searchsorted(rows, row))
    if at < rows.size and rows[at] == row:
        return at
    return int(np.flatnonzero(rows == row)[0])  # not ascending after all: looked for


_NANS: dict[int, np.ndarray[Any, Any]] = {}


def _nans(size: int) -> np.ndarray[Any, Any]:
    """A read-only array of `size` NaN (a record has at most `top` candidates: a handful of sizes, kept)."""
    found = _NANS.get(size)
    if found is None:
        found = _NANS[size] = np.full(size, np.nan)
        found.flags.writeable = False
    return found


def _finite_rows(matrix: np.ndarray[Any, Any]) -> list[list[float | None]]:
    """As _finite over a matrix (None for what is not finite)."""
    return [[_shown(v) for v in row] for row in _rounded(matrix).tolist()]


# Beyond this, x * 1e4 is no longer exact to the unit: such values are rounded by round() itself.
_SCALED_LIMIT = 2.0**52 / 1e4
ANNOTATION_LIMIT = 1000  # characters of the decision annotation (many custom metrics could make it long)


def _rounded(matrix: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """round(x, 4) of every finite value and NaN for the others, in a few array operations (builtin round() per
    value cost a microsecond each, ~140 of them per record). The same values: away from a tie at the fifth
    decimal, rint(x * 1e4) / 1e4 picks the same last digit as round() and is the double nearest to it; values
    near a tie (where x * 1e4 itself is inexact) and values too large for the scaling are rounded by round().
    Non-finite values are zeroed before the arithmetic, so no floating-point warning is possible (np.errstate,
    which would silence them, cost more than the rest)."""
    finite = np.isfinite(matrix)
    clean = np.where(finite, matrix, 0.0)
    big = np.abs(clean) >= _SCALED_LIMIT
    if big.any():
        clean[big] = 0.0
    scaled = clean * 1e4
    near_tie = (np.abs(np.abs(scaled - np.trunc(scaled)) - 0.5) < 1e-6) | big
    out = np.rint(scaled)
    out /= 1e4
    out[~finite] = np.nan
    if near_tie.any():
        for i, j in np.argwhere(near_tie).tolist():
            out[i, j] = round(float(matrix[i, j]), 4)
    return out


def _owner(result: CycleResult) -> str | None:
    """The pod's controller as the rebalancer keys it (kind/namespace/name), interned: the pods of one owner share
    the string in the ring."""
    controller = disruption(result.pod.raw).controller
    return None if controller is None else sys.intern(controller)


def _notes(result: CycleResult) -> tuple[str, ...]:
    notes: tuple[str, ...] = result.cycle.get(EXPLANATIONS, ())
    return tuple(notes)


# One term of a record's candidates: plugin, weight and its metrics as (name, sources). Candidates of one
# record share it, and records of one profile usually have the same layout, which the ring shares.
TermLayout = tuple[str, int, tuple[tuple[str, tuple[str, ...]], ...]]
Layout = tuple[TermLayout, ...]


def layout_of(record: DecisionRecord) -> Layout:
    if not record.candidates:
        return ()
    return tuple((t.plugin, t.weight, tuple((m.metric, tuple(m.sources)) for m in t.metrics))
                 for t in record.candidates[0].terms)


def _stored(value: float | None) -> float:
    return math.nan if value is None else value


def _shown(value: float) -> float | None:
    return None if math.isnan(value) else value


def _read(values: array[float]) -> list[float]:
    """The numbers as a record shows them: round(x, 4), NaN for what is not finite."""
    if not values:
        return []
    return _rounded(np.frombuffer(values, dtype=np.float64).reshape(1, -1))[0].tolist()  # type: ignore[no-any-return]


def _shown_total(value: float) -> float:
    """A candidate's total as a record shows it: round(x, 4), kept as it is when not finite."""
    return round(value, 4) if math.isfinite(value) else value


class StoredDecision:
    """A DecisionRecord as the ring keeps it. `values` holds, per candidate in rank order, its total, then per
    term its normalised and raw score, then per metric of the term its value, age and in-flight part (NaN
    for None), as computed: they are rounded to 4 decimals (and non-finite ones shown as None, but a total) when
    read, as the record shows them. `bind` and `bind_ms` are filled in when the bind ends."""

    __slots__ = ("attempts", "bind", "bind_ms", "config_hash", "duration_ms", "feasible", "id", "layout",
                 "margin", "message", "node", "nodes", "nodes_total", "nominated_node", "notes", "owner", "pod",
                 "profile", "rejections", "result", "time", "uid", "values")
    kind: ClassVar[Kind] = "placement"

    def __init__(self, record: DecisionRecord, layout: Layout, values: array[float] | None = None) -> None:
        """values: the candidates' numbers already packed (build_stored packs them); None: read from the record."""
        self.id, self.time, self.pod, self.uid = record.id, record.time, record.pod, record.uid
        self.profile, self.config_hash, self.result = record.profile, record.config_hash, record.result
        self.node, self.message, self.nominated_node = record.node, record.message, record.nominated_node
        self.nodes_total, self.feasible, self.attempts = record.nodes_total, record.feasible, record.attempts
        self.rejections = tuple(record.rejections.items())
        self.margin, self.duration_ms = record.margin, record.duration_ms
        self.bind, self.bind_ms = record.bind, record.bind_ms
        self.notes = tuple(record.notes)
        self.owner = record.owner
        self.layout = layout
        self.nodes = tuple(c.node for c in record.candidates)
        if values is not None:
            self.values = values
            return
        values = array("d")
        for candidate in record.candidates:
            values.append(candidate.total)
            for term in candidate.terms:
                values.extend((_stored(term.normalized), _stored(term.raw)))
                for m in term.metrics:
                    values.extend((_stored(m.value), _stored(m.age_seconds), _stored(m.in_flight)))
        self.values = values

    @classmethod
    def of(cls, *, decision_id: int, time: float, pod: str, uid: str, profile: str, config_hash: str, result: str,
           node: str | None, message: str, nodes_total: int, feasible: int, rejections: tuple[tuple[str, int], ...],
           nodes: tuple[str, ...], values: array[float], layout: Layout, margin: float | None, duration_ms: float,
           attempts: int, nominated_node: str | None, notes: tuple[str, ...], owner: str | None) -> StoredDecision:
        """One made from its fields (build_stored), with no DecisionRecord in between."""
        self = cls.__new__(cls)
        self.id, self.time, self.pod, self.uid = decision_id, time, pod, uid
        self.profile, self.config_hash, self.result = profile, config_hash, result
        self.node, self.message, self.nominated_node = node, message, nominated_node
        self.nodes_total, self.feasible, self.attempts = nodes_total, feasible, attempts
        self.rejections, self.margin, self.duration_ms = rejections, margin, duration_ms
        self.bind, self.bind_ms = None, None
        self.notes, self.owner, self.layout, self.nodes, self.values = notes, owner, layout, nodes, values
        return self

    def bind_ended(self, kind: BindOutcomeKind, detail: str, seconds: float) -> None:
        """The bind's outcome, into the record: until then `result` and `message` say what the scheduling cycle
        decided ("binding to X"); from now on what became of it (bind_verdict). An unknown outcome is retried with
        the same record: each try's outcome replaces the last one's. The message is set before the result, so a
        reader racing this (a /decisions request) sees the old result or both new fields."""
        result, self.message = bind_verdict(kind, self.node, detail)
        self.result, self.bind, self.bind_ms = result, kind, round(seconds * 1000, 3)

    @property
    def winner_total(self) -> float | None:
        return _shown_total(self.values[0]) if self.nodes else None

    def winner_values(self) -> Iterator[tuple[str, float]]:
        """(metric, value) of every metric value the winner's terms read (none missing), as the record shows them."""
        if not self.nodes:
            return
        values = self.values
        i = 1
        for _, _, metrics in self.layout:
            i += 2
            for metric, _ in metrics:
                value = values[i]
                if math.isfinite(value):
                    yield metric, round(value, 4)
                i += 3

    def annotation(self) -> str:
        """The pod's `metrics-sched.io/decision` annotation: the decision's id, the winner's total, the margin, how
        many nodes were feasible and the metric values it was chosen on. Compact on purpose: the pod carries it
        through every later write and watch event (at 500 nodes the full summary's few hundred bytes cost the API
        server ~1 CPU-ms per pod); the per-plugin line is in the Scheduled event, everything in `explain`."""
        if self.node is None or not self.nodes:
            return f"#{self.id} {self.message}"[:ANNOTATION_LIMIT]
        margin = f", margin {self.margin:.1f}" if self.margin is not None else ""
        metrics = " ".join(f"{metric}={value:g}" for metric, value in dict(self.winner_values()).items())
        return (f"#{self.id} score {_shown_total(self.values[0]):.1f}{margin}, {self.feasible}/{self.nodes_total} "
                f"feasible" + (f"; {metrics}" if metrics else ""))[:ANNOTATION_LIMIT]

    def summary(self) -> str:
        """One line for the pod's Scheduled event: DecisionRecord.summary(), read from the packed numbers (only
        the winner's, rounded here as the record would show them)."""
        if self.node is None or not self.nodes:
            return self.message
        values = self.values
        parts = [f"score {_shown_total(values[0]):.1f}"]
        i = 1
        for plugin, _, metrics in self.layout:
            normalized = values[i]
            i += 2
            if not math.isfinite(normalized):  # no value
                parts.append(f"{plugin} n/a")
                i += 3 * len(metrics)
                continue
            shown = []
            for metric, _ in metrics:
                value = values[i]
                if math.isfinite(value):
                    shown.append(f"{metric}={round(value, 4):g}")
                i += 3
            parts.append(f"{plugin} {round(normalized, 4):.0f}" + (f" ({', '.join(shown)})" if shown else ""))
        margin = f"; margin {self.margin:.1f} over runner-up" if self.margin is not None else ""
        return f"{'; '.join(parts)}{margin}; {self.feasible}/{self.nodes_total} nodes feasible"

    def _candidate_dicts(self) -> list[dict[str, Any]]:
        out = []
        totals = iter(self.values[::len(self.values) // len(self.nodes)] if self.nodes else ())
        values = iter(_read(self.values))
        for rank, node in enumerate(self.nodes):
            next(values)
            total = _shown_total(next(totals))
            terms = []
            for plugin, weight, metrics in self.layout:
                normalized, raw = _shown(next(values)), _shown(next(values))
                raws = [{"metric": metric, "value": _shown(next(values)), "age_seconds": _shown(next(values)),
                         "sources": list(sources), "in_flight": _shown(next(values))} for metric, sources in metrics]
                terms.append({"plugin": plugin, "weight": weight, "normalized": normalized, "raw": raw,
                              "metrics": raws})
            out.append({"node": node, "total": total, "rank": rank, "terms": terms})
        return out

    def to_record(self) -> DecisionRecord:
        return DecisionRecord(
            id=self.id, time=self.time, pod=self.pod, uid=self.uid, profile=self.profile,
            config_hash=self.config_hash, result=self.result, node=self.node, message=self.message,
            nodes_total=self.nodes_total, feasible=self.feasible, rejections=dict(self.rejections),
            candidates=[
                Candidate(c["node"], c["total"], c["rank"], [
                    TermDetail(t["plugin"], t["weight"], t["normalized"], t["raw"],
                               [RawValue(**m) for m in t["metrics"]]) for t in c["terms"]])
                for c in self._candidate_dicts()
            ], margin=self.margin, duration_ms=self.duration_ms, attempts=self.attempts,
            nominated_node=self.nominated_node, bind=self.bind, bind_ms=self.bind_ms, notes=list(self.notes),
            owner=self.owner,
        )

    def as_dict(self) -> dict[str, Any]:
        """What /decisions serves: the same as DecisionRecord.as_dict(), built without the dataclasses."""
        return {
            "kind": self.kind, "id": self.id, "time": self.time, "pod": self.pod, "uid": self.uid,
            "profile": self.profile,
            "config_hash": self.config_hash, "result": self.result, "node": self.node, "message": self.message,
            "nodes_total": self.nodes_total, "feasible": self.feasible, "rejections": dict(self.rejections),
            "candidates": self._candidate_dicts(), "margin": self.margin, "duration_ms": self.duration_ms,
            "attempts": self.attempts, "nominated_node": self.nominated_node, "bind": self.bind,
            "bind_ms": self.bind_ms, "notes": list(self.notes), "owner": self.owner,
        }


@dataclass(frozen=True, slots=True)
class EvictionRecord:
    """One rebalancer verdict on a pod (evicted, planned in a dry run, or skipped, with why), as the ring keeps
    it: flat and slotted, so it is stored as it is."""

    id: int
    time: float
    pod: str  # namespace/name
    uid: str
    owner: str | None  # the controller's key: where its replacement went is the owner's next placement
    node: str  # where the pod was
    rule: str  # the rule that found the node bad
    verdict: str  # metrics_sched.rebalance.model.Verdict's value
    reason: str
    target: str | None  # where the simulation would place it
    gain: float | None  # the target's total score minus the current node's
    gang: str | None = None  # namespace/name of the gang moved whole with the pod (rebalance.gangs: whole)
    kind: ClassVar[Kind] = "eviction"

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "id": self.id, "time": self.time, "pod": self.pod, "uid": self.uid,
                "owner": self.owner, "node": self.node, "rule": self.rule, "verdict": self.verdict,
                "reason": self.reason, "target": self.target, "gain": self.gain, "gang": self.gang}


def new_eviction_record(*, pod: str, uid: str, owner: str | None, node: str, rule: str, verdict: str, reason: str,
                        target: str | None, gain: float | None, now: float | None = None,
                        gang: str | None = None) -> EvictionRecord:
    """An EvictionRecord with the next id of the audit's sequence."""
    return EvictionRecord(id=next(_ids), time=time.time() if now is None else now, pod=pod, uid=uid, owner=owner,
                          node=node, rule=rule, verdict=verdict, reason=reason, target=target,
                          gain=None if gain is None else round(float(gain), 4), gang=gang)
