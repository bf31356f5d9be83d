"""MetricScorePlugin: a telemetry filter + score written as a declaration of metric terms.

    class GPUPower(MetricScorePlugin):
        name = "GPUPower"
        TERMS = (MetricTerm("gpu_power_watts", better="lower", scale=Scale("range", 0, 700)),)

The base owns everything such a plugin used to repeat: reading the cache with the in-flight ledger
applied, the metric's freshness contract (`onMissing: deny` filters nodes without a fresh value,
`lowest` scores them 0, `neutral` drops the term for them), thresholds as a filter, normalisation to
0-100, the NaN-skipping weighted mean of several terms, the evidence the audit records, and telling
the queue that a refresh may have admitted a node. Plugins with args return their terms from
`make_terms()`; GPUTemperature shows how to add state (hysteresis) on top.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, NamedTuple, TypeVar

import numpy as np

from metrics_sched.config.contract import FreshnessContract, OnMissing
from metrics_sched.config.errors import ArgsError
from metrics_sched.framework.batchable import MAX_DIRTY, Batchable, BatchScope, Reads
from metrics_sched.framework.cycle_state import CycleState
from metrics_sched.framework.events import ClusterEvent
from metrics_sched.framework.handle import Handle
from metrics_sched.framework.interfaces import (
    Filtered,
    FilterPlugin,
    InFlightValues,
    MetricAwarePlugin,
    MetricEvidence,
    Normalized,
    ScoreDetail,
    ScorePlugin,
    unchanged,
)
from metrics_sched.framework.scoring import nan_weighted_mean, weighted_mean_down
from metrics_sched.model.podinfo import PodInfo
from metrics_sched.state.node_table import BoolArray, FloatArray, IntArray, NodeTable
from metrics_sched.telemetry.cache import MetricColumn
from metrics_sched.telemetry.ledger import InFlightLedgerStore

__all__ = ["Direction", "MetricRead", "MetricScorePlugin", "MetricTerm", "Normalization", "Scale", "read_metric"]

Direction = Literal["lower", "higher"]


# np.clip's own ufunc: np.clip's Python wrappers cost several times its arithmetic on the few rows a batched cycle
# scores (numpy 2 keeps its ufuncs in numpy._core, 1.x in numpy.core).
_CLIP: np.ufunc = importlib.import_module(
    "numpy._core.umath" if int(np.__version__.split(".")[0]) >= 2 else "numpy.core.umath").clip


@dataclass(frozen=True)
class Scale:
    """How raw values map to 0-100: fixed bounds (`range`, values outside are clipped, robust to
    outliers) or the candidates' own min and max (`minmax`)."""

    method: Literal["range", "minmax"] = "minmax"
    low: float = 0.0
    high: float = 1.0

    def apply(self, values: FloatArray, better: Direction) -> FloatArray:
        """0-100, 100 = best; NaN stays NaN (no value)."""
        low, high = self.low, self.high
        if self.method == "minmax":
            finite = values[np.isfinite(values)]
            if finite.size == 0:
                return np.full(values.shape, np.nan)
            low, high = float(finite.min()), float(finite.max())
            if high == low:
                return np.where(np.isfinite(values), 100.0, np.nan)
        # NaN passes through these without a warning (no errstate: entering one costs more than the arithmetic on a
        # few patched rows).
        scaled: FloatArray = _CLIP(values, low, high)  # np.clip's result
        if high - low == math.inf:  # a minmax between values near the float limits, or a range as `halved` says
            scaled, low, high = _halved(scaled, low, high)
        scaled -= low
        scaled /= high - low
        if better == "lower":
            np.subtract(1.0, scaled, out=scaled)
        scaled *= 100.0
        if np.isinf(values).any():  # ±inf is no value either (the cache never holds one; a plugin might)
            scaled[np.isinf(values)] = np.nan
        return scaled

    def apply_one(self, value: float, better: Direction) -> float:
        """apply() of one value of a pointwise (range) scale, in Python floats: the same IEEE operations in the
        same order, so the same double, without the dozen numpy calls a one-row array costs."""
        if value != value or value in (math.inf, -math.inf):
            return math.nan
        low, high = self.low, self.high
        scaled = min(max(value, low), high)  # np.clip
        if self.halved:
            scaled, low, high = _halved(scaled, low, high)
        scaled -= low
        scaled /= high - low
        if better == "lower":
            scaled = 1.0 - scaled
        return scaled * 100.0

    @property
    def pointwise(self) -> bool:
        """A node's score depends on its value alone (not on the other candidates')."""
        return self.method == "range"

    @property
    def halved(self) -> bool:
        """Its fixed bounds are further apart than a double holds: values are scaled on halves (_halved)."""
        return self.high - self.low == math.inf


