"""The rebalancer's decisions, one tick at a time: which nodes are bad, which of their pods to move, where they
would go, and which of those moves the limits allow. It calls no API but one read per simulated pod (its
spec, see simulation.py); the caller evicts what comes back PLANNED (or only reports it in a dry run) and
tells record_outcome what happened.

Order of choice: pods of the lowest priority first; among equals, the biggest gain per eviction (the
simulated target's total minus the current node's); the limits then take them greedily in that order. An
eviction that then does not happen (429, an error, the pod gone) gives its slots back, and the next move the
limits held back goes in its place within the same tick (record_outcome returns it).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from metrics_sched.framework.handle import MetricReader
from metrics_sched.framework.runtime import Framework
from metrics_sched.ports import ApiError
from metrics_sched.rebalance.detector import Detector, describe
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

    def verdict(self, verdict: Verdict, reason: str, move: Move | None = None) -> EvictionVerdict:
        return EvictionVerdict(
            pod=self.pod.key, uid=self.pod.uid, owner=self.pod.controller, node=self.pod.node, rule=self.bad.rule,
            verdict=verdict, reason=f"{self.why}; {reason}", target=move.target if move else None,
            gain=round(move.gain, 3) if move else None, priority=self.pod.priority)


class Rebalancer:
    def __init__(self, config: RebalanceConfig, framework: Framework, cluster: ClusterState, metrics: MetricReader,
                 scheduler_names: frozenset[str], clock: Callable[[], float] = time.time, *,
                 pods: PodReader, frameworks: Mapping[str, Framework] | None = None) -> None:
        """`framework` simulates every pod unless `frameworks` (schedulerName -> its profile's framework) has the
        pod's own: a pod is re-placed by the profile that placed it."""
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
        moves: list[tuple[_Candidate, Move]] = []
        for pod in pods:
            candidate = _Candidate(pod, *by_node[pod.node])
            held = (self._memory.cooling(candidate.owner, now)
                    or self._memory.started_recently(candidate.owner, youngest.get(candidate.owner), now)
                    or self._memory.backing_off(pod.uid, now))
            if held:
                skipped.append(candidate.verdict(Verdict.SKIPPED, held))
                continue
            outcome = self._simulate(candidate)
            if outcome is None:
                continue  # gone, moved or leaving: the watch will tell the state
            if isinstance(outcome, str):
                skipped.append(candidate.verdict(Verdict.SKIPPED, outcome))
            elif (outcome.gain < self.config.margin
                  and (outcome.here_fits or outcome.target in by_node)):
                skipped.append(candidate.verdict(Verdict.SKIPPED, short_of(outcome, self.config.margin), outcome))
            else:
                moves.append((candidate, outcome))

        moves.sort(key=lambda m: (m[0].pod.priority, -m[1].gain, m[0].pod.key))
        self._budget = budget = Budget(self.config.limits)
        self._planned, self._standby = {}, []
        planned: list[EvictionVerdict] = []
        for candidate, move in moves:
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

    def _simulate(self, candidate: _Candidate) -> Move | str | None:
        """Reads the pod again and simulates it; None when it is gone, elsewhere or leaving."""
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
        refused = (refusal(disruption(raw), int(spec.get("priority") or 0), self.config.max_priority)
                   or kept(raw, self.config.evict_local_storage_pods))
        if refused:
            return refused
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


def _youngest(pods: Iterable[PodRecord]) -> dict[str, float]:
    """Owner -> when its youngest pod in the cluster started (hold the cluster lock)."""
    out: dict[str, float] = {}
    for pod in pods:
        if pod.controller is not None and pod.started > out.get(pod.controller, -math.inf):
            out[pod.controller] = pod.started
    return out
