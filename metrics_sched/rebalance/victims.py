"""Which pods on a bad node may be moved at all (before any simulation).

A pod is ours to move if one of our profiles placed it (its schedulerName) or it matches the configured
label selector; it is never moved if a DaemonSet owns it (it would come back on the same node), it is a static
pod's mirror (the kubelet owns it), it is standalone (nothing would re-create it), it is annotated
`metrics-sched.io/evictable: "false"`, its priority is above the cap, or it is already leaving (terminating)
or not yet bound (only assumed by us).

What the state does not keep is judged on the pod as read again before the simulation (`kept`): the
annotation Cluster Autoscaler honours (`cluster-autoscaler.kubernetes.io/safe-to-evict: "false"`), a gang
(PodGroup or Workload scheduling group: never split, so a member is not moved alone, unless `gangs: whole`
moves it with its whole gang), and local storage (an
emptyDir that is not memory-backed: its data dies with the pod), unless `evictLocalStoragePods` or the pod opts
in as the Descheduler and Cluster Autoscaler read it (`descheduler.alpha.kubernetes.io/evict` present,
`safe-to-evict: "true"`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from metrics_sched.config.model import SelectorExpression
from metrics_sched.model.group_membership import GroupRefError, group_of_raw
from metrics_sched.model.selectors import LabelSelector
from metrics_sched.state.cluster_state import EVICTABLE_ANNOTATION, Disruption
from metrics_sched.state.pod_record import PodRecord

__all__ = ["DESCHEDULER_EVICT_ANNOTATION", "SAFE_TO_EVICT_ANNOTATION", "VictimPolicy", "kept", "refusal", "selector"]

SAFE_TO_EVICT_ANNOTATION = "cluster-autoscaler.kubernetes.io/safe-to-evict"
DESCHEDULER_EVICT_ANNOTATION = "descheduler.alpha.kubernetes.io/evict"


def refusal(facts: Disruption, priority: int, max_priority: int | None) -> str | None:
    """Why a pod may never be evicted, or None. The same rules for the state's record and for the pod as read
    again just before the simulation (an annotation may have been added since it was placed)."""
    if facts.mirror:
        return "a static pod's mirror"
    if facts.controller is None:
        return "standalone (no controller would re-create it)"
    if facts.controller.startswith("DaemonSet/"):
        return f"owned by {facts.controller}"
    if not facts.evictable:
        return f'annotated {EVICTABLE_ANNOTATION}: "false"'
    if max_priority is not None and priority > max_priority:
        return f"priority {priority} above {max_priority}"
    return None


def kept(pod: Mapping[str, Any], evict_local_storage: bool, *, whole_gangs: bool = False) -> str | None:
    """Why the pod as read again stays where it is (an annotation, a gang, local storage), or None. `whole_gangs`
    (rebalance.gangs: whole): a gang member is not kept for being one (its gang moves whole, gang.py)."""
    metadata: Mapping[str, Any] = pod.get("metadata") or {}
    spec: Mapping[str, Any] = pod.get("spec") or {}
    annotations: Mapping[str, Any] = metadata.get("annotations") or {}
    safe_to_evict = annotations.get(SAFE_TO_EVICT_ANNOTATION)
    if safe_to_evict == "false":
        return f'annotated {SAFE_TO_EVICT_ANNOTATION}: "false"'
    try:
        group = group_of_raw(str(metadata.get("namespace") or ""), metadata.get("labels") or {}, spec)
    except GroupRefError as exc:  # a gang reference the scheduler cannot honour is still a gang
        return f"a member of a gang ({exc}): a gang is never split"
    if group is not None and not whole_gangs:
        return f"a member of gang {group} ({group.api.value} PodGroup): a gang is never split"
    if evict_local_storage or DESCHEDULER_EVICT_ANNOTATION in annotations or safe_to_evict == "true":
        return None
    for volume in spec.get("volumes") or ():
        empty_dir = volume.get("emptyDir") if isinstance(volume, Mapping) else None
        if isinstance(empty_dir, Mapping) and empty_dir.get("medium") != "Memory":
            return (f"local storage: emptyDir {volume.get('name')} is not memory-backed "
                    "(rebalance.evictLocalStoragePods: false)")
    return None


def selector(match_labels: Mapping[str, str], expressions: Iterable[SelectorExpression]) -> LabelSelector | None:
    """The configured podSelector; None when it has no requirement (no selector, not "everything")."""
    parsed = LabelSelector.parse({
        "matchLabels": dict(match_labels),
        "matchExpressions": [{"key": e.key, "operator": e.operator, "values": list(e.values)} for e in expressions]})
    return parsed if parsed.requirements else None


@dataclass(frozen=True)
class VictimPolicy:
    scheduler_names: frozenset[str]
    pod_selector: LabelSelector | None  # None: no selector (not "everything")
    max_priority: int | None

    def ours(self, pod: PodRecord) -> bool:
        if pod.scheduler_name in self.scheduler_names:
            return True
        return self.pod_selector is not None and self.pod_selector.matches(pod.labels)

    def movable(self, pod: PodRecord) -> bool:
        if pod.assumed or pod.terminating or not self.ours(pod):
            return False
        facts = Disruption(pod.controller, pod.mirror, pod.evictable)
        return refusal(facts, pod.priority, self.max_priority) is None

    def refusal(self, pod: PodRecord) -> str | None:
        """Why the pod is not movable, in words (a gang member's, which keeps its whole gang), or None."""
        if pod.assumed:
            return "not yet bound"
        if pod.terminating:
            return "already terminating"
        if not self.ours(pod):
            return f"placed by {pod.scheduler_name or 'another scheduler'} and not matched by rebalance.podSelector"
        return refusal(Disruption(pod.controller, pod.mirror, pod.evictable), pod.priority, self.max_priority)

    def on(self, pods: Iterable[PodRecord], nodes: Mapping[str, object]) -> list[PodRecord]:
        """The movable pods placed on `nodes` (hold the cluster lock: one pass over the placed pods)."""
        return [p for p in pods if p.node in nodes and p.row is not None and self.movable(p)]
