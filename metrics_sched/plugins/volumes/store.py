"""VolumeStore: the cluster's storage objects, with the bindings the scheduler has assumed but not yet written.

PersistentVolumes, claims, StorageClasses, CSINodes, CSIDrivers and CSIStorageCapacities arrive from their
watches (watch threads); the volume plugins read them on the scheduling thread and PreBind waits on them
from bind workers, so one lock guards everything and one condition wakes PreBind when a claim or volume
changes.

Assumed objects (kube-scheduler's assume cache): Reserve records a PV pre-bound to a claim, or a claim given
a selected node, before PreBind writes it, so the next pod's cycle does not pick the same PV. The assumed
version shadows the watched one until the watch delivers any other version of that object (the write
landed, or someone else changed it) or Unreserve restores it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from metrics_sched.framework import (
    ApiKind,
    AttachmentInfo,
    CapacityInfo,
    ClusterEvent,
    ClusterIndex,
    CSIDriverInfo,
    CSINodeInfo,
    EventType,
    IndexChange,
    KubeObject,
    PersistentVolume,
    PersistentVolumeClaim,
    StorageClass,
    blocking,
    claim_key,
    parse_attachment,
    parse_capacity,
    parse_claim,
    parse_csi_driver,
    parse_csi_node,
    parse_storage_class,
    parse_volume,
)

__all__ = ["STORAGE_KINDS", "AssumeConflict", "VolumeStore"]

# The storage objects the volume plugins read (volume binding, zones, restrictions, CSI limits).
STORAGE_KINDS = (
    ApiKind("v1", "persistentvolumes"),
    ApiKind("v1", "persistentvolumeclaims"),
    *(ApiKind("storage.k8s.io/v1", resource) for resource in (
        "storageclasses", "csinodes", "csidrivers", "csistoragecapacities", "volumeattachments")),
)

T = TypeVar("T")


class AssumeConflict(ValueError):
    """The object to assume is gone, or the watch has delivered another version than the one decided on."""


class VolumeStore(ClusterIndex):
    kinds = STORAGE_KINDS

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._volumes: dict[str, PersistentVolume] = {}
        self._by_class: dict[str, set[str]] = {}  # storage class -> PV names (matching scans one class)
        self._claims: dict[str, PersistentVolumeClaim] = {}
        self._classes: dict[str, StorageClass] = {}
        self._csi_nodes: dict[str, CSINodeInfo] = {}
        self._csi_drivers: dict[str, CSIDriverInfo] = {}
        self._capacities: dict[str, CapacityInfo] = {}
        self._attachments: dict[str, AttachmentInfo] = {}
        # name/key -> (assumed object, resourceVersion of the watched object it shadows)
        self._assumed_volumes: dict[str, tuple[PersistentVolume, str]] = {}
        self._assumed_claims: dict[str, tuple[PersistentVolumeClaim, str]] = {}
        self._generation = 0

    # -- watches ---------------------------------------------------------------------------------
    def on_event(self, kind: ApiKind, event: EventType, obj: KubeObject) -> IndexChange | None:
        meta = obj.get("metadata") or {}
        name = str(meta.get("name", ""))
        if kind.resource == "volumeattachments":
            # Only a detach can help (NodeVolumeLimits counts attachments): kube-scheduler's VolumeAttachment Delete.
            if event == "DELETED":
                return IndexChange(ClusterEvent.VOLUME_DETACHED, self.remove_attachment(name))
            self.upsert_attachment(obj)
            return None
        if event == "DELETED":
            # Deleting storage helps no parked pod (kube-scheduler registers adds and updates only).
            key = claim_key(str(meta.get("namespace", "")), name) if kind.resource in _NAMESPACED else name
            _REMOVE[kind.resource](self, key)
            return None
        parsed, cluster_event = _UPSERT[kind.resource](self, obj)
        return IndexChange(cluster_event, parsed)

    def _bump(self) -> None:
        self._generation += 1
        self._changed.notify_all()

    def upsert_volume(self, obj: Mapping[str, Any]) -> PersistentVolume:
        pv = parse_volume(obj)
        with self._lock:
            old = self._volumes.get(pv.name)
            if old is not None and old.storage_class != pv.storage_class:
                self._unindex(old)
            self._volumes[pv.name] = pv
            self._by_class.setdefault(pv.storage_class, set()).add(pv.name)
            assumed = self._assumed_volumes.get(pv.name)
            if assumed is not None and assumed[1] != pv.resource_version:
                del self._assumed_volumes[pv.name]
            self._bump()
        return pv

    def _unindex(self, pv: PersistentVolume) -> None:
        names = self._by_class.get(pv.storage_class)
        if names is not None:
            names.discard(pv.name)
            if not names:
                del self._by_class[pv.storage_class]

    def remove_volume(self, name: str) -> None:
        with self._lock:
            old = self._volumes.pop(name, None)
            if old is not None:
                self._unindex(old)
            self._assumed_volumes.pop(name, None)
            self._bump()

    def upsert_claim(self, obj: Mapping[str, Any]) -> PersistentVolumeClaim:
        claim = parse_claim(obj)
        with self._lock:
            self._claims[claim.key] = claim
            assumed = self._assumed_claims.get(claim.key)
            if assumed is not None and assumed[1] != claim.resource_version:
                del self._assumed_claims[claim.key]
            self._bump()
        return claim

    def remove_claim(self, key: str) -> None:
        with self._lock:
            self._claims.pop(key, None)
            self._assumed_claims.pop(key, None)
            self._bump()

    def upsert_class(self, obj: Mapping[str, Any]) -> StorageClass:
        storage_class = parse_storage_class(obj)
        with self._lock:
            self._classes[storage_class.name] = storage_class
            self._bump()
        return storage_class

    def remove_class(self, name: str) -> None:
        with self._lock:
            self._classes.pop(name, None)
            self._bump()

    def upsert_csi_node(self, obj: Mapping[str, Any]) -> CSINodeInfo:
        info = parse_csi_node(obj)
        with self._lock:
            self._csi_nodes[info.name] = info
            self._bump()
        return info

    def remove_csi_node(self, name: str) -> None:
        with self._lock:
            self._csi_nodes.pop(name, None)
            self._bump()

    def upsert_csi_driver(self, obj: Mapping[str, Any]) -> CSIDriverInfo:
        info = parse_csi_driver(obj)
        with self._lock:
            self._csi_drivers[info.name] = info
            self._bump()
        return info

    def remove_csi_driver(self, name: str) -> None:
        with self._lock:
            self._csi_drivers.pop(name, None)
            self._bump()

    def upsert_capacity(self, obj: Mapping[str, Any]) -> CapacityInfo:
        info = parse_capacity(obj)
        with self._lock:
            self._capacities[info.key] = info
            self._bump()
        return info

    def remove_capacity(self, key: str) -> None:
        with self._lock:
            self._capacities.pop(key, None)
            self._bump()

    def upsert_attachment(self, obj: Mapping[str, Any]) -> AttachmentInfo:
        info = parse_attachment(obj)
        with self._lock:
            self._attachments[info.name] = info
            self._bump()
        return info

    def remove_attachment(self, name: str) -> AttachmentInfo | None:
        with self._lock:
            info = self._attachments.pop(name, None)
            self._bump()
            return info

    # -- reads (assumed versions win) ------------------------------------------------------------
    @property
    def generation(self) -> int:
        """Bumped on every change, assumed ones included: masks computed from the store are valid until it moves."""
        with self._lock:
            return self._generation

    def volume(self, name: str) -> PersistentVolume | None:
        with self._lock:
            assumed = self._assumed_volumes.get(name)
            return assumed[0] if assumed is not None else self._volumes.get(name)

    def claim(self, key: str) -> PersistentVolumeClaim | None:
        with self._lock:
            assumed = self._assumed_claims.get(key)
            return assumed[0] if assumed is not None else self._claims.get(key)

    def storage_class(self, name: str) -> StorageClass | None:
        with self._lock:
            return self._classes.get(name)

    def csi_node(self, name: str) -> CSINodeInfo | None:
        with self._lock:
            return self._csi_nodes.get(name)

    def csi_nodes(self) -> list[CSINodeInfo]:
        with self._lock:
            return list(self._csi_nodes.values())

    def csi_driver(self, name: str) -> CSIDriverInfo | None:
        with self._lock:
            return self._csi_drivers.get(name)

    def capacities(self, storage_class: str) -> list[CapacityInfo]:
        with self._lock:
            return [c for c in self._capacities.values() if c.storage_class == storage_class]

    def attachments(self) -> list[AttachmentInfo]:
        with self._lock:
            return list(self._attachments.values())

    def volumes_of_class(self, storage_class: str) -> list[PersistentVolume]:
        """The PVs of one class (assumed versions where there are), sorted by name for stable choices."""
        with self._lock:
            found = []
            for name in sorted(self._by_class.get(storage_class, ())):
                assumed = self._assumed_volumes.get(name)
                found.append(assumed[0] if assumed is not None else self._volumes[name])
            return found

    def counts(self) -> dict[str, int]:
        """Objects held, per kind (for metrics and the memory tests)."""
        with self._lock:
            return {"persistentvolumes": len(self._volumes), "persistentvolumeclaims": len(self._claims),
                    "storageclasses": len(self._classes), "csinodes": len(self._csi_nodes),
                    "csidrivers": len(self._csi_drivers), "csistoragecapacities": len(self._capacities),
                    "volumeattachments": len(self._attachments),
                    "assumed": len(self._assumed_volumes) + len(self._assumed_claims)}

    # -- assume cache ----------------------------------------------------------------------------
    def assume_volume(self, pv: PersistentVolume, decided_on: str) -> None:
        """Records `pv` (e.g. with a claimRef) until its write is seen or restore_volume. `decided_on` is the
        resourceVersion the decision read: checked against the watched one in the same step (AssumeConflict)."""
        with self._lock:
            watched = self._volumes.get(pv.name)
            _check_version(pv.name, watched.resource_version if watched else None, decided_on)
            self._assumed_volumes[pv.name] = (pv, decided_on)
            self._bump()

    def restore_volume(self, name: str) -> None:
        with self._lock:
            if self._assumed_volumes.pop(name, None) is not None:
                self._bump()

    def assume_claim(self, claim: PersistentVolumeClaim, decided_on: str) -> None:
        with self._lock:
            watched = self._claims.get(claim.key)
            _check_version(claim.key, watched.resource_version if watched else None, decided_on)
            self._assumed_claims[claim.key] = (claim, decided_on)
            self._bump()

    def restore_claim(self, key: str) -> None:
        with self._lock:
            if self._assumed_claims.pop(key, None) is not None:
                self._bump()

    def watched_volume(self, name: str) -> PersistentVolume | None:
        """The PV as the watch last delivered it (what a write must be conditional on)."""
        with self._lock:
            return self._volumes.get(name)

    def watched_claim(self, key: str) -> PersistentVolumeClaim | None:
        with self._lock:
            return self._claims.get(key)

    def assumed(self) -> tuple[list[str], list[str]]:
        """Names of assumed PVs and keys of assumed claims (a test or the comparer checks none are left)."""
        with self._lock:
            return sorted(self._assumed_volumes), sorted(self._assumed_claims)

    # -- waiting ---------------------------------------------------------------------------------
    def wait_for(self, check: Callable[[], T | None], timeout: float,
                 stop: Callable[[], bool] = lambda: False) -> T | None:
        """Calls check() (without the lock held) now and after each change until it answers something other
        than None, `stop()` turns true, or `timeout` seconds pass; returns the last answer. A bind worker waiting
        here is replaced in its pool meanwhile (framework.worker_waits.blocking)."""
        deadline = time.monotonic() + timeout
        with blocking():
            while True:
                with self._lock:
                    seen = self._generation
                answer = check()
                if answer is not None or stop():
                    return answer
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                with self._lock:
                    if self._generation == seen:
                        # Bounded so `stop` is looked at even when nothing changes.
                        self._changed.wait(min(left, 1.0))


def _check_version(key: str, watched: str | None, decided_on: str) -> None:
    """The assume cache's check (upstream: "is out of sync"), under the store's lock with the assume itself."""
    if watched is None:
        raise AssumeConflict(f'"{key}" is gone')
    if watched != decided_on:
        raise AssumeConflict(f'"{key}" is out of sync (stored: {watched}, assume: {decided_on})')


_NAMESPACED = frozenset({"persistentvolumeclaims", "csistoragecapacities"})
_UPSERT: dict[str, Callable[[VolumeStore, KubeObject], tuple[object, ClusterEvent]]] = {
    "persistentvolumes": lambda v, o: (v.upsert_volume(o), ClusterEvent.PV_CHANGED),
    "persistentvolumeclaims": lambda v, o: (v.upsert_claim(o), ClusterEvent.PVC_CHANGED),
    "storageclasses": lambda v, o: (v.upsert_class(o), ClusterEvent.STORAGE_CLASS_CHANGED),
    "csinodes": lambda v, o: (v.upsert_csi_node(o), ClusterEvent.CSI_NODE_CHANGED),
    "csidrivers": lambda v, o: (v.upsert_csi_driver(o), ClusterEvent.CSI_DRIVER_CHANGED),
    "csistoragecapacities": lambda v, o: (v.upsert_capacity(o), ClusterEvent.CSI_CAPACITY_CHANGED),
}
_REMOVE: dict[str, Callable[[VolumeStore, str], None]] = {
    "persistentvolumes": VolumeStore.remove_volume,
    "persistentvolumeclaims": VolumeStore.remove_claim,
    "storageclasses": VolumeStore.remove_class,
    "csinodes": VolumeStore.remove_csi_node,
    "csidrivers": VolumeStore.remove_csi_driver,
    "csistoragecapacities": VolumeStore.remove_capacity,
}
