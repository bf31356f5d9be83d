"""KubeClusterSource: the ClusterSource port on reflectors, one per watched resource."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from adapters.kubernetes.client import KubeClient
from adapters.kubernetes.reflector import Reflector, ReflectorOptions, ReflectorStats
from metrics_sched.ports import (
    ApiError,
    ClusterEventSink,
    EventType,
    KubeObject,
    PodGroupApi,
    StorageKind,
    WorkloadKind,
)


@dataclass(frozen=True)
class WatchedResource:
    """A resource to list and watch, and how its events reach the sink.

    Adding a resource later (e.g. PersistentVolumeClaims, or NodeMetrics) is a new WatchedResource
    plus the sink method it calls: the reflector itself is resource-agnostic.
    """

    name: str
    path: str
    deliver: Callable[[ClusterEventSink, EventType, KubeObject], None]
    synced: Callable[[ClusterEventSink], None]
    params: Mapping[str, str] = field(default_factory=dict)  # labelSelector / fieldSelector


NODES = WatchedResource(
    "nodes", "/api/v1/nodes",
    deliver=lambda sink, kind, obj: sink.on_node_event(kind, obj),
    synced=lambda sink: sink.on_synced("nodes"),
)
PODS = WatchedResource(
    "pods", "/api/v1/pods",
    deliver=lambda sink, kind, obj: sink.on_pod_event(kind, obj),
    synced=lambda sink: sink.on_synced("pods"),
)
# What a pod affinity term's namespaceSelector selects.
NAMESPACES = WatchedResource(
    "namespaces", "/api/v1/namespaces",
    deliver=lambda sink, kind, obj: sink.on_namespace_event(kind, obj),
    synced=lambda sink: sink.on_synced("namespaces"),
)


def _workload(kind: WorkloadKind, path: str) -> WatchedResource:
    """A workload whose selector PodTopologySpread's default constraints read (kube-scheduler's DefaultSelector)."""
    return WatchedResource(
        kind, path,
        deliver=lambda sink, event, obj: sink.on_workload_event(kind, event, obj),
        synced=lambda sink: sink.on_synced(kind),
    )


SERVICES = _workload("services", "/api/v1/services")
REPLICATION_CONTROLLERS = _workload("replicationcontrollers", "/api/v1/replicationcontrollers")
REPLICA_SETS = _workload("replicasets", "/apis/apps/v1/replicasets")
STATEFUL_SETS = _workload("statefulsets", "/apis/apps/v1/statefulsets")
WORKLOADS: tuple[WatchedResource, ...] = (SERVICES, REPLICATION_CONTROLLERS, REPLICA_SETS, STATEFUL_SETS)


def _storage(kind: StorageKind, path: str) -> WatchedResource:
    """A storage object the volume plugins read (PVs, claims, classes, CSI nodes, drivers and capacities)."""
    return WatchedResource(
        kind, path,
        deliver=lambda sink, event, obj: sink.on_storage_event(kind, event, obj),
        synced=lambda sink: sink.on_synced(kind),
    )


STORAGE: tuple[WatchedResource, ...] = (
    _storage("persistentvolumes", "/api/v1/persistentvolumes"),
    _storage("persistentvolumeclaims", "/api/v1/persistentvolumeclaims"),
    _storage("storageclasses", "/apis/storage.k8s.io/v1/storageclasses"),
    _storage("csinodes", "/apis/storage.k8s.io/v1/csinodes"),
    _storage("csidrivers", "/apis/storage.k8s.io/v1/csidrivers"),
    _storage("csistoragecapacities", "/apis/storage.k8s.io/v1/csistoragecapacities"),
    _storage("volumeattachments", "/apis/storage.k8s.io/v1/volumeattachments"),
)
# What preemption reads to spare the pods a budget protects.
BUDGETS = WatchedResource(
    "poddisruptionbudgets", "/apis/policy/v1/poddisruptionbudgets",
    deliver=lambda sink, kind, obj: sink.on_budget_event(kind, obj),
    synced=lambda sink: sink.on_synced("poddisruptionbudgets"),
)
DEFAULT_RESOURCES: tuple[WatchedResource, ...] = (NODES, PODS, NAMESPACES, *WORKLOADS, *STORAGE, BUDGETS)


def _pod_groups(api: PodGroupApi, resource: str) -> WatchedResource:
    """A gang API's PodGroups (Coscheduling). Not awaited before scheduling starts: a member whose group has not
    been listed yet waits (Unschedulable) and is woken when the group arrives. Watched only where the API is
    served (pod_group_resources)."""
    return WatchedResource(
        resource, f"/apis/{api}/podgroups",
        deliver=lambda sink, event, obj: sink.on_pod_group_event(api, event, obj),
        synced=lambda sink: None,
    )


COSCHEDULING_POD_GROUPS = _pod_groups("scheduling.x-k8s.io/v1alpha1", "podgroups.scheduling.x-k8s.io")
# The Workload API's PodGroup moved from v1alpha2 (1.36) to v1beta1 (1.37): whichever is served is watched.
WORKLOAD_POD_GROUPS = _pod_groups("scheduling.k8s.io/v1alpha2", "podgroups.scheduling.k8s.io/v1alpha2")
WORKLOAD_POD_GROUPS_BETA = _pod_groups("scheduling.k8s.io/v1beta1", "podgroups.scheduling.k8s.io/v1beta1")
POD_GROUPS: tuple[WatchedResource, ...] = (COSCHEDULING_POD_GROUPS, WORKLOAD_POD_GROUPS, WORKLOAD_POD_GROUPS_BETA)


def pod_group_resources(client: KubeClient) -> tuple[tuple[WatchedResource, ...], list[str]]:
    """The PodGroup resources this API server serves (the CRD installed, the Workload API enabled), and a line
    for each it does not (its gang members then wait, saying their group does not exist)."""
    served: list[WatchedResource] = []
    missing: list[str] = []
    for resource in POD_GROUPS:
        group_version = resource.path.removeprefix("/apis/").removesuffix("/podgroups")
        try:
            found = client.request("GET", f"/apis/{group_version}")
        except ApiError as exc:
            if not exc.not_found:
                raise
            missing.append(f"{resource.name}: {group_version} is not served")
            continue
        if any(r.get("name") == "podgroups" for r in found.get("resources") or ()):
            served.append(resource)
        else:
            missing.append(f"{resource.name}: {group_version} has no podgroups resource")
    return tuple(served), missing


class KubeClusterSource:
    def __init__(self, client: KubeClient, *, resources: Sequence[WatchedResource] = DEFAULT_RESOURCES,
                 options: ReflectorOptions | None = None, rng: random.Random | None = None) -> None:
        self._client = client
        self._resources = tuple(resources)
        self._options = options
        self._rng = rng
        self._reflectors: dict[str, Reflector] = {}

    def start(self, sink: ClusterEventSink) -> None:
        if self._reflectors:
            raise RuntimeError("KubeClusterSource already started")
        if len(self._resources) > self._client.max_watch_connections:
            # A watch beyond the pool would wait for a connection forever, its resource never synced.
            raise ValueError(f"{len(self._resources)} watched resources need at least as many watch connections; "
                             f"the client has {self._client.max_watch_connections}")
        for resource in self._resources:
            self._reflectors[resource.name] = Reflector(
                self._client, resource.name, resource.path,
                on_event=_bind_deliver(resource, sink), on_synced=_bind_synced(resource, sink),
                params=resource.params, options=self._options, rng=self._rng,
            )
        for reflector in self._reflectors.values():
            reflector.start()

    def stop(self) -> None:
        # Abort every watch first, then wait: stopping one by one would add up their shutdown times.
        for reflector in self._reflectors.values():
            reflector.request_stop()
        for reflector in self._reflectors.values():
            reflector.join()

    def wait_synced(self, timeout: float | None = None) -> bool:
        """True once every resource has delivered its initial list (False on timeout)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for reflector in self._reflectors.values():
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not reflector.wait_synced(left):
                return False
        return bool(self._reflectors)

    def stats(self) -> dict[str, ReflectorStats]:
        """Per resource: lists, relists, watch restarts, events... for the metrics endpoint."""
        return {name: reflector.stats() for name, reflector in self._reflectors.items()}


def _bind_deliver(resource: WatchedResource, sink: ClusterEventSink) -> Callable[[EventType, KubeObject], None]:
    return lambda kind, obj: resource.deliver(sink, kind, obj)


def _bind_synced(resource: WatchedResource, sink: ClusterEventSink) -> Callable[[], None]:
    return lambda: resource.synced(sink)
