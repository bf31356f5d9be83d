"""A batched cycle's score terms brought up to now: those read from the cluster scored afresh (or kept by the plugin,
IncrementalScorer), those reading pods or the ledger re-scored on the changed rows, each normalised as the full
cycle does."""

from __future__ import annotations

import time

import numpy as np

from metrics_sched.framework.interfaces import Normalized, ScoreDetail
from metrics_sched.framework.runtime.batching.batch import Batch, BatchStats
from metrics_sched.framework.runtime.batching.totals import FEW, equal
from metrics_sched.framework.runtime.full_cycle import normalize_scores
from metrics_sched.framework.runtime.results import CycleResult, ScoreTerm
from metrics_sched.state.node_table import IntArray, NodeTable

__all__ = ["rescore"]


def rescore(stats: BatchStats, batch: Batch, result: CycleResult, table: NodeTable, dirty: IntArray,
            positions: IntArray, ledger: dict[str, int],
            pods_changed: IntArray) -> tuple[bool, bool, list[int], bool] | None:
    """Brings the batch's terms up to now, in place (a refused batch is dropped: the caller never keeps one
    half-updated). Returns whether a normalised value moved outside the changed rows (the totals are then
    recomputed over every candidate), whether a changed row's normalised value moved, the positions of the
    terms whose normalised values are a new array, and whether one of those that may move everywhere had or
    has gaps (the weights are then recomputed). None: an incremental plugin's scores cannot be kept."""
    cycle, pod, rows, clock, timings = result.cycle, result.pod, batch.rows, time.perf_counter, result.timings
    terms = batch.terms
    whole = moved = regaps = False
    changed: list[int] = []
    some = dirty.size > 0
    # A few changed rows (the usual one: the last placement) are compared and patched with Python floats.
    places = positions.tolist() if 0 < dirty.size <= FEW else None
    for index in batch.active:  # the terms that may move at all (the others keep their values)
        entry = terms[index]
        old = entry.term
        scorer = entry.scorer
        if entry.incremental is not None:
            started = clock()
            kept = entry.incremental.rescore(cycle, pod, table, pods_changed)
            if kept is None:
                return None
            raw, evidence = kept, old.evidence
        elif entry.cluster:
            started = clock()
            scored = scorer.score(cycle, pod, table, rows)
            detail = scored if isinstance(scored, ScoreDetail) else ScoreDetail(scored)
            raw, evidence = np.asarray(detail.scores, dtype=np.float64), detail.evidence
        elif some and (entry.pods or (ledger and not ledger.keys().isdisjoint(entry.ledger))):
            started = clock()
            scored = scorer.score(cycle, pod, table, dirty)
            if isinstance(scored, ScoreDetail):
                fresh, evidence = scored.scores, scored.evidence
            else:
                fresh, evidence = scored, ()
            old_raw = old.raw
            if places is not None:
                values = fresh.tolist()
                if len(places) == 1:  # the usual case: one placement's row
                    x, y = values[0], old_raw.item(places[0])
                    same = x == y or (x != x and y != y)  # NaN equal to NaN
                else:
                    same = all(x == y or (x != x and y != y)
                               for x, y in zip(values, [old_raw.item(at) for at in places], strict=True))
            else:
                fresh = np.asarray(fresh, dtype=np.float64)
                same = equal(fresh, old_raw[positions])
            if same:
                # The same scores; the evidence (whole-table arrays, e.g. the ledger's latest) is taken as is.
                if evidence is not old.evidence:
                    entry.term = ScoreTerm(old.plugin, old.weight, old_raw, old.normalized, evidence)
                continue
            raw = old_raw.copy()  # the results handed out keep theirs
            if places is not None:
                for at, value in zip(places, values, strict=True):
                    raw[at] = value
            else:
                raw[positions] = fresh
            if entry.identity:
                # normalize_scores gives the raw values back (the same array, as the cycle's term holds): the
                # normalised values moved where the raw ones did. A NaN only where promised (IN_RANGE).
                timings.append((scorer.name, "Score", clock() - started, "Success"))
                moved = True
                if not entry.gaps and scorer.normalized is Normalized.IN_RANGE and (
                        any(value != value for value in values) if places is not None
                        else bool(np.isnan(fresh).any())):
                    entry.gaps = True
                entry.term = ScoreTerm(old.plugin, old.weight, raw, raw, evidence)
                changed.append(index)
                continue
            if entry.per_node:
                # The cycle's bounding maps each value on its own too (NaN for anything not finite, else
                # clipped to 0-100): the changed rows alone give their values, the others keep theirs.
                fresh_normalized, fresh_gaps = normalize_scores(scorer, np.asarray(fresh, dtype=np.float64))
                timings.append((scorer.name, "Score", clock() - started, "Success"))
                moved = moved or not equal(old.normalized[positions], fresh_normalized)
                normalized = old.normalized.copy()
                normalized[positions] = fresh_normalized
                # `gaps` only picks WeightedMean's path, which gives the same numbers either way: a NaN gone
                # from a changed row may leave it True.
                entry.gaps = entry.gaps or fresh_gaps
                entry.term = ScoreTerm(old.plugin, old.weight, raw, normalized, evidence)
                changed.append(index)
                continue
        else:
            continue
        # Normalised over every candidate, as the cycle does (an incremental plugin may hand them over kept).
        given = entry.incremental.normalized() if entry.incremental is not None else None
        normalized, gaps = normalize_scores(scorer, raw) if given is None else given
        timings.append((scorer.name, "Score", clock() - started, "Success"))
        # Scores read from the cluster move with nearly every placement (spreading: at least on the node
        # placed on): compared, they would be recomputed all the same.
        if not entry.cluster and gaps == entry.gaps and equal(normalized, old.normalized):
            normalized = old.normalized  # nothing moved: the totals stand
        else:
            if not whole:
                whole = True
                stats.totals_recomputed += 1
            changed.append(index)
            regaps = regaps or gaps or entry.gaps
        entry.gaps = gaps
        entry.term = ScoreTerm(old.plugin, old.weight, raw, normalized, evidence)
    return whole, moved, changed, regaps

