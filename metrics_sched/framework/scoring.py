"""The one NaN-skipping weighted mean: a term without a value for a node (NaN) drops out there and the
others are re-weighted, both when a plugin combines its metrics and when the framework combines plugins.

Most terms have a value for every node (the resource plugins always do): those are added with their
weight and no mask, and the per-node weight sum stays a scalar until a term with a gap comes along.
The result is the same, bit for bit, as masking every term: the same products added in the same order.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from metrics_sched.state.node_table import FloatArray

__all__ = ["WeightedMean", "nan_weighted_mean", "weighted_mean_down", "weighted_sums_down"]


class WeightedMean:
    """Accumulates weighted terms over `size` rows; result() is the mean with NaN terms dropped per row."""

    __slots__ = ("_scalar", "_total", "_weights")

    def __init__(self, size: int) -> None:
        self._total = np.zeros(size, dtype=np.float64)
        self._scalar = 0.0  # the weight sum while every term had a value everywhere
        self._weights: FloatArray | None = None  # per row, once a term had a gap

    def add(self, part: FloatArray, weight: float, *, gaps: bool | None = None) -> None:
        """`gaps`: whether `part` may hold NaN (None: look)."""
        if gaps is None:
            gaps = bool(np.isnan(part).any())
        if not gaps:
            if weight == 1:
                self._total += part  # part * 1.0 is part, bit for bit
            else:
                self._total += part * weight
            if self._weights is None:
                self._scalar += weight
            else:
                self._weights += weight
            return
        present = ~np.isnan(part)
        self._total += np.where(present, part * weight, 0.0)
        if self._weights is None:
            self._weights = np.full(self._total.shape, self._scalar, dtype=np.float64)
        self._weights += present * weight

    def result(self, empty: float = np.nan) -> FloatArray:
        if self._weights is None:
            if self._scalar > 0:
                out: FloatArray = self._total / self._scalar
                return out
            return np.full(self._total.shape, empty, dtype=np.float64)
        weights = self._weights
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(weights > 0, self._total / np.where(weights > 0, weights, 1.0), empty)


def nan_weighted_mean(parts: Sequence[FloatArray], weights: Sequence[float], size: int,
                      *, empty: float = np.nan) -> FloatArray:
    """Mean of `parts` (each over the same `size` rows) by `weights`; `empty` where no part has a value."""
    mean = WeightedMean(size)
    for part, weight in zip(parts, weights, strict=True):
        mean.add(part, weight)
    return mean.result(empty)


def weighted_sums_down(values: FloatArray, weights: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Per column of `values` (a row per part and more than one column, C-ordered; `weights` a column of one weight
    per part): the sum of value x weight over the parts that are not NaN there, and the sum of their weights. numpy
    reduces such a matrix down its rows in order: WeightedMean's additions, and adding 0.0 for a NaN leaves a sum as
    skipping it does, so the same doubles as adding the parts one by one."""
    present = values == values
    sums: FloatArray = np.add.reduce(np.where(present, values * weights, 0.0), axis=0)
    weight_sums: FloatArray = np.add.reduce(present * weights, axis=0)
    return sums, weight_sums


def weighted_mean_down(values: FloatArray, weights: FloatArray, *, empty: float = np.nan) -> FloatArray:
    """nan_weighted_mean of the rows of `values` (weighted_sums_down's shapes), per column, in a few numpy calls
    whatever the number of parts: `empty` where no part has a value."""
    sums, weight_sums = weighted_sums_down(values, weights)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(weight_sums > 0, sums / np.where(weight_sums > 0, weight_sums, 1.0), empty)
