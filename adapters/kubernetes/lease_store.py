"""KubeLeaseStore: the LeaseStore port on coordination.k8s.io/v1 Leases.

update() is a PUT carrying the resourceVersion it read, so two candidates racing for the lease
cannot both win: the loser gets 409 and re-reads. Give it a client of its own (client.lease_client): a
renewal stuck behind a burst of binds, for a token or a connection, would cost the leadership. Should it
share one anyway, lease calls at least bypass the QPS limit.
"""

from __future__ import annotations

import threading
from typing import Any
from urllib.parse import quote

from adapters.kubernetes.client import KubeClient
from metrics_sched.ports import ApiError, LeaseRecord


class KubeLeaseStore:
    def __init__(self, client: KubeClient) -> None:
        self._client = client
        # The last object read or written per lease: a PUT replaces the whole object, so labels,
        # annotations and spec fields this port does not model are carried over from it.
        self._last_seen: dict[tuple[str, str], dict[str, Any]] = {}
        self._lock = threading.Lock()

    def get(self, namespace: str, name: str) -> LeaseRecord | None:
        try:
            obj = self._client.request("GET", _lease_path(namespace, name), rate_limited=False)
        except ApiError as exc:
            if exc.not_found:
                return None
            raise
        return self._remember(obj)

    def create(self, record: LeaseRecord) -> LeaseRecord:
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": record.name, "namespace": record.namespace},
                "spec": _spec(record)}
        obj = self._client.request("POST", f"/apis/coordination.k8s.io/v1/namespaces/{quote(record.namespace, safe='')}"
                                   "/leases", body, rate_limited=False)
        return self._remember(obj)

    def update(self, record: LeaseRecord) -> LeaseRecord:
        if not record.resource_version:
            # Without it the PUT would be unconditional, and two leaders could both "win".
            raise ValueError(f"lease {record.namespace}/{record.name}: update needs the resource_version it read")
        with self._lock:
            base = self._last_seen.get((record.namespace, record.name))
        body: dict[str, Any] = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {}, "spec": {}}
        if base is not None and base["metadata"].get("resourceVersion") == record.resource_version:
            body = {**base, "metadata": dict(base["metadata"]), "spec": dict(base.get("spec") or {})}
        body["metadata"].update(name=record.name, namespace=record.namespace,
                                resourceVersion=record.resource_version)
        body["metadata"].pop("managedFields", None)
        for key in ("holderIdentity", "acquireTime", "renewTime"):
            body["spec"].pop(key, None)
        body["spec"].update(_spec(record))
        obj = self._client.request("PUT", _lease_path(record.namespace, record.name), body, rate_limited=False)
        return self._remember(obj)

    def _remember(self, obj: dict[str, Any]) -> LeaseRecord:
        record = _record(obj)
        with self._lock:
            self._last_seen[(record.namespace, record.name)] = obj
        return record


def _lease_path(namespace: str, name: str) -> str:
    return f"/apis/coordination.k8s.io/v1/namespaces/{quote(namespace, safe='')}/leases/{quote(name, safe='')}"


def _spec(record: LeaseRecord) -> dict[str, Any]:
    spec: dict[str, Any] = {"leaseDurationSeconds": record.lease_duration_seconds,
                            "leaseTransitions": record.lease_transitions}
    # Absent rather than null: a released lease has no holder.
    if record.holder is not None:
        spec["holderIdentity"] = record.holder
    if record.acquire_time is not None:
        spec["acquireTime"] = record.acquire_time
    if record.renew_time is not None:
        spec["renewTime"] = record.renew_time
    return spec


def _record(obj: dict[str, Any]) -> LeaseRecord:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    return LeaseRecord(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        holder=spec.get("holderIdentity") or None,
        lease_duration_seconds=int(spec.get("leaseDurationSeconds") or 0),
        acquire_time=spec.get("acquireTime"),
        renew_time=spec.get("renewTime"),
        lease_transitions=int(spec.get("leaseTransitions") or 0),
        resource_version=meta.get("resourceVersion"),
    )
