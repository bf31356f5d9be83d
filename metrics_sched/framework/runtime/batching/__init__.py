"""Opportunistic batching (kube-scheduler's KEP-5598, made exact): a pod of the same template as one scheduled
before reuses that cycle's feasibility and scores, and only what changed since is evaluated again.

kube-scheduler 1.36 keeps the sorted node list of the last cycle and hands the next compatible pod its head
once the last chosen node is full (1 pod per node, within 500 ms), and refuses pods with inter-pod or
topology spread constraints (default ones included). Here the reuse is exact: the decision is the one the
full cycle would make, bit for bit, scores, candidates and rejection counts included (tests/unit/test_batching).

A batch (one per template, the last MAX_TEMPLATES; stored from a template's second full cycle within as
many templates, so a stream that rarely repeats pays nothing) holds the cycle state after PreFilter and
PreScore, the candidate rows, each score term (raw, normalised, evidence), the weighted totals, the
rejection counts, and what it was computed against. What each plugin reads (Reads, from
`Batchable.batch_scope`; None from any consulted plugin: no batch; a plugin that is not Batchable reads
Reads.CLUSTER) decides what a batched cycle redoes:
- refused (the full cycle runs and stores a new batch) when anything global changed: a node added, removed
  or changed (NodeTable.nodes_generation), rows, labels, images, resource columns, the telemetry generation,
  a metric value about to go stale (TELEMETRY readers), a ledger entry removed, a plugin's token (e.g. the
  inter-pod terms placed pods carry), nominated pods to hold room for, or sampling (percentage below 100);
- the rows whose pods changed since (NodeTable.rows_changed_since: the last placement, forgets, pod events)
  are re-checked with the filters that read pods (or the ledger, when it took a placement for their metrics),
  through `Batchable.filter_rows`; a candidate that no longer fits (a node filled up) leaves the batch as the
  full cycle would find it (drop: counted under the first filter that now turns it down, and every term
  scored again over the candidates left; more than MAX_GONE at once end the batch). A changed row that is not a
  candidate keeps the batch while the filters before the one that turned it down first (the stored cycle's filter
  trace: the one its rejection is counted under) still let it through (filter_rows) and that one still turns it
  down for the same reasons (asked again only when its verdict could have moved: it reads pods, or a ledger
  metric that took a placement): it is turned down, and counted, as before;
- plugins reading other nodes (Reads.CLUSTER: PodTopologySpread with constraints, ZoneSpread, inter-pod
  terms of the pod's own) re-run PreFilter, PreScore and Score in full, over every candidate; a Filter of
  theirs that is not skipped makes the pod unbatchable. Those whose scores are per-row counts summed per
  domain (framework.incremental: PodTopologySpread's ScheduleAnyway constraints, ZoneSpread) keep them
  instead: the counts of the rows that moved update the domain sums, the scores are a gather;
- the changed rows are re-scored by the score plugins that read pods or the ledger; a term whose normalize()
  maps each value alone (a clip, the identity) is normalised on those rows only, any other over every
  candidate with its own normalize(), as the cycle does; the totals are recomputed on the changed rows only
  unless a normalised value moved elsewhere, and then from the first term that may move everywhere on (the
  batch keeps the sum of the terms before it, and each later term's addend: totals.Stages);
- the pick is the cycle's (FullCycle.choose: Placement plugins, highest total, the seeded random tie-break).
Reserve, Permit and binding run per pod as always, on a clone of the stored cycle state.

Modules, each calling only those below it: batcher (the runner: reuse a batch, else the full cycle and store one),
store (a full cycle kept as a batch), rescore (the terms brought up to now), drop (changed rows the filters judge
otherwise), batch (a batch, the figures, shared pieces), totals (the weighted totals in pieces), terms (a batch's
score terms), signature (the pod's template).
"""

from metrics_sched.framework.runtime.batching.batch import BatchStats
from metrics_sched.framework.runtime.batching.batcher import Batcher

__all__ = ["BatchStats", "Batcher"]
