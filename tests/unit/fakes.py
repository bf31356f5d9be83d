"""In-memory implementations of the core's ports for unit tests."""

from __future__ import annotations

import copy
import threading
import uuid
from collections.abc import Callable, Mapping
from typing import Any, Literal

from metrics_sched.leader import MemoryLeaseStore
from metrics_sched.ports import ApiError, EventSeries, KubeObject, LeaseRecord, SchedulingEvent


class FakeAPI:
    """Pods, bindings, events and leases held in dicts; binding semantics like the apiserver's."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pods: dict[str, dict[str, Any]] = {}
        self.events: list[SchedulingEvent] = []
        self.event_names: list[str] = []  # of self.events, index for index
        self.event_series: dict[str, EventSeries] = {}  # event name -> its series, as last written
        self.conditions: dict[str, dict[str, str]] = {}
        self.condition_writes = 0
        # Called (outside the lock) as a report write starts: "event", "series" or "condition". Lets a test hold
        # a write in flight while the pod changes.
        self.before_write: Callable[[str], None] | None = None
        self.annotations: dict[str, dict[str, str]] = {}
        self.binds: list[tuple[str, str]] = []
        self.fail_next_binds: list[ApiError] = []
        self.bind_then_fail: list[ApiError] = []  # bind happens, then the caller sees this error
        self.lease_store = MemoryLeaseStore()
        self._rv = 0
        self.watchers: list[Any] = []
        self.namespace_lists: list[tuple[str, str | None]] = []  # namespace_pods calls

    # PodWriter
    def bind(self, namespace: str, name: str, uid: str, node: str,
             annotations: Mapping[str, str] | None = None) -> None:
        with self.lock:
            if self.fail_next_binds:
                raise self.fail_next_binds.pop(0)
            pod = self.pods.get(f"{namespace}/{name}")
            if pod is None:
                raise ApiError(404, f"pods {name!r} not found")
            if pod["metadata"]["uid"] != uid:
                raise ApiError(409, "Precondition failed: UID in precondition does not match")
            if pod["spec"].get("nodeName"):
                raise ApiError(409, f"pod {name} is already assigned to node {pod['spec']['nodeName']!r}")
            pod["spec"]["nodeName"] = node
            # The API server's binding also sets PodScheduled=True (and a new resourceVersion).
            _set_condition(pod, {"type": "PodScheduled", "status": "True"})
            self._bump(pod)
            if annotations:
                pod["metadata"].setdefault("annotations", {}).update(annotations)
                self.annotations.setdefault(f"{namespace}/{name}", {}).update(annotations)
            self.binds.append((f"{namespace}/{name}", node))
            error = self.bind_then_fail.pop(0) if self.bind_then_fail else None
        for watcher in self.watchers:
            watcher.on_pod_event("MODIFIED", copy.deepcopy(pod))
        if error:
            raise error

    def get_pod(self, namespace: str, name: str) -> KubeObject | None:
        with self.lock:
            pod = self.pods.get(f"{namespace}/{name}")
            return copy.deepcopy(pod) if pod else None

    # ClusterLister.namespace_pods (the rebalancer's read of a gang's members); selectors of the form k=v,k2=v2
    def namespace_pods(self, namespace: str, label_selector: str | None = None) -> list[KubeObject]:
        wanted = dict(term.split("=", 1) for term in label_selector.split(",")) if label_selector else {}
        with self.lock:
            self.namespace_lists.append((namespace, label_selector))
            return [copy.deepcopy(p) for p in self.pods.values() if p["metadata"].get("namespace") == namespace
                    and all((p["metadata"].get("labels") or {}).get(k) == v for k, v in wanted.items())]

    def record_event(self, event: SchedulingEvent, series: EventSeries | None = None) -> str:
        if self.before_write:
            self.before_write("event")
        with self.lock:
            name = f"{event.pod_name}.{len(self.events)}"
            self.events.append(event)
            self.event_names.append(name)
            if series is not None:
                self.event_series[name] = series
            return name

    def update_event_series(self, event: SchedulingEvent, name: str, series: EventSeries) -> None:
        if self.before_write:
            self.before_write("series")
        with self.lock:
            if name not in self.event_names:  # expired: created again under its name
                self.events.append(event)
                self.event_names.append(name)
            self.event_series[name] = series

    def set_pod_scheduled_condition(self, namespace: str, name: str, *, status: Literal["True", "False"],
                                    reason: str, message: str, resource_version: str | None = None) -> None:
        if self.before_write:
            self.before_write("condition")
        key = f"{namespace}/{name}"
        with self.lock:
            pod = self.pods.get(key)
            if resource_version is not None:
                if pod is None:
                    raise ApiError(404, f"pods {name!r} not found")
                if pod["metadata"].get("resourceVersion") != resource_version:
                    raise ApiError(409, "the object has been modified; please apply your changes to the latest "
                                        "version and try again")
            self.condition_writes += 1
            self.conditions[key] = {"status": status, "reason": reason, "message": message}
            if pod is not None:
                _set_condition(pod, {"type": "PodScheduled", "status": status, "reason": reason, "message": message})
                self._bump(pod)

    # test helpers
    def add_pod(self, pod: dict[str, Any]) -> dict[str, Any]:
        pod.setdefault("metadata", {}).setdefault("uid", str(uuid.uuid4()))
        pod["metadata"].setdefault("namespace", "default")
        pod["metadata"].setdefault("creationTimestamp", "2026-11-30T12:00:00Z")
        key = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
        with self.lock:
            self._bump(pod)
            self.pods[key] = pod
        for watcher in self.watchers:
            watcher.on_pod_event("ADDED", copy.deepcopy(pod))
        return pod

    def delete_pod(self, key: str) -> None:
        with self.lock:
            pod = self.pods.pop(key)
        for watcher in self.watchers:
            watcher.on_pod_event("DELETED", copy.deepcopy(pod))

    def pod_scheduled(self, key: str) -> dict[str, str] | None:
        """The PodScheduled condition the pod has now (whoever wrote it)."""
        with self.lock:
            conditions = self.pods[key].get("status", {}).get("conditions", [])
            return next((dict(c) for c in conditions if c["type"] == "PodScheduled"), None)

    def series_for(self, key: str, reason: str) -> list[EventSeries | None]:
        """Per event about the pod with this reason, in order: its series (None while it is a single event)."""
        with self.lock:
            return [self.event_series.get(n) for e, n in zip(self.events, self.event_names, strict=True)
                    if f"{e.namespace}/{e.pod_name}" == key and e.reason == reason]

    def _bump(self, pod: dict[str, Any]) -> None:
        self._rv += 1
        pod["metadata"]["resourceVersion"] = str(self._rv)

    def events_for(self, key: str, reason: str | None = None) -> list[SchedulingEvent]:
        with self.lock:
            return [e for e in self.events if f"{e.namespace}/{e.pod_name}" == key
                    and (reason is None or e.reason == reason)]

    # LeaseStore: the core's in-memory one (optimistic concurrency as the API server)
    def get(self, namespace: str, name: str) -> LeaseRecord | None:
        return self.lease_store.get(namespace, name)

    def create(self, record: LeaseRecord) -> LeaseRecord:
        return self.lease_store.create(record)

    def update(self, record: LeaseRecord) -> LeaseRecord:
        return self.lease_store.update(record)

    @property
    def leases(self) -> dict[tuple[str, str], LeaseRecord]:
        return self.lease_store.leases


def _set_condition(pod: dict[str, Any], condition: dict[str, str]) -> None:
    conditions = pod.setdefault("status", {}).setdefault("conditions", [])
    conditions[:] = [c for c in conditions if c["type"] != condition["type"]] + [condition]


def node(name: str, *, cpu: str = "4", memory: str = "16Gi", pods: int = 110, gpus: int = 0,
         labels: dict[str, str] | None = None, taints: list[dict[str, str]] | None = None,
         ready: bool = True, unschedulable: bool = False) -> dict[str, Any]:
    alloc = {"cpu": cpu, "memory": memory, "pods": str(pods), "ephemeral-storage": "100Gi"}
    if gpus:
        alloc["nvidia.com/gpu"] = str(gpus)
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": {"taints": taints or [], "unschedulable": unschedulable},
        "status": {"allocatable": alloc, "capacity": alloc,
                   "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def pod(name: str, *, cpu: str = "100m", memory: str = "128Mi", gpus: int = 0, scheduler: str = "metrics-sched",
        namespace: str = "default", node_name: str | None = None, priority: int = 0, **spec: Any) -> dict[str, Any]:
    requests: dict[str, str] = {"cpu": cpu, "memory": memory}
    if gpus:
        requests["nvidia.com/gpu"] = str(gpus)
    body: dict[str, Any] = {
        "metadata": {"name": name, "namespace": namespace, "uid": str(uuid.uuid4()),
                     "creationTimestamp": "2026-11-30T12:00:00Z"},
        "spec": {"schedulerName": scheduler, "priority": priority,
                 "containers": [{"name": "c", "resources": {"requests": requests}}], **spec},
        "status": {"phase": "Pending"},
    }
    if node_name:
        body["spec"]["nodeName"] = node_name
    return body