_Scaled = TypeVar("_Scaled", float, FloatArray)


def _halved(scaled: _Scaled, low: float, high: float) -> tuple[_Scaled, float, float]:
    """The clipped value(s) and the bounds halved, exactly, for bounds further apart than a double holds: neither
    their difference nor a value's distance from `low` then overflows (the highest value was scored as none)."""
    return scaled * 0.5, low * 0.5, high * 0.5


@dataclass(frozen=True)
class Normalization:
    """The args form of a Scale: `{method: range|minmax, min, max}`; min/max without a method mean range."""

    method: Literal["range", "minmax"] | None = None
    min: float | None = None
    max: float | None = None

    def scale(self, default: Scale) -> Scale:
        method = self.method or ("range" if self.min is not None or self.max is not None else default.method)
        low = default.low if self.min is None else self.min
        high = default.high if self.max is None else self.max
        if method == "range" and not high > low:
            raise ArgsError("max", f"must be greater than min ({high:g} <= {low:g})")
        return Scale(method, low, high)

    def check(self, default: Scale) -> None:
        """For a plugin's Args.validate: `scale(default)`'s refusal, named as the plugin's `normalization.<field>`
        (not `validate`: the args parser calls that on nested args without arguments)."""
        try:
            self.scale(default)
        except ArgsError as exc:
            raise ArgsError(f"normalization.{exc.field}", exc.message) from None


@dataclass(frozen=True)
class MetricTerm:
    metric: str
    better: Direction = "lower"
    scale: Scale = Scale()
    weight: float = 1.0
    filter_above: float | None = None  # nodes above take no pod
    filter_below: float | None = None
    per_resource: str | None = None  # compare value per unit of this allocatable resource (price per GPU)
    ledger: bool = True  # add the in-flight ledger's estimate when scoring


@dataclass(frozen=True)
class MetricRead:
    column: MetricColumn
    values: FloatArray  # over all rows, ledger applied, NaN where not fresh
    missing: BoolArray  # over all rows
    in_flight: FloatArray | None = None  # the ledger's part of `values`
    measured: FloatArray | None = None  # `values` without the ledger's part (None: the same as values)


def read_metric(handle: Handle, metric: str, table: NodeTable, *, with_ledger: bool = True) -> MetricRead:
    column = handle.metrics.column(metric, table)
    measured = np.where(column.fresh, column.values, np.nan)
    if with_ledger and len(handle.ledger):
        in_flight = handle.ledger.adjustment(metric, table, column.observed_at)
        return MetricRead(column, measured + in_flight, ~column.fresh, in_flight, measured)
    return MetricRead(column, measured, ~column.fresh, None, measured)


class _RowRead(NamedTuple):
    """One term's reads for scoring a few rows (_score_few; a named tuple: made per term and batched cycle)."""

    column: MetricColumn
    measured: FloatArray
    missing: BoolArray
    in_flight: InFlightValues | None
    lowest: bool  # the contract's onMissing: lowest (a row without a fresh value scores 0)


@dataclass(slots=True)
class _RowsKept:
    """Scores of rows kept between batched cycles (_kept_rows): valid for these columns and this validity; a row's
    score for as long as its pods have not changed since `stamp` (NodeTable.pod_stamp when it was computed; -1:
    never)."""

    columns: tuple[MetricColumn, ...]
    validity: tuple[int | bool, ...]
    scores: FloatArray
    stamp: IntArray
    adds: IntArray  # per row: the ledger's `adds` when it was computed (a placement on it since: stale)


