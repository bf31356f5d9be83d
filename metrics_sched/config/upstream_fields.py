"""What kube-scheduler's KubeSchedulerConfiguration v1 has that metrics-sched accepts without honouring,
and the warnings that say so: a file written for kube-scheduler loads, and every field that does nothing
here is named once (logged at load, printed by `check-config`).
"""

from __future__ import annotations

from dataclasses import dataclass

# Extension points of upstream v1 (pod-group scheduling) that metrics-sched has no plugins for.
NO_EFFECT_POINTS = ("placementGenerate", "placementScore")

# kube-scheduler's in-tree plugins (k8s.io/kubernetes pkg/scheduler/framework/plugins/names, v1.36). Those of
# them metrics-sched lacks (NodeDeclaredFeatures, ...) are ignored with a warning where a file enables them; any
# other unknown name is still an error (a typo must not pass).
UPSTREAM_PLUGINS = frozenset({
    "PrioritySort", "DefaultBinder", "DefaultPreemption", "DynamicResources", "GangScheduling", "ImageLocality",
    "InterPodAffinity", "NodeAffinity", "NodeDeclaredFeatures", "NodeName", "NodePorts",
    "NodeResourcesBalancedAllocation", "NodeResourcesFit", "NodeUnschedulable", "NodeVolumeLimits",
    "PodTopologySpread", "SchedulingGates", "TaintToleration", "VolumeBinding", "VolumeRestrictions", "VolumeZone",
    "TopologyPlacementGenerator", "PodGroupPodsCount",
})

# Upstream plugins whose job a metrics-sched plugin of another name does (a file naming them is warned, whether it
# enables or disables them, since the entry changes nothing here).
UPSTREAM_COUNTERPARTS = {
    "GangScheduling": "Coscheduling (gangs of the Workload API and of scheduler-plugins' PodGroup)",
}

# Upstream plugins whose behaviour metrics-sched has built in, always on: enabling one is silent (it is what happens
# anyway), disabling one is warned (it cannot be switched off here). SchedulingGates is upstream's PreEnqueue
# plugin; here the queue itself keeps a pod with spec.schedulingGates out until they are removed
# (scheduler/queue.py), and the API server refuses to bind a gated pod anyway.
ALWAYS_ON = {
    "SchedulingGates": "the queue always holds back pods with spec.schedulingGates until they are removed",
}

# The only wire format the API client speaks; upstream's protobuf is accepted and JSON used instead.
JSON_CONTENT_TYPE = "application/json"
PROTOBUF_CONTENT_TYPE = "application/vnd.kubernetes.protobuf"


@dataclass(frozen=True)
class ConfigWarning:
    """An accepted field that has no (or a different) effect here; `field` is its full path."""

    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


class WarningLog:
    """Collects the warnings of one load, one per field."""

    def __init__(self) -> None:
        self._by_field: dict[str, ConfigWarning] = {}

    def warn(self, field: str, message: str) -> None:
        self._by_field.setdefault(field, ConfigWarning(field, message))

    def collected(self) -> tuple[ConfigWarning, ...]:
        return tuple(self._by_field.values())
