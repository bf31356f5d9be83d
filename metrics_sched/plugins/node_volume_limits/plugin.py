"""NodeVolumeLimits: a node's CSI drivers cap how many volumes they attach, as kube-scheduler 1.36's
NodeVolumeLimits plugin (`CSILimits`, pkg/scheduler/framework/plugins/nodevolumelimits) decides it.

Limits come only from the node's CSINode: `allocatable.count` per driver (no CSINode, or a driver without a
count: no limit). A volume is named `<driver>/<handle>`, so a volume shared by several pods counts once:
- a claim bound to a CSI PV: the PV's driver and volumeHandle;
- a claim bound to an in-tree PV whose plugin migrates to CSI (aws-ebs, gce-pd, azure-disk, cinder, portworx):
  that CSI driver, with the PV's name as handle (only equality matters; the model keeps no in-tree disk id);
- a claim not bound yet, or bound to a PV that does not exist: its class's provisioner (an in-tree one by its
  CSI name), with a placeholder handle per claim, so pods sharing a pending claim count it once; no class,
  or an unknown one: not counted;
- a generic ephemeral volume: its claim `<pod>-<volume>`, which must be owned by the pod;
- an in-line GCE PD or EBS volume: the CSI driver and the handle the CSI translation library gives it.
Migration counts wherever a CSINode exists, which is everywhere a limit exists.

Per node: the distinct volumes of the placed (and assumed) pods on it, plus its VolumeAttachments whose PV is
a CSI volume not already counted, per driver; the pod's volumes not already on the node are added, and a
driver over its limit rejects the node (Unschedulable: evicting a pod frees an attachment).

The per-row counts are rebuilt only when a pod with volumes is placed or removed, a storage object changes
or a node takes or leaves a row: from the claims and disks in use (VolumeUsage) and the attachments, never
by a loop over nodes.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

import numpy as np

from metrics_sched.framework import (
    SUCCESS,
    AttachmentInfo,
    Batchable,
    BatchScope,
    ClusterEvent,
    Code,
    CycleState,
    EventHint,
    Filtered,
    FilterPlugin,
    Handle,
    IntArray,
    NoArgs,
    NodeTable,
    PersistentVolumeClaim,
    PodInfo,
    PodRecord,
    PreFilterPlugin,
    QueueingHint,
    Reads,
    Status,
    claim_key,
    has_only_local_volumes,
)

from ..volumes import VolumeStore

ERR_REASON_MAX_VOLUME_COUNT = "node(s) exceed max volume count"

# In-line volume kinds the CSI translation library can migrate (IsInlineMigratable), with their CSI driver.
INLINE_MIGRATABLE = {
    "awsElasticBlockStore": "ebs.csi.aws.com",
    "gcePersistentDisk": "pd.csi.storage.gke.io",
    "azureDisk": "disk.csi.azure.com",
    "azureFile": "file.csi.azure.com",
    "cinder": "cinder.csi.openstack.org",
    "portworxVolume": "pxd.portworx.com",
    "vsphereVolume": "csi.vsphere.vmware.com",
}
# The kinds whose migration counts towards limits (isCSIMigrationOn: not azureFile nor vsphereVolume).
_COUNTED_KINDS = {kind: INLINE_MIGRATABLE[kind]
                  for kind in ("awsElasticBlockStore", "gcePersistentDisk", "azureDisk", "cinder", "portworxVolume")}
# In-tree provisioner (a class's) -> CSI driver, for the plugins migration counts; azure-file and
# vsphere-volume are migratable but never counted.
_PLUGIN_DRIVERS = {
    "kubernetes.io/aws-ebs": "ebs.csi.aws.com",
    "kubernetes.io/gce-pd": "pd.csi.storage.gke.io",
    "kubernetes.io/azure-disk": "disk.csi.azure.com",
    "kubernetes.io/cinder": "cinder.csi.openstack.org",
    "kubernetes.io/portworx-volume": "pxd.portworx.com",
}
_UNCOUNTED_PLUGINS = frozenset({"kubernetes.io/azure-file", "kubernetes.io/vsphere-volume"})
_GCE_INLINE_HANDLE = "projects/UNSPECIFIED/zones/UNSPECIFIED/disks/{}"  # the translation's volIDZonalFmt
_IN_TREE_PV_HANDLE = "in-tree-pv:{}"


def ebs_volume_id(volume_id: str) -> str:
    """KubernetesVolumeIDToEBSVolumeID: `aws://<zone>/<vol-id>` -> `<vol-id>`, a bare id as is."""
    if not volume_id.startswith("aws://"):
        return volume_id
    return urlparse(volume_id).path.strip("/")


def inline_volume(kind: str, identity: tuple[str, ...]) -> tuple[str, str] | None:
    """(driver, handle) of an in-line in-tree volume once translated to CSI, None if it is not counted."""
    driver = _COUNTED_KINDS.get(kind)
    if driver is None or not identity:
        return None
    if kind == "awsElasticBlockStore":
        return driver, ebs_volume_id(identity[0])
    if kind == "gcePersistentDisk":
        return driver, _GCE_INLINE_HANDLE.format(identity[0])
    return driver, identity[0]  # azureDisk diskURI, cinder / portworx volumeID


def _raw_volumes(pod: PodInfo) -> list[Mapping[str, Any]]:
    return [v for v in (pod.raw.get("spec") or {}).get("volumes") or () if isinstance(v, Mapping)]


def _migratable_kind(volume: Mapping[str, Any]) -> str | None:
    """The volume's in-tree kind if the CSI translation library can migrate it in-line (IsInlineMigratable)."""
    return next((kind for kind in INLINE_MIGRATABLE if isinstance(volume.get(kind), Mapping)), None)


