"""KubeResourceClaimWriter: the ResourceClaimWriter port (DynamicResources' claim status writes) on resource.k8s.io/v1.

The status update is a PUT of the whole status carrying the resourceVersion the scheduler decided on, so a claim
allocated or changed meanwhile answers 409 instead of being overwritten (kube-scheduler's UpdateStatus does the
same with its cached copy).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from adapters.kubernetes.client import MERGE_PATCH, STRATEGIC_MERGE_PATCH, KubeClient
from metrics_sched.ports import ApiError, KubeObject

__all__ = ["KubeResourceClaimWriter"]

_GROUP = "/apis/resource.k8s.io/v1"


def _claim_path(namespace: str, name: str) -> str:
    return f"{_GROUP}/namespaces/{quote(namespace, safe='')}/resourceclaims/{quote(name, safe='')}"


class KubeResourceClaimWriter:
    def __init__(self, client: KubeClient) -> None:
        self._client = client

    def get_claim(self, namespace: str, name: str) -> KubeObject | None:
        try:
            return self._client.request("GET", _claim_path(namespace, name))
        except ApiError as exc:
            if exc.not_found:
                return None
            raise

    def update_claim(self, claim: KubeObject) -> KubeObject:
        meta = claim.get("metadata") or {}
        return self._client.request("PUT", _claim_path(str(meta.get("namespace", "")), str(meta.get("name", ""))),
                                    claim)

    def update_claim_status(self, claim: KubeObject) -> KubeObject:
        meta = claim.get("metadata") or {}
        path = _claim_path(str(meta.get("namespace", "")), str(meta.get("name", ""))) + "/status"
        return self._client.request("PUT", path, claim)

    def patch_claim_status(self, namespace: str, name: str, patch: Mapping[str, Any]) -> KubeObject:
        return self._client.request("PATCH", _claim_path(namespace, name) + "/status", patch,
                                    content_type=STRATEGIC_MERGE_PATCH)

    def create_claim(self, claim: KubeObject) -> KubeObject:
        namespace = str((claim.get("metadata") or {}).get("namespace", ""))
        return self._client.request("POST", f"{_GROUP}/namespaces/{quote(namespace, safe='')}/resourceclaims", claim)

    def delete_claim(self, namespace: str, name: str, uid: str) -> None:
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid}}
        try:
            self._client.request("DELETE", _claim_path(namespace, name), body)
        except ApiError as exc:
            if not exc.not_found:
                raise

    def set_extended_resource_claim_status(self, namespace: str, pod: str, status: Mapping[str, Any]) -> None:
        path = f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(pod, safe='')}/status"
        self._client.request("PATCH", path, {"status": {"extendedResourceClaimStatus": dict(status)}},
                             content_type=MERGE_PATCH)
