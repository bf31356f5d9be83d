"""A batched cycle's changed rows that the filters now judge otherwise: candidates that no longer fit leave the batch
(drop), and rows that were not candidates must still be turned down as before (still_turned_down)."""

from __future__ import annotations

import numpy as np

from metrics_sched.framework.incremental import IncrementalScorer, row_positions
from metrics_sched.framework.interfaces import ScoreDetail, top_score
from metrics_sched.framework.runtime.batching.batch import Batch, BatchStats, copied, may_move, same_answer
from metrics_sched.framework.runtime.batching.totals import narrowed_stages, staged_total, stages_of, without
from metrics_sched.framework.runtime.full_cycle import FullCycle, normalize_scores
from metrics_sched.framework.runtime.results import CycleResult, ScoreTerm, first_rejecter
from metrics_sched.model.podinfo import PodInfo
from metrics_sched.state.node_table import BoolArray, FloatArray, IntArray, NodeTable

__all__ = ["drop", "still_turned_down"]


def drop(full: FullCycle, stats: BatchStats, batch: Batch, result: CycleResult, table: NodeTable, gone: IntArray,
         ledger: dict[str, int]) -> bool:
    """Candidates whose pods changed and that no longer fit (a node filled up) leave the batch as the full
    cycle would find them: each counted under the reasons of the first filter that now turns it down, that
    filter's trace no longer passing it, the candidates without it. The terms lose its position: a term's
    normalised values are kept (the others') when its normalize() maps each value alone, or with the highest
    that stays (normalize_by_top), else normalised again over the candidates left; its raw scores are kept
    unless they may read the candidates (Batchable.row_local_scores, scores_kept_without: a minmax scale
    whose extremes left), then scored again. Those kept incrementally are narrowed (or prepared afresh:
    PodTopologySpread's weights count the candidates), and, as every term read from the cluster, scored over
    every candidate by rescore() in this cycle: here their values are only kept in place. The totals' pieces
    lose the position too, those that moved written again (narrowed_stages). In place, batch and result (its
    candidates and rejection counts); False: not possible (nothing would be left, or a plugin's answer
    changed), the caller refuses the batch."""
    pod, cycle = result.pod, result.cycle
    if gone.size >= batch.rows.size:
        return False  # nothing left: the full cycle (and its PostFilter)
    trace = list(batch.trace)
    rejections = copied(batch.rejections)
    rejected_by = set(batch.rejected_by)
    for row in gone.tolist():
        at = np.array([row], dtype=np.int64)
        first, rejecter = 0, None  # the first filter that now turns it down, in the trace's order
        for position, check in enumerate(batch.moves):
            plugin = may_move(check, ledger)
            if plugin is not None and not plugin.filter_rows(cycle, pod, table, at).all():
                first, rejecter = position, plugin
                break
        if rejecter is None:
            return False
        reasons = rejecter.reasons_on_row(cycle, pod, table, row)
        if reasons is None:
            return False  # its filter_rows and filter disagree: the full cycle's is the answer
        for reason in reasons:
            rejections[reason] += 1
        rejected_by.add(rejecter.name)
        step = trace[first]
        trace[first] = step._replace(reasons=_with_row(step.reasons, reasons, row, step.feasible.shape[0]))
        for position in range(first, len(trace)):
            step = trace[position]
            mask = step.feasible.copy()  # the stored cycle's result may still hold it
            mask[row] = False
            trace[position] = step._replace(feasible=mask)
    keep = np.ones(batch.rows.size, dtype=bool)
    keep[batch.position[gone]] = False
    # The positions gone, ascending: every array over the candidates loses them by joining the blocks between
    # them (without), a few times cheaper than a boolean mask, and a drop narrows two per term.
    at = np.sort(batch.position[gone])
    rows = without(batch.rows, at)
    positions = row_positions(rows, batch.position.shape[0])
    pre_scores = {pre.name: pre for pre in full.pre_scores}
    moved: list[int] = []  # the terms whose normalised values are not the old ones without the rows gone
    for index, entry in enumerate(batch.terms):
        old, scorer = entry.term, entry.scorer
        if entry.incremental is not None:
            kept = entry.incremental.narrowed(table, keep, rows, positions)
            if kept is None:  # prepared afresh over the candidates left, as the full cycle does
                pre = pre_scores.get(scorer.name)
                if pre is not None and not same_answer(pre.pre_score(cycle, pod, table, rows),
                                                 scorer.name in batch.score_skipped):
                    return False
                assert isinstance(scorer, IncrementalScorer)
                kept = scorer.incremental_scores(cycle, pod, table, rows)
                if kept is None:
                    return False
            entry.incremental = kept
        if entry.cluster:
            # Scored afresh over every candidate in this cycle anyway (rescore): kept in place until then.
            entry.term = _narrowed_term(old, without(old.raw, at), at)
            continue
        if entry.constant:  # the values it keeps are all the same: the first ones of each array
            left = old.raw.shape[0] - at.shape[0]
            raw = old.raw[:left]
            entry.term = ScoreTerm(old.plugin, old.weight, raw, raw if old.normalized is old.raw
                                   else old.normalized[:left], old.evidence)
            stats.cut_constant += 1
            continue
        if scorer.row_local_scores() or scorer.scores_kept_without(table, batch.rows, gone):
            raw, evidence = without(old.raw, at), old.evidence
            if entry.per_node or (scorer.normalize_by_top and top_score(raw) == top_score(old.raw)):
                # each normalised value its own raw value's (and the highest's, which stays): they stay
                entry.term = _narrowed_term(old, raw, at)
                continue
        else:
            # Scored again over the candidates left: a score may read the candidates (a minmax scale).
            scored = scorer.score(cycle, pod, table, rows)
            detail = scored if isinstance(scored, ScoreDetail) else ScoreDetail(scored)
            raw, evidence = np.asarray(detail.scores, dtype=np.float64), detail.evidence
        normalized, gaps = normalize_scores(scorer, raw)
        entry.gaps = entry.gaps or gaps
        entry.term = ScoreTerm(old.plugin, old.weight, raw, normalized, evidence)
        moved.append(index)
        stats.renormalised[old.plugin] += 1
    terms = batch.terms
    stages = batch.stages
    if stages is not None:
        stages = batch.stages = narrowed_stages(stages, terms, at, moved)
    if moved and not any(entry.cluster for entry in terms):
        batch.total = staged_total(stages if stages is not None else stages_of(terms))
    else:
        # Each candidate's total as it was (its normalised values are), or computed again over every candidate
        # by this cycle's rescore() (a term read from the cluster moves everywhere).
        batch.total = without(batch.total, at)
    batch.rows, batch.position = rows, positions
    batch.trace, batch.rejections, batch.rejected_by = trace, rejections, frozenset(rejected_by)
    batch.prototype[0]["feasible_rows"] = rows
    result.feasible_rows = rows
    dict.update(result.rejections, rejections)
    result.rejected_by = set(rejected_by)
    return True

