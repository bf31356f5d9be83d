"""Coscheduling: gang scheduling (all or nothing) for scheduler-plugins' PodGroup CRD and the 1.36 Workload
API's PodGroup, with the gang placed as a whole in the topology domain that suits it best.

After scheduler-plugins' Coscheduling (pkg/coscheduling) and kube-scheduler's GangScheduling:

- QueueSort: priority, then the group's creation time (its last failure's after a failed attempt, so one
  stuck gang does not block the queue), then the group: a gang's members are popped one after the other.
  Pods in no group sort as PrioritySort sorts them.
- PreFilter: a member waits (Unschedulable, with the reason) while its PodGroup does not exist, while fewer
  than minMember members exist or enough of them are still gated, while the group backs off after a failed
  attempt, and while the cluster's free capacity is below the group's minResources.
- Placement (after Score, for the first member of an attempt): the domain of the group's topology key
  (the Workload API's topologyConstraints, the PodGroup annotation `metrics-sched.io/topology-key`, or this
  plugin's `topologyKey`) that holds every member still to place and scores best on the profile's weighted
  objective (placement.py, beside it); Filter then keeps every member in that domain (late members of a placed
  gang too, but not a new run of it: once none of the members that attempt placed is left, its replacements
  choose afresh). No domain holds them all: the gang is placed across domains, member by member, as
  Coscheduling and kube-scheduler's GangScheduling place it (a domain nobody asked for is a preference, not a
  requirement); the attempt fails only when the group named the key itself (the Workload API's
  topologyConstraints, the annotation) or with `fallbackToMemberByMember: false`. Every member's decision record
  carries the gang decision.
- Reserve / Permit: a member waits at Permit until minMember members hold a node, then all are allowed
  at once; the wait is the group's scheduleTimeoutSeconds (or `permitWaitingTimeSeconds`).
- Preemption (DefaultPreemption, the PostFilter before this one) makes room for the whole gang at once or for
  none of it: PreFilter lists the members still to place (PREEMPT_TOGETHER). Its dry runs re-run PreFilter on a
  clone of the cycle's state, where this cycle's admission stands (the attempt may have failed since).
- A failed attempt (a member's wait timed out, a member found no node that preemption could not help, was
  rejected or unreserved) rejects
  every waiting member together (their Unreserve frees what they held), drops the domain, and backs the group
  off for `podGroupBackoffSeconds`; its members are woken when the backoff ends.
- PodGroup status: Scheduling while members wait, Scheduled at the quorum, Pending after a failure.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from metrics_sched.framework import (
    PODS,
    PREEMPT_TOGETHER,
    SUCCESS,
    ArgsError,
    Batchable,
    BatchScope,
    BoolArray,
    Code,
    CycleState,
    Filtered,
    FilterPlugin,
    FloatArray,
    GroupKey,
    GroupRefError,
    Handle,
    IntArray,
    NodeTable,
    PermitPlugin,
    PlacementPlugin,
    PodGroupStatus,
    PodInfo,
    PostFilterPlugin,
    PostFilterResult,
    PreemptTogether,
    PreFilterPlugin,
    QueueSortPlugin,
    Reads,
    ReservePlugin,
    StateKey,
    Status,
    explain,
    group_of,
)
from metrics_sched.plugins.coscheduling.metrics import GANG_FAILURES, GANG_WAIT
from metrics_sched.plugins.coscheduling.placement import choose_domain
from metrics_sched.plugins.coscheduling.tracker import SCHEDULED, FailureReason, GangDecision, GangTracker

from .pod_groups import PodGroup, PodGroupStore

__all__ = ["Coscheduling", "GangCycle"]

DEFAULT_TOPOLOGY_KEY = "topology.kubernetes.io/zone"


@dataclass(frozen=True)
class GangCycle:
    """What PreFilter found out about the pod's gang, for Filter, placement, PostFilter and Permit."""

    key: GroupKey
    group: PodGroup
    topology_key: str
    required: bool  # the group itself named the topology key: never placed across domains
    decision: GangDecision | None  # the attempt's domain, if a member already chose it


_GANG = StateKey[GangCycle]("Coscheduling/gang")


