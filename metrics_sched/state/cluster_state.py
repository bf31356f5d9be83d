"""Nodes and the pods placed on them (bound, or assumed by us and not yet seen bound).

Every pod that occupies a node counts, whoever scheduled it. An assumed pod counts from the moment
the scheduler picks its node, before the bind call; it is never expired, only confirmed by the
watch (same pod, bound) or forgotten on a definite failure. Pods reported on a node the table does
not know yet are kept aside and counted when the node arrives.
"""

from __future__ import annotations

import contextlib
import enum
import sys
import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np

from metrics_sched.model.affinity import AffinityTerm, TermKind
from metrics_sched.model.podinfo import PodInfo
from metrics_sched.model.resize import ResourceFields, occupied_requests, resource_fields
from metrics_sched.model.resources import CPU, MEMORY
from metrics_sched.state.namespaces import NamespaceIndex
from metrics_sched.state.node_table import BoolArray, IntArray, NodeRecord, NodeTable, parse_node
from metrics_sched.state.nominations import Nominations
from metrics_sched.state.pod_index import PodIndex, PodQuery
from metrics_sched.state.pod_record import PodRecord
from metrics_sched.state.pod_shape import WILDCARD_IP, HostPort, PodShapes
from metrics_sched.state.volume_usage import VolumeUsage
from metrics_sched.state.workloads import WorkloadSelectors

_ANY_IP = "*"  # the per-row count over every hostIP of a (protocol, port): what a wildcard port conflicts with
# What the rebalancer reads to know a pod may never be evicted: a static pod's mirror, or an opt-out.
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
EVICTABLE_ANNOTATION = "metrics-sched.io/evictable"


class Placement(enum.StrEnum):
    """What observing a bound pod changed in the state (observe_bound_pod's answer)."""

    ADDED = "added"
    MOVED = "moved"
    CONFIRMED = "confirmed"  # was assumed there: the bind landed
    RELABELLED = "relabelled"  # same node, its labels or deletion changed: counted again
    RESIZED = "resized"  # same node, an in-place resize changed what it holds: counted again
    SAME = "same"


@dataclass(frozen=True)
class Disruption:
    """What decides whether a pod may be evicted, read from its metadata."""

    controller: str | None  # the ownerReference with controller: true, as kind/namespace/name
    mirror: bool
    evictable: bool


def disruption(pod: Mapping[str, Any]) -> Disruption:
    metadata = pod.get("metadata") or {}
    annotations = metadata.get("annotations") or {}
    controller = None
    for ref in metadata.get("ownerReferences") or ():
        if ref.get("controller"):
            controller = f"{ref.get('kind')}/{metadata.get('namespace', '')}/{ref.get('name')}"
            break
    return Disruption(controller, MIRROR_ANNOTATION in annotations, annotations.get(EVICTABLE_ANNOTATION) != "false")


@dataclass(frozen=True)
class NodeChange:
    name: str
    row: int
    added: bool
    # What changed, for requeueing only the pods it may help.
    allocatable: bool = False
    schedulable: bool = False
    labels: bool = False
    taints: bool = False
    record: NodeRecord | None = None  # the node as it is now, for queueing hints