def still_turned_down(batch: Batch, pod: PodInfo, table: NodeTable, rows: IntArray, ledger: dict[str, int]) -> bool:
    """Whether rows that were not candidates, and whose pods changed since, are still turned down by the same
    filter for the same reasons (so not candidates, and counted as before): the filters before it whose verdict
    could have moved still let them through (filter_rows, as candidates are re-checked), and that filter, when its
    verdict could have moved (it reads pods, or a ledger metric that took a placement: a node that filled up for
    this template while smaller pods still land on it), still turns each down under the same reasons
    (Batchable.reasons_on_row)."""
    for row in rows.tolist():
        first = first_rejecter(batch.trace, row)
        if first is None:
            return False
        at = np.array([row], dtype=np.int64)
        for position in range(first):
            plugin = may_move(batch.moves[position], ledger)
            if plugin is not None and not plugin.filter_rows(batch.cycle, pod, table, at).all():
                return False
        rejecter = may_move(batch.moves[first], ledger)
        if rejecter is None:
            continue
        now = rejecter.reasons_on_row(batch.cycle, pod, table, row)
        if now is None or now != _row_reasons(batch.trace[first].reasons, row):
            return False  # a candidate again, or counted otherwise: the full cycle says how
    return True



def _narrowed_term(old: ScoreTerm, raw: FloatArray, gone: IntArray) -> ScoreTerm:
    """`old` over the candidates left: `raw` (its raw scores without the positions `gone`) and its normalised values
    without them, the same array as `raw` when they were the same (a plugin whose scores are already 0-100)."""
    normalized = raw if old.normalized is old.raw else without(old.normalized, gone)
    return ScoreTerm(old.plugin, old.weight, raw, normalized, old.evidence)


def _row_reasons(reasons: dict[str, BoolArray], row: int) -> set[str]:
    """The reasons a filter's verdict lists `row` under."""
    return {reason for reason, rows in reasons.items() if rows[row]}


def _with_row(reasons: dict[str, BoolArray], now: frozenset[str], row: int, size: int) -> dict[str, BoolArray]:
    """`reasons` (a filter's over `size` rows, kept by a batch) with `row` listed under the reasons `now` (that
    filter asked again) alone: copies, the stored cycle's result may still hold the originals."""
    out: dict[str, BoolArray] = {}
    for reason in reasons.keys() | now:
        rows = reasons[reason].copy() if reason in reasons else np.zeros(size, dtype=bool)
        rows[row] = reason in now
        out[reason] = rows
    return out


