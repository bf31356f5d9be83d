"""Carries out the rebalancer's verdicts: evicts (or, in a dry run, only plans), and tells everyone.

One tick: the Rebalancer's `tick()` answers a verdict per pod it considered on a bad node. A PLANNED one is
evicted through the Evictor port (the Eviction API, so PodDisruptionBudgets hold: 429 is BLOCKED, 404 or a
uid that no longer matches (409) is GONE, anything else ERROR), or in a dry run stays PLANNED; the outcome
goes back to the Rebalancer (`record_outcome`: cooldowns and limits). Every verdict, skipped ones with why,
becomes an `eviction` record in the audit ring (/decisions?kind=eviction), an Event on the pod (best-effort;
never in a dry run: a dry run writes nothing to the cluster) and a count of metrics_sched_evictions_total.

A verdict repeated unchanged tick after tick (a pod skipped for want of a better node, a plan in a dry run,
a PodDisruptionBudget still blocking) is recorded and reported once, when it starts: the ring keeps
placements too, and an Event per pod every interval would be noise. The metrics count every verdict.

A gang moved whole (its PLANNED verdicts carry its name) is evicted all or none: first an Eviction dry run of
every member (the API server checks each one's PodDisruptionBudget and changes nothing), and only when every
one passes, the real evictions. A member refused in the dry run keeps the whole gang: nothing is evicted, the
refused member gets its outcome (BLOCKED for a 429) and the others BLOCKED with it, or SKIPPED when it is gone
or failed otherwise. A real eviction that fails after the dry runs passed (a race: a budget spent meanwhile, or
one budget over several members, which each dry run alone cannot see) does not stop the others: a gang with a
member gone cannot run anyway, so the rest are evicted too and the verdicts say the gang was split.

In the scheduler process `serve` runs the ticks every `interval` on the leader only, supervised as the
other workers; `metrics-sched rebalance` calls `tick` itself.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Literal, Protocol

from metrics_sched.audit.record import new_eviction_record
from metrics_sched.audit.ring import DecisionRing
from metrics_sched.observability.metrics import RebalanceMetrics
from metrics_sched.ports import ApiError, Evictor, PodWriter, SchedulingEvent
from metrics_sched.rebalance.model import EvictionVerdict, Verdict
from metrics_sched.supervision import Supervisor, Worker

log = logging.getLogger("metrics_sched.rebalance")

EVENT_ACTION = "Rebalance"
# The Event per outcome (GONE: the pod is gone, there is nobody to tell).
EVENTS: dict[Verdict, tuple[Literal["Normal", "Warning"], str]] = {
    Verdict.EVICTED: ("Normal", "Evicted"),
    Verdict.PLANNED: ("Normal", "EvictionPlanned"),
    Verdict.BLOCKED: ("Warning", "EvictionBlocked"),
    Verdict.SKIPPED: ("Normal", "EvictionSkipped"),
    Verdict.ERROR: ("Warning", "EvictionFailed"),
}
_LOUD = frozenset({Verdict.EVICTED, Verdict.PLANNED, Verdict.BLOCKED, Verdict.ERROR})


class RebalancerLike(Protocol):
    """What the runner needs of metrics_sched.rebalance.rebalancer.Rebalancer."""

    @property
    def candidates(self) -> int:
        """Pods on bad nodes considered in the last tick."""
        ...

    def tick(self) -> list[EvictionVerdict]: ...

    def record_outcome(self, verdict: EvictionVerdict, outcome: Verdict) -> list[EvictionVerdict]:
        """Returns the verdicts planned in place of one that did not happen (to carry out next)."""
        ...


class RebalanceRunner:
    def __init__(self, rebalancer: RebalancerLike, evictor: Evictor, ring: DecisionRing, *, dry_run: bool,
                 writer: PodWriter | None = None, metrics: RebalanceMetrics | None = None,
                 controller: str = "metrics-sched", instance: str = "", clock: Callable[[], float] = time.time,
                 rules: tuple[str, ...] = ()) -> None:
        self.rebalancer = rebalancer
        self.evictor = evictor
        self.ring = ring
        self.dry_run = dry_run
        self.writer = None if dry_run else writer  # a dry run writes nothing to the cluster, Events included
        self.metrics = metrics
        self.controller = controller
        self.instance = instance or controller
        self.clock = clock
        # pod uid -> (verdict, rule, target) last recorded: only the pods of the last tick (bounded by them).
        self._last: dict[str, tuple[Verdict, str, str | None]] = {}
        if metrics is not None:
            metrics.declare(rules, (v.value for v in Verdict))

    # -- one tick ------------------------------------------------------------------------------------
    def tick(self) -> list[EvictionVerdict]:
        """Runs one tick; returns its verdicts as carried out (PLANNED became EVICTED, BLOCKED, ... unless dry)."""
        planned = self.rebalancer.tick()
        if self.metrics is not None:
            self.metrics.on_candidates(self.rebalancer.candidates)
        last, self._last = self._last, {}
        done: list[EvictionVerdict] = []
        queue = deque(planned)
        while queue:
            verdict = queue.popleft()
            # Recorded as of before the eviction, and at once: the evicted pod's replacement can be created and
            # placed while the call returns (or while the tick's next evictions run), and explain finds it as
            # the owner's first placement since the eviction's record.
            at = self.clock()
            carried = [verdict]
            if verdict.verdict == Verdict.PLANNED:
                if verdict.gang is not None:  # the gang's members, together
                    gang = [verdict, *(v for v in queue if v.gang == verdict.gang and v.verdict == Verdict.PLANNED)]
                    queue = deque(v for v in queue if v not in gang[1:])
                    carried, instead = self._carry_out_gang(gang)
                else:
                    carried[0], instead = self._carry_out(verdict)
                if instead:  # planned in its place: carried out next, instead of their SKIPPED verdicts
                    uids = {v.uid for v in instead}
                    queue = deque([*instead, *(v for v in queue if v.uid not in uids)])
            for verdict in carried:
                done.append(verdict)
                if self.metrics is not None:
                    self.metrics.on_verdict(verdict.rule, verdict.verdict.value)
                key = (verdict.verdict, verdict.rule, verdict.target)
                self._last[verdict.uid] = key
                if last.get(verdict.uid) == key:
                    continue  # unchanged since the last tick: recorded and reported then
                self._record(verdict, at)
        return done

    def _carry_out_gang(self, gang: list[EvictionVerdict]) -> tuple[list[EvictionVerdict], list[EvictionVerdict]]:
        """A gang's PLANNED verdicts: dry runs of every member's eviction, then (all passed) the evictions."""
        if self.dry_run:
            return [self._carry_out(v)[0] for v in gang], []
        name = gang[0].gang
        outcomes: list[tuple[EvictionVerdict, Verdict, str]] = []
        refused: tuple[EvictionVerdict, Verdict, str] | None = None
        for verdict in gang:
            namespace, _, pod = verdict.pod.partition("/")
            try:
                self.evictor.evict(namespace, pod, verdict.uid, dry_run=True)
            except ApiError as exc:
                outcome, why = _failed(exc)
                refused = (verdict, outcome, f"{why} (eviction dry run); gang {name} stays whole, nothing evicted")
                break
        if refused is not None:
            member, outcome, why = refused
            for verdict in gang:
                if verdict is member:
                    outcomes.append((verdict, outcome, why))
                else:
                    # Blocked with it (backed off like it) when a budget refused; else the gang is judged afresh
                    # next tick.
                    others = Verdict.BLOCKED if outcome == Verdict.BLOCKED else Verdict.SKIPPED
                    outcomes.append((verdict, others, f"gang {name} stays whole: the eviction dry run of "
                                                      f"{member.pod} answered {why.split(' (eviction dry run)')[0]}"))
        else:
            failed: list[str] = []
            for verdict in gang:
                namespace, _, pod = verdict.pod.partition("/")
                try:
                    self.evictor.evict(namespace, pod, verdict.uid)
                    outcomes.append((verdict, Verdict.EVICTED, ""))
                except ApiError as exc:
                    outcome, why = _failed(exc)
                    failed.append(verdict.pod)
                    outcomes.append((verdict, outcome, f"{why} after its eviction dry run passed"))
            if failed:  # a gang with a member left cannot run: said on every member's verdict
                split = f"gang {name} split: {', '.join(failed)} not evicted, the other members were"
                outcomes = [(v, o, f"{why}; {split}" if why else split) for v, o, why in outcomes]
        done: list[EvictionVerdict] = []
        instead: list[EvictionVerdict] = []
        for verdict, outcome, why in outcomes:
            try:
                instead.extend(self.rebalancer.record_outcome(verdict, outcome))
            except Exception:  # the eviction happened: it must still be recorded
                log.exception("rebalancer.record_outcome failed for %s (%s)", verdict.pod, outcome.value)
            reason = f"{why}; {verdict.reason}" if why else verdict.reason
            done.append(dataclasses.replace(verdict, verdict=outcome, reason=reason))
        return done, instead

    def _carry_out(self, verdict: EvictionVerdict) -> tuple[EvictionVerdict, list[EvictionVerdict]]:
        outcome, reason = Verdict.PLANNED, verdict.reason
        if self.dry_run:
            reason = f"dry run: would evict; {verdict.reason}"
        else:
            namespace, _, name = verdict.pod.partition("/")
            try:
                self.evictor.evict(namespace, name, verdict.uid)
                outcome = Verdict.EVICTED
            except ApiError as exc:
                outcome, why = _failed(exc)
                reason = f"{why}; {verdict.reason}"
        instead: list[EvictionVerdict] = []
        try:
            instead = self.rebalancer.record_outcome(verdict, outcome)
        except Exception:  # the eviction happened: it must still be recorded
            log.exception("rebalancer.record_outcome failed for %s (%s)", verdict.pod, outcome.value)
        return dataclasses.replace(verdict, verdict=outcome, reason=reason), instead

    def _record(self, v: EvictionVerdict, at: float) -> None:
        self.ring.add_eviction(new_eviction_record(
            pod=v.pod, uid=v.uid, owner=v.owner, node=v.node, rule=v.rule, verdict=v.verdict.value, reason=v.reason,
            target=v.target, gain=v.gain, now=at, gang=v.gang))
        (log.info if v.verdict in _LOUD else log.debug)("%s %s on %s (%s): %s", v.pod, v.verdict.value, v.node, v.rule,
                                                        v.reason, extra={
            "pod": v.pod, "verdict": v.verdict.value, "node": v.node, "rule": v.rule, "target": v.target,
            "gain": v.gain})
        event = EVENTS.get(v.verdict)
        if self.writer is None or event is None:
            return
        namespace, _, name = v.pod.partition("/")
        type_, reason = event
        target = f"; expected to land on {v.target} (+{v.gain:.1f})" if v.target and v.gain is not None else ""
        note = f"rebalancer rule {v.rule} on node {v.node}: {v.reason}{target}"
        try:
            self.writer.record_event(SchedulingEvent(
                namespace=namespace, pod_name=name, pod_uid=v.uid, type=type_, reason=reason, action=EVENT_ACTION,
                note=note, reporting_controller=self.controller, reporting_instance=self.instance))
        except ApiError as exc:  # best-effort: the record and the metric are written already
            log.debug("event %s for %s not written: %s", reason, v.pod, exc)

    # -- the scheduler process's loop -------------------------------------------------------------------
    def serve(self, stop: threading.Event, interval: float, *, is_leader: Callable[[], bool],
              supervisor: Supervisor) -> None:
        """Ticks every `interval` seconds while this replica leads, until `stop`. The first tick waits one
        interval: the rules' windows need telemetry seen over time anyway. A tick that raises is counted and
        logged (metrics_sched_worker_failures_total{worker="rebalancer"}); the loop goes on."""
        while not stop.wait(interval):
            if is_leader():
                supervisor.guard(Worker.REBALANCER, self.tick)


def _failed(exc: ApiError) -> tuple[Verdict, str]:
    if exc.status == 429:
        return Verdict.BLOCKED, f"the Eviction API refused (429, a PodDisruptionBudget): {exc.message}"
    if exc.not_found:
        return Verdict.GONE, "the pod is gone (404)"
    if exc.conflict:  # the uid precondition failed: the pod of this name is another one now
        return Verdict.GONE, "the pod was replaced (409: uid changed)"
    return Verdict.ERROR, f"eviction failed: {exc}"