class ClusterState:
    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.table = NodeTable()
        self.pods: dict[str, PodRecord] = {}
        # What a pod of a spec holds and carries, shared by the records of the pods of one spec.
        self.shapes = PodShapes(self.table)
        self._waiting: dict[str, set[str]] = {}
        # Owner (controller) -> per-row count of its placed pods, and its total: an owner whose last pod leaves
        # is dropped, so finished Jobs do not pile up one array each.
        self._owner_counts: dict[str, IntArray] = {}
        self._owner_totals: dict[str, int] = {}
        # (protocol, port) -> hostIP (or _ANY_IP) -> per-row count of placed pods holding it (NodePorts).
        self._port_counts: dict[tuple[str, int], dict[str, IntArray]] = {}
        # Pods matching the selectors being scheduled, and the affinity terms placed pods carry (inter-pod rules).
        self.pod_index = PodIndex(self.table.capacity)
        # Namespace labels (affinity namespaceSelector) and workload selectors (default topology spreading).
        self.namespaces = NamespaceIndex()
        self.workloads = WorkloadSelectors()
        # The volumes placed pods use, counted with them (the storage objects are the volume plugins' own index).
        self.volume_usage = VolumeUsage()
        # Pods nominated by preemption, whose room is held against lower-priority pods; a nomination ends when
        # the pod is assumed, bound or deleted (here) or when preemption finds it no longer helps.
        self.nominations = Nominations()

    # -- nodes -----------------------------------------------------------------------------------
    def upsert_node(self, node: Mapping[str, Any]) -> NodeChange:
        record = parse_node(node)
        with self.lock:
            before = self._record(record.name)
            row, added = self.table.upsert(record)
            for uid in self._waiting.pop(record.name, set()):
                pod = self.pods.get(uid)
                if pod is not None and pod.row is None:
                    self._account(pod, row)
            return NodeChange(
                name=record.name, row=row, added=added,
                allocatable=before is None or before.allocatable != record.allocatable,
                schedulable=before is None or (before.ready, before.unschedulable) != (record.ready,
                                                                                        record.unschedulable),
                labels=before is None or before.labels != record.labels,
                taints=before is None or before.taints != record.taints,
                record=record,
            )

    def _record(self, name: str) -> NodeRecord | None:
        row = self.table.index.get(name)
        return None if row is None else self.table.records[row]

    def remove_node(self, name: str) -> list[PodRecord]:
        """Removes a node; returns the pods we had assumed there. Every pod of the node, assumed ones too, waits
        uncounted for the node to come back: an assumed pod's bind may already be on its way, and if the node
        returns before it lands, the room it takes must not look free (a bind that fails forgets the pod)."""
        with self.lock:
            orphans = []
            for pod in self.pods.values():
                if pod.node == name:
                    if pod.row is not None:
                        # Uncounted pod by pod (not by zeroing the row), so an owner, a port or a selector's
                        # count left with no placed pod is dropped as on any release.
                        if pod.owner_key:
                            self._count_owner(pod.owner_key, pod.row, -1)
                        if pod.host_ports:
                            self._count_ports(pod.host_ports, pod.row, -1)
                        self.pod_index.account(pod, pod.row, -1)
                        self.volume_usage.account(pod.namespace, pod.volumes, pod.row, -1)
                    pod.row = None
                    self._waiting.setdefault(name, set()).add(pod.uid)
                    if pod.assumed:
                        orphans.append(pod)
            self.table.remove(name)
            return orphans

    def has_node(self, name: str) -> bool:
        # Without the state lock: one dict lookup is atomic under the GIL, and the answer can be stale the moment
        # it is returned either way (a bind to a node removed since fails at the API server). Taking the lock
        # here made every bind worker wait out the scheduling cycle that holds it.
        return name in self.table.index

    # -- pods ------------------------------------------------------------------------------------
    def _account(self, pod: PodRecord, row: int, sign: int = 1) -> None:
        self.table.add_requests(row, pod.vector, pod.nonzero, sign)
        pod.row = row if sign > 0 else None
        if pod.owner_key:
            self._count_owner(pod.owner_key, row, sign)
        if pod.host_ports:
            self._count_ports(pod.host_ports, row, sign)
        self.pod_index.account(pod, row, sign)
        self.volume_usage.account(pod.namespace, pod.volumes, row, sign)

    def _count_owner(self, owner: str, row: int, sign: int) -> None:
        total = self._owner_totals.get(owner, 0) + sign
        if total <= 0:  # its last placed pod left: forget the owner (a later pod starts a new array)
            self._owner_totals.pop(owner, None)
            self._owner_counts.pop(owner, None)
            return
        self._owner_totals[owner] = total
        counts = self._owner_counts.get(owner)
        if counts is None or counts.shape[0] < self.table.capacity:
            grown = np.zeros(self.table.capacity, dtype=np.int64)
            if counts is not None:
                grown[: counts.shape[0]] = counts
            counts = self._owner_counts[owner] = grown
        counts[row] += sign

    def _count_ports(self, ports: Iterable[HostPort], row: int, sign: int) -> None:
        for ip, protocol, port in ports:
            by_ip = self._port_counts.setdefault((protocol, port), {})
            for key in (ip, _ANY_IP):
                counts = by_ip.get(key)
                if counts is None or counts.shape[0] <= row:
                    grown = np.zeros(max(self.table.capacity, row + 1), dtype=np.int64)
                    if counts is not None:
                        grown[: counts.shape[0]] = counts
                    counts = by_ip[key] = grown
                counts[row] += sign
                if sign < 0 and not counts.any():  # no placed pod holds it any more: forget it
                    del by_ip[key]
            if not by_ip:
                del self._port_counts[(protocol, port)]

    def _place(self, info: PodInfo, node: str, assumed: bool) -> PodRecord:
        record = self.record_of(info, node, assumed)
        self.pods[info.uid] = record
        row = self.table.index.get(node)
        if row is None:
            self._waiting.setdefault(node, set()).add(info.uid)
        else:
            self._account(record, row)
        return record

    def record_of(self, info: PodInfo, node: str, assumed: bool = False) -> PodRecord:
        """The record the pod would have on `node`, neither stored nor counted (preemption holds a nominated
        pod's room with it)."""
        # What the pod holds on its node: its spec's requests, or more while an in-place resize is under way.
        shape = self.shapes.of(info)
        record = PodRecord(
            uid=info.uid, namespace=info.namespace, name=info.name, node=node, vector=shape.vector,
            nonzero=shape.nonzero, owner_key=info.owner_key, assumed=assumed, host_ports=shape.host_ports,
            terminating=info.deleting, affinity=shape.affinity, resources=shape.resources, volumes=info.volumes,
            priority=info.priority, scheduler_name=sys.intern(info.scheduler_name),
        )
        _set_metadata(record, info)
        return record

    @contextlib.contextmanager
    def simulated(self, removed: Iterable[PodRecord] = (), added: Iterable[tuple[PodRecord, int]] = ()
                  ) -> Iterator[None]:
        """Under the lock: the state as if the placed pods `removed` were gone and the records `added` (not stored,
        e.g. nominated pods) counted on their rows, for every filter (requests, ports, inter-pod counts, volumes);
        restored exactly on exit. Preemption's dry runs: no copy of the table is made."""
        with self.lock:
            undo: list[tuple[PodRecord, int, int]] = []
            try:
                for record in removed:
                    row = record.row
                    if row is not None and self.pods.get(record.uid) is record:
                        self._account(record, row, -1)
                        undo.append((record, row, 1))
                for record, row in added:
                    self._account(record, row, 1)
                    undo.append((record, row, -1))
                yield
            finally:
                for record, row, sign in reversed(undo):
                    self._account(record, row, sign)

    def _release(self, record: PodRecord) -> None:
        if record.row is not None:
            self._account(record, record.row, sign=-1)
        else:
            waiting = self._waiting.get(record.node)
            if waiting is not None:
                waiting.discard(record.uid)
                if not waiting:  # the node may never come (deleted before its pods): keep no empty set for it
                    del self._waiting[record.node]

    def observe_bound_pod(self, info: PodInfo) -> Placement:
        """A pod the API shows on a node. Returns 'confirmed' (was assumed there), 'moved', 'added', 'relabelled'
        (same node, its labels or deletion changed: counted again), 'resized' (same node, what it holds changed:
        an in-place resize; counted again) or 'same'."""
        assert info.node_name
        with self.lock:
            self.nominations.remove(info.uid)
            existing = self.pods.get(info.uid)
            if existing is not None:
                if existing.node == info.node_name:
                    was_assumed = existing.assumed
                    existing.assumed = False
                    if existing.labels != info.labels or existing.terminating != info.deleting:
                        row = existing.row
                        if (row is not None and existing.terminating == info.deleting
                                and existing.owner_key == info.owner_key
                                and existing.resources == resource_fields(info.raw)):
                            # Its labels alone (nearly every bind: the binding adds the node's topology labels,
                            # KEP-4742): only what counts pods by label moves, not what the pod holds.
                            self._relabel(existing, row, info)
                            return Placement.RELABELLED
                        self._release(existing)
                        del self.pods[info.uid]
                        self._place(info, info.node_name, assumed=False)
                        return Placement.RELABELLED
                    fields = resource_fields(info.raw)
                    if existing.resources != fields:
                        requests, non_zero = occupied_requests(info)
                        vector = self.table.vector(requests)  # as long as existing.vector, or longer
                        grown = np.zeros_like(vector)
                        grown[: existing.vector.shape[0]] = existing.vector
                        if (not np.array_equal(vector, grown)
                                or existing.nonzero != (non_zero.get(CPU, 0), non_zero.get(MEMORY, 0))):
                            self._release(existing)
                            del self.pods[info.uid]
                            self._place(info, info.node_name, assumed=False)
                            return Placement.RESIZED
                        existing.resources = fields  # e.g. the kubelet reported what it allocated: no change
                    return Placement.CONFIRMED if was_assumed else Placement.SAME
                self._release(existing)
                del self.pods[info.uid]
                self._place(info, info.node_name, assumed=False)
                return Placement.MOVED
            self._place(info, info.node_name, assumed=False)
            return Placement.ADDED

    def _relabel(self, record: PodRecord, row: int, info: PodInfo) -> None:
        """The counted pod's metadata as `info` has it (what else record_of reads of a pod that kept its spec, owner,
        resources and deletion state), re-counted where labels count (the pod index), the row marked changed: what
        releasing and placing it again would leave, without rebuilding the record or moving its requests out and
        back."""
        self.pod_index.account(record, row, -1)
        _set_metadata(record, info)
        self.pod_index.account(record, row, 1)
        self.table.pods_changed(row)

    def remove_pod(self, uid: str) -> PodRecord | None:
        with self.lock:
            self.nominations.remove(uid)
            record = self.pods.pop(uid, None)
            if record is not None:
                self._release(record)
            return record

    def assume(self, info: PodInfo, node: str) -> PodRecord:
        with self.lock:
            if info.uid in self.pods:
                raise ValueError(f"pod {info.key} ({info.uid}) is already placed on {self.pods[info.uid].node}")
            self.nominations.remove(info.uid)
            return self._place(info, node, assumed=True)

    def forget(self, uid: str) -> None:
        """Drops an assumed pod after a definite bind failure (a confirmed pod is left alone)."""
        with self.lock:
            record = self.pods.get(uid)
            if record is not None and record.assumed:
                self._release(record)
                del self.pods[uid]

    # The three reads below take no lock, for has_node's reason (one dict lookup is atomic under the GIL; the answer
    # may be stale the moment it is returned either way): the pod watch asks them for nearly every event, and with
    # the lock each one waited out the scheduling cycle holding it, often more than one (a lock is not fair, and
    # the loop holds the GIL when it releases it). counted_on compares several fields of one record: the fields it
    # compares that are changed in place (assumed, resources, labels: observe_bound_pod, its relabel swapping in a
    # new dict) are changed by the pod watch's own thread, the one that asks.

    def counted_on(self, uid: str, node: str, labels: Mapping[str, str] | None = None, deleting: bool = False,
                   resources: ResourceFields | None = None) -> bool:
        """The pod is already counted, confirmed, on this node with these labels, deletion state and resource
        fields (`resource_fields` of the pod; None: not compared): an update that keeps all that changes
        nothing. Ask it from the thread that delivers pod events (see above)."""
        record = self.pods.get(uid)
        return (record is not None and record.node == node and not record.assumed
                and record.labels == (labels or {}) and record.terminating == deleting
                and (resources is None or record.resources == resources))

    def record(self, uid: str) -> PodRecord | None:
        return self.pods.get(uid)

    def is_placed(self, uid: str) -> bool:
        return uid in self.pods

    def assumed_count(self) -> int:
        with self.lock:
            return sum(1 for p in self.pods.values() if p.assumed)

    def host_port_conflicts(self, ports: Iterable[HostPort], size: int | None = None) -> BoolArray:
        """Rows (over `size`, default the table's capacity) where a placed pod holds a host port that one of
        `ports` conflicts with (HostPortInfo.CheckConflict): same protocol and port, and the same hostIP or
        either side the wildcard 0.0.0.0. A few dict lookups and array ors per port, never a loop over nodes."""
        size = self.table.capacity if size is None else size
        conflicts = np.zeros(size, dtype=bool)
        for ip, protocol, port in ports:
            by_ip = self._port_counts.get((protocol or "TCP", port))
            if not by_ip or port <= 0:
                continue
            ip = ip or WILDCARD_IP
            for key in (_ANY_IP,) if ip == WILDCARD_IP else (ip, WILDCARD_IP):
                counts = by_ip.get(key)
                if counts is not None:
                    n = min(size, counts.shape[0])
                    conflicts[:n] |= counts[:n] > 0
        return conflicts

    def owner_counts(self, owner_key: str) -> IntArray:
        counts = self._owner_counts.get(owner_key)
        size = self.table.capacity
        if counts is None:
            return np.zeros(size, dtype=np.int64)
        if counts.shape[0] < size:
            grown = np.zeros(size, dtype=np.int64)
            grown[: counts.shape[0]] = counts
            self._owner_counts[owner_key] = counts = grown
        return counts

    # -- inter-pod constraints -------------------------------------------------------------------
    def pod_counts(self, query: PodQuery) -> IntArray:
        """Per-row count of the placed pods `query` matches (bound and assumed), over the table's capacity."""
        self.pod_index.resize(self.table.capacity)
        return self.pod_index.counts(query, self.pods.values())[: self.table.capacity]

    def carried_terms(self, kind: TermKind) -> list[tuple[AffinityTerm, IntArray]]:
        """The distinct (anti-)affinity terms of this kind placed pods carry, each with its per-row count."""
        self.pod_index.resize(self.table.capacity)
        return [(term, counts[: self.table.capacity]) for term, counts in self.pod_index.carried(kind)]


