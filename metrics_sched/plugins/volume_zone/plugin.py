"""VolumeZone: a pod's bound PersistentVolumes carry zone/region labels the node must match, as kube-scheduler
1.36's VolumeZone plugin (pkg/scheduler/framework/plugins/volumezone) decides it.

PreFilter reads, for each persistentVolumeClaim volume (generic ephemeral ones are not looked at), the claim's
PV and its topology labels (beta and GA zone/region; a value may list several zones joined by "__"). An
unbound claim of a WaitForFirstConsumer class is left to VolumeBinding; any other unbound claim, a missing
claim, class or PV rejects the pod (UnschedulableAndUnresolvable, upstream's messages). A pod whose PVs
carry no such label skips the Filter.

Filter: a node with none of the four labels passes (single-zone clusters); otherwise every PV label must be on
the node with one of its values, a beta PV label falling back to the node's GA label (not the other way).
The PV's spec.nodeAffinity is VolumeBinding's business, not this plugin's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from metrics_sched.framework import (
    SUCCESS,
    Batchable,
    BatchScope,
    ClusterEvent,
    Code,
    CycleState,
    EventHint,
    Filtered,
    FilterPlugin,
    NodeTable,
    PersistentVolume,
    PersistentVolumeClaim,
    PodInfo,
    PreFilterPlugin,
    QueueingHint,
    Reads,
    StateKey,
    Status,
    StorageClass,
    claim_key,
    explain,
    has_only_local_volumes,
)

from ..volumes import VolumeStore

ERR_REASON_CONFLICT = "node(s) had no available volume zone"

BETA_ZONE = "failure-domain.beta.kubernetes.io/zone"
BETA_REGION = "failure-domain.beta.kubernetes.io/region"
ZONE = "topology.kubernetes.io/zone"
REGION = "topology.kubernetes.io/region"
TOPOLOGY_LABELS = (BETA_ZONE, BETA_REGION, ZONE, REGION)
_GA = {BETA_ZONE: ZONE, BETA_REGION: REGION}
_MULTI_ZONE_DELIMITER = "__"


@dataclass(frozen=True)
class PVTopology:
    pv_name: str
    key: str
    values: frozenset[str]


def pv_topologies(pv: PersistentVolume) -> tuple[PVTopology, ...]:
    """The PV's topology labels in upstream's order; a value with an empty part ("a__") is ignored, as
    LabelZonesToSet rejects it."""
    found = []
    for key in TOPOLOGY_LABELS:
        value = pv.labels.get(key)
        if value is None:
            continue
        parts = [part.strip() for part in value.split(_MULTI_ZONE_DELIMITER)]
        if any(not part for part in parts):
            continue
        found.append(PVTopology(pv.name, key, frozenset(parts)))
    return tuple(found)


def _claim_names(pod: PodInfo) -> list[str]:
    """claimName of every persistentVolumeClaim volume, in order (ephemeral volumes are not considered)."""
    names = []
    for volume in (pod.raw.get("spec") or {}).get("volumes") or ():
        source = volume.get("persistentVolumeClaim") if isinstance(volume, Mapping) else None
        if isinstance(source, Mapping):
            names.append(str(source.get("claimName") or ""))
    return names


_STATE = StateKey[tuple[PVTopology, ...]]("VolumeZone/topologies")


class VolumeZone(PreFilterPlugin, FilterPlugin, Batchable):
    name = "VolumeZone"
    node_local = True  # the node's zone labels against the pod's PVs
    indexes = (VolumeStore,)
    events = frozenset({ClusterEvent.STORAGE_CLASS_CHANGED, ClusterEvent.NODE_ADDED, ClusterEvent.NODE_LABELS,
                        ClusterEvent.PVC_CHANGED, ClusterEvent.PV_CHANGED})

    def batch_scope(self, pod: PodInfo) -> BatchScope | None:
        """Opportunistic batching: reads the zones of the pod's volumes: a pod with any is not batched."""
        return BatchScope(Reads.NODE) if has_only_local_volumes(pod) else None

    def events_to_register(self) -> list[EventHint]:
        return [EventHint(ClusterEvent.STORAGE_CLASS_CHANGED, self._after_class_added),
                EventHint(ClusterEvent.NODE_ADDED), EventHint(ClusterEvent.NODE_LABELS),
                EventHint(ClusterEvent.PVC_CHANGED, self._after_claim_changed),
                # Upstream queues a new PV and skips an update that keeps the topology labels; the event
                # carries only the new PV here, so every PV change may help.
                EventHint(ClusterEvent.PV_CHANGED)]

    @staticmethod
    def _after_class_added(pod: PodInfo, storage_class: object) -> QueueingHint:
        """Only a WaitForFirstConsumer class lets an unbound claim pass (volumeBindingMode is immutable)."""
        if not isinstance(storage_class, StorageClass):
            return QueueingHint.QUEUE
        return QueueingHint.QUEUE if storage_class.wait_for_first_consumer else QueueingHint.SKIP

    @staticmethod
    def _after_claim_changed(pod: PodInfo, claim: object) -> QueueingHint:
        if not isinstance(claim, PersistentVolumeClaim):
            return QueueingHint.QUEUE
        if claim.namespace == pod.namespace and claim.name in _claim_names(pod):
            return QueueingHint.QUEUE
        return QueueingHint.SKIP

    def _topologies(self, pod: PodInfo) -> tuple[PVTopology, ...] | Status:
        """upstream's getPVbyPod: the topology of each bound PV, or the status that rejects the pod."""
        store = self.handle.index(VolumeStore)
        found: list[PVTopology] = []
        for name in _claim_names(pod):
            if not name:
                return Status(Code.UNRESOLVABLE, "PersistentVolumeClaim had no name")
            claim = store.watched_claim(claim_key(pod.namespace, name))
            if claim is None:
                return Status(Code.UNRESOLVABLE, f'persistentvolumeclaim "{name}" not found')
            if not claim.volume_name:
                if not claim.storage_class:
                    return Status(Code.UNRESOLVABLE, "PersistentVolumeClaim had no pv name and storageClass name")
                storage_class = store.storage_class(claim.storage_class)
                if storage_class is None:
                    return Status(Code.UNRESOLVABLE,
                                  f'storageclass.storage.k8s.io "{claim.storage_class}" not found')
                if storage_class.wait_for_first_consumer:
                    continue  # VolumeBinding checks where it can be provisioned or bound
                return Status(Code.UNRESOLVABLE, "PersistentVolume had no name")
            pv = store.watched_volume(claim.volume_name)
            if pv is None:
                return Status(Code.UNRESOLVABLE, f'persistentvolume "{claim.volume_name}" not found')
            found.extend(pv_topologies(pv))
        return tuple(found)

    def pre_filter(self, cycle: CycleState, pod: PodInfo) -> Status:
        topologies = self._topologies(pod)
        if isinstance(topologies, Status):
            return topologies
        if not topologies:
            return Status(Code.SKIP)
        cycle.write(_STATE, topologies)
        return SUCCESS

    def filter(self, cycle: CycleState, pod: PodInfo, table: NodeTable) -> Filtered:
        if not (pod.raw.get("spec") or {}).get("volumes"):
            return Filtered.all(table)
        topologies = cycle.get(_STATE)
        if topologies is None:  # PreFilter skipped or is not enabled: compute it as upstream's Filter does
            computed = self._topologies(pod)
            if isinstance(computed, Status):
                return Filtered.single(np.zeros(table.capacity, dtype=bool), computed.reason)
            topologies = computed
        if not topologies:
            return Filtered.all(table)
        constrained = np.zeros(table.capacity, dtype=bool)
        for key in TOPOLOGY_LABELS:
            constrained |= table.label_exists(key)
        matches = np.ones(table.capacity, dtype=bool)
        for topology in topologies:
            own = table.label_column(topology.key)
            ga = _GA.get(topology.key)
            value = np.where(own == None, table.label_column(ga), own) if ga else own  # noqa: E711
            any_value = np.zeros(table.capacity, dtype=bool)
            for allowed in topology.values:  # a handful of zones: one elementwise compare each
                any_value |= np.asarray(value == allowed, dtype=bool)
            if (constrained & ~any_value).any():
                explain(cycle, f"PV {topology.pv_name} is in {topology.key.rpartition('/')[2]} "
                               f"{', '.join(sorted(topology.values))}")
            matches &= any_value
        rejected = constrained & ~matches
        return Filtered(~rejected, {ERR_REASON_CONFLICT: rejected})
