"""VolumeRestrictions: in-line disks a node can mount only once, and ReadWriteOncePod claims, as kube-scheduler
1.36's VolumeRestrictions plugin (pkg/scheduler/framework/plugins/volumerestrictions) decides them.

- Disk conflicts (per node): the pod's in-line GCE PD, AWS EBS, RBD or iSCSI volume conflicts with one a placed
  (or assumed) pod holds on the node: same PD or IQN unless both read-only, same EBS volume always, same RBD
  pool/image with a monitor in common unless both read-only. Volumes inside PVs are not looked at.
- ReadWriteOncePod (node-independent): a persistentVolumeClaim volume whose claim has that access mode and
  that any placed pod already names rejects every node; preemption (evicting that pod) is what may help, so
  both reasons are Unschedulable, not Unresolvable.

PreFilter rejects a pod whose claim does not exist and skips the Filter when the pod has no such disk and no
RWOP claim in use. The per-row disk holders are kept incrementally by the cluster state (VolumeUsage), so the
Filter looks up only the pod's own disks.
"""

from __future__ import annotations

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
    PersistentVolumeClaim,
    PodInfo,
    PodRecord,
    PodVolumes,
    PreFilterPlugin,
    QueueingHint,
    Reads,
    StateKey,
    Status,
    claim_key,
    disks_conflict,
    has_only_local_volumes,
)

from ..volumes import VolumeStore

ERR_REASON_DISK_CONFLICT = "node(s) had no available disk"
ERR_REASON_RWOP_CONFLICT = ("node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod access mode "
                            "already in-use by another pod")
READ_WRITE_ONCE_POD = "ReadWriteOncePod"
# The in-line kinds whose mounts are restricted (upstream's needsRestrictionsCheck).
RESTRICTED_KINDS = frozenset({"gcePersistentDisk", "awsElasticBlockStore", "rbd", "iscsi"})


@dataclass(frozen=True)
class _State:
    volumes: PodVolumes
    rwop_claims: frozenset[str]  # names of the pod's ReadWriteOncePod claims
    conflicting: int  # how many of them some placed pod uses


_STATE = StateKey[_State]("VolumeRestrictions/state")


def _claim_names(volumes: PodVolumes) -> set[str]:
    return {c.claim for c in volumes.claims if not c.ephemeral}


class VolumeRestrictions(PreFilterPlugin, FilterPlugin, Batchable):
    name = "VolumeRestrictions"
    # Removing the pod that uses the disk or the ReadWriteOncePod claim frees it. Not node-local: a ReadWriteOncePod
    # claim in use on any node rejects every node.
    resolvable_reasons = frozenset({ERR_REASON_DISK_CONFLICT, ERR_REASON_RWOP_CONFLICT})
    indexes = (VolumeStore,)
    events = frozenset({ClusterEvent.POD_DELETED, ClusterEvent.NODE_ADDED, ClusterEvent.PVC_CHANGED})

    def batch_scope(self, pod: PodInfo) -> BatchScope | None:
        """Opportunistic batching: reads claims and disks across the cluster: a pod with any is not batched."""
        return BatchScope(Reads.NODE) if has_only_local_volumes(pod) else None

    def events_to_register(self) -> list[EventHint]:
        return [EventHint(ClusterEvent.POD_DELETED, self._after_pod_deleted), EventHint(ClusterEvent.NODE_ADDED),
                EventHint(ClusterEvent.PVC_CHANGED, self._after_claim_added)]

    @staticmethod
    def _after_pod_deleted(pod: PodInfo, released: PodRecord | None) -> QueueingHint:
        """A deleted pod helps if it held a disk conflicting with the pod's, or named one of its claims
        (upstream does not look up whether that claim is ReadWriteOncePod)."""
        if released is None:  # not a pod we had placed: its volumes are unknown here
            return QueueingHint.QUEUE
        if released.namespace != pod.namespace:
            return QueueingHint.SKIP
        wanted = pod.volumes
        if any(disks_conflict(disk, held) for disk in wanted.disks for held in released.volumes.disks):
            return QueueingHint.QUEUE
        if _claim_names(wanted) & _claim_names(released.volumes):
            return QueueingHint.QUEUE
        return QueueingHint.SKIP

    @staticmethod
    def _after_claim_added(pod: PodInfo, claim: object) -> QueueingHint:
        if not isinstance(claim, PersistentVolumeClaim):
            return QueueingHint.QUEUE
        if claim.namespace == pod.namespace and claim.name in _claim_names(pod.volumes):
            return QueueingHint.QUEUE
        return QueueingHint.SKIP

    def _state(self, pod: PodInfo) -> _State | Status:
        volumes = pod.volumes
        store = self.handle.index(VolumeStore)
        rwop: set[str] = set()
        for volume in volumes.claims:
            if volume.ephemeral:
                continue
            claim = store.watched_claim(claim_key(pod.namespace, volume.claim))
            if claim is None:
                return Status(Code.UNRESOLVABLE, f'persistentvolumeclaim "{volume.claim}" not found')
            if READ_WRITE_ONCE_POD in claim.access_modes:
                rwop.add(claim.name)
        cluster = self.handle.cluster
        if not rwop:  # nothing to count: no lock taken for the pods without such a claim (almost every pod)
            return _State(volumes, frozenset(), 0)
        with cluster.lock:
            conflicting = sum(1 for name in rwop
                              if cluster.volume_usage.claim_referenced(claim_key(pod.namespace, name)))
        return _State(volumes, frozenset(rwop), conflicting)

    def pre_filter(self, cycle: CycleState, pod: PodInfo) -> Status:
        state = self._state(pod)
        if isinstance(state, Status):
            return state
        if state.conflicting == 0 and not any(d.kind in RESTRICTED_KINDS for d in state.volumes.disks):
            return Status(Code.SKIP)
        cycle.write(_STATE, state)
        return SUCCESS

    def filter(self, cycle: CycleState, pod: PodInfo, table: NodeTable) -> Filtered:
        state = cycle.get(_STATE)
        if state is None:  # PreFilter skipped (a what-if run) or is not enabled: what it would have found
            computed = self._state(pod)
            if isinstance(computed, Status):
                return Filtered.single(np.zeros(table.capacity, dtype=bool), computed.reason)
            state = computed
        disk_conflict = np.zeros(table.capacity, dtype=bool)
        disks = [d for d in state.volumes.disks if d.kind in RESTRICTED_KINDS]
        if disks:
            usage = self.handle.cluster.volume_usage
            with self.handle.cluster.lock:
                rows = [row for disk in disks for row in usage.conflicting_rows(disk)]
            rows = [row for row in rows if row < table.capacity]
            disk_conflict[rows] = True
        reasons = {ERR_REASON_DISK_CONFLICT: disk_conflict}
        feasible = ~disk_conflict
        if state.conflicting > 0:  # upstream checks it after the disks: those rows keep the disk reason
            reasons[ERR_REASON_RWOP_CONFLICT] = feasible.copy()
            feasible = np.zeros(table.capacity, dtype=bool)
        return Filtered(feasible, reasons)
