"""Routes watch events: every bound pod to the cluster state, our pending pods to the queue, and
changes that may help parked pods to queue moves."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import get_args

import numpy as np

from metrics_sched.framework.cluster_index import ClusterIndexes, IndexChange
from metrics_sched.framework.events import ClusterEvent
from metrics_sched.model.podinfo import PodInfo, parse_pod, share_strings
from metrics_sched.model.resize import resource_fields
from metrics_sched.ports import ApiKind, EventType, KubeObject, WorkloadKind
from metrics_sched.scheduler.queue import SchedulingQueue
from metrics_sched.state.cluster_state import ClusterState, Placement
from metrics_sched.state.pod_record import PodRecord

log = logging.getLogger(__name__)

# The kinds the cluster state keeps itself, beside nodes and pods (which have sink methods of their own):
# namespaces for namespaceSelectors, the workloads for default topology spreading. Every other kind is a
# plugin's cluster index's, watched only when an enabled plugin declares it.
NAMESPACES = ApiKind("v1", "namespaces")
_WORKLOADS: dict[str, WorkloadKind] = {kind: kind for kind in get_args(WorkloadKind)}
SERVICES, REPLICATION_CONTROLLERS = (ApiKind("v1", kind) for kind in ("services", "replicationcontrollers"))
REPLICA_SETS, STATEFUL_SETS = (ApiKind("apps/v1", kind) for kind in ("replicasets", "statefulsets"))
WORKLOAD_KINDS = (SERVICES, REPLICATION_CONTROLLERS, REPLICA_SETS, STATEFUL_SETS)
CORE_KINDS: tuple[ApiKind, ...] = (NAMESPACES, *WORKLOAD_KINDS)


# What observing a bound pod means to parked pods (ClusterState.observe_bound_pod's answers).
_PLACEMENT_EVENTS = {Placement.ADDED: ClusterEvent.POD_ADDED, Placement.MOVED: ClusterEvent.POD_ADDED,
                     Placement.CONFIRMED: ClusterEvent.POD_ADDED, Placement.RELABELLED: ClusterEvent.POD_LABELS}


class ClusterEventHandlers:
    def __init__(
        self,
        state: ClusterState,
        queue: SchedulingQueue,
        scheduler_names: frozenset[str],
        *,
        on_pod_deleted: Callable[[str], None] = lambda uid: None,
        on_pod_bound: Callable[[str], None] = lambda uid: None,
        on_node_deleted: Callable[[str], None] = lambda name: None,
        indexes: ClusterIndexes | None = None,
    ) -> None:
        self.state = state
        self.indexes = indexes if indexes is not None else ClusterIndexes()
        self._pod_observers = self.indexes.pod_observers
        self._own: dict[str, Callable[[ApiKind, EventType, KubeObject], None]] = {
            NAMESPACES.name: self._on_namespace_event,
            **{kind.name: self._on_workload_event for kind in WORKLOAD_KINDS},
        }
        # Every kind a source is to list and watch besides nodes and pods, and (with them) those whose initial list
        # scheduling waits for, as kube-scheduler waits for all its informers: a pod scheduled before its plugins'
        # objects arrive would be judged against an empty cache.
        self.kinds: tuple[ApiKind, ...] = (*CORE_KINDS, *self.indexes.kinds)
        self._kinds = {kind.name: kind for kind in self.kinds}
        self.awaited = frozenset({"nodes", "pods", *(kind.name for kind in self.kinds if kind.awaited)})
        self.queue = queue
        self.scheduler_names = scheduler_names
        self.on_pod_deleted = on_pod_deleted  # e.g. reject the pod if it is held at Permit
        self.on_pod_bound = on_pod_bound  # e.g. drop a verdict not yet reported: the pod is bound
        self.on_node_deleted = on_node_deleted  # e.g. drop the node's metric series
        # Called once, from the watch thread that completes the initial sync (e.g. gc.freeze() the caches).
        self.on_all_synced: list[Callable[[], None]] = []
        self.synced: set[str] = set()
        # Pending pods whose last version seen had status.nominatedNodeName (UpdateNominatedPod's "old pod").
        self._status_nominated: set[str] = set()
        self._synced_lock = threading.Lock()  # each watch thread reports its own resource

    def responsible_for(self, pod: PodInfo) -> bool:
        """Pods we schedule: ours by name, unbound, not being deleted, not finished."""
        return (pod.scheduler_name in self.scheduler_names and not pod.node_name and not pod.deleting
                and not pod.terminal)

    def on_node_event(self, kind: EventType, node: KubeObject) -> None:
        name = (node.get("metadata") or {}).get("name", "")
        if kind == "DELETED":
            # Its pods wait, uncounted, for it to come back; a bind not yet sent sees it gone and requeues.
            self.state.remove_node(name)
            self.on_node_deleted(name)
            return
        change = self.state.upsert_node(node)
        if change.added:
            self.queue.move_all(ClusterEvent.NODE_ADDED, change.record)
            return
        for flag, event in ((change.allocatable, ClusterEvent.NODE_ALLOCATABLE),
                            (change.schedulable, ClusterEvent.NODE_SCHEDULABLE),
                            (change.labels, ClusterEvent.NODE_LABELS),
                            (change.taints, ClusterEvent.NODE_TAINTS)):
            if flag:
                self.queue.move_all(event, change.record)

    def on_pod_event(self, kind: EventType, pod: KubeObject) -> None:
        if kind == "MODIFIED" and self._unchanged_placement(pod):
            return  # status churn (Running, Ready...) of a pod we already count where it is
        spec = pod.get("spec") or {}
        if kind != "DELETED" and not spec.get("nodeName") \
                and (spec.get("schedulerName") or "default-scheduler") in self.scheduler_names:
            share_strings(pod)  # it may wait long in the queue, with its whole object: before parse_pod reads it
        info = parse_pod(pod)
        for index in self._pod_observers:  # e.g. a gang's members: one that grows may reach its quorum
            change = index.on_pod(kind, info)
            if change is not None:
                self._apply(change)
        if kind == "DELETED" or info.terminal or info.node_name:
            self._status_nominated.discard(info.uid)
        if kind == "DELETED" or info.terminal:
            released = self.state.remove_pod(info.uid)
            self.queue.delete(info.uid)
            self.on_pod_deleted(info.uid)
            if released is not None:
                # Bound or only assumed by us (deleted while held at Permit or while its bind was in flight),
                # the room it held is free now (kube-scheduler: AssignedPodDelete either way).
                self.queue.move_all(ClusterEvent.POD_DELETED, released)
            return
        if info.node_name:
            before = self.state.record(info.uid)
            outcome = self.state.observe_bound_pod(info)
            self.queue.delete(info.uid)
            self.on_pod_bound(info.uid)
            after = self.state.record(info.uid)
            event = _PLACEMENT_EVENTS.get(outcome)
            if event is not None:
                # A pod now counts on its node: a pod parked for want of an affine pod may fit.
                self.queue.move_all(event, after)
            if before is not None and after is not None and _shrank(before, after):
                # An in-place resize gave room back on the same node: as if a pod had left it (kube-scheduler's
                # UpdatePodScaleDown). No record as the event's object: the pod itself is still there.
                self.queue.move_all(ClusterEvent.POD_DELETED, None)
            return
        if info.deleting or info.scheduler_name not in self.scheduler_names:
            self.queue.delete(info.uid)
            return
        self._follow_nomination(info, (pod.get("status") or {}).get("nominatedNodeName"))
        if self.state.is_placed(info.uid):
            # Assumed by us, bind in flight (the watch has not caught up yet): the attempt keeps the new pod,
            # for a retry should the bind fail.
            self.queue.update(info)
            return
        self.queue.add(info)

    def _follow_nomination(self, info: PodInfo, nominated: object) -> None:
        """kube-scheduler's UpdateNominatedPod: the nomination follows status.nominatedNodeName when the field was
        added, changed or removed (another leader nominated elsewhere, or the nomination was cleared); when the pod
        had none before and has none now, the nomination kept in memory stays (its status patch may still be on
        its way). A nomination learned from the field also holds its room after a restart or a leader change."""
        nominations = self.state.nominations
        had = info.uid in self._status_nominated
        if nominated:
            self._status_nominated.add(info.uid)
            known = nominations.get(info.uid)
            if known is None or known.node != str(nominated):
                nominations.nominate(info, str(nominated), self.state.record_of)
        elif had:
            self._status_nominated.discard(info.uid)
            nominations.remove(info.uid)

    def _apply(self, change: IndexChange) -> None:
        if change.event is not None:
            self.queue.move_all(change.event, change.detail)
        if change.activate:
            self.queue.activate(change.activate)

    def _unchanged_placement(self, pod: KubeObject) -> bool:
        node = (pod.get("spec") or {}).get("nodeName")
        if not node or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            return False
        metadata = pod.get("metadata") or {}
        return self.state.counted_on(metadata.get("uid", ""), node, metadata.get("labels") or {},
                                     bool(metadata.get("deletionTimestamp")), resource_fields(pod))

    def _on_namespace_event(self, _: ApiKind, kind: EventType, namespace: KubeObject) -> None:
        name = str((namespace.get("metadata") or {}).get("name", ""))
        if kind == "DELETED":
            # Not an event of its own (as upstream): the pods it held leave with their AssignedPodDelete.
            self.state.namespaces.remove(name)
        elif self.state.namespaces.upsert(namespace):
            # New or relabelled (not a status or annotation change): a pod parked because a namespaceSelector
            # matched no (or other) namespaces may fit now.
            self.queue.move_all(ClusterEvent.NAMESPACE_LABELS, name)

    def _on_workload_event(self, kind: ApiKind, event: EventType, obj: KubeObject) -> None:
        # Scoring input only (PodTopologySpread's default constraints): no parked pod can start to fit.
        if event == "DELETED":
            self.state.workloads.remove(_WORKLOADS[kind.name], obj)
        else:
            self.state.workloads.upsert(_WORKLOADS[kind.name], obj)

    def on_object_event(self, kind: ApiKind, event: EventType, obj: KubeObject) -> None:
        """An object of a watched kind other than nodes and pods: to the indexes that declare its kind (their
        answers move or activate parked pods), or to the cluster state for the kinds it still keeps itself."""
        own = self._own.get(kind.name)
        if own is not None:
            own(kind, event, obj)
            return
        for index in self.indexes.routes(kind.name):
            change = index.on_event(kind, event, obj)
            if change is not None:
                self._apply(change)

    def on_synced(self, resource: str) -> None:
        with self._synced_lock:
            before = self.caches_synced()
            self.synced.add(resource)
            completed = not before and self.caches_synced()
        log.info("%s synced", resource)
        for index in self.indexes.routes(resource):
            index.on_synced(self._kinds[resource])
        if completed:
            for callback in self.on_all_synced:
                callback()

    def unwatched(self, names: Iterable[str]) -> None:
        """Kinds the source does not watch after all (optional ones this API server does not serve): scheduling
        does not wait for their lists."""
        self.awaited = self.awaited - frozenset(names)

    def caches_synced(self) -> bool:
        """True once every watched resource has delivered its initial list: the scheduler may start."""
        return self.synced >= self.awaited


def _shrank(before: PodRecord, after: PodRecord) -> bool:
    """The pod holds less of something on the same node than before (an in-place resize down). `before` may
    have been released since (its row is gone); its node, vector and nonzero are what it held."""
    if before.node != after.node:
        return False
    if after.nonzero[0] < before.nonzero[0] or after.nonzero[1] < before.nonzero[1]:
        return True
    old, new = before.vector, after.vector  # the table may have gained resource columns in between
    if old is new:
        return False  # the usual case: a status change kept the record's vector
    if old.shape == new.shape:
        return bool((new < old).any())
    size = max(old.shape[0], new.shape[0])
    return bool((np.pad(new, (0, size - new.shape[0])) < np.pad(old, (0, size - old.shape[0]))).any())
