"""The rebalancer's decisions, one tick at a time: which nodes are bad, which of their pods to move, where they
would go, and which of those moves the limits allow. It calls no API but one read per simulated pod (its
spec, see simulation.py); the caller evicts what comes back PLANNED (or only reports it in a dry run) and
tells record_outcome what happened.

Order of choice: pods of the lowest priority first; among equals, the biggest gain per eviction (the
simulated target's total minus the current node's); the limits then take them greedily in that order. An
eviction that then does not happen (429, an error, the pod gone) gives its slots back, and the next move the
limits held back goes in its place within the same tick (record_outcome returns it).

Gangs (`gangs: whole`): a member on a bad node brings its whole gang (gang.py): every member must be movable and
not held (cooldown, back-off), every member gets a target, and the move is worth it as one (the members' mean
gain >= margin, or some member's filters no longer admit its node). A gang is one unit of choice (its highest
member priority, its mean gain) and of the limits (all members or none); its PLANNED verdicts carry its name and
come together, for the runner to evict all or none.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from metrics_sched.framework.handle import MetricReader
from metrics_sched.framework.runtime import Framework
from metrics_sched.model.group_membership import GroupKey, GroupRefError, group_of_raw
from metrics_sched.ports import ApiError, KubeObject
from metrics_sched.rebalance.detector import Detector, describe
from metrics_sched.rebalance.gang import GangMove, Member, MemberLister, domain_rule, members_of, place_gang
from metrics_sched.rebalance.limits import Budget, Memory
from metrics_sched.rebalance.model import BadNode, EvictionVerdict, RebalanceConfig, Verdict
from metrics_sched.rebalance.projection import Projection, estimates
from metrics_sched.rebalance.simulation import Move, PodReader, short_of, simulate
from metrics_sched.rebalance.victims import VictimPolicy, kept, refusal, selector
from metrics_sched.state.cluster_state import ClusterState, disruption
from metrics_sched.state.pod_record import PodRecord

__all__ = ["Rebalancer"]

_REFUSED = {Verdict.BLOCKED: "blocked (429: a PodDisruptionBudget)", Verdict.ERROR: "failed"}


@dataclass(frozen=True)
class _Candidate:
    pod: PodRecord
    bad: BadNode
    why: str  # the node's case, in words

    @property
    def owner(self) -> str:
        return self.pod.controller or self.pod.key

    def verdict(self, verdict: Verdict, reason: str, move: Move | None = None,
                gang: GroupKey | None = None) -> EvictionVerdict:
        return EvictionVerdict(
            pod=self.pod.key, uid=self.pod.uid, owner=self.pod.controller, node=self.pod.node, rule=self.bad.rule,
            verdict=verdict, reason=f"{self.why}; {reason}", target=move.target if move else None,
            gain=round(move.gain, 3) if move else None, priority=self.pod.priority,
            gang=None if gang is None else str(gang))


@dataclass(frozen=True)
class _GangPlan:
    """A gang to move whole: each member's candidate (its own bad node's case, or the case of the member that
    brought the gang) and move, in the order the simulation placed them."""

    move: GangMove
    members: tuple[tuple[_Candidate, Move], ...]

    @property
    def priority(self) -> int:
        return max(c.pod.priority for c, _ in self.members)

    def verdicts(self, verdict: Verdict, reason: str, only: set[str] | None = None) -> list[EvictionVerdict]:
        """One per member (those on bad nodes only, when `only` is their uids)."""
        return [c.verdict(verdict, f"{self.move.words()}; {move.words()}{reason}", move, self.move.key)
                for c, move in self.members if only is None or c.pod.uid in only]


@dataclass(frozen=True)
class _Gang:
    """The pod read again is a member of this gang, which moves whole."""

    key: GroupKey
    raw: KubeObject


class Rebalancer:
    def __init__(self, config: RebalanceConfig, framework: Framework, cluster: ClusterState, metrics: MetricReader,
                 scheduler_names: frozenset[str], clock: Callable[[], float] = time.time, *,
                 pods: PodReader, frameworks: Mapping[str, Framework] | None = None,
                 members: MemberLister | None = None) -> None:
        """`framework` simulates every pod unless `frameworks` (schedulerName -> its profile's framework) has the
        pod's own: a pod is re-placed by the profile that placed it. `members` reads a gang's members (needed
        with `gangs: whole`)."""
        if config.gangs == "whole" and members is None:
            raise ValueError("rebalance.gangs: whole needs a MemberLister to read a gang's members")
        self.members = members
        self.config = config
        self.framework = framework
        self.frameworks = dict(frameworks or {})
        self.cluster = cluster
        self.metrics = metrics
        self.pods = pods
        self._clock = clock
        self._detector = Detector(config.rules)
        self._policy = VictimPolicy(scheduler_names, selector(config.pod_selector, config.pod_selector_expressions),
                                    config.max_priority)
        self._memory = Memory(config.limits, config.interval_seconds)
        self._bad: list[BadNode] = []
        # The last tick's budget, its planned pods (uid -> candidate) and the moves the budget refused, in the
        # order of choice: an eviction that does not happen gives its slots to the next of these.
        self._budget = Budget(config.limits)
        self._planned: dict[str, _Candidate] = {}
        self._standby: list[tuple[_Candidate, Move]] = []
        self.candidates = 0  # movable pods on bad nodes at the last tick (metrics_sched_rebalance_candidates)

    def bad_nodes(self) -> list[BadNode]:
        """The nodes found bad at the last tick, one entry per rule they break."""
        return list(self._bad)

    def tick(self) -> list[EvictionVerdict]:
        """Detects, selects, simulates and limits: PLANNED verdicts first (in the order to evict), then SKIPPED
        ones with why. Pods that may never be moved (not ours, DaemonSet, mirror, standalone...) get none."""
        now = self._clock()
        self._memory.ticked(now)
        with self.cluster.lock:
            found = self._detector.observe(self.cluster.table, self.metrics, now)
            by_node: dict[str, tuple[BadNode, str]] = {}
            for rule, bad in found:  # a node bad by several rules answers for the first one configured
                if bad.node not in by_node:
                    by_node[bad.node] = (bad, describe(bad, rule, now))
            pods = self._policy.on(self.cluster.pods.values(), by_node) if by_node else []
            youngest = _youngest(self.cluster.pods.values()) if pods and self._memory.unsure(now) else {}
            self._memory.prune(now, self.cluster.pods)
        self._bad = [bad for _, bad in found]
        self.candidates = len(pods)
        pods.sort(key=lambda p: (p.priority, p.key))

        skipped: list[EvictionVerdict] = []
        moves: list[tuple[_Candidate, Move] | _GangPlan] = []
        on_bad = {p.uid for p in pods}
        covered: set[str] = set()  # members of a gang judged this tick: judged with it, not again alone
        for pod in pods:
            if pod.uid in covered:
                continue
            candidate = _Candidate(pod, *by_node[pod.node])
            held = self._held(candidate.pod, youngest, now)
            if held:
                skipped.append(candidate.verdict(Verdict.SKIPPED, held))
                continue
            outcome = self._simulate(candidate)
            if outcome is None:
                continue  # gone, moved or leaving: the watch will tell the state
            if isinstance(outcome, _Gang):
                members, plan = self._gang(candidate, outcome, by_node, youngest, now)
                covered.update(c.pod.uid for c in members)
                if isinstance(plan, _GangPlan):
                    moves.append(plan)
                else:
                    skipped.extend(c.verdict(Verdict.SKIPPED, plan, gang=outcome.key)
                                   for c in members if c.pod.uid in on_bad)
            elif isinstance(outcome, str):
                skipped.append(candidate.verdict(Verdict.SKIPPED, outcome))
            elif (outcome.gain < self.config.margin
                  and (outcome.here_fits or outcome.target in by_node)):
                skipped.append(candidate.verdict(Verdict.SKIPPED, short_of(outcome, self.config.margin), outcome))
            else:
                moves.append((candidate, outcome))

        moves.sort(key=_order)
        self._budget = budget = Budget(self.config.limits)
        self._planned, self._standby = {}, []
        planned: list[EvictionVerdict] = []
        for item in moves:
            if isinstance(item, _GangPlan):
                places = [(c.pod.node, c.pod.namespace) for c, _ in item.members]
                owners = {c.owner for c, _ in item.members}
                over = budget.refusal_all(places, owners)
                if over:
                    skipped.extend(item.verdicts(Verdict.SKIPPED, f"; {over}", on_bad))
                    continue
                budget.take_all(places, owners)
                for c, _ in item.members:
                    self._planned[c.pod.uid] = c
                planned.extend(item.verdicts(Verdict.PLANNED, ""))
                continue
            candidate, move = item
            pod = candidate.pod
            over = budget.refusal(pod.node, pod.namespace, candidate.owner)
            if over:
                skipped.append(candidate.verdict(Verdict.SKIPPED, f"{move.words()}; {over}", move))
                self._standby.append((candidate, move))
            else:
                budget.take(pod.node, pod.namespace, candidate.owner)
                self._planned[pod.uid] = candidate
                planned.append(candidate.verdict(Verdict.PLANNED, move.words(), move))
        return planned + skipped

    def _instead(self, uid: str, outcome: Verdict) -> list[EvictionVerdict]:
        """A planned eviction of the last tick that did not happen gives its slots back; the first move the budget
        refused that fits now is planned in its place."""
        candidate = self._planned.pop(uid, None)
        if candidate is None:
            return []
        pod = candidate.pod
        self._budget.give_back(pod.node, pod.namespace, None if outcome == Verdict.BLOCKED else candidate.owner)
        for i, (other, move) in enumerate(self._standby):
            if self._budget.refusal(other.pod.node, other.pod.namespace, other.owner) is None:
                del self._standby[i]
                self._budget.take(other.pod.node, other.pod.namespace, other.owner)
                self._planned[other.pod.uid] = other
                return [other.verdict(Verdict.PLANNED, f"{move.words()}; in place of {pod.key} ({outcome.value})",
                                      move)]
        return []

    def _held(self, pod: PodRecord, youngest: Mapping[str, float], now: float) -> str | None:
        """Why the pod waits (its owner's cooldown, its back-off), or None."""
        owner = pod.controller or pod.key
        return (self._memory.cooling(owner, now) or self._memory.started_recently(owner, youngest.get(owner), now)
                or self._memory.backing_off(pod.uid, now))

    def _gang(self, trigger: _Candidate, gang: _Gang, by_node: Mapping[str, tuple[BadNode, str]],
              youngest: Mapping[str, float], now: float) -> tuple[list[_Candidate], _GangPlan | str]:
        """The gang `trigger` belongs to, moved whole: its members' candidates (each on a bad node with its own
        node's case, the others with the trigger's) and the plan, or why the gang stays."""
        key = gang.key
        assert self.members is not None  # the constructor insists with gangs: whole
        try:
            raws = members_of(self.members, key)
        except ApiError as exc:
            return [trigger], f"could not read the members of gang {key}: {exc}"
        members: list[Member] = []
        candidates: list[_Candidate] = []
        with self.cluster.lock:
            records = [self.cluster.pods.get(str((raw.get("metadata") or {}).get("uid") or "")) for raw in raws]
        why: str | None = None
        for raw, record in zip(raws, records, strict=True):
            metadata = raw.get("metadata") or {}
            spec = raw.get("spec") or {}
            name = f"{metadata.get('namespace')}/{metadata.get('name')}"
            if record is None or record.node != spec.get("nodeName"):
                why = why or f"member {name} is not yet placed in the scheduler's state"
                continue
            case = by_node.get(record.node)
            candidates.append(_Candidate(record, *case) if case else
                              _Candidate(record, trigger.bad, trigger.why))
            members.append(Member(record, raw))
            refused = (self._policy.refusal(record)
                       or refusal(disruption(raw), int(spec.get("priority") or 0), self.config.max_priority)
                       or kept(raw, self.config.evict_local_storage_pods, whole_gangs=True)
                       or self._held(record, youngest, now))
            if refused:
                why = why or f"member {name}: {refused}"
        if trigger.pod.uid not in {m.record.uid for m in members}:
            return [trigger, *candidates], f"gang {key} changed meanwhile (its members as read now lack this pod)"
        if why:
            return candidates, f"gang {key} moves whole or not at all: {why}"
        members.sort(key=lambda m: (-m.record.priority, m.record.key))
        spec = gang.raw.get("spec") or {}
        framework = self.frameworks.get(str(spec.get("schedulerName") or ""), self.framework)
        projection = Projection(self.config.rules, self._detector.limits, estimates(framework))
        plan = place_gang(framework, self.cluster, key, members, by_node, projection, self.metrics,
                          domain_rule(framework, key))
        if isinstance(plan, str):
            return candidates, f"gang {key} moves whole or not at all: {plan}"
        if plan.gain < self.config.margin and plan.here_fits:
            return candidates, (f"gang {key} moves whole or not at all: its members' mean gain {plan.gain:+.1f} is "
                                f"below the margin {self.config.margin:g}")
        by_uid = {c.pod.uid: c for c in candidates}
        return candidates, _GangPlan(plan, tuple((by_uid[m.record.uid], move) for m, move in plan.moves))

    def _simulate(self, candidate: _Candidate) -> Move | str | _Gang | None:
        """Reads the pod again and simulates it; None when it is gone, elsewhere or leaving; _Gang when it is a
        gang member and gangs move whole (the caller simulates the gang)."""
        pod = candidate.pod
        try:
            raw = self.pods.get_pod(pod.namespace, pod.name)
        except ApiError as exc:
            return f"could not read the pod: {exc}"
        if raw is None:
            return None
        metadata = raw.get("metadata") or {}
        spec = raw.get("spec") or {}
        if metadata.get("uid") != pod.uid or metadata.get("deletionTimestamp") or spec.get("nodeName") != pod.node:
            return None
        whole = self.config.gangs == "whole"
        refused = (refusal(disruption(raw), int(spec.get("priority") or 0), self.config.max_priority)
                   or kept(raw, self.config.evict_local_storage_pods, whole_gangs=whole))
        if refused:
            return refused
        if whole:
            try:
                key = group_of_raw(pod.namespace, metadata.get("labels") or {}, spec)
            except GroupRefError as exc:  # kept() refuses it first; here for the type checker's sake
                return f"a member of a gang ({exc}): a gang is never split"
            if key is not None:
                return _Gang(key, raw)
        framework = self.frameworks.get(str(spec.get("schedulerName") or ""), self.framework)
        projection = Projection(self.config.rules, self._detector.limits, estimates(framework))
        return simulate(framework, self.cluster, raw, pod.node, projection, self.metrics)

    def record_outcome(self, verdict: EvictionVerdict, outcome: Verdict) -> list[EvictionVerdict]:
        """What the caller's eviction did. EVICTED starts the owner's cooldown; BLOCKED (429) or ERROR backs the
        pod off (2 intervals, doubling while refused, at most the cooldown); GONE ends its back-off; PLANNED and
        SKIPPED change nothing (a dry run changes nothing, and repeats its plan each tick).

        Returns the verdicts planned in place of one that did not happen (BLOCKED, ERROR, GONE): its slots
        within the limits go to the next candidate the budget had refused this tick, which the caller carries
        out in turn (a pod a PodDisruptionBudget protects does not hold its node)."""
        now = self._clock()
        if outcome == Verdict.EVICTED:
            self._memory.evicted(verdict.owner or verdict.pod, verdict.uid, now)
        elif outcome in _REFUSED:
            self._memory.refused(verdict.uid, _REFUSED[outcome], now)
        elif outcome == Verdict.GONE:
            self._memory.settled(verdict.uid)
        if outcome in _REFUSED or outcome == Verdict.GONE:
            return self._instead(verdict.uid, outcome)
        return []


def _order(item: tuple[_Candidate, Move] | _GangPlan) -> tuple[int, float, str]:
    """Lowest priority first, then the biggest gain (a gang's: its highest member priority, its mean gain)."""
    if isinstance(item, _GangPlan):
        return item.priority, -item.move.gain, str(item.move.key)
    candidate, move = item
    return candidate.pod.priority, -move.gain, candidate.pod.key


def _youngest(pods: Iterable[PodRecord]) -> dict[str, float]:
    """Owner -> when its youngest pod in the cluster started (hold the cluster lock)."""
    out: dict[str, float] = {}
    for pod in pods:
        if pod.controller is not None and pod.started > out.get(pod.controller, -math.inf):
            out[pod.controller] = pod.started
    return out
