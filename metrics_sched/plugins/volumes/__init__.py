"""The volume plugins' shared library (not a plugin): VolumeStore, the cluster index of storage objects that
VolumeBinding, VolumeZone, VolumeRestrictions and NodeVolumeLimits declare and read."""

from metrics_sched.plugins.volumes.store import STORAGE_KINDS, AssumeConflict, VolumeStore

__all__ = ["STORAGE_KINDS", "AssumeConflict", "VolumeStore"]
