"""A pod parsed once, on arrival, into what scheduling needs (the raw JSON stays alongside)."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from metrics_sched.model.resources import Resources, pod_requests
from metrics_sched.model.volumes import PodVolumes, parse_pod_volumes


@dataclass(frozen=True)
class Toleration:
    key: str | None
    operator: str  # Equal | Exists
    value: str | None
    effect: str | None  # None = all effects

    def tolerates(self, key: str, value: str | None, effect: str) -> bool:
        """Mirrors k8s.io/api/core/v1 Toleration.ToleratesTaint."""
        if self.effect and self.effect != effect:
            return False
        if self.key and self.key != key:
            return False
        if self.operator == "Exists":
            return True
        return (self.value or "") == (value or "")


@dataclass
class PodInfo:
    raw: Mapping[str, Any]
    uid: str
    namespace: str
    name: str
    scheduler_name: str
    priority: int
    created: float
    node_name: str | None
    requests: Resources
    non_zero_requests: Resources
    labels: Mapping[str, str]
    node_selector: Mapping[str, str]
    tolerations: tuple[Toleration, ...]
    owner_key: str | None
    scheduling_gates: tuple[str, ...]
    deleting: bool
    phase: str
    resource_version: str = ""
    # Set instead of requests when the pod cannot be parsed; the scheduler reports it and moves on.
    parse_error: str | None = None
    attempts: int = 0

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def affinity(self) -> Mapping[str, Any]:
        return (self.raw.get("spec") or {}).get("affinity") or {}

    @property
    def terminal(self) -> bool:
        return self.phase in ("Succeeded", "Failed")

    @functools.cached_property
    def volumes(self) -> PodVolumes:
        """spec.volumes as the volume plugins read them, parsed once per pod version (four plugins, their queueing
        hints and the cluster state read it; the spec's volumes are immutable)."""
        return parse_pod_volumes(self.raw)


def _timestamp(value: str | None) -> float:
    if not value:
        return 0.0
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def _owner_key(metadata: Mapping[str, Any]) -> str | None:
    for ref in metadata.get("ownerReferences") or []:
        if ref.get("controller"):
            return f"{ref.get('kind')}/{ref.get('uid')}"
    return None


def parse_pod(pod: Mapping[str, Any]) -> PodInfo:
    metadata = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    error = None
    try:
        requests = pod_requests(pod)
        non_zero = pod_requests(pod, non_zero=True)
    except ValueError as exc:
        requests, non_zero, error = {}, {}, f"malformed resource quantity: {exc}"
    tolerations = tuple(
        Toleration(key=t.get("key") or None, operator=t.get("operator") or "Equal", value=t.get("value"),
                   effect=t.get("effect") or None)
        for t in spec.get("tolerations") or []
    )
    return PodInfo(
        raw=pod,
        uid=metadata.get("uid", ""),
        namespace=metadata.get("namespace", ""),
        name=metadata.get("name", ""),
        scheduler_name=spec.get("schedulerName") or "default-scheduler",
        priority=int(spec.get("priority") or 0),
        created=_timestamp(metadata.get("creationTimestamp")),
        node_name=spec.get("nodeName") or None,
        requests=requests,
        non_zero_requests=non_zero,
        labels=metadata.get("labels") or {},
        node_selector=spec.get("nodeSelector") or {},
        tolerations=tolerations,
        owner_key=_owner_key(metadata),
        scheduling_gates=tuple(g.get("name", "") for g in spec.get("schedulingGates") or []),
        deleting=bool(metadata.get("deletionTimestamp")),
        phase=status.get("phase") or "Pending",
        resource_version=metadata.get("resourceVersion", ""),
        parse_error=error,
    )