@dataclass
class _Memo:
    """One term's reads and scores over all rows, kept while the column (values and fresh mask) and the
    ledger's adjustment are the same objects: between placements and refreshes they are (cache.column,
    InFlightLedgerStore.adjustment), so a cycle costs a gather instead of a dozen passes."""

    column: MetricColumn
    in_flight: FloatArray | None
    read: MetricRead
    scores: FloatArray | None = None  # pointwise terms only: 0-100 over all rows
    # A placement changes the ledger's adjustment on its node alone: the memo it was patched from (one step,
    # never a chain) and the rows that differ, so the scores are patched there too, not recomputed.
    previous: _Memo | None = None
    changed: IntArray | None = None
    extremes: IntArray | None = None  # the rows of the lowest and highest finite value (none: no value)
    evidence: MetricEvidence | None = None  # what the audit is shown of this read (built once per memo)


class MetricScorePlugin(FilterPlugin, ScorePlugin, MetricAwarePlugin, Batchable):
    events = frozenset({ClusterEvent.NODE_ADDED, ClusterEvent.METRIC_CHANGED})
    TERMS: ClassVar[tuple[MetricTerm, ...]] = ()
    normalized = Normalized.IN_RANGE  # Scale.apply gives 0-100, NaN where a node has no value
    # Thresholds compare the measured value, or the value with the in-flight ledger's estimate added.
    filter_with_ledger: ClassVar[bool] = False

    def __init__(self, args: Any, handle: Handle) -> None:
        super().__init__(args, handle)
        self._terms = tuple(self.make_terms())
        # Every term pointwise: score() keeps their weighted mean over all rows (fixed with the terms).
        # (Not a halved one: the fused columns below do not halve; Scale.apply does.)
        self._pointwise = all(t.scale.pointwise and not t.per_resource and not t.scale.halved for t in self._terms)
        self._weights = [t.weight for t in self._terms]
        # The terms' bounds, spans and weights as columns (every term pointwise: a range scale), for scoring a few
        # rows of all of them at once (_fused_rows); a span is high - low as Scale.apply computes it.
        if self._pointwise:
            self._lows = np.array([[t.scale.low] for t in self._terms], dtype=np.float64)
            self._highs = np.array([[t.scale.high] for t in self._terms], dtype=np.float64)
            self._spans = np.array([[t.scale.high - t.scale.low] for t in self._terms], dtype=np.float64)
            self._weight_column = np.array([[w] for w in self._weights], dtype=np.float64)
            self._lower = [i for i, t in enumerate(self._terms) if t.better == "lower"]
        self._memos: dict[tuple[str, bool], _Memo] = {}
        self._combined: tuple[tuple[object, ...], FloatArray] | None = None  # all terms pointwise: their mean
        self._scope: BatchScope | None = None
        self._rows_kept: _RowsKept | None = None

    def _memo(self, metric: str, table: NodeTable, with_ledger: bool) -> _Memo:
        column = self.handle.metrics.column(metric, table)
        in_flight = (self.handle.ledger.adjustment(metric, table, column.observed_at)
                     if with_ledger and len(self.handle.ledger) else None)
        memo = self._memos.get((metric, with_ledger))
        if memo is not None and memo.column is column and memo.in_flight is not in_flight \
                and memo.in_flight is not None and in_flight is not None and memo.read.measured is not None:
            step = self.handle.ledger.last_step(metric)
            changed = (np.array(step[2], dtype=np.int64) if step is not None and step[0] is in_flight
                       and step[1] is memo.in_flight else np.flatnonzero(in_flight != memo.in_flight))
            # Patched in place: the memo's arrays are its own (evidence holds `measured` and the ledger's array,
            # never these), and the memo patched from is dropped here.
            values, measured = memo.read.values, memo.read.measured
            if changed.size <= _FEW:
                for row in changed.tolist():
                    values[row] = measured[row] + in_flight[row]  # float64 + float64: the full sum's double
            else:
                values[changed] = measured[changed] + in_flight[changed]  # as the full sum gives them
            memo.previous = None
            memo = _Memo(column, in_flight, MetricRead(column, values, memo.read.missing, in_flight,
                                                       memo.read.measured), previous=memo, changed=changed)
            self._memos[(metric, with_ledger)] = memo
        elif memo is None or memo.column is not column or memo.in_flight is not in_flight:
            measured = np.where(column.fresh, column.values, np.nan)
            values = measured if in_flight is None else measured + in_flight
            memo = _Memo(column, in_flight, MetricRead(column, values, ~column.fresh, in_flight, measured))
            self._memos[(metric, with_ledger)] = memo
        return memo

    def _term_scores(self, term: MetricTerm, memo: _Memo, table: NodeTable, rows: IntArray) -> FloatArray:
        """The term's 0-100 scores over `rows` (computed over all rows and kept, when pointwise)."""
        read = memo.read
        if not term.per_resource and not term.scale.pointwise and self._extremes_among(memo, rows):
            # minmax over the candidates is minmax over all rows when the lowest and highest are candidates
            # (the usual case): the scores over all rows are kept, as for a pointwise term.
            return self._full_scores(term, memo)[rows]
        if term.per_resource or not term.scale.pointwise:
            values = read.values[rows]
            if term.per_resource:
                col = table.resource_index.get(term.per_resource)
                units = table.allocatable[rows, col].astype(np.float64) if col is not None else np.zeros(rows.size)
                with np.errstate(divide="ignore", invalid="ignore"):
                    values = np.where(units > 0, values / units, np.nan)
            scores = term.scale.apply(values, term.better)
            if read.column.contract.on_missing == OnMissing.LOWEST:
                scores = np.where(read.missing[rows], 0.0, scores)
            return scores
        return self._full_scores(term, memo)[rows]

    def make_terms(self) -> Sequence[MetricTerm]:
        """The terms, built once from the parsed args (self.args) when the base is constructed, before a
        subclass's own __init__ body runs; plugins without args declare TERMS instead."""
        return self.TERMS

    def terms(self) -> Sequence[MetricTerm]:
        return self._terms

    def applies(self, pod: PodInfo) -> bool:
        """Pods this plugin neither filters nor scores (e.g. CPU pods for a GPU metric) answer False."""
        return True

    def row_local_scores(self) -> bool:
        return self._pointwise  # a minmax scale reads the candidates' lowest and highest values

    def scores_kept_without(self, table: NodeTable, rows: IntArray, gone: IntArray) -> bool:
        """A minmax term scores the candidates over all rows when the lowest and highest values are candidates
        (_term_scores): while those stay, the others' scores are the same gather. Every other term (pointwise) maps
        each value alone; the weighted mean is per row."""
        for term in self._terms:
            if term.scale.pointwise:
                continue
            if term.per_resource or term.ledger:
                return False  # scaled among the candidates' own values / the memo moves with every placement
            memo = self._memos.get((term.metric, False))
            if memo is None or memo.column is not self.handle.metrics.column(term.metric, table) \
                    or not self._extremes_among(memo, rows) or memo.extremes is None \
                    or not set(memo.extremes.tolist()).isdisjoint(gone.tolist()):
                return False
        return True

    def batch_scope(self, pod: PodInfo) -> BatchScope | None:
        """Opportunistic batching: reads its metrics (a refresh or a value going stale ends batches), the node's
        allocatable (per-resource terms) and, where the ledger applies, the in-flight entries on the node."""
        if self._scope is None:  # the same for every pod: built once
            reads = Reads.NODE | Reads.TELEMETRY
            scoring = reads | (Reads.LEDGER if any(term.ledger for term in self.terms()) else Reads.NONE)
            if any(term.ledger and not term.scale.pointwise for term in self.terms()):
                # A minmax term scales by the candidates' lowest and highest value: when a placement moves a value
                # (the ledger), every candidate's score may move, so a batched cycle scores it over all of them.
                scoring |= Reads.CLUSTER
            filtering = reads | (Reads.LEDGER if self.filter_with_ledger else Reads.NONE)
            self._scope = BatchScope(scoring, tuple(dict.fromkeys(term.metric for term in self.terms())), filtering)
        return self._scope

    def metrics_changed(self, table: NodeTable) -> bool:
        # Thresholds (or a deny-on-missing contract) can admit a node after a refresh: let parked pods retry.
        return any(t.filter_above is not None or t.filter_below is not None
                   or self.handle.metrics.contract(t.metric).on_missing == OnMissing.DENY for t in self.terms())

    def filter(self, cycle: CycleState, pod: PodInfo, table: NodeTable) -> Filtered:
        feasible = np.ones(table.capacity, dtype=bool)
        if not self.applies(pod):
            return Filtered(feasible)
        reasons: dict[str, BoolArray] = {}
        for term in self.terms():
            deny = self.handle.metrics.contract(term.metric).on_missing == OnMissing.DENY
            if term.filter_above is None and term.filter_below is None and not deny:
                continue
            read = self._memo(term.metric, table, self.filter_with_ledger).read
            if term.filter_above is not None:
                reasons[f"node(s) had {term.metric} above {term.filter_above:g}"] = over = (
                    read.values > term.filter_above)
                feasible &= ~over
            if term.filter_below is not None:
                reasons[f"node(s) had {term.metric} below {term.filter_below:g}"] = under = (
                    read.values < term.filter_below)
                feasible &= ~under
            if deny:
                reasons[f"node(s) had no fresh {term.metric}"] = read.missing
                feasible &= ~read.missing
        return Filtered(feasible, reasons)

    def score(self, cycle: CycleState, pod: PodInfo, table: NodeTable, rows: IntArray) -> ScoreDetail:
        if not self.applies(pod):
            return ScoreDetail(np.full(rows.shape[0], np.nan))
        if self._pointwise and rows.shape[0] <= _FEW_SCORED:
            few = self._score_few(table, rows)
            if few is not None:
                return few
        terms = self._terms
        memos = [self._memo(term.metric, table, term.ledger) for term in terms]
        # Evidence over all rows (the audit picks its candidates' rows): no per-cycle copies.
        evidence = tuple(memo.evidence or self._evidence(memo) for memo in memos)
        if self._pointwise:
            # Every term pointwise: their weighted mean over all rows is kept too, one gather a cycle.
            key = tuple(m.read for m in memos)
            kept = self._combined
            if kept is None or any(a is not b for a, b in zip(kept[0], key, strict=True)):
                kept = self._combined = (key, self._combine(terms, memos, table.capacity))
            return ScoreDetail(kept[1][rows], evidence)
        parts = [self._term_scores(t, m, table, rows) for t, m in zip(terms, memos, strict=True)]
        if len(parts) == 1 and terms[0].weight == 1:  # the mean of one term of weight 1 is the term (NaN stays NaN)
            return ScoreDetail(parts[0], evidence)
        combined = nan_weighted_mean(parts, [t.weight for t in terms], rows.size)
        return ScoreDetail(combined, evidence)

    def _score_few(self, table: NodeTable, rows: IntArray) -> ScoreDetail | None:
        """score() of a few rows (a batched cycle re-scores the rows a placement changed) when every term is
        pointwise: each row's value straight from the column and the ledger's adjustment, scaled and averaged in
        Python floats, or in numpy on the gathered rows beyond _FEW of them (the same IEEE operations in the same
        order as the memo's patch, Scale.apply and the weighted mean: the same doubles), with the evidence a full
        score() gives. Beyond _FEW rows, the rows' scores are kept (_RowsKept) and only those whose pods changed
        since are computed: a batched cycle of one template re-scores the rows the others placed on since its last
        pod, and the score of a row is the pod's whatever the template. The memos are left as they are: the next
        score() over many rows patches them from the rows where the adjustment differs. None (the memo path runs)
        until a memo holds the column's measured values."""
        ledger = self.handle.ledger
        placed = len(ledger) > 0
        adds = ledger.adds  # before the views are taken: a placement added after them is looked for next time
        reads: list[_RowRead] = []
        evidence: list[MetricEvidence] = []
        for term in self._terms:
            column = self.handle.metrics.column(term.metric, table)
            memo = self._memos.get((term.metric, term.ledger))
            if memo is None or memo.column is not column or memo.read.measured is None:
                return None
            measured = memo.read.measured
            in_flight = ledger.view(term.metric, table, column.observed_at) if term.ledger and placed else None
            evidence.append(MetricEvidence(column.metric, measured, in_flight, column.observed_at,
                                           tuple(column.sources)))
            reads.append(_RowRead(column, measured, memo.read.missing, in_flight,
                                  column.contract.on_missing == OnMissing.LOWEST))
        if rows.shape[0] <= _FEW:
            combined = np.array([self._row_score(reads, row) for row in rows.tolist()], dtype=np.float64)
        else:
            combined = self._kept_rows(reads, table, rows, ledger, adds, placed)
        return ScoreDetail(combined, tuple(evidence))

    def _row_score(self, reads: Sequence[_RowRead], row: int) -> float:
        """One row's score in Python floats (apply_one, _weighted_mean_one: the vector form's doubles)."""
        parts: list[float] = []
        for term, read in zip(self._terms, reads, strict=True):
            if read.lowest and read.missing[row]:
                parts.append(0.0)
                continue
            value = read.measured.item(row)
            if read.in_flight is not None:
                value += read.in_flight.item(row)
            parts.append(term.scale.apply_one(value, term.better))
        return _weighted_mean_one(parts, self._weights)

    def _kept_rows(self, reads: Sequence[_RowRead], table: NodeTable, rows: IntArray, ledger: InFlightLedgerStore,
                   adds: int, placed: bool) -> FloatArray:
        """The scores of `rows` (more than _FEW), from those kept, computed again on the rows whose pods changed
        or that took a placement in the ledger since they were (a row's in-flight part moves only with a placement
        on it; the ledger adds it at Reserve, after the assume, and another thread, the rebalancer's, may score in
        between), and on any not computed yet. The kept scores go with what every row's are computed from besides
        its own placements: the columns (new samples, freshness judged again), the ledger's removals, whether it
        holds any placement, and the table's rows."""
        columns = tuple(read.column for read in reads)
        validity = (ledger.removals, placed, table.capacity, table.rows_generation, table.nodes_generation)
        kept = self._rows_kept
        if kept is None or kept.validity != validity or any(
                a is not b for a, b in zip(kept.columns, columns, strict=True)):
            kept = self._rows_kept = _RowsKept(columns, validity, np.full(table.capacity, np.nan),
                                               np.full(table.capacity, -1, dtype=np.int64),
                                               np.full(table.capacity, -1, dtype=np.int64))
        stale = rows[(kept.stamp[rows] < table.row_pod_stamp[rows]) | (kept.adds[rows] < ledger.last_adds(rows))]
        if stale.size > _FEW:
            values = np.empty((len(reads), stale.size))
            lowest_missing: list[tuple[int, BoolArray]] = []
            for index, read in enumerate(reads):
                if read.in_flight is None:
                    read.measured.take(stale, out=values[index])
                else:
                    np.add(read.measured.take(stale), read.in_flight.take(stale), out=values[index])
                if read.lowest:
                    lowest_missing.append((index, read.missing[stale]))
            kept.scores[stale] = self._fused_rows(values, lowest_missing)
        elif stale.size:
            scores = kept.scores
            for row in stale.tolist():
                scores[row] = self._row_score(reads, row)
        kept.stamp[stale] = table.pod_stamp
        kept.adds[stale] = adds
        result: FloatArray = kept.scores[rows]
        return result

    def _fused_rows(self, values: FloatArray, lowest_missing: Sequence[tuple[int, BoolArray]]) -> FloatArray:
        """Every term's Scale.apply of its row of `values` (terms x rows: more than one row), 0 where a LOWEST term
        has no fresh value, and their nan_weighted_mean (scoring.weighted_mean_down), on the one matrix: the same IEEE
        operations on each element as term by term (the clip, the subtraction, the division by the span, 1 - x for
        `lower`, x 100), in a dozen numpy calls instead of a dozen per term."""
        scaled: FloatArray = _CLIP(values, self._lows, self._highs)
        scaled -= self._lows
        scaled /= self._spans
        lower = self._lower
        if len(lower) == scaled.shape[0]:
            np.subtract(1.0, scaled, out=scaled)
        else:
            for index in lower:
                np.subtract(1.0, scaled[index], out=scaled[index])
        scaled *= 100.0
        infinite = np.isinf(values)
        if infinite.any():  # ±inf is no value (Scale.apply)
            scaled[infinite] = np.nan
        for index, missing in lowest_missing:
            scaled[index][missing] = 0.0
        return weighted_mean_down(scaled, self._weight_column)

    @staticmethod
    def _evidence(memo: _Memo) -> MetricEvidence:
        read = memo.read
        memo.evidence = MetricEvidence(read.column.metric, read.measured if read.measured is not None else read.values,
                                       read.in_flight, read.column.observed_at, tuple(read.column.sources))
        return memo.evidence

    def _combine(self, terms: Sequence[MetricTerm], memos: Sequence[_Memo], size: int) -> FloatArray:
        """The terms' weighted mean over all rows: patched on the changed rows when every term is the one last
        combined or patched from it (a placement), computed afresh otherwise. Elementwise either way, so the same."""
        weights = self._weights
        if self._combined is not None:
            before, combined = self._combined
            patched = [m.changed for m, old in zip(memos, before, strict=True) if m.read is not old
                       and m.previous is not None and m.previous.read is old and m.changed is not None]
            if len(patched) == sum(m.read is not old for m, old in zip(memos, before, strict=True)):
                # A row in several terms' patches is computed twice, to the same value: cheaper than a unique().
                rows = patched[0] if len(patched) == 1 else np.concatenate(patched)
                if rows.size:  # in place: what score() hands out is a gather of it, never the array itself
                    full = [self._full_scores(t, m) for t, m in zip(terms, memos, strict=True)]
                    if rows.size <= _FEW:
                        for row in rows.tolist():
                            combined[row] = _weighted_mean_one([float(f[row]) for f in full], weights)
                    else:
                        combined[rows] = nan_weighted_mean([f[rows] for f in full], weights, rows.size)
                return combined
        return nan_weighted_mean([self._full_scores(t, m) for t, m in zip(terms, memos, strict=True)], weights, size)

    @staticmethod
    def _scaled(term: MetricTerm, values: FloatArray, missing: BoolArray, contract: FreshnessContract) -> FloatArray:
        scores = term.scale.apply(values, term.better)
        if contract.on_missing == OnMissing.LOWEST:
            scores = np.where(missing, 0.0, scores)
        return scores

    @staticmethod
    def _extremes_among(memo: _Memo, rows: IntArray) -> bool:
        """Whether the rows holding the lowest and the highest finite value are among `rows` (sorted)."""
        if memo.extremes is None:
            values = memo.read.values
            finite = np.isfinite(values)
            if not finite.any():
                memo.extremes = np.zeros(0, dtype=np.int64)
            else:
                memo.extremes = np.array([np.nanargmin(np.where(finite, values, np.nan)),
                                          np.nanargmax(np.where(finite, values, np.nan))], dtype=np.int64)
        if memo.extremes.size == 0 or rows.size == 0:
            return False
        at = np.searchsorted(rows, memo.extremes)
        return bool((at < rows.size).all() and (rows[np.minimum(at, rows.size - 1)] == memo.extremes).all())

    def _full_scores(self, term: MetricTerm, memo: _Memo) -> FloatArray:
        if memo.scores is None:
            read, previous, changed = memo.read, memo.previous, memo.changed
            contract = read.column.contract
            if previous is not None and previous.scores is not None and changed is not None and term.scale.pointwise:
                scores, previous.scores = previous.scores, None  # taken over and patched in place
                if changed.size <= _FEW:
                    lowest = contract.on_missing == OnMissing.LOWEST
                    for row in changed.tolist():
                        scores[row] = 0.0 if lowest and read.missing[row] else term.scale.apply_one(
                            float(read.values[row]), term.better)
                else:
                    scores[changed] = self._scaled(term, read.values[changed], read.missing[changed], contract)
            else:
                scores = self._scaled(term, read.values, read.missing, contract)
            memo.scores = scores
        return memo.scores

    normalize = unchanged  # score() is already on 0-100 (NaN = no value)


