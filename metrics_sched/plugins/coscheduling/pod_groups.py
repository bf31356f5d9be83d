"""The pod groups the scheduler knows of, and which pods belong to each.

Groups come from two APIs (metrics_sched.model.group_membership): scheduler-plugins' PodGroup CRD
(`scheduling.x-k8s.io/v1alpha1`: spec.minMember, spec.scheduleTimeoutSeconds, spec.minResources) and the 1.36
Workload API's PodGroup (`scheduling.k8s.io/v1alpha2`: spec.schedulingPolicy.gang.minCount, or `basic`, which
is no gang at all; spec.schedulingConstraints.topologyConstraints[0].topologyKey). Either may carry the
annotation `metrics-sched.io/topology-key` to choose the topology domain a gang is placed in as a whole.

Members are counted from the pod watch: every pod naming the group that is not finished, pending or bound,
as Coscheduling counts them from its pod lister. Changes come from the watch threads, reads from the
scheduling thread and Permit timers: one lock.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from metrics_sched.framework import (
    ApiKind,
    ClusterIndex,
    EventType,
    GroupApi,
    GroupKey,
    GroupRefError,
    IndexChange,
    KubeObject,
    PodGroupApi,
    PodInfo,
    QuantityError,
    Resources,
    group_of,
    parse_resource_list,
)

__all__ = ["POD_GROUP_KINDS", "TOPOLOGY_KEY_ANNOTATION", "GroupMembers", "PodGroup", "PodGroupStore",
           "parse_pod_group"]

# The topology key a gang is placed within, on either API's PodGroup (the Workload API's own
# topologyConstraints win when both are set).
TOPOLOGY_KEY_ANNOTATION = "metrics-sched.io/topology-key"

# The PodGroups of either gang API, by the name the source reports them under: the CRD, and the Workload API's as
# 1.36 (v1alpha2) and 1.37 (v1beta1) serve it. Each is watched only where it is served; none is awaited before
# scheduling starts: a member whose group has not been listed yet waits (Unschedulable) and is woken when it comes.
_SERVED: dict[str, PodGroupApi] = {
    "podgroups.scheduling.x-k8s.io": "scheduling.x-k8s.io/v1alpha1",
    "podgroups.scheduling.k8s.io/v1alpha2": "scheduling.k8s.io/v1alpha2",
    "podgroups.scheduling.k8s.io/v1beta1": "scheduling.k8s.io/v1beta1",
}
POD_GROUP_KINDS = tuple(ApiKind(api, "podgroups", name=name, awaited=False, optional=True)
                        for name, api in _SERVED.items())


@dataclass(frozen=True)
class PodGroup:
    key: GroupKey
    uid: str
    created: float  # unix seconds (creationTimestamp), the group's place in the queue
    min_member: int  # members that must be placed together; 0 for a group without a gang policy
    timeout: float | None  # seconds a member waits at Permit for the others; None: the plugin's default
    topology_key: str | None = None
    min_resources: Resources = field(default_factory=dict)
    error: str | None = None  # the object cannot be honoured (e.g. a malformed minResources): members wait
    served: PodGroupApi = "scheduling.x-k8s.io/v1alpha1"  # the group version it came from (status is written there)

    @property
    def gang(self) -> bool:
        return self.min_member > 0


def _created(meta: Mapping[str, Any]) -> float:
    value = meta.get("creationTimestamp")
    if not isinstance(value, str) or not value:
        return 0.0
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def _positive_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def parse_pod_group(api: GroupApi, obj: Mapping[str, Any], served: PodGroupApi | None = None) -> PodGroup:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    key = GroupKey(api, str(meta.get("namespace", "")), str(meta.get("name", "")))
    annotations = meta.get("annotations") or {}
    topology_key = annotations.get(TOPOLOGY_KEY_ANNOTATION) or None
    uid, created = str(meta.get("uid", "")), _created(meta)
    if api == GroupApi.COSCHEDULING:
        try:
            min_resources = parse_resource_list(spec.get("minResources"), "spec.minResources")
            error = None
        except QuantityError as exc:
            min_resources, error = {}, str(exc)
        # minMember is optional in the CRD; absent (or 0) Coscheduling lets every member through on its own.
        return PodGroup(key, uid, created, min_member=_positive_int(spec.get("minMember")) or 0,
                        timeout=float(t) if (t := _positive_int(spec.get("scheduleTimeoutSeconds"))) else None,
                        topology_key=topology_key, min_resources=min_resources, error=error,
                        served=served or "scheduling.x-k8s.io/v1alpha1")
    policy = spec.get("schedulingPolicy") or {}
    gang = policy.get("gang")
    constraints = (spec.get("schedulingConstraints") or {}).get("topologyConstraints") or []
    if constraints and isinstance(constraints[0], Mapping) and constraints[0].get("topologyKey"):
        topology_key = str(constraints[0]["topologyKey"])
    min_count = _positive_int(gang.get("minCount")) if isinstance(gang, Mapping) else None
    error = None
    if isinstance(gang, Mapping) and min_count is None:
        error = "spec.schedulingPolicy.gang.minCount is not a positive integer"
    return PodGroup(key, uid, created, min_member=min_count or 0, timeout=None, topology_key=topology_key, error=error,
                    served=served or "scheduling.k8s.io/v1alpha2")


@dataclass
class GroupMembers:
    pending: dict[str, PodInfo] = field(default_factory=dict)  # uid -> the pod as last seen, unbound
    bound: set[str] = field(default_factory=set)  # uids bound to a node (by anyone)
    gated: set[str] = field(default_factory=set)  # pending uids with schedulingGates: not yet schedulable

    @property
    def count(self) -> int:
        return len(self.pending) + len(self.bound)


class PodGroupStore(ClusterIndex):
    kinds = POD_GROUP_KINDS

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._groups: dict[GroupKey, PodGroup] = {}
        self._members: dict[GroupKey, GroupMembers] = {}
        self._pod_group: dict[str, GroupKey] = {}  # pod uid -> its group
        self.generation = 0

    # -- groups ----------------------------------------------------------------------------------
    def upsert(self, served: PodGroupApi, obj: Mapping[str, Any]) -> tuple[PodGroup, PodGroup | None]:
        """The PodGroup from the `served` group version: (the group now, as it was before or None if new)."""
        group = parse_pod_group(GroupApi.of(served), obj, served)
        with self._lock:
            before = self._groups.get(group.key)
            self._groups[group.key] = group
            self.generation += 1
        return group, before

    def remove(self, served: PodGroupApi, obj: Mapping[str, Any]) -> GroupKey:
        meta = obj.get("metadata") or {}
        key = GroupKey(GroupApi.of(served), str(meta.get("namespace", "")), str(meta.get("name", "")))
        with self._lock:
            self._groups.pop(key, None)
            self.generation += 1
        return key

    def on_event(self, kind: ApiKind, event: EventType, obj: KubeObject) -> IndexChange | None:
        if event == "DELETED":
            self.remove(_SERVED[kind.name], obj)  # its members wait (PreFilter) until it is created again
            return None
        group, _ = self.upsert(_SERVED[kind.name], obj)
        # New, or changed (e.g. minMember lowered): its members may go on now.
        return IndexChange(activate=self.members(group.key).pending)

    def on_pod(self, event: EventType, pod: PodInfo) -> IndexChange | None:
        """Membership: a group that gains a member (or whose member loses its gates) may reach its quorum, so its
        waiting members get another try at once."""
        if event == "DELETED":
            self.forget_pod(pod.uid)
            return None
        grown = self.observe_pod(pod)
        return None if grown is None else IndexChange(activate=self.members(grown).pending)

    def get(self, key: GroupKey) -> PodGroup | None:
        with self._lock:
            return self._groups.get(key)

    def groups(self) -> list[PodGroup]:
        with self._lock:
            return list(self._groups.values())

    # -- members ---------------------------------------------------------------------------------
    def observe_pod(self, info: PodInfo) -> GroupKey | None:
        """A pod as the watch shows it now; returns its group if that group just gained a member or a member lost
        its schedulingGates (then its waiting members may go on now)."""
        try:
            key = group_of(info)
        except GroupRefError:
            key = None
        with self._lock:
            old = self._pod_group.get(info.uid)
            if old is not None and old != key:
                self._drop(info.uid, old)
            if key is None or info.terminal or info.deleting:
                if old is not None and old == key:
                    self._drop(info.uid, key)
                return None
            members = self._members.setdefault(key, GroupMembers())
            known = info.uid in members.pending or info.uid in members.bound
            was_gated = info.uid in members.gated
            self._pod_group[info.uid] = key
            if info.node_name:
                members.pending.pop(info.uid, None)
                members.gated.discard(info.uid)
                members.bound.add(info.uid)
            else:
                members.pending[info.uid] = info
                if info.scheduling_gates:
                    members.gated.add(info.uid)
                else:
                    members.gated.discard(info.uid)
            return key if not known or was_gated != (info.uid in members.gated) else None

    def forget_pod(self, uid: str) -> GroupKey | None:
        with self._lock:
            key = self._pod_group.get(uid)
            if key is not None:
                self._drop(uid, key)
            return key

    def _drop(self, uid: str, key: GroupKey) -> None:
        self._pod_group.pop(uid, None)
        members = self._members.get(key)
        if members is None:
            return
        members.pending.pop(uid, None)
        members.bound.discard(uid)
        members.gated.discard(uid)
        if not members.count:
            del self._members[key]

    def members(self, key: GroupKey) -> GroupMembers:
        """A copy of the group's members now."""
        with self._lock:
            found = self._members.get(key)
            if found is None:
                return GroupMembers()
            return GroupMembers(dict(found.pending), set(found.bound), set(found.gated))

    def member_count(self, key: GroupKey) -> tuple[int, int, int]:
        """(members, of which bound, of which gated)."""
        with self._lock:
            found = self._members.get(key)
            return (found.count, len(found.bound), len(found.gated)) if found is not None else (0, 0, 0)

    def pending_gangs(self) -> int:
        """Gangs with members waiting to be placed and fewer than minMember bound (the pending-groups gauge)."""
        with self._lock:
            return sum(1 for key, group in self._groups.items()
                       if group.gang and (m := self._members.get(key)) is not None and m.pending
                       and len(m.bound) < group.min_member)
