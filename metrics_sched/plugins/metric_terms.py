"""Shared by the telemetry plugins (not a plugin itself): reading a metric column with the in-flight
ledger applied, normalising it to 0-100, and the args every metric term accepts.

Normalisation (args `normalization`):
    {method: range, min: A, max: B}  fixed bounds; values outside are clipped (robust to outliers)
    {method: minmax}                  bounds from the candidates of this decision
`direction: lower` means lower is better (temperature, load, cost).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from metrics_sched.config.errors import ArgsError
from metrics_sched.framework.interfaces import Handle
from metrics_sched.state.node_table import BoolArray, FloatArray, IntArray, NodeTable
from metrics_sched.telemetry.cache import MetricCache, MetricColumn
from metrics_sched.telemetry.contract import OnMissing
from metrics_sched.telemetry.ledger import InFlightLedgerStore

Direction = Literal["lower", "higher"]


@dataclass(frozen=True)
class Normalization:
    method: Literal["range", "minmax"] = "minmax"
    low: float = 0.0
    high: float = 1.0


def parse_normalization(data: Any, field: str, default: Normalization) -> Normalization:
    if data is None:
        return default
    if not isinstance(data, Mapping):
        raise ArgsError(field, "must be a mapping {method: range|minmax, min, max}")
    for key in data:
        if key not in ("method", "min", "max"):
            raise ArgsError(f"{field}.{key}", "unknown field (expected method, min, max)")
    method = data.get("method", "range" if "min" in data or "max" in data else default.method)
    if method not in ("range", "minmax"):
        raise ArgsError(f"{field}.method", f"must be range or minmax, got {method!r}")
    low = number(data.get("min", default.low), f"{field}.min")
    high = number(data.get("max", default.high), f"{field}.max")
    if method == "range" and not high > low:
        raise ArgsError(f"{field}.max", f"must be greater than min ({high} <= {low})")
    return Normalization(method, low, high)


def number(value: Any, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not np.isfinite(value):
        raise ArgsError(field, f"must be a finite number, got {value!r}")
    return float(value)


def direction(value: Any, field: str) -> Direction:
    if value not in ("lower", "higher"):
        raise ArgsError(field, f"must be 'lower' or 'higher' (which is better), got {value!r}")
    result: Direction = value
    return result


def normalize(values: FloatArray, better: Direction, norm: Normalization) -> FloatArray:
    """0-100, 100 = best; NaN stays NaN (no value)."""
    finite = values[np.isfinite(values)]
    if norm.method == "range":
        low, high = norm.low, norm.high
    else:
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
class MetricRead:
    column: MetricColumn
    values: FloatArray  # over all rows, ledger applied, NaN where not fresh
    missing: BoolArray  # over all rows
    in_flight: FloatArray | None = None  # the ledger's part of `values`


def read_metric(handle: Handle, metric: str, table: NodeTable, *, with_ledger: bool = True) -> MetricRead:
    cache: MetricCache = handle.service("metrics")
    column = cache.column(metric, table)
    values = np.where(column.fresh, column.values, np.nan)
    in_flight = None
    if with_ledger:
        try:
            ledger: InFlightLedgerStore = handle.service("ledger")
        except KeyError:
            ledger = None  # type: ignore[assignment]
        if ledger is not None and len(ledger):
            in_flight = ledger.adjustment(metric, table, column.observed_at)
            values = values + in_flight
    return MetricRead(column, values, ~column.fresh, in_flight)


def apply_missing(scores: FloatArray, missing: BoolArray, policy: OnMissing) -> FloatArray:
    """neutral: NaN (the term drops out and the others are re-weighted); lowest: 0; deny: filtered earlier."""
    if policy == OnMissing.LOWEST:
        return np.where(missing, 0.0, scores)
    return np.where(missing, np.nan, scores)


def denies_missing(handle: Handle, metrics: Iterable[str]) -> bool:
    """True when some metric's contract filters nodes without a value (a refresh can then admit nodes)."""
    cache: MetricCache = handle.service("metrics")
    return any(cache.contract(m).on_missing == OnMissing.DENY for m in metrics)


def reject_missing(read: MetricRead, feasible: BoolArray, reasons: dict[str, BoolArray]) -> BoolArray:
    """Applies onMissing: deny to a filter's verdict, recording the reason."""
    deny = deny_missing_mask(read)
    if deny is None:
        return feasible
    reasons[f"node(s) had no fresh {read.column.metric}"] = deny
    return feasible & ~deny


def deny_missing_mask(read: MetricRead) -> BoolArray | None:
    """Rows to reject because the metric's contract says onMissing: deny; None when the policy allows."""
    if read.column.contract.on_missing != OnMissing.DENY:
        return None
    return read.missing


def stash_raw(cycle: dict[str, Any], plugin: str, metric: str, read: MetricRead, rows: IntArray) -> None:
    """Keeps raw values and ages per candidate for the decision record (the audit never recomputes)."""
    raw = cycle.setdefault("raw_metrics", {})
    sample = read.values if read.in_flight is None else read.values - read.in_flight
    raw[(plugin, metric)] = {
        "values": sample[rows],
        "in_flight": None if read.in_flight is None else read.in_flight[rows],
        "observed_at": read.column.observed_at[rows],
        "sources": read.column.sources,
    }