class Coscheduling(QueueSortPlugin, PreFilterPlugin, FilterPlugin, PlacementPlugin, PostFilterPlugin,
                   ReservePlugin, PermitPlugin, Batchable):
    name = "Coscheduling"
    indexes = (PodGroupStore,)

    @dataclass(frozen=True)
    class Args:
        # A member's wait at Permit when its group sets no scheduleTimeoutSeconds (scheduler-plugins' default).
        permit_waiting_time_seconds: float = 60.0
        # How long a group waits after a failed attempt before its members are tried again.
        pod_group_backoff_seconds: float = 10.0
        # The topology a gang is placed in as a whole, unless its group names one.
        topology_key: str = DEFAULT_TOPOLOGY_KEY
        # Domain: a gang goes to the one domain that holds it and scores best; MemberByMember: each member where
        # it scores best (as Coscheduling does), unless its group names a topology key itself.
        gang_placement: Literal["Domain", "MemberByMember"] = "Domain"
        # No domain holds the whole gang: place it member by member (across domains) instead of failing, unless
        # the group named the key itself. On by default: a gang that asked for no topology must not stay Pending
        # for want of a zone that holds it all while the cluster has room (Coscheduling would place it).
        fallback_to_member_by_member: bool = True

        def validate(self) -> None:
            if not 0 < self.permit_waiting_time_seconds <= 900:
                raise ArgsError("permitWaitingTimeSeconds",
                                "must be in (0, 900] (kube-scheduler caps Permit at 15 min)")
            if self.pod_group_backoff_seconds < 0:
                raise ArgsError("podGroupBackoffSeconds", "must be >= 0")

    args: Args

    def batch_scope(self, pod: PodInfo) -> BatchScope | None:
        """Opportunistic batching: a pod outside any group is skipped (pod-only); a member is never batched."""
        try:
            return None if group_of(pod) is not None else BatchScope(Reads.NONE)
        except GroupRefError:
            return None

    def __init__(self, args: Any, handle: Handle) -> None:
        super().__init__(args, handle)
        self.store = handle.index(PodGroupStore)
        self.tracker = GangTracker()
        self._timers: dict[GroupKey, threading.Timer] = {}
        self._timers_lock = threading.Lock()
        handle.events.declare(GANG_WAIT, GANG_FAILURES)
        self.tracker.observers.append(self._attempt_ended)

    def _attempt_ended(self, key: GroupKey, outcome: str, seconds: float) -> None:
        """An attempt reached its quorum or failed: its wait and, if it failed, its reason go to the metrics."""
        events = self.handle.events
        events.publish(GANG_WAIT.sample(seconds, outcome))
        if outcome != SCHEDULED:
            events.publish(GANG_FAILURES.sample(1.0, outcome))

    # -- QueueSort -------------------------------------------------------------------------------
    def sort_key(self, pod: PodInfo) -> tuple[Any, ...]:
        try:
            key = group_of(pod)
        except GroupRefError:
            key = None
        group = self.store.get(key) if key is not None else None
        if key is None or group is None:
            return (-pod.priority, pod.created, "")
        failed = self.tracker.last_failure(key)
        return (-pod.priority, failed if failed is not None else group.created, f"{key.api}:{key}")

    # -- PreFilter -------------------------------------------------------------------------------
    def pre_filter(self, cycle: CycleState, pod: PodInfo) -> Status:
        try:
            key = group_of(pod)
        except GroupRefError as exc:
            return Status(Code.UNRESOLVABLE, str(exc))
        if key is None:
            return Status(Code.SKIP)
        group = self.store.get(key)
        if group is None:
            return Status(Code.UNRESOLVABLE, f"waiting for pod group {key} ({key.api}) to exist")
        if group.error:
            return Status(Code.UNRESOLVABLE, f"pod group {key} cannot be honoured: {group.error}")
        if not group.gang:
            return Status(Code.SKIP)  # the Workload API's basic policy: members are scheduled one by one
        known = cycle.get(_GANG)
        if known is not None and known.key == key:
            # This cycle admitted the pod already: preemption's dry run re-runs PreFilter on a clone of the cycle
            # (upstream's SelectVictimsOnNode keeps the cycle's PreFilter state). The admission stands, whatever
            # backoff the attempt's failure has set since.
            return SUCCESS
        left = self.tracker.backoff_left(key)
        if left > 0:
            return Status(Code.UNSCHEDULABLE, f"pod group {key} failed its last attempt; backing off {left:.1f}s more")
        count, _, gated = self.store.member_count(key)
        if count < group.min_member:
            return Status(Code.UNRESOLVABLE, f"pod group {key} has {count} of its {group.min_member} members")
        if count - gated < group.min_member:
            return Status(Code.UNRESOLVABLE, f"pod group {key}: {gated} of its {count} members are gated "
                                             f"(schedulingGates), fewer than {group.min_member} can be scheduled")
        short = self._short_of(group, self.handle.table)
        if short:
            return Status(Code.UNSCHEDULABLE, f"pod group {key}: the cluster's free capacity is below its "
                                              f"minResources ({short})")
        required = group.topology_key is not None
        topology_key = group.topology_key or self.args.topology_key
        decision = self._standing_decision(key, pod)
        if decision is not None:
            explain(cycle, decision.note())
        cycle.write(_GANG, GangCycle(key, group, topology_key, required, decision))
        # In one domain when placement asks for it and no domain was chosen yet (once chosen, Filter keeps every
        # member in it, preemption's dry runs included).
        in_domain = decision is None and (required or (self.args.gang_placement == "Domain"
                                                       and not self.args.fallback_to_member_by_member))
        cycle.write(PREEMPT_TOGETHER, PreemptTogether(f"{key}", lambda: self._still_to_place(key, group, pod),
                                                      topology_key if in_domain else None))
        return SUCCESS

    def _standing_decision(self, key: GroupKey, pod: PodInfo) -> GangDecision | None:
        """The domain the gang's attempt chose, which keeps `pod` in it; None when none binds it. A complete attempt
        binds only the run of the gang it placed: once none of its members is left (deleted, or evicted together
        by the rebalancer's `gangs: whole`) it is dropped and the replacements choose afresh; and it binds none of
        its own members (only a what-if re-places one: the rebalancer's simulation of the gang's replacement)."""
        attempt = self.tracker.attempt(key)
        if attempt is None:
            return None
        if attempt.complete:
            if pod.uid in attempt.reserved:
                return None
            members = self.store.members(key)
            if self.tracker.retire(key, set(members.pending) | members.bound):
                return None
        return attempt.decision

    def _still_to_place(self, key: GroupKey, group: PodGroup, pod: PodInfo) -> list[PodInfo]:
        """The gang's other members a preemption for `pod` must make room for too: as many as the quorum still
        lacks besides `pod`, schedulable (not gated), not holding a node, in queue order (priority, creation)."""
        members = self.store.members(key)
        live = set(members.pending) | members.bound
        reserved = {uid for uid in self.tracker.reserved(key) if uid in live}
        needed = group.min_member - len(reserved | members.bound) - 1
        if needed <= 0:
            return []
        others = [info for uid, info in members.pending.items()
                  if uid != pod.uid and uid not in reserved and uid not in members.gated]
        others.sort(key=lambda info: (-info.priority, info.created, info.key))
        return others[:needed]

    @staticmethod
    def _short_of(group: PodGroup, table: NodeTable) -> str:
        """minResources the whole cluster's free capacity lacks ("" when it has them, or none is asked)."""
        if not group.min_resources:
            return ""
        present = table.present[: table.capacity]
        wanted = {**group.min_resources, PODS: group.min_member}
        lacking = []
        for resource, amount in wanted.items():
            col = table.resource_index.get(resource)
            free = 0 if col is None else int(
                np.maximum(table.allocatable[present, col] - table.requested[present, col], 0).sum())
            if free < amount:
                lacking.append(f"{resource}: {free} free < {amount}")
        return ", ".join(lacking)

    # -- Filter ----------------------------------------------------------------------------------
    def filter(self, cycle: CycleState, pod: PodInfo, table: NodeTable) -> Filtered:
        gang = cycle.get(_GANG)
        if gang is None or gang.decision is None or gang.decision.domain is None:
            return Filtered.all(table)
        decision = gang.decision
        inside = np.asarray(table.label_column(decision.topology_key) == decision.domain, dtype=bool)
        return Filtered.single(inside, f"node(s) outside the gang's domain {decision.topology_key}={decision.domain}")

    # -- Placement -------------------------------------------------------------------------------
    def place(self, cycle: CycleState, pod: PodInfo, table: NodeTable, rows: IntArray,
              total: FloatArray) -> tuple[BoolArray | None, Status]:
        gang = cycle.get(_GANG)
        if gang is None or gang.decision is not None or (self.args.gang_placement != "Domain" and not gang.required):
            return None, SUCCESS
        key, group = gang.key, gang.group
        members = self.store.members(key)
        live = set(members.pending) | members.bound
        placed = {uid for uid in self.tracker.reserved(key) if uid in live} | members.bound
        needed = max(group.min_member - len(placed), 1)
        request = self._member_request(table, pod, members.pending.values())
        choice = choose_domain(table, gang.topology_key, rows, total, request, needed)
        if choice.chosen is None:
            if not choice.domains and not gang.required:
                decision = GangDecision(key, gang.topology_key, None, pod.key,
                                        f"no feasible node carries {gang.topology_key}: placed by score alone")
            elif self.args.fallback_to_member_by_member and not gang.required:
                decision = GangDecision(key, gang.topology_key, None, pod.key,
                                        f"{choice.explain()}; placed across domains (the group did not require one)")
            else:
                self._fail(key, FailureReason.NO_DOMAIN, pod.uid, choice.explain())
                return None, Status(Code.UNSCHEDULABLE, f"pod group {key}: {choice.explain()}")
            self.tracker.decide(key, decision, choice)
            explain(cycle, decision.note())
            cycle.write(_GANG, GangCycle(key, group, gang.topology_key, gang.required, decision))
            return None, SUCCESS
        assert choice.chosen is not None
        decision = GangDecision(key, gang.topology_key, choice.chosen.value, pod.key, choice.explain())
        self.tracker.decide(key, decision, choice)
        explain(cycle, decision.note())
        cycle.write(_GANG, GangCycle(key, group, gang.topology_key, gang.required, decision))
        topology = table.topology(gang.topology_key)
        return np.asarray(topology.codes[rows] == topology.index[choice.chosen.value], dtype=bool), SUCCESS

    @staticmethod
    def _member_request(table: NodeTable, pod: PodInfo, pending: Any) -> IntArray:
        """The largest member's requests (elementwise), as a table row, one pod slot included."""
        request = table.vector(pod.requests)
        for member in pending:
            request = np.maximum(request, table.vector(member.requests))
        request[table.resource_column(PODS)] = 1
        return request

    # -- PostFilter ------------------------------------------------------------------------------
    def post_filter(self, cycle: CycleState, pod: PodInfo, table: NodeTable,
                    rejections: Mapping[str, int]) -> tuple[PostFilterResult, Status]:
        gang = cycle.get(_GANG)
        if gang is None:
            return PostFilterResult(), Status(Code.UNSCHEDULABLE)
        attempt = self.tracker.attempt(gang.key)
        if attempt is not None and attempt.complete:
            return PostFilterResult(), Status(Code.UNSCHEDULABLE)  # the gang is placed; this member waits alone
        if self.handle.cluster.nominations.get(pod.uid) is not None:
            # Preemption (which runs first) made or is making room for the gang, this member included: its victims
            # are still leaving. Failing the attempt now would back the gang off while that room opens.
            return PostFilterResult(), Status(Code.UNSCHEDULABLE, f"pod group {gang.key}: member {pod.key} waits "
                                                                  f"for the room preemption is making for it")
        # As Coscheduling: one member failing means the others very likely would, so they stop holding nodes.
        self._fail(gang.key, FailureReason.MEMBER_UNSCHEDULABLE, pod.uid, f"member {pod.key} fits no node")
        return PostFilterResult(), Status(Code.UNSCHEDULABLE,
                                          f"pod group {gang.key} rejected: member {pod.key} is unschedulable")

    # -- Reserve ---------------------------------------------------------------------------------
    def reserve(self, cycle: CycleState, pod: PodInfo, node: str) -> Status:
        gang = cycle.get(_GANG)
        if gang is not None:
            members = self.store.members(gang.key)
            self.tracker.reserve(gang.key, pod.uid, node, set(members.pending) | members.bound)
        return SUCCESS

    def unreserve(self, cycle: CycleState, pod: PodInfo, node: str) -> None:
        gang = cycle.get(_GANG)
        if gang is None:
            return
        attempt = self.tracker.attempt(gang.key)
        if not self.tracker.unreserve(gang.key, pod.uid):
            return
        timeout = self._timeout(gang.group)
        timed_out = attempt is not None and self.tracker.age(attempt) >= timeout - 0.05
        reason = FailureReason.TIMEOUT if timed_out else FailureReason.MEMBER_REJECTED
        why = f"member {pod.key} waited {timeout:g}s" if timed_out else f"member {pod.key} was unreserved"
        self._fail(gang.key, reason, pod.uid, why)

    # -- Permit ----------------------------------------------------------------------------------
    def _timeout(self, group: PodGroup) -> float:
        return group.timeout if group.timeout is not None else self.args.permit_waiting_time_seconds

    def permit(self, cycle: CycleState, pod: PodInfo, node: str) -> tuple[Status, float]:
        gang = cycle.get(_GANG)
        if gang is None:
            return SUCCESS, 0.0
        key, group = gang.key, gang.group
        members = self.store.members(key)
        live = set(members.pending) | members.bound | {pod.uid}
        reserved = self.tracker.reserved(key)
        placed = {uid for uid in reserved if uid in live} | members.bound
        if len(placed) >= group.min_member:
            if self.tracker.complete(key) is not None:
                self.tracker.prune(lambda known: self.store.get(known) is not None)  # deleted groups' state goes
            for waiting in self.handle.waiting_pods:
                if waiting.pod.uid in reserved and waiting.pod.uid != pod.uid:
                    waiting.allow(self.name)
            self._report(group, PodGroupStatus("Scheduled", len(placed), "Scheduled",
                                             f"{len(placed)} of minMember {group.min_member} members placed"))
            return SUCCESS, 0.0
        if len(reserved) == 1:
            # The first member to wait: the others should follow at once, wherever they are parked.
            self.handle.activator.activate(uid for uid in members.pending if uid != pod.uid)
        self._report(group, PodGroupStatus("Scheduling", len(placed), "Unschedulable",
                                         f"{len(placed)} of minMember {group.min_member} members hold a node"))
        return (Status.wait(f"pod group {key}: {len(placed)} of minMember {group.min_member} members hold a node"),
                self._timeout(group))

    # -- failure ---------------------------------------------------------------------------------
    def _fail(self, key: GroupKey, reason: str, uid: str, why: str) -> None:
        """Ends the gang's attempt: its waiting members are rejected together, the group backs off and its members
        are woken when the backoff ends."""
        backoff = self.args.pod_group_backoff_seconds
        reserved = self.tracker.fail(key, reason, backoff)
        message = f"pod group {key} attempt failed: {why}"
        if reserved:
            for waiting in self.handle.waiting_pods:
                if waiting.pod.uid in reserved and waiting.pod.uid != uid:
                    waiting.reject(self.name, message)
        _, bound, _ = self.store.member_count(key)
        group = self.store.get(key)
        if group is not None:
            self._report(group, PodGroupStatus("Pending", bound, "Unschedulable", message))
        if backoff > 0:
            # Without a backoff the members stay parked until a cluster event may help, as any unschedulable pod:
            # waking them at once would retry a gang that cannot fit in a loop.
            self._wake_after(key, backoff)

    def _wake_after(self, key: GroupKey, seconds: float) -> None:
        def wake() -> None:
            with self._timers_lock:
                self._timers.pop(key, None)
            self.handle.activator.activate(self.store.members(key).pending)

        timer = threading.Timer(seconds, wake)
        timer.daemon = True
        with self._timers_lock:
            previous = self._timers.pop(key, None)
            self._timers[key] = timer
        if previous is not None:
            previous.cancel()
        timer.start()

    def _report(self, group: PodGroup, status: PodGroupStatus) -> None:
        sink = self.handle.group_status
        if sink is not None:
            sink.report(group, status)
