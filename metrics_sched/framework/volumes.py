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
    CapacityInfo,
    ClaimRef,
    CSIDriverInfo,
    CSINodeInfo,
    PersistentVolume,
    PersistentVolumeClaim,
    PodVolumes,
    StorageClass,
    claim_key,
    parse_attachment,
    parse_capacity,
    parse_claim,
    parse_csi_driver,
    parse_csi_node,
    parse_storage_class,
    parse_volume,
)
from metrics_sched.state.volume_usage import disks_conflict

__all__ = [
    "ANN_BIND_COMPLETED",
    "ANN_BOUND_BY_CONTROLLER",
    "ANN_SELECTED_NODE",
    "NO_PROVISIONER",
    "AttachmentInfo",
    "CSIDriverInfo",
    "CSINodeInfo",
    "CapacityInfo",
    "ClaimRef",
    "PersistentVolume",
    "PersistentVolumeClaim",
    "PodVolumes",
    "StorageClass",
    "claim_key",
    "disks_conflict",
    "parse_attachment",
    "parse_capacity",
    "parse_claim",
    "parse_csi_driver",
    "parse_csi_node",
    "parse_storage_class",
    "parse_volume",
]
