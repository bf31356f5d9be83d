"""Which pods on a bad node may be moved at all (before any simulation).

A pod is ours to move if one of our profiles placed it (its schedulerName) or it matches the configured
label selector; it is never moved if a DaemonSet owns it (it would come back on the same node), it is a static
pod's mirror (the kubelet owns it), it is standalone (nothing would re-create it), it is annotated
`metrics-sched.io/evictable: "false"`, its priority is above the cap, or it is already leaving (terminating)
or not yet bound (only assumed by us).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from metrics_sched.state.cluster_state import EVICTABLE_ANNOTATION, Disruption
from metrics_sched.state.pod_record import PodRecord

__all__ = ["VictimPolicy", "refusal"]


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


@dataclass(frozen=True)
class VictimPolicy:
    scheduler_names: frozenset[str]
    pod_selector: Mapping[str, str]  # matchLabels, ANDed; empty: no selector (not "everything")
    max_priority: int | None

    def ours(self, pod: PodRecord) -> bool:
        if pod.scheduler_name in self.scheduler_names:
            return True
        return bool(self.pod_selector) and all(pod.labels.get(k) == v for k, v in self.pod_selector.items())

    def movable(self, pod: PodRecord) -> bool:
        if pod.assumed or pod.terminating or not self.ours(pod):
            return False
        facts = Disruption(pod.controller, pod.mirror, pod.evictable)
        return refusal(facts, pod.priority, self.max_priority) is None

    def on(self, pods: Iterable[PodRecord], nodes: Mapping[str, object]) -> list[PodRecord]:
        """The movable pods placed on `nodes` (hold the cluster lock: one pass over the placed pods)."""
        return [p for p in pods if p.node in nodes and p.row is not None and self.movable(p)]
