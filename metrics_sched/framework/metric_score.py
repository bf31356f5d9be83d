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

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import numpy as np

from metrics_sched.config.contract import OnMissing
from metrics_sched.config.errors import ArgsError
from metrics_sched.framework.cycle_state import CycleState
from metrics_sched.framework.events import ClusterEvent
from metrics_sched.framework.handle import Handle
from metrics_sched.framework.interfaces import (
    Filtered,
    FilterPlugin,
    MetricAwarePlugin,
    MetricEvidence,
    ScoreDetail,
    ScorePlugin,
)
from metrics_sched.framework.scoring import nan_weighted_mean
from metrics_sched.model.podinfo import PodInfo
from metrics_sched.state.node_table import BoolArray, FloatArray, IntArray, NodeTable
from metrics_sched.telemetry.cache import MetricColumn

__all__ = ["Direction", "MetricRead", "MetricScorePlugin", "MetricTerm", "Normalization", "Scale", "read_metric"]

Direction = Literal["lower", "higher"]


@dataclass(frozen=True)
class Scale:
    """How raw values map to 0-100: fixed bounds (`range`, values outside are clipped, robust to
    outliers) or the candidates' own min and max (`minmax`)."""

    method: Literal["range", "minmax"] = "minmax"
    low: float = 0.0
    high: float = 1.0

    def apply(self, values: FloatArray, better: Direction) -> FloatArray:
        """0-100, 100 = best; NaN stays NaN (no value)."""
        finite = values[np.isfinite(values)]
        low, high = self.low, self.high
        if self.method == "minmax":
            if finite.size == 0:
                return np.full(values.shape, np.nan)
            low, high = float(finite.min()), float(finite.max())
            if high == low:
                return np.where(np.isfinite(values), 100.0, np.nan)
        with np.errstate(invalid="ignore"):
            scaled = (np.clip(values, low, high) - low) / (high - low)
        if better == "lower":
            scaled = 1.0 - scaled
        return np.where(np.isfinite(values), 100.0 * scaled, np.nan)


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


def read_metric(handle: Handle, metric: str, table: NodeTable, *, with_ledger: bool = True) -> MetricRead:
    column = handle.metrics.column(metric, table)
    values = np.where(column.fresh, column.values, np.nan)
    in_flight = None
    if with_ledger and len(handle.ledger):
        in_flight = handle.ledger.adjustment(metric, table, column.observed_at)
        values = values + in_flight
    return MetricRead(column, values, ~column.fresh, in_flight)


class MetricScorePlugin(FilterPlugin, ScorePlugin, MetricAwarePlugin):
    events = frozenset({ClusterEvent.NODE_ADDED, ClusterEvent.METRIC_CHANGED})
    TERMS: ClassVar[tuple[MetricTerm, ...]] = ()
    # Thresholds compare the measured value, or the value with the in-flight ledger's estimate added.
    filter_with_ledger: ClassVar[bool] = False

    def __init__(self, args: Any, handle: Handle) -> None:
        super().__init__(args, handle)
        self._terms = tuple(self.make_terms())

    def make_terms(self) -> Sequence[MetricTerm]:
        """The terms, built once from the parsed args (self.args) when the base is constructed, before a
        subclass's own __init__ body runs; plugins without args declare TERMS instead."""
        return self.TERMS

    def terms(self) -> Sequence[MetricTerm]:
        return self._terms

    def applies(self, pod: PodInfo) -> bool:
        """Pods this plugin neither filters nor scores (e.g. CPU pods for a GPU metric) answer False."""
        return True

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
            read = read_metric(self.handle, term.metric, table, with_ledger=self.filter_with_ledger)
            with np.errstate(invalid="ignore"):
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
        parts: list[FloatArray] = []
        evidence: list[MetricEvidence] = []
        terms = self.terms()
        for term in terms:
            read = read_metric(self.handle, term.metric, table, with_ledger=term.ledger)
            sample = read.values if read.in_flight is None else read.values - read.in_flight
            evidence.append(MetricEvidence(
                term.metric, sample[rows], None if read.in_flight is None else read.in_flight[rows],
                read.column.observed_at[rows], tuple(read.column.sources)))
            values = read.values[rows]
            if term.per_resource:
                col = table.resource_index.get(term.per_resource)
                units = table.allocatable[rows, col].astype(np.float64) if col is not None else np.zeros(rows.size)
                with np.errstate(divide="ignore", invalid="ignore"):
                    values = np.where(units > 0, values / units, np.nan)
            scores = term.scale.apply(values, term.better)
            if read.column.contract.on_missing == OnMissing.LOWEST:
                scores = np.where(read.missing[rows], 0.0, scores)
            parts.append(scores)
        combined = nan_weighted_mean(parts, [t.weight for t in terms], rows.size)
        return ScoreDetail(combined, tuple(evidence))

    def normalize(self, scores: FloatArray) -> FloatArray:
        return scores  # score() is already on 0-100 (NaN = no value)
