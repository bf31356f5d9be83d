"""A batch's score terms: per plugin, its term of the stored cycle and what a batched cycle redoes of it."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from metrics_sched.framework.batchable import Batchable
from metrics_sched.framework.incremental import IncrementalScores
from metrics_sched.framework.interfaces import Normalized, ScorePlugin, unchanged
from metrics_sched.framework.runtime.results import ScoreTerm

__all__ = ["PER_NODE_NORMALIZE", "BatchableScorer", "Term", "is_constant"]


class BatchableScorer(ScorePlugin, Batchable):
    """For the type checker only: a score plugin with the batching hooks (no plugin derives from it)."""


# normalize() implementations that map each value on its own (a clip, the identity): a changed row's normalised
# value is then normalize() of its raw value alone, and no other row's moves. Compared by identity, so a plugin
# that overrides normalize() is normalised over every candidate again.
PER_NODE_NORMALIZE = frozenset({ScorePlugin.normalize, unchanged})


@dataclass(slots=True)
class Term:
    """One score term of a batch, and what the batched cycle redoes of it."""

    term: ScoreTerm
    # A plugin that is not Batchable is read as Reads.CLUSTER (scored afresh each batched cycle), and its hooks are
    # never asked: typed as Batchable for the term of a plugin that is.
    scorer: BatchableScorer
    cluster: bool  # scored afresh over every candidate in each batched cycle
    pods: bool  # reads the pods on a node: re-scored on the changed rows
    ledger: tuple[str, ...]  # the metrics whose in-flight entries it reads: re-scored on the changed rows when
    # the ledger took a placement for one of them
    gaps: bool  # the normalised values hold NaN (what the cycle's WeightedMean was told)
    per_node: bool  # its normalize() maps each value on its own
    # Its normalised values may move on rows that did not change: scored over every candidate, or re-scored on
    # the changed rows and normalised over every candidate (fixed at store time: Term.of).
    everywhere: bool
    # Its normalize() is `unchanged` and it promises 0-100 (Normalized.COMPLETE: and never NaN): normalize_scores
    # gives its raw values back as they are, so a changed row's normalised value is its raw value.
    identity: bool
    # Kept up to date by the plugin (IncrementalScorer) instead of re-running its PreScore and Score.
    incremental: IncrementalScores | None = None
    # It never moves (not in Batch.active), its raw and normalised values are each one double repeated, and
    # a candidate leaving keeps them (row-local scores, normalised alone or by the highest): the term over the
    # candidates left is its arrays' first values (views), where joining the blocks around the one gone copies them.
    # Set when the batch is stored (is_constant), only kept through drop's cut: a term with no preference
    # (NodeAffinity, TaintToleration, ImageLocality for most pods) is all zeros.
    constant: bool = False

    @classmethod
    def of(cls, term: ScoreTerm, scorer: BatchableScorer, cluster: bool, pods: bool, ledger: tuple[str, ...],
           gaps: bool, incremental: IncrementalScores | None) -> Term:
        normalize = type(scorer).normalize
        per_node = normalize in PER_NODE_NORMALIZE
        everywhere = cluster or (not per_node and (pods or bool(ledger)))
        identity = normalize is unchanged and scorer.normalized is not Normalized.UNCHECKED
        return cls(term, scorer, cluster, pods, ledger, gaps, per_node, everywhere, identity, incremental)


def is_constant(entry: Term) -> bool:
    """Whether drop() may cut the term's arrays instead of joining them (Term.constant): its scores row-local and
    kept when a candidate leaves (normalised alone, or by the highest, which a constant array keeps), and its raw and
    normalised values each one double, bit for bit (0.0 and -0.0 are not one), over more than one candidate."""
    term, scorer = entry.term, entry.scorer
    if term.raw.shape[0] < 2 or not scorer.row_local_scores() or not (entry.per_node or scorer.normalize_by_top):
        return False
    return all(bool((bits == bits[0]).all()) for bits in (term.raw.view(np.int64), term.normalized.view(np.int64)))

