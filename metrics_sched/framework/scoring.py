"""The one NaN-skipping weighted mean: a term without a value for a node (NaN) drops out there and the
others are re-weighted, both when a plugin combines its metrics and when the framework combines plugins."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from metrics_sched.state.node_table import FloatArray

__all__ = ["nan_weighted_mean"]


def nan_weighted_mean(parts: Sequence[FloatArray], weights: Sequence[float], size: int,
                      *, empty: float = np.nan) -> FloatArray:
    """Mean of `parts` (each over the same `size` rows) by `weights`; `empty` where no part has a value."""
    total = np.zeros(size, dtype=np.float64)
    weight_sum = np.zeros(size, dtype=np.float64)
    for part, weight in zip(parts, weights, strict=True):
        present = ~np.isnan(part)
        total += np.where(present, part * weight, 0.0)
        weight_sum += present * weight
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(weight_sum > 0, total / np.where(weight_sum > 0, weight_sum, 1.0), empty)
