"""A batch's weighted totals: kept in pieces (Stages) so a batched cycle patches the rows or the terms that moved,
with the same float operations in the same order as the full cycle's WeightedMean, bit for bit."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import TypeVar

import numpy as np

from metrics_sched.framework.runtime.batching.terms import Term
from metrics_sched.framework.scoring import weighted_mean_down, weighted_sums_down
from metrics_sched.state.node_table import FloatArray, IntArray

__all__ = ["FEW", "Stages", "equal", "narrowed_stages", "restage", "row_total", "rows_total", "staged_total",
           "stages_of", "without"]

# At most this many changed rows are compared and patched one by one with Python floats (fewer numpy calls).
FEW = 8

_Array = TypeVar("_Array", FloatArray, IntArray)

@dataclass
class Stages:
    """The weighted totals in pieces, so a term whose normalised values moved everywhere costs one pass from it
    on: one matrix whose first row is what WeightedMean adds for the terms before the first that may move
    everywhere (the prefix) and each next row what it adds for one term from there (its part), so the totals are
    one reduction down the rows (numpy adds the rows of a C-contiguous matrix in order along axis 0: the same
    additions as WeightedMean's, in the same order), and the weight each row's total is divided by. Owned by the
    batch (never handed out), patched in place."""

    first: int  # the first term that may move everywhere (len(terms): none)
    matrix: FloatArray  # (1 + len(terms) - first, candidates): the prefix, then the parts of terms[first:]
    weights: FloatArray
    positive: bool = True  # every row has a weight (the usual case: a plain division)

    def weighed(self) -> None:
        """The weights changed."""
        self.positive = bool(self.weights.size == 0 or self.weights.min() > 0)



def stages_of(terms: Sequence[Term]) -> Stages:
    """The totals' pieces for these terms (all of them computed afresh)."""
    first = next((i for i, entry in enumerate(terms) if entry.everywhere), len(terms))
    size = terms[0].term.normalized.shape[0] if terms else 0
    matrix: FloatArray = np.zeros((1 + len(terms) - first, size), dtype=np.float64)
    prefix = matrix[0]
    for entry in terms[:first]:
        prefix += _part(entry)
    for index, entry in enumerate(terms[first:], start=1):
        _write_part(entry, matrix[index])
    weights = np.zeros(size, dtype=np.float64)
    for entry in terms:
        weights += _weight(entry)
    stages = Stages(first, matrix, weights)
    stages.weighed()
    return stages


def narrowed_stages(stages: Stages, terms: Sequence[Term], gone: IntArray, moved: Sequence[int]) -> Stages:
    """The pieces of `stages` without the candidates at the positions `gone` (ascending), for the terms now (moved:
    those whose normalised values are not the old ones without them): what stages_of gives for them, each piece
    computed per row in the same order, so a piece no moved term feeds is the old one without those columns."""
    first = stages.first
    matrix = without(stages.matrix, gone)
    if any(index < first for index in moved):
        prefix = matrix[0]
        prefix.fill(0.0)
        for entry in terms[:first]:
            prefix += _part(entry)
    for index in moved:
        if index >= first:
            _write_part(terms[index], matrix[1 + index - first])
    if any(terms[index].gaps for index in moved):
        weights: FloatArray = np.zeros(matrix.shape[1], dtype=np.float64)
        for entry in terms:
            weights += _weight(entry)
    else:
        weights = without(stages.weights, gone)
    narrowed = Stages(first, matrix, weights)
    narrowed.weighed()
    return narrowed


def without(values: _Array, gone: IntArray) -> _Array:
    """`values` without the columns (last axis) at the positions `gone` (ascending): the blocks between them joined,
    C-ordered (a sum down the rows then runs in order), where a boolean mask over the columns of a matrix cost ten
    times as much."""
    if gone.shape[0] == 1:  # the usual drop: one candidate filled up
        at = gone.item(0)
        one: _Array = np.concatenate((values[..., :at], values[..., at + 1:]), axis=-1)
        return one
    bounds = [-1, *gone.tolist(), values.shape[-1]]
    joined: _Array = np.concatenate([values[..., start + 1:end] for start, end in pairwise(bounds)], axis=-1)
    return joined


def _part(entry: Term) -> FloatArray:
    """What WeightedMean adds to the totals for the term (a NaN adds nothing; normalized * 1.0 is normalized)."""
    normalized, weight = entry.term.normalized, entry.term.weight
    if weight == 1 and not entry.gaps:
        return normalized
    part: FloatArray = normalized * weight
    if entry.gaps:
        part = np.where(np.isnan(normalized), 0.0, part)
    return part


def _write_part(entry: Term, out: FloatArray) -> None:
    """_part(entry) written into `out` (a row of the stages' matrix)."""
    normalized, weight = entry.term.normalized, entry.term.weight
    if weight == 1:
        np.copyto(out, normalized)
    else:
        np.multiply(normalized, weight, out=out)
    if entry.gaps:
        out[np.isnan(normalized)] = 0.0


def _weight(entry: Term) -> FloatArray | float:
    """What WeightedMean adds to each row's weight for the term (integers: any order gives the same sums)."""
    if entry.gaps:
        present: FloatArray = ~np.isnan(entry.term.normalized) * float(entry.term.weight)
        return present
    return float(entry.term.weight)


def restage(stages: Stages, terms: Sequence[Term], changed: Sequence[int], regaps: bool,
             positions: IntArray) -> None:
    """Brings the pieces up to the terms now, given the positions of the terms whose normalised values are new
    arrays: a term that may move everywhere has its part written afresh (and the weights recomputed, if it had or
    has gaps); on the changed rows, the prefix, the weights and the other terms' parts are recomputed on their own
    (a term that may move everywhere has its part afresh, or the same values)."""
    first = stages.first
    matrix = stages.matrix
    for index in changed:
        entry = terms[index]
        if entry.everywhere:
            _write_part(entry, matrix[1 + index - first])
    weights = regaps
    if weights:
        stages.weights = np.zeros_like(stages.weights)
        for entry in terms:
            stages.weights += _weight(entry)
    if positions.size:
        # On the changed rows only what a changed term feeds moves: the prefix (when a term in it changed), the
        # changed terms' own parts, and the weights (when a changed term has gaps: its NaN may have come or gone;
        # a term's gaps never go back to False, so it covers the values before too).
        prefix_moved = bool(changed) and changed[0] < first
        own = [(terms[index].term.normalized, terms[index].term.weight, matrix[1 + index - first])
               for index in changed if index >= first and not terms[index].everywhere]
        reweigh = any(terms[index].gaps for index in changed if not terms[index].everywhere)
        prefix, row_weights = matrix[0], stages.weights
        before = [(entry.term.normalized, entry.term.weight) for entry in terms[:first]] if prefix_moved else []
        every = [(entry.term.normalized, entry.term.weight) for entry in terms] if reweigh else []
        if positions.size > FEW:
            # The same operations on the rows gathered, a matrix per sum (a row per term, added down the rows in order,
            # as the Python loop below adds them): a Python float per row and term cost more beyond a few rows.
            if prefix_moved:
                prefix[positions] = _weighted_sums(before, positions)[0]
            for normalized, term_weight, part_of in own:
                values = normalized[positions]
                part_of[positions] = np.where(values == values, values * term_weight, 0.0)
            if reweigh:
                row_weights[positions] = _weighted_sums(every, positions)[1]
                if not (row_weights[positions] > 0).all():
                    stages.positive = False
        for position in positions.tolist() if positions.size <= FEW else ():
            if prefix_moved:
                total = 0.0
                for normalized, term_weight in before:
                    value = normalized.item(position)
                    if value == value:  # not NaN
                        total += value * term_weight
                prefix[position] = total
            for normalized, term_weight, part_of in own:
                value = normalized.item(position)
                part_of[position] = value * term_weight if value == value else 0.0
            if reweigh:
                weight = 0.0
                for normalized, term_weight in every:
                    if normalized.item(position) == normalized.item(position):
                        weight += term_weight
                row_weights[position] = weight
                if weight <= 0:
                    stages.positive = False
        # A row that had no weight may have one now: look again (the usual case never gets here).
        weights = weights or not stages.positive
    if weights:
        stages.weighed()


def staged_total(stages: Stages) -> FloatArray:
    """WeightedMean's result (0 where no term has a weight) from the pieces: the same additions in the same
    order (one reduction down the matrix), divided by the same weights."""
    matrix = stages.matrix
    if matrix.shape[1] > 1:
        total: FloatArray = np.add.reduce(matrix, axis=0)
    else:
        # One candidate: down a single column numpy sums the (contiguous) values pairwise, not in order.
        total = matrix[0].copy()
        for part in matrix[1:]:
            total += part
    weights = stages.weights
    if stages.positive:
        total /= weights
        return total
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(weights > 0, total / np.where(weights > 0, weights, 1.0), 0.0)


def equal(a: FloatArray, b: FloatArray) -> bool:
    """np.array_equal(a, b, equal_nan=True), with one comparison when no value differs (the usual answer)."""
    if a.shape != b.shape:
        return False
    if a.size <= 8:  # the changed rows (a few): Python's comparisons are cheaper than numpy's calls
        return all(x == y or (x != x and y != y) for x, y in zip(a.tolist(), b.tolist(), strict=True))
    differ = a != b  # NaN differs from everything, itself included
    if not differ.any():
        return True
    first = int(differ.argmax())
    if a[first] == a[first] or b[first] == b[first]:
        return False  # a value that really differs (the usual case when they are not equal)
    return bool(np.isnan(a[differ]).all() and np.isnan(b[differ]).all())


def row_total(terms: Sequence[Term], position: int) -> float:
    """One candidate's weighted total as WeightedMean computes it (NaN terms drop out; 0 when none has a value):
    the same float operations in the same order, on the one row (a few changed rows: no pass over the table)."""
    total = weights = 0.0
    for entry in terms:
        value = entry.term.normalized.item(position)
        if value == value:  # not NaN
            total += value * entry.term.weight
            weights += entry.term.weight
    return total / weights if weights > 0 else 0.0


def _gathered(terms: Sequence[tuple[FloatArray, float]], positions: IntArray) -> tuple[FloatArray, FloatArray]:
    """The terms' values at `positions` (more than one), a row per term, and their weights as a column: what
    scoring.weighted_sums_down and weighted_mean_down add down the rows in the terms' order (row_total's order)."""
    values = np.array([normalized.take(positions) for normalized, _ in terms])
    return values, np.array([[weight] for _, weight in terms], dtype=np.float64)


def _weighted_sums(terms: Sequence[tuple[FloatArray, float]], positions: IntArray) -> tuple[FloatArray, FloatArray]:
    """Per position: the sum of value x weight over the terms whose value is not NaN, and of their weights."""
    if not terms:
        zeros: FloatArray = np.zeros(positions.size)
        return zeros, zeros
    return weighted_sums_down(*_gathered(terms, positions))


def rows_total(terms: Sequence[Term], positions: IntArray) -> FloatArray:
    """row_total of each of several positions, in numpy (the same doubles)."""
    values, weights = _gathered([(entry.term.normalized, entry.term.weight) for entry in terms], positions)
    return weighted_mean_down(values, weights, empty=0.0)

