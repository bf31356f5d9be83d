"""Cluster events and queueing hints (kube-scheduler's EventsToRegister / QueueingHintFn).

A plugin that rejected a pod names the events that may make it schedulable; each may carry a hint,
a function that looks at the pod and the event's object and answers QUEUE or SKIP, so a parked pod
moves only when an event can actually help it.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from metrics_sched.model.podinfo import PodInfo

__all__ = ["ALL_EVENTS", "ClusterEvent", "EventHint", "HintFn", "QueueingHint"]


class ClusterEvent(enum.StrEnum):
    NODE_ADDED = "NodeAdd"
    NODE_ALLOCATABLE = "NodeAllocatableChange"
    NODE_SCHEDULABLE = "NodeSchedulableChange"
    NODE_LABELS = "NodeLabelChange"
    NODE_TAINTS = "NodeTaintChange"
    POD_ADDED = "AssignedPodAdd"
    POD_LABELS = "AssignedPodUpdateLabel"  # a placed pod's labels changed (or it started terminating)
    POD_DELETED = "AssignedPodDelete"
    NAMESPACE_LABELS = "NamespaceLabelChange"  # a namespace appeared or its labels changed
    PVC_CHANGED = "PersistentVolumeClaimChange"  # added or updated
    PV_CHANGED = "PersistentVolumeChange"  # added or updated
    STORAGE_CLASS_CHANGED = "StorageClassChange"  # added or updated
    CSI_NODE_CHANGED = "CSINodeChange"  # added or updated
    CSI_DRIVER_CHANGED = "CSIDriverChange"  # added or updated
    CSI_CAPACITY_CHANGED = "CSIStorageCapacityChange"  # added or updated
    VOLUME_DETACHED = "VolumeAttachmentDelete"
    RESOURCE_CLAIM_CHANGED = "ResourceClaimChange"  # added, updated or deleted
    RESOURCE_SLICE_CHANGED = "ResourceSliceChange"  # added or updated
    DEVICE_CLASS_CHANGED = "DeviceClassChange"  # added or updated
    DEVICE_TAINT_RULE_CHANGED = "DeviceTaintRuleChange"  # added, updated or deleted
    METRIC_CHANGED = "MetricChange"


ALL_EVENTS = frozenset(ClusterEvent)


class QueueingHint(enum.Enum):
    QUEUE = "Queue"
    SKIP = "QueueSkip"


# (parked pod, the event's object) -> hint. The object is the NodeRecord for node events, the PodRecord
# placed, relabelled or released for AssignedPod*, the namespace name for NamespaceLabelChange, the parsed
# storage object (metrics_sched.model.volumes) for the storage events, a ClaimChange (old, new) for
# ResourceClaimChange, the object for the other DRA events, the set of refreshed metric names for
# MetricChange.
HintFn = Callable[[PodInfo, Any], QueueingHint]


@dataclass(frozen=True)
class EventHint:
    event: ClusterEvent
    hint: HintFn | None = None  # None: every such event may help

    def admits(self, pod: PodInfo, detail: Any) -> bool:
        return self.hint is None or self.hint(pod, detail) == QueueingHint.QUEUE
