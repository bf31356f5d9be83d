"""KubeVolumeWriter: the VolumeWriter port (VolumeBinding's PreBind writes) as raw JSON merge patches.

Both patches carry the resourceVersion the scheduler decided on, so a PV taken by someone else, or a claim
changed meanwhile, answers 409 instead of being overwritten (kube-scheduler updates the whole object with
its cached version, to the same effect).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

from adapters.kubernetes.client import MERGE_PATCH, KubeClient
from metrics_sched.model.volumes import ANN_BOUND_BY_CONTROLLER, ANN_SELECTED_NODE

__all__ = ["KubeVolumeWriter"]


class KubeVolumeWriter:
    def __init__(self, client: KubeClient) -> None:
        self._client = client

    def bind_volume(self, name: str, resource_version: str, namespace: str, claim: str, claim_uid: str, *,
                    bound_by_controller: bool = True) -> str:
        metadata: dict[str, Any] = {"resourceVersion": resource_version}
        if bound_by_controller:
            metadata["annotations"] = {ANN_BOUND_BY_CONTROLLER: "yes"}
        patch = {
            "metadata": metadata,
            "spec": {"claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "namespace": namespace,
                                  "name": claim, "uid": claim_uid}},
        }
        written = self._client.request("PATCH", f"/api/v1/persistentvolumes/{quote(name, safe='')}", patch,
                                       content_type=MERGE_PATCH)
        return _version(written)

    def select_node(self, namespace: str, claim: str, resource_version: str, node: str) -> str:
        patch = {"metadata": {"resourceVersion": resource_version, "annotations": {ANN_SELECTED_NODE: node}}}
        path = f"/api/v1/namespaces/{quote(namespace, safe='')}/persistentvolumeclaims/{quote(claim, safe='')}"
        return _version(self._client.request("PATCH", path, patch, content_type=MERGE_PATCH))


def _version(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion", ""))
