"""The SDK's storage types: PersistentVolumes, claims and StorageClasses as plugins read them, the annotations
volume binding writes, what a pod mounts, and upstream's in-line disk conflict rule.

Re-exported from `metrics_sched.framework`, which is where plugins import them from; this module only groups them.
"""

from metrics_sched.model.volumes import (
    ANN_BIND_COMPLETED,
    ANN_BOUND_BY_CONTROLLER,
    ANN_SELECTED_NODE,
    NO_PROVISIONER,
    AttachmentInfo,
    ClaimRef,
    PersistentVolume,
    PersistentVolumeClaim,
    PodVolumes,
    StorageClass,
    claim_key,
)
from metrics_sched.state.volume_usage import disks_conflict

__all__ = [
    "ANN_BIND_COMPLETED",
    "ANN_BOUND_BY_CONTROLLER",
    "ANN_SELECTED_NODE",
    "NO_PROVISIONER",
    "AttachmentInfo",
    "ClaimRef",
    "PersistentVolume",
    "PersistentVolumeClaim",
    "PodVolumes",
    "StorageClass",
    "claim_key",
    "disks_conflict",
]
