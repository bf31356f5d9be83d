"""KubeResourceClaimWriter: the ResourceClaimWriter port (DynamicResources' claim status writes) on resource.k8s.io/v1.

The status update is a PUT of the whole status carrying the resourceVersion the scheduler decided on, so a claim
allocated or changed meanwhile answers 409 instead of being overwritten (kube-scheduler's UpdateStatus does the
same with its cached copy).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from adapters.kubernetes.client import STRATEGIC_MERGE_PATCH, KubeClient
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