def _set_metadata(record: PodRecord, info: PodInfo) -> None:
    """The record's fields read from the pod's metadata and status (what may change while it stays placed, its
    spec, owner and resources kept): record_of sets them on a new record, observe_bound_pod's relabel on the one
    counted. Labels are a new dict, never changed in place (the pod watch reads them without the lock)."""
    facts = disruption(info.raw)
    record.labels = dict(info.labels)
    record.controller, record.mirror, record.evictable = facts.controller, facts.mirror, facts.evictable
    record.started = _started(info)
    record.preempted = info.deleting and _preempted_by_scheduler(info.raw)


def _started(info: PodInfo) -> float:
    started = (info.raw.get("status") or {}).get("startTime")
    if started:
        try:
            return datetime.fromisoformat(str(started).replace("Z", "+00:00")).timestamp()
        except ValueError:
            pass
    return info.created


def _preempted_by_scheduler(pod: Mapping[str, Any]) -> bool:
    """kube-scheduler's podTerminatingByPreemption, less the deletionTimestamp (the caller checks it)."""
    for condition in (pod.get("status") or {}).get("conditions") or ():
        if condition.get("type") == "DisruptionTarget":
            return bool(condition.get("status") == "True" and condition.get("reason") == "PreemptionByScheduler")
    return False


