"""DefaultPreemption (PostFilter): kube-scheduler's preemption of lower-priority pods, with its args.

When no node fits, the nodes whose rejection removing pods could resolve (not those a node's labels, taints,
unschedulable flag, ... rule out: UnschedulableAndUnresolvable upstream) are dry-run from a random offset until
enough candidates are found (minCandidateNodesPercentage of them, at least minCandidateNodesAbsolute): on each,
the fewest lower-priority victims that make the pod fit (victims.py, beside it). The node is picked by
upstream's criteria, a remaining tie by the profile's score (cooler, cheaper); the pod is nominated there at once
(its room held against lower-priority pods) and the victims are taken by the executor, off the scheduling thread.

Cost: the dry runs hold the cluster lock on the scheduling thread; each is one PreFilter and Filter pass over the
table in a state with victims un-counted (ClusterState.simulated). When every filter in play declares itself
node-local (FilterPlugin.node_local; no inter-pod rule, spreading constraint or contested claim for this pod), all
nodes are dry-run together: 1 + (most lower-priority pods on a node) passes in all (batch.py; measured on this shared
2-core machine: 40 ms at 100 nodes, 0.2 s at 1,000, 1.0 s at 5,000 nodes of 4 lower-priority pods each).
Otherwise node by node: 1 + (lower-priority pods on the node) passes per node tried, for at most the candidate
count of nodes. Plus one pass over the placed pods to group them by node.

Switch it off by disabling the plugin in the profile (`plugins.postFilter.disabled: [{name: DefaultPreemption}]`),
as in kube-scheduler.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from metrics_sched.framework import (
    ArgsError,
    BoolArray,
    ClusterEvent,
    Code,
    CycleState,
    DryRun,
    Filtered,
    Handle,
    NodeTable,
    PodInfo,
    PodRecord,
    PostFilterPlugin,
    PostFilterResult,
    Status,
    explain,
)
from metrics_sched.plugins.default_preemption.batch import Selected, select_victims_everywhere
from metrics_sched.plugins.default_preemption.candidates import Candidate, candidate_count
from metrics_sched.plugins.default_preemption.eligibility import NEVER, eligible_to_preempt, preemption_policy
from metrics_sched.plugins.default_preemption.executor import PreemptionExecutor
from metrics_sched.plugins.default_preemption.outcome import (
    PREEMPTION,
    PREEMPTION_ATTEMPTS,
    PREEMPTION_VICTIMS,
    PreemptionOutcome,
    Victim,
)
from metrics_sched.plugins.default_preemption.selection import pick_one_node
from metrics_sched.plugins.default_preemption.victims import select_victims

from .disruption_budgets import DisruptionBudgets

__all__ = ["DefaultPreemption"]

NO_VICTIMS = "No preemption victims found for incoming pod"
NOT_HELPFUL = "Preemption is not helpful for scheduling"
_ATTEMPT = PREEMPTION_ATTEMPTS.sample()  # the same event every run: publishing it builds nothing


class DefaultPreemption(PostFilterPlugin):
    name = "DefaultPreemption"
    indexes = (DisruptionBudgets,)
    events: ClassVar[frozenset[ClusterEvent]] = frozenset()  # it never rejects a pod: the filters' events requeue it

    @dataclass(frozen=True)
    class Args:
        min_candidate_nodes_percentage: int = 10
        min_candidate_nodes_absolute: int = 100

        def validate(self) -> None:
            if not 0 <= self.min_candidate_nodes_percentage <= 100:
                raise ArgsError("minCandidateNodesPercentage", "must be in the range [0, 100]")
            if self.min_candidate_nodes_absolute < 0:
                raise ArgsError("minCandidateNodesAbsolute", "must not be negative")
            if self.min_candidate_nodes_percentage == 0 and self.min_candidate_nodes_absolute == 0:
                raise ArgsError("minCandidateNodesAbsolute",
                                "minCandidateNodesPercentage and minCandidateNodesAbsolute cannot both be zero")

    args: Args

    def __init__(self, args: Args, handle: Handle) -> None:
        super().__init__(args, handle)
        self.budgets = handle.index(DisruptionBudgets)
        self.random = random.Random()
        self.executor: PreemptionExecutor | None = None
        if handle.preemptor is not None:
            self.executor = PreemptionExecutor(handle.preemptor, handle.pod_writer, handle.waiting_pods,
                                               on_done=self._preempted)
        handle.events.declare(PREEMPTION_ATTEMPTS, PREEMPTION_VICTIMS)

    def _preempted(self, uid: str, ok: bool) -> None:
        """A failed API call may leave no deletion to requeue the pod: it goes back to the active queue at once
        (upstream activates the preemptor when its preemption goroutine fails)."""
        if not ok:
            self.handle.activator.activate([uid])

    # -- PostFilter ------------------------------------------------------------------------------
    def post_filter(self, cycle: CycleState, pod: PodInfo, table: NodeTable,
                    rejections: Mapping[str, int]) -> tuple[PostFilterResult, Status]:
        self.handle.events.publish(_ATTEMPT)  # every run is an attempt, whatever it ends with (as upstream counts)
        if self.executor is None:  # a scheduler built without the API's writes (tests, replay): nothing to take
            explain(cycle, "preemption: not wired (no API writer)")
            return PostFilterResult(), Status(Code.UNSCHEDULABLE, "preemption: not wired (no API writer)")
        cluster = self.handle.cluster
        with cluster.lock:
            if self._victims_staying(pod):
                message = "waiting for the preemption for this pod to be finished"
                explain(cycle, f"preemption: {message}")
                return PostFilterResult(), Status(Code.UNSCHEDULABLE, f"preemption: {message}")
            if preemption_policy(pod) == "Never":  # decided by the spec alone: no dry run (upstream checks it first)
                return self._ineligible(cycle, NEVER)
            held = cluster.nominations.held_for(pod, table)
            with cluster.simulated(added=held):
                ran = self.handle.dry_run(pod)
            if ran is None:  # a PreFilter turned the pod down: no node can be helped
                return self._none(cycle, pod, table, {}, NOT_HELPFUL)
            verdict = ran.verdict
            potential = self._potential(ran, table)

            nominated = self._nominated_node(pod)
            nominated_row = table.index.get(nominated) if nominated else None
            if nominated is not None and nominated_row is not None:
                reason = eligible_to_preempt(pod, [p for p in cluster.pods.values() if p.node == nominated],
                                             not potential[nominated_row] and not verdict.feasible[nominated_row])
            else:
                reason = eligible_to_preempt(pod, None, False)
            if reason is not None:
                return self._ineligible(cycle, reason)

            rows = np.flatnonzero(potential)
            if rows.size == 0:
                return self._none(cycle, pod, table, {}, NOT_HELPFUL)
            local = ran.node_local
            candidates, statuses = self._dry_run(pod, table, rows, held, local)
            if not candidates:
                return self._none(cycle, pod, table, statuses, NOT_HELPFUL)
            pick = pick_one_node(candidates, lambda tied: self._scores(pod, tied))
            chosen = pick.candidate
            cleared = [n for n in cluster.nominations.on_node(chosen.node) if n.priority < pod.priority]
            for other in cleared:
                cluster.nominations.remove(other.uid)
            cluster.nominations.nominate(pod, chosen.node, cluster.record_of)
        self._record(cycle, pod, chosen, pick.decided_by, pick.tied, len(candidates))
        self.handle.events.publish(PREEMPTION_VICTIMS.sample(len(chosen.victims)))
        self.executor.submit(pod, chosen.node, [v for v in chosen.victims if not v.terminating], cleared)
        victims = len(chosen.victims)
        return PostFilterResult(chosen.node), Status(
            Code.SUCCESS, f"preemption: {victims} lower-priority pod(s) on node {chosen.node} are being preempted; "
                          f"the pod is nominated to {chosen.node}")

    @staticmethod
    def _ineligible(cycle: CycleState, reason: str) -> tuple[PostFilterResult, Status]:
        cycle.write(PREEMPTION, PreemptionOutcome(None, reason=reason))
        explain(cycle, f"preemption: {reason}")
        return PostFilterResult(), Status(Code.UNSCHEDULABLE, f"preemption: {reason}")

    def _victims_staying(self, pod: PodInfo) -> bool:
        """A preemption for this pod is under way and one of its victims is still there, not yet leaving."""
        assert self.executor is not None
        pods = self.handle.cluster.pods
        for uid in self.executor.victims_of(pod.uid):
            record = pods.get(uid)
            if record is not None and not record.terminating:
                return True
        return False

    def _potential(self, ran: DryRun, table: NodeTable) -> BoolArray:
        """Rows the filters rejected only for reasons removing pods may resolve (as the filters declare: upstream's
        Unschedulable; node affinity, taints, unschedulable or not-ready nodes, volume zones, every VolumeBinding
        reason, a metric filter... are UnschedulableAndUnresolvable and rule the node out)."""
        verdict, size = ran.verdict, table.capacity
        rejected = table.present[:size] & ~verdict.feasible[:size]
        ruled_out = np.zeros(size, dtype=bool)
        for reason, rows in verdict.reasons.items():
            if reason not in ran.resolvable:
                ruled_out |= rows[:size]
        return np.asarray(rejected & ~ruled_out, dtype=bool)

    def _nominated_node(self, pod: PodInfo) -> str | None:
        nomination = self.handle.cluster.nominations.get(pod.uid)
        if nomination is not None:
            return nomination.node
        node = (pod.raw.get("status") or {}).get("nominatedNodeName")
        return str(node) if node else None

    def _dry_run(self, pod: PodInfo, table: NodeTable, rows: np.ndarray, held: Sequence[tuple[PodRecord, int]],
                 local: bool) -> tuple[list[Candidate], dict[str, int]]:
        """Candidates from the rows in table order, starting at a random offset (upstream's
        GetOffsetAndNumCandidates), until enough are found with at least one that violates no budget. `local`:
        every filter in play is node-local, so all nodes are dry-run together (batch.py);
        otherwise node by node."""
        cluster = self.handle.cluster
        wanted = candidate_count(int(rows.size), self.args.min_candidate_nodes_percentage,
                                 self.args.min_candidate_nodes_absolute)
        lower: dict[int, list[PodRecord]] = {}
        for record in cluster.pods.values():  # one pass over the placed pods, grouped by row
            if record.priority < pod.priority and record.row is not None:
                lower.setdefault(record.row, []).append(record)
        budgets = self.budgets.snapshot()
        offset = self.random.randrange(rows.size)
        order = np.concatenate([rows[offset:], rows[:offset]])
        candidates: list[Candidate] = []
        non_violating = 0
        statuses: Counter[str] = Counter()
        everywhere: dict[int, Selected] = {}
        if local:
            def verdict() -> Filtered | None:
                ran = self.handle.dry_run(pod)
                return None if ran is None else ran.verdict

            everywhere = select_victims_everywhere(cluster, {r: lower[r] for r in rows.tolist() if r in lower},
                                                   budgets, held, verdict)
        for row in order.tolist():
            potential = lower.get(row, [])
            if not potential:
                statuses[NO_VICTIMS] += 1
                continue
            if local:
                selected = everywhere[row]
                if isinstance(selected, list):
                    for reason in selected or [NOT_HELPFUL]:
                        statuses[reason] += 1
                    continue
                victims, violating = selected
                candidates.append(Candidate(table.name(row), row, tuple(victims),
                                            frozenset(v.uid for v in violating)))
                non_violating += not violating
                if non_violating and len(candidates) >= wanted:
                    break
                continue
            failed: list[str] = []

            def fits(removed: Sequence[PodRecord], row: int = row, failed: list[str] = failed) -> bool:
                with cluster.simulated(removed=removed, added=held):
                    ran = self.handle.dry_run(pod)
                if ran is None:
                    return False
                verdict = ran.verdict
                if not verdict.feasible[row]:
                    failed[:] = [r for r, mask in verdict.reasons.items() if mask[row]]
                    return False
                return True

            found = select_victims(potential, budgets, fits)
            if found is None:
                for reason in failed or [NOT_HELPFUL]:
                    statuses[reason] += 1
                continue
            victims, violating = found
            candidates.append(Candidate(table.name(row), row, tuple(victims), frozenset(v.uid for v in violating)))
            non_violating += not violating
            if non_violating and len(candidates) >= wanted:
                break
        return candidates, dict(statuses)

    def _scores(self, pod: PodInfo, tied: Sequence[Candidate]) -> dict[str, float]:
        rows = np.asarray(sorted(c.row for c in tied), dtype=np.int64)
        totals = self.handle.rank(pod, rows)
        if totals is None:
            return {}
        by_row = dict(zip(rows.tolist(), totals.tolist(), strict=True))
        return {c.node: float(by_row[c.row]) for c in tied if np.isfinite(by_row[c.row])}

    def _none(self, cycle: CycleState, pod: PodInfo, table: NodeTable, statuses: Mapping[str, int],
              absent: str) -> tuple[PostFilterResult, Status]:
        """No candidate: upstream's "preemption: 0/N nodes are available: ..." (the nodes not tried count as not
        helpful), and the pod's nomination, if any, is cleared (kube-scheduler nominates "" then)."""
        counts = Counter(statuses)
        tried = sum(counts.values())
        if len(table) > tried:
            counts[absent] += len(table) - tried
        parts = ", ".join(sorted(f"{n} {reason}" for reason, n in counts.items()))  # upstream sorts the strings
        message = f"0/{len(table)} nodes are available: {parts}."
        cycle.write(PREEMPTION, PreemptionOutcome(None, reason=message))
        explain(cycle, f"preemption: {message}")
        cluster = self.handle.cluster
        had = cluster.nominations.remove(pod.uid) is not None or bool(
            (pod.raw.get("status") or {}).get("nominatedNodeName"))
        if had and self.executor is not None:
            self.executor.clear(pod)
        return PostFilterResult(), Status(Code.UNSCHEDULABLE, f"preemption: {message}")

    @staticmethod
    def _record(cycle: CycleState, pod: PodInfo, chosen: Candidate, decided_by: str, tied: tuple[str, ...],
                candidates: int) -> None:
        victims = tuple(Victim(v.key, v.priority, v.uid in chosen.violating) for v in chosen.victims)
        cycle.write(PREEMPTION, PreemptionOutcome(chosen.node, victims, chosen.pdb_violations, decided_by, tied,
                                                  candidates))
        listed = ", ".join(f"{v.key} (priority {v.priority})" for v in chosen.victims)
        explain(cycle, f"preemption: nominated to {chosen.node} out of {candidates} candidate node(s); victims: "
                       f"{listed}; PDB violations: {chosen.pdb_violations}; chosen by {decided_by}"
                       + (f" among {', '.join(tied)}" if len(tied) > 1 else ""))
