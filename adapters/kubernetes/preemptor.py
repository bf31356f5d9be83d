"""KubePreemptor: the Preemptor port (a pod's nominatedNodeName, a victim's DisruptionTarget condition and its
deletion) as raw JSON calls, in kube-scheduler's order: the condition is patched before the delete, so the
victim's controller and containers can tell the pod was preempted while it terminates.

The delete carries the victim's uid as a precondition: a pod deleted and re-created under the same name since
the decision is not deleted for its predecessor (409). The replies are not parsed: only the status counts.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from adapters.kubernetes.client import MERGE_PATCH, STRATEGIC_MERGE_PATCH, KubeClient
from adapters.kubernetes.kube_time import Clock, seconds_time, utc_now

__all__ = ["KubePreemptor"]


class KubePreemptor:
    def __init__(self, client: KubeClient, *, clock: Clock = utc_now) -> None:
        self._client = client
        self._clock = clock

    def set_nominated_node(self, namespace: str, name: str, node: str | None) -> None:
        # A merge patch: null removes the field (clearing the nomination), a string sets it.
        body = {"status": {"nominatedNodeName": node}}
        self._client.send("PATCH", f"{_pod_path(namespace, name)}/status", body, content_type=MERGE_PATCH)

    def mark_disruption_target(self, namespace: str, name: str, message: str) -> None:
        # Strategic merge keys pod conditions by type: only DisruptionTarget is added or replaced.
        body: dict[str, Any] = {"status": {"conditions": [{
            "type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler", "message": message,
            "lastTransitionTime": seconds_time(self._clock()),
        }]}}
        self._client.send("PATCH", f"{_pod_path(namespace, name)}/status", body, content_type=STRATEGIC_MERGE_PATCH)

    def delete_pod(self, namespace: str, name: str, uid: str) -> None:
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid}}
        self._client.send("DELETE", _pod_path(namespace, name), body)


def _pod_path(namespace: str, name: str) -> str:
    return f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(name, safe='')}"
