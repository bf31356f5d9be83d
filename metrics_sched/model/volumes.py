"""Storage objects as the volume plugins read them, parsed once from the API's JSON.

PersistentVolume, PersistentVolumeClaim, StorageClass, CSINode, CSIDriver and CSIStorageCapacity keep only
what scheduling reads (kube-scheduler's volumebinding, volumezone, volumerestrictions and nodevolumelimits
plugins), so the store's memory follows the cluster's objects, not their full JSON. `PodVolumes` is what a
pod's spec.volumes asks of them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from metrics_sched.model.quantity import QuantityError, to_int
from metrics_sched.model.selectors import NOTHING, LabelSelector, SelectorError

__all__ = [
    "ANN_BIND_COMPLETED",
    "ANN_BOUND_BY_CONTROLLER",
    "ANN_SELECTED_NODE",
    "ANN_STORAGE_PROVISIONER",
    "NO_PROVISIONER",
    "NO_VOLUMES",
    "AttachmentInfo",
    "CSIDriverInfo",
    "CSINodeInfo",
    "CapacityInfo",
    "ClaimRef",
    "ClaimVolume",
    "InlineDisk",
    "PersistentVolume",
    "PersistentVolumeClaim",
    "PodVolumes",
    "StorageClass",
    "claim_key",
    "parse_attachment",
    "parse_capacity",
    "parse_claim",
    "parse_csi_driver",
    "parse_csi_node",
    "parse_pod_volumes",
    "parse_storage_class",
    "parse_volume",
]

# Set by a scheduler on a WaitForFirstConsumer claim to ask its provisioner for a volume on that node.
ANN_SELECTED_NODE = "volume.kubernetes.io/selected-node"
# Set by the PV controller on a claim whose class names an external provisioner.
ANN_STORAGE_PROVISIONER = "volume.kubernetes.io/storage-provisioner"
# Written with a PV's claimRef when a scheduler (not the user) pre-binds it; the PV controller finishes the bind.
ANN_BOUND_BY_CONTROLLER = "pv.kubernetes.io/bound-by-controller"
ANN_BIND_COMPLETED = "pv.kubernetes.io/bind-completed"
# The provisioner of classes for statically created (e.g. local) volumes: nothing is ever provisioned.
NO_PROVISIONER = "kubernetes.io/no-provisioner"
_BETA_CLASS_ANNOTATION = "volume.beta.kubernetes.io/storage-class"


def claim_key(namespace: str, name: str) -> str:
    return f"{namespace}/{name}"


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _bytes(value: Any) -> int | None:
    if value is None:
        return None
    try:
        return to_int(value)
    except (QuantityError, ValueError, TypeError):
        return None


def _selector(raw: Any) -> LabelSelector | None:
    """A claim's or capacity's label selector (None when absent: matches everything; a bad one matches nothing)."""
    if raw is None:
        return None
    try:
        return LabelSelector.parse(raw)
    except SelectorError:
        return NOTHING


def _terms(raw: Any) -> tuple[Mapping[str, Any], ...]:
    return tuple(t for t in raw if isinstance(t, Mapping)) if isinstance(raw, Sequence) else ()


@dataclass(frozen=True)
class ClaimRef:
    namespace: str
    name: str
    uid: str = ""

    @property
    def key(self) -> str:
        return claim_key(self.namespace, self.name)


@dataclass(frozen=True)
class PersistentVolume:
    name: str
    resource_version: str
    storage_class: str
    capacity: int  # bytes
    access_modes: frozenset[str]
    volume_mode: str  # Filesystem | Block
    claim_ref: ClaimRef | None
    phase: str
    deleting: bool
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    # spec.nodeAffinity.required.nodeSelectorTerms (None: reachable from every node).
    node_terms: tuple[Mapping[str, Any], ...] | None
    csi_driver: str | None = None
    csi_handle: str | None = None
    source_kind: str = ""  # the volume source's key (csi, local, hostPath, nfs, gcePersistentDisk...)
    attributes_class: str = ""  # spec.volumeAttributesClassName ("" when unset)


@dataclass(frozen=True)
class PersistentVolumeClaim:
    namespace: str
    name: str
    uid: str
    resource_version: str
    storage_class: str  # "" when neither spec.storageClassName nor the beta annotation sets one
    request: int  # bytes
    access_modes: frozenset[str]
    volume_mode: str
    volume_name: str  # spec.volumeName: bound (or pre-bound by the user) to this PV
    selector: LabelSelector | None
    phase: str
    deleting: bool
    annotations: Mapping[str, str]
    owner_uids: frozenset[str]  # controller owners (a generic ephemeral volume's claim is owned by its pod)
    attributes_class: str = ""  # spec.volumeAttributesClassName ("" when unset): a PV must have the same

    @property
    def key(self) -> str:
        return claim_key(self.namespace, self.name)

    @property
    def selected_node(self) -> str | None:
        return self.annotations.get(ANN_SELECTED_NODE)


@dataclass(frozen=True)
class StorageClass:
    name: str
    provisioner: str
    wait_for_first_consumer: bool
    allowed_topologies: tuple[Mapping[str, Any], ...]  # topologySelectorTerms ([] allows every node)


@dataclass(frozen=True)
class CSINodeInfo:
    name: str
    # driver -> allocatable.count (None when the driver reports no limit)
    limits: Mapping[str, int | None]


@dataclass(frozen=True)
class CSIDriverInfo:
    name: str
    storage_capacity: bool  # spec.storageCapacity: the scheduler must check CSIStorageCapacity objects
    attach_required: bool


@dataclass(frozen=True)
class AttachmentInfo:
    """A VolumeAttachment: a CSI driver (attacher) has a PV attached to a node (NodeVolumeLimits counts it)."""

    name: str
    attacher: str
    node: str
    volume: str | None  # source.persistentVolumeName


@dataclass(frozen=True)
class CapacityInfo:
    """A CSIStorageCapacity: free space of a class in the nodes its topology selects."""

    key: str  # namespace/name
    storage_class: str
    node_topology: LabelSelector | None  # None: no node has it
    capacity: int | None  # bytes; None = unknown
    maximum_volume_size: int | None


def parse_volume(obj: Mapping[str, Any]) -> PersistentVolume:
    meta, spec = _meta(obj), obj.get("spec") or {}
    ref = spec.get("claimRef")
    claim = (ClaimRef(str(ref.get("namespace") or ""), str(ref.get("name") or ""), str(ref.get("uid") or ""))
             if isinstance(ref, Mapping) else None)
    required = ((spec.get("nodeAffinity") or {}).get("required") or {})
    node_terms = _terms(required.get("nodeSelectorTerms")) if required else None
    csi = spec.get("csi") if isinstance(spec.get("csi"), Mapping) else None
    kinds = [k for k in spec if k not in _PV_SPEC_FIELDS]
    return PersistentVolume(
        name=str(meta.get("name", "")),
        resource_version=str(meta.get("resourceVersion", "")),
        storage_class=str(spec.get("storageClassName") or (meta.get("annotations") or {}).get(
            _BETA_CLASS_ANNOTATION) or ""),
        capacity=_bytes((spec.get("capacity") or {}).get("storage")) or 0,
        access_modes=frozenset(str(m) for m in spec.get("accessModes") or ()),
        volume_mode=str(spec.get("volumeMode") or "Filesystem"),
        claim_ref=claim,
        phase=str((obj.get("status") or {}).get("phase", "")),
        deleting=bool(meta.get("deletionTimestamp")),
        labels={str(k): str(v) for k, v in (meta.get("labels") or {}).items()},
        annotations={str(k): str(v) for k, v in (meta.get("annotations") or {}).items()},
        node_terms=node_terms,
        csi_driver=str(csi.get("driver")) if csi else None,
        csi_handle=str(csi.get("volumeHandle")) if csi else None,
        source_kind=kinds[0] if kinds else "",
        attributes_class=str(spec.get("volumeAttributesClassName") or ""),
    )


_PV_SPEC_FIELDS = frozenset({"accessModes", "capacity", "claimRef", "mountOptions", "nodeAffinity",
                             "persistentVolumeReclaimPolicy", "storageClassName", "volumeMode",
                             "volumeAttributesClassName"})


def parse_claim(obj: Mapping[str, Any]) -> PersistentVolumeClaim:
    meta, spec = _meta(obj), obj.get("spec") or {}
    annotations = {str(k): str(v) for k, v in (meta.get("annotations") or {}).items()}
    # The beta annotation wins over the field, as upstream's GetPersistentVolumeClaimClass reads it first.
    storage_class = annotations.get(_BETA_CLASS_ANNOTATION) or spec.get("storageClassName") or ""
    owners = frozenset(str(o.get("uid", "")) for o in meta.get("ownerReferences") or ()
                       if isinstance(o, Mapping) and o.get("controller"))
    return PersistentVolumeClaim(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        resource_version=str(meta.get("resourceVersion", "")),
        storage_class=str(storage_class),
        request=_bytes(((spec.get("resources") or {}).get("requests") or {}).get("storage")) or 0,
        access_modes=frozenset(str(m) for m in spec.get("accessModes") or ()),
        volume_mode=str(spec.get("volumeMode") or "Filesystem"),
        volume_name=str(spec.get("volumeName") or ""),
        selector=_selector(spec.get("selector")),
        phase=str((obj.get("status") or {}).get("phase", "")),
        deleting=bool(meta.get("deletionTimestamp")),
        annotations=annotations,
        owner_uids=owners,
        attributes_class=str(spec.get("volumeAttributesClassName") or ""),
    )


def parse_storage_class(obj: Mapping[str, Any]) -> StorageClass:
    return StorageClass(
        name=str(_meta(obj).get("name", "")),
        provisioner=str(obj.get("provisioner", "")),
        wait_for_first_consumer=obj.get("volumeBindingMode") == "WaitForFirstConsumer",
        allowed_topologies=_terms(obj.get("allowedTopologies")),
    )


def parse_csi_node(obj: Mapping[str, Any]) -> CSINodeInfo:
    limits: dict[str, int | None] = {}
    for driver in (obj.get("spec") or {}).get("drivers") or ():
        if not isinstance(driver, Mapping) or not driver.get("name"):
            continue
        count = (driver.get("allocatable") or {}).get("count")
        limits[str(driver["name"])] = int(count) if isinstance(count, int) else None
    return CSINodeInfo(str(_meta(obj).get("name", "")), limits)


def parse_csi_driver(obj: Mapping[str, Any]) -> CSIDriverInfo:
    spec = obj.get("spec") or {}
    return CSIDriverInfo(str(_meta(obj).get("name", "")), bool(spec.get("storageCapacity")),
                         spec.get("attachRequired") is not False)


def parse_attachment(obj: Mapping[str, Any]) -> AttachmentInfo:
    spec = obj.get("spec") or {}
    volume = (spec.get("source") or {}).get("persistentVolumeName")
    return AttachmentInfo(str(_meta(obj).get("name", "")), str(spec.get("attacher", "")),
                          str(spec.get("nodeName", "")), str(volume) if volume else None)


def parse_capacity(obj: Mapping[str, Any]) -> CapacityInfo:
    meta = _meta(obj)
    topology = obj.get("nodeTopology")
    return CapacityInfo(
        key=claim_key(str(meta.get("namespace", "")), str(meta.get("name", ""))),
        storage_class=str(obj.get("storageClassName", "")),
        node_topology=_selector(topology) if topology is not None else None,
        capacity=_bytes(obj.get("capacity")),
        maximum_volume_size=_bytes(obj.get("maximumVolumeSize")),
    )


@dataclass(frozen=True)
class ClaimVolume:
    """A pod volume backed by a claim: a persistentVolumeClaim, or a generic ephemeral volume (whose claim,
    `<pod>-<volume>`, the ephemeral-volume controller creates, owned by the pod)."""

    volume: str
    claim: str
    read_only: bool = False
    ephemeral: bool = False


@dataclass(frozen=True)
class InlineDisk:
    """An in-line in-tree disk: VolumeRestrictions' conflicts (GCE PD, EBS, RBD, iSCSI: attached read-write once per
    node) and NodeVolumeLimits' count (the kinds that migrate to a CSI driver: EBS, GCE PD, Azure Disk, Cinder,
    Portworx)."""

    kind: str  # gcePersistentDisk | awsElasticBlockStore | rbd | iscsi | azureDisk | cinder | portworxVolume
    identity: tuple[str, ...]  # pdName | volumeID | (pool, image) | iqn | diskURI | volumeID | volumeID
    read_only: bool
    monitors: frozenset[str] = frozenset()  # rbd: two disks conflict when their monitors overlap


@dataclass(frozen=True)
class PodVolumes:
    claims: tuple[ClaimVolume, ...] = ()
    disks: tuple[InlineDisk, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.claims or self.disks)

    def claim_keys(self, namespace: str) -> tuple[str, ...]:
        return tuple(claim_key(namespace, c.claim) for c in self.claims)


NO_VOLUMES = PodVolumes()


def _disk(kind: str, source: Mapping[str, Any]) -> InlineDisk | None:
    read_only = bool(source.get("readOnly"))
    if kind == "gcePersistentDisk":
        return InlineDisk(kind, (str(source.get("pdName", "")),), read_only)
    if kind == "awsElasticBlockStore":
        return InlineDisk(kind, (str(source.get("volumeID", "")),), read_only)
    if kind == "rbd":
        return InlineDisk(kind, (str(source.get("pool") or "rbd"), str(source.get("image", ""))), read_only,
                          frozenset(str(m) for m in source.get("monitors") or ()))
    if kind == "iscsi":
        return InlineDisk(kind, (str(source.get("iqn", "")),), read_only)
    if kind == "azureDisk":
        return InlineDisk(kind, (str(source.get("diskURI", "")),), read_only)
    if kind in ("cinder", "portworxVolume"):
        return InlineDisk(kind, (str(source.get("volumeID", "")),), read_only)
    return None


# In-line volume kinds the volume plugins read (an in-line CSI volume counts nowhere upstream: not against a
# node's limit, nor as a disk conflict; nor do the other in-line kinds).
_DISK_KINDS = ("gcePersistentDisk", "awsElasticBlockStore", "rbd", "iscsi", "azureDisk", "cinder", "portworxVolume")


def parse_pod_volumes(pod: Mapping[str, Any]) -> PodVolumes:
    spec = pod.get("spec") or {}
    name = str(_meta(pod).get("name", ""))
    claims: list[ClaimVolume] = []
    disks: list[InlineDisk] = []
    for volume in spec.get("volumes") or ():
        if not isinstance(volume, Mapping):
            continue
        vname = str(volume.get("name", ""))
        pvc = volume.get("persistentVolumeClaim")
        if isinstance(pvc, Mapping):
            claims.append(ClaimVolume(vname, str(pvc.get("claimName", "")), bool(pvc.get("readOnly"))))
            continue
        if isinstance(volume.get("ephemeral"), Mapping):
            claims.append(ClaimVolume(vname, f"{name}-{vname}", ephemeral=True))
            continue
        for kind in _DISK_KINDS:
            source = volume.get(kind)
            if isinstance(source, Mapping):
                disk = _disk(kind, source)
                if disk is not None:
                    disks.append(disk)
                break
    if not (claims or disks):
        return NO_VOLUMES
    return PodVolumes(tuple(claims), tuple(disks))