@dataclass
class _Attached:
    """What the placed pods and the attachments hold, per row (rebuilt when `key` moves)."""

    key: tuple[int, int, int, int]
    rows_by_volume: dict[str, IntArray]  # unique name -> rows where a placed pod uses it
    per_driver: dict[str, IntArray]  # driver -> volumes attached per row (pods and VolumeAttachments)
    limits: dict[str, IntArray]  # driver -> allocatable.count per row, -1 where there is none


class NodeVolumeLimits(PreFilterPlugin, FilterPlugin, Batchable):
    name = "NodeVolumeLimits"
    node_local = True  # the volumes attached to the node's pods
    resolvable_reasons = frozenset({ERR_REASON_MAX_VOLUME_COUNT})  # removing pods detaches their volumes
    indexes = (VolumeStore,)
    events = frozenset({ClusterEvent.CSI_NODE_CHANGED, ClusterEvent.POD_DELETED, ClusterEvent.PVC_CHANGED,
                        ClusterEvent.VOLUME_DETACHED})

    def batch_scope(self, pod: PodInfo) -> BatchScope | None:
        """Opportunistic batching: reads volumes attached across the cluster: a pod with any is not batched."""
        return BatchScope(Reads.NODE) if has_only_local_volumes(pod) else None

    def __init__(self, args: NoArgs, handle: Handle) -> None:
        super().__init__(args, handle)
        self._volumes = handle.index(VolumeStore)
        # Upstream's randomVolumeIDPrefix: a pending claim's placeholder handle can't equal a real one.
        self._pending_prefix = secrets.token_hex(16)
        self._attached: _Attached | None = None

    # -- events ----------------------------------------------------------------------------------
    def events_to_register(self) -> list[EventHint]:
        # Upstream queues a new CSINode and an update that raises some driver's count; the event carries only
        # the new CSINode here, so every CSINode change may help.
        return [EventHint(ClusterEvent.CSI_NODE_CHANGED),
                EventHint(ClusterEvent.POD_DELETED, self._after_pod_deleted),
                EventHint(ClusterEvent.PVC_CHANGED, self._after_claim_added),
                EventHint(ClusterEvent.VOLUME_DETACHED, self._after_detached)]

    @staticmethod
    def _after_pod_deleted(pod: PodInfo, released: PodRecord | None) -> QueueingHint:
        """A deleted pod frees attachments only if it had a claim or an in-line migratable volume."""
        if released is None:
            return QueueingHint.QUEUE
        volumes = released.volumes
        if volumes.claims or any(d.kind in INLINE_MIGRATABLE for d in volumes.disks):
            return QueueingHint.QUEUE
        return QueueingHint.SKIP

    @staticmethod
    def _after_claim_added(pod: PodInfo, claim: object) -> QueueingHint:
        if not isinstance(claim, PersistentVolumeClaim):
            return QueueingHint.QUEUE
        if claim.namespace != pod.namespace:
            return QueueingHint.SKIP
        names = {c.claim for c in pod.volumes.claims}
        return QueueingHint.QUEUE if claim.name in names else QueueingHint.SKIP

    @staticmethod
    def _after_detached(pod: PodInfo, attachment: AttachmentInfo | None) -> QueueingHint:
        """A detach helps a pod with a persistentVolumeClaim volume, or an in-line volume of that driver."""
        if attachment is None:
            return QueueingHint.QUEUE
        for volume in _raw_volumes(pod):
            if isinstance(volume.get("persistentVolumeClaim"), Mapping):
                return QueueingHint.QUEUE
            kind = _migratable_kind(volume)
            if kind is not None and INLINE_MIGRATABLE[kind] == attachment.attacher:
                return QueueingHint.QUEUE
        return QueueingHint.SKIP

    # -- resolving volumes -----------------------------------------------------------------------
    def _from_class(self, claim: PersistentVolumeClaim) -> tuple[str, str] | None:
        """getCSIDriverInfoFromSC: a claim without a (known) PV counts under its class's provisioner."""
        if not claim.storage_class:
            return None
        storage_class = self._volumes.storage_class(claim.storage_class)
        if storage_class is None or storage_class.provisioner in _UNCOUNTED_PLUGINS:
            return None
        driver = _PLUGIN_DRIVERS.get(storage_class.provisioner, storage_class.provisioner)
        return driver, f"{self._pending_prefix}-{claim.namespace}/{claim.name}"

    def _claim_volume(self, claim: PersistentVolumeClaim) -> tuple[str, str] | None:
        """(unique name `<driver>/<handle>`, driver) of the claim's volume, None when it is not counted."""
        resolved: tuple[str, str] | None
        pv = self._volumes.watched_volume(claim.volume_name) if claim.volume_name else None
        if pv is None:
            resolved = self._from_class(claim)
        elif pv.csi_driver is not None:
            resolved = pv.csi_driver, pv.csi_handle or ""
        else:
            driver = _COUNTED_KINDS.get(pv.source_kind)
            resolved = (driver, _IN_TREE_PV_HANDLE.format(pv.name)) if driver else None
        if resolved is None or not resolved[0] or not resolved[1]:
            return None
        return f"{resolved[0]}/{resolved[1]}", resolved[0]

    def _new_volumes(self, pod: PodInfo) -> dict[str, str] | str:
        """The pod's counted volumes (unique name -> driver), or the reason it is rejected on every node."""
        volumes = pod.volumes
        store = self._volumes
        found: dict[str, str] = {}
        for volume in volumes.claims:
            if not volume.claim:
                return "PersistentVolumeClaim had no name"
            claim = store.watched_claim(claim_key(pod.namespace, volume.claim))
            if claim is None:
                return (f"looking up PVC {pod.namespace}/{volume.claim}: "
                        f'persistentvolumeclaim "{volume.claim}" not found')
            if volume.ephemeral and (claim.namespace != pod.namespace or pod.uid not in claim.owner_uids):
                return (f"PVC {claim.namespace}/{claim.name} was not created for pod "
                        f"{pod.namespace}/{pod.name} (pod is not owner)")
            counted = self._claim_volume(claim)
            if counted is not None:
                found[counted[0]] = counted[1]
        for disk in volumes.disks:
            inline = inline_volume(disk.kind, disk.identity)
            if inline is not None:
                found[f"{inline[0]}/{inline[1]}"] = inline[0]
        return found

    # -- per-row counts --------------------------------------------------------------------------
    def _attached_now(self, table: NodeTable) -> _Attached:
        cluster = self.handle.cluster
        store, usage = self._volumes, cluster.volume_usage
        capacity = table.capacity
        with cluster.lock:  # the usage and the table's rows move under it
            # The generations are read before the reads they cover: a change while building shows next time.
            key = (usage.generation, store.generation, capacity, table.rows_generation)
            if self._attached is not None and self._attached.key == key:
                return self._attached
            used: dict[str, tuple[str, set[int]]] = {}  # unique name -> (driver, rows)
            for ckey, rows in usage.claims():
                claim = store.watched_claim(ckey)
                counted = self._claim_volume(claim) if claim is not None else None  # a missing claim: not counted
                if counted is not None:
                    used.setdefault(counted[0], (counted[1], set()))[1].update(rows)
            for (kind, identity), disk_rows in usage.disks():
                inline = inline_volume(kind, identity)
                if inline is not None:
                    used.setdefault(f"{inline[0]}/{inline[1]}", (inline[0], set()))[1].update(disk_rows)
            attachment_rows = [(a, table.index.get(a.node)) for a in store.attachments()]
            limit_rows = [(c, table.index.get(c.name)) for c in store.csi_nodes()]
        rows_by_volume: dict[str, IntArray] = {}
        per_driver: dict[str, IntArray] = {}
        for unique, (driver, held) in used.items():
            rows_array = np.fromiter(sorted(held), dtype=np.int64, count=len(held))
            rows_by_volume[unique] = rows_array
            per_driver.setdefault(driver, np.zeros(capacity, dtype=np.int64))[rows_array] += 1
        counted_attachments: set[tuple[int, str]] = set()
        for attachment, row in attachment_rows:
            if row is None or not attachment.attacher or attachment.volume is None:
                continue
            pv = store.watched_volume(attachment.volume)
            if pv is None or pv.csi_driver is None:
                continue
            unique = f"{attachment.attacher}/{pv.csi_handle or ''}"
            if (row, unique) in counted_attachments or (unique in used and row in used[unique][1]):
                continue
            counted_attachments.add((row, unique))
            per_driver.setdefault(attachment.attacher, np.zeros(capacity, dtype=np.int64))[row] += 1
        limits: dict[str, IntArray] = {}
        for csi_node, row in limit_rows:
            if row is None:
                continue
            for driver, count in csi_node.limits.items():
                if count is not None:
                    limits.setdefault(driver, np.full(capacity, -1, dtype=np.int64))[row] = count
        self._attached = _Attached(key, rows_by_volume, per_driver, limits)
        return self._attached

    # -- extension points ------------------------------------------------------------------------
    def pre_filter(self, cycle: CycleState, pod: PodInfo) -> Status:
        for volume in _raw_volumes(pod):
            if (isinstance(volume.get("persistentVolumeClaim"), Mapping) or isinstance(volume.get("ephemeral"), Mapping)
                    or _migratable_kind(volume) is not None):
                return SUCCESS
        return Status(Code.SKIP)

    def filter(self, cycle: CycleState, pod: PodInfo, table: NodeTable) -> Filtered:
        if not _raw_volumes(pod):
            return Filtered.all(table)
        new = self._new_volumes(pod)
        if isinstance(new, str):
            return Filtered.single(np.zeros(table.capacity, dtype=bool), new)
        if not new:
            return Filtered.all(table)
        attached = self._attached_now(table)
        if not attached.limits:
            return Filtered.all(table)
        by_driver: dict[str, list[str]] = {}
        for unique, driver in new.items():
            by_driver.setdefault(driver, []).append(unique)
        exceeded = np.zeros(table.capacity, dtype=bool)
        for driver, uniques in by_driver.items():
            limit = attached.limits.get(driver)
            if limit is None:
                continue
            count = np.full(table.capacity, len(uniques), dtype=np.int64)
            for unique in uniques:  # a volume already used on a row adds nothing there
                rows = attached.rows_by_volume.get(unique)
                if rows is not None:
                    count[rows] -= 1
            # Only where the pod adds a volume of this driver: a pod that only shares volumes already attached
            # there passes even on a node over its limit (upstream drops attached volumes from the new ones first).
            adds = count > 0
            current = attached.per_driver.get(driver)
            if current is not None:
                count += current
            exceeded |= (limit >= 0) & adds & (count > limit)
        return Filtered(~exceeded, {ERR_REASON_MAX_VOLUME_COUNT: exceeded})
