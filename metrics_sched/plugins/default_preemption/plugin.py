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
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from metrics_sched.framework import (
    PREEMPT_TOGETHER,
    ArgsError,
    BoolArray,
    ClusterEvent,
    Code,
    CycleState,
    DryRun,
    Filtered,
    Handle,
    NodeTable,
    Nomination,
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
MAX_DOMAINS = 8  # a gang placed in one domain: the domains tried for its whole preemption, at most
NOT_HELPFUL = "Preemption is not helpful for scheduling"
_ATTEMPT = PREEMPTION_ATTEMPTS.sample()  # the same event every run: publishing it builds nothing


@dataclass(frozen=True)
class _Found:
    """The node a pod preempts on (pickOneNodeForPreemption's pick) and how it was chosen."""

    candidate: Candidate
    decided_by: str
    tied: tuple[str, ...]
    candidates: int


@dataclass(frozen=True)
class _Refused:
    """No preemption for a pod: why (`ineligible`: PodEligibleToPreemptOthers said no), and the per-node reasons."""

    reason: str
    statuses: Mapping[str, int] = field(default_factory=dict)
    ineligible: bool = False


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
        together = cycle.get(PREEMPT_TOGETHER)
        with cluster.lock:
            if self._victims_staying(pod):
                message = "waiting for the preemption for this pod to be finished"
                explain(cycle, f"preemption: {message}")
                return PostFilterResult(), Status(Code.UNSCHEDULABLE, f"preemption: {message}")
            if preemption_policy(pod) == "Never":  # decided by the spec alone: no dry run (upstream checks it first)
                return self._ineligible(cycle, NEVER)
            held = cluster.nominations.held_for(pod, table)
            found = self._search(pod, table, held, cycle=cycle)
            if isinstance(found, _Refused):
                if found.ineligible:
                    return self._ineligible(cycle, found.reason)
                return self._none(cycle, pod, table, found.statuses, found.reason)
            plan = [(pod, found)]
            others = list(together.others()) if together is not None else []
            if others:
                assert together is not None
                planned = self._plan_in_domain(cycle, pod, found, others, table, held, together.topology_key)
                if isinstance(planned, tuple):
                    return self._gang_refused(cycle, pod, table, together.group, len(others) + 1, planned)
                plan = planned
                found = plan[0][1]
            cleared_of: list[list[Nomination]] = []
            for member, pick in plan:
                node_name = pick.candidate.node
                cleared = [n for n in cluster.nominations.on_node(node_name)
                           if n.priority < member.priority and all(m.uid != n.uid for m, _ in plan)]
                for other in cleared:
                    cluster.nominations.remove(other.uid)
                cluster.nominations.nominate(member, node_name, cluster.record_of)
                cleared_of.append(cleared)
        chosen = found.candidate
        self._record(cycle, pod, chosen, found.decided_by, found.tied, found.candidates)
        if len(plan) > 1:
            assert together is not None
            explain(cycle, f"preemption: for the {len(plan)} member(s) of pod group {together.group} at once: "
                           + "; ".join(f"{m.key} on {p.candidate.node} ({len(p.candidate.victims)} victim(s))"
                                       for m, p in plan))
        for (member, pick), cleared in zip(plan, cleared_of, strict=True):
            self.handle.events.publish(PREEMPTION_VICTIMS.sample(len(pick.candidate.victims)))
            self.executor.submit(member, pick.candidate.node,
                                 [v for v in pick.candidate.victims if not v.terminating], cleared)
        victims = len(chosen.victims)
        together_note = (f"; with the {len(plan) - 1} other member(s) of its pod group" if len(plan) > 1 else "")
        return PostFilterResult(chosen.node), Status(
            Code.SUCCESS, f"preemption: {victims} lower-priority pod(s) on node {chosen.node} are being preempted; "
                          f"the pod is nominated to {chosen.node}{together_note}")

    def _search(self, pod: PodInfo, table: NodeTable, held: Sequence[tuple[PodRecord, int]], *,
                cycle: CycleState | None = None, taken: frozenset[str] = frozenset(),
                within: BoolArray | None = None) -> _Found | _Refused:
        """The node to preempt on for `pod` and its victims in the state as it is now (under the cluster's lock,
        perhaps inside a simulation), `held` counted, the pods in `taken` (already victims of this plan) gone,
        only rows in `within` (a gang's domain) tried. `cycle`: the pod's own cycle state, which the dry runs
        clone (None for a gang's other members)."""
        cluster = self.handle.cluster
        with cluster.simulated(added=held):
            ran = self.handle.dry_run(pod, cycle)
        if ran is None:  # a PreFilter turned the pod down: no node can be helped
            return _Refused(NOT_HELPFUL)
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
            return _Refused(reason, ineligible=True)

        rows = np.flatnonzero(potential if within is None else potential & within[: potential.size])
        if rows.size == 0:
            return _Refused(NOT_HELPFUL)
        candidates, statuses = self._dry_run(pod, table, rows, held, ran.node_local, cycle, taken)
        if not candidates:
            return _Refused(NOT_HELPFUL, statuses)
        pick = pick_one_node(candidates, lambda tied: self._scores(pod, tied))
        return _Found(pick.candidate, pick.decided_by, pick.tied, len(candidates))

    def _plan_in_domain(self, cycle: CycleState, pod: PodInfo, found: _Found, others: Sequence[PodInfo],
                        table: NodeTable, held: Sequence[tuple[PodRecord, int]], topology_key: str | None
                        ) -> list[tuple[PodInfo, _Found]] | tuple[PodInfo, _Refused]:
        """The whole gang's plan: `pod` where `found` says, the others in turn; with `topology_key`, every member
        in one domain: the domain of `found` first, then the others `pod` may preempt in (at most MAX_DOMAINS),
        `pod` re-planned within each. The plan, or the member that found no room (in the last domain tried)."""
        plan = [(pod, found)]
        topology = table.topology(topology_key) if topology_key is not None else None
        first = -1 if topology is None else int(topology.codes[found.candidate.row])
        if topology is None or first < 0:  # no domain asked, or the node lacks the label: placed by score alone
            refused = self._plan_gang(plan, others, table)
            return plan if refused is None else refused
        codes = topology.codes[: table.capacity]
        present = table.present[: table.capacity]
        domains = [first] + [c for c in np.unique(codes[present & (codes >= 0)]).tolist() if c != first]
        last: tuple[PodInfo, _Refused] = (pod, _Refused(NOT_HELPFUL))
        for code in domains[:MAX_DOMAINS]:
            within = np.asarray(codes == code, dtype=bool)
            if code != first:
                again = self._search(pod, table, held, cycle=cycle, within=within)
                if isinstance(again, _Refused):
                    last = (pod, again)
                    continue
                plan = [(pod, again)]
            else:
                plan = [(pod, found)]
            refused = self._plan_gang(plan, others, table, within)
            if refused is None:
                return plan
            last = refused
        return last

    def _plan_gang(self, plan: list[tuple[PodInfo, _Found]], others: Sequence[PodInfo], table: NodeTable,
                   within: BoolArray | None = None) -> tuple[PodInfo, _Refused] | None:
        """Victims for each of a gang's other members in turn, in the state the plan so far leaves (its victims
        gone, its members counted on their nodes), appended to `plan`; the member that found none and why,
        or None when every member has a node. A member nominated already (an earlier preemption's victims still
        leaving) keeps its node: counted there, not planned again. Nothing is nominated or taken here."""
        cluster = self.handle.cluster
        kept: list[tuple[PodRecord, int]] = []  # members nominated already: their room is being made
        for member in others:
            nomination = cluster.nominations.get(member.uid)
            row = table.index.get(nomination.node) if nomination is not None else None
            if nomination is not None and row is not None:
                kept.append((nomination.record, row))
        for member in others:
            if any(record.uid == member.uid for record, _ in kept):
                continue
            if preemption_policy(member) == "Never":
                return member, _Refused(NEVER, ineligible=True)
            taken = [v for _, found in plan for v in found.candidate.victims]
            placed = [(cluster.record_of(m, found.candidate.node), found.candidate.row) for m, found in plan]
            planned = {m.uid for m, _ in plan} | {record.uid for record, _ in kept}
            held = [(record, row) for record, row in cluster.nominations.held_for(member, table)
                    if record.uid not in planned] + kept + placed
            with cluster.simulated(removed=taken):
                found = self._search(member, table, held, taken=frozenset(v.uid for v in taken), within=within)
            if isinstance(found, _Refused):
                return member, found
            plan.append((member, found))
        return None

    def _gang_refused(self, cycle: CycleState, pod: PodInfo, table: NodeTable, group: str, size: int,
                      refused: tuple[PodInfo, _Refused]) -> tuple[PostFilterResult, Status]:
        """All or nothing: one member preemption cannot help means no member preempts (a part of a gang placed
        waits at Permit and times out, its victims evicted for nothing)."""
        member, why = refused
        detail = why.reason
        if why.statuses:
            detail = ", ".join(sorted(f"{n} {reason}" for reason, n in Counter(why.statuses).items()))
        message = (f"pod group {group}: preemption cannot make room for all {size} members at once "
                   f"(none for {member.key}: {detail})")
        return self._none(cycle, pod, table, {}, message)

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
                 local: bool, cycle: CycleState | None = None, taken: frozenset[str] = frozenset()
                 ) -> tuple[list[Candidate], dict[str, int]]:
        """Candidates from the rows in table order, starting at a random offset (upstream's
        GetOffsetAndNumCandidates), until enough are found with at least one that violates no budget. `local`:
        every filter in play is node-local, so all nodes are dry-run together (batch.py);
        otherwise node by node. `cycle`: the pod's cycle state, cloned by each dry run; `taken`: pods already
        victims of this plan (a gang's), gone in the simulation and never victims again."""
        cluster = self.handle.cluster
        wanted = candidate_count(int(rows.size), self.args.min_candidate_nodes_percentage,
                                 self.args.min_candidate_nodes_absolute)
        lower: dict[int, list[PodRecord]] = {}
        for record in cluster.pods.values():  # one pass over the placed pods, grouped by row
            if record.priority < pod.priority and record.row is not None and record.uid not in taken:
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
                ran = self.handle.dry_run(pod, cycle)
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
                    ran = self.handle.dry_run(pod, cycle)
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