# Up to this many changed rows are patched with Python floats, one row at a time (a placement changes one): a numpy
# call on a one-row array costs a microsecond or two, and a patch made a few dozen of them.
_FEW = 4
# score() of up to this many rows (a batched cycle re-scores the rows changed since its template's last pod: one,
# or one per pod placed since when templates interleave) reads each row straight (_score_few: Python floats up to
# _FEW rows, numpy on the gathered rows beyond) instead of patching the memos over every row (a dozen numpy calls
# and their dataclasses per term). As many as a batched cycle re-scores: at 16, the core bench's interleaved
# templates sent 44 % of its batched cycles (17-64 changed rows) down the memo path; all of them: +15 % cycles/s.
_FEW_SCORED = MAX_DIRTY


def _weighted_mean_one(parts: Sequence[float], weights: Sequence[float]) -> float:
    """nan_weighted_mean of one row, in Python floats: the present parts (not NaN) times their weight (a weight of
    1 adds the part itself, as WeightedMean does) added in order, over the weights added in the same order; NaN
    when no part is present. The same doubles as the vector form (tests/unit/test_metric_memo)."""
    total = 0.0
    weight_sum = 0.0
    for part, weight in zip(parts, weights, strict=True):
        if part != part:
            continue
        total += part if weight == 1 else part * weight
        weight_sum += weight
    return total / weight_sum if weight_sum > 0 else math.nan
