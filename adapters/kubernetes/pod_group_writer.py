"""KubePodGroupStatusWriter: the PodGroupStatusWriter port, a patch of the status subresource.

scheduler-plugins' CRD (`scheduling.x-k8s.io/v1alpha1`) gets a JSON merge patch of status.phase, status.scheduled
(the count our copy of the CRD declares; scheduler-plugins' own controller fills running/succeeded/failed) and
status.scheduleStartTime. The Workload API's PodGroup (`scheduling.k8s.io`, v1alpha2 in 1.36 and v1beta1 in 1.37,
a built-in type) gets a strategic merge patch of its PodGroupScheduled condition only (conditions merge by type, so
other writers' conditions stay).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from adapters.kubernetes.client import MERGE_PATCH, STRATEGIC_MERGE_PATCH, KubeClient
from adapters.kubernetes.kube_time import Clock, seconds_time, utc_now
from metrics_sched.ports import PodGroupApi, PodGroupStatus

__all__ = ["KubePodGroupStatusWriter"]

CONDITION = "PodGroupScheduled"


class KubePodGroupStatusWriter:
    def __init__(self, client: KubeClient, clock: Clock = utc_now) -> None:
        self._client = client
        self._clock = clock

    def write_pod_group_status(self, api: PodGroupApi, namespace: str, name: str, status: PodGroupStatus) -> None:
        path = f"/apis/{api}/namespaces/{quote(namespace, safe='')}/podgroups/{quote(name, safe='')}/status"
        now = seconds_time(self._clock())
        body: dict[str, Any]
        if api.startswith("scheduling.x-k8s.io/"):
            fields: dict[str, Any] = {"phase": status.phase, "scheduled": status.scheduled}
            if status.phase == "Scheduling":
                fields["scheduleStartTime"] = now
            body = {"status": fields}
            self._client.request("PATCH", path, body, content_type=MERGE_PATCH)
            return
        condition = {"type": CONDITION, "status": "True" if status.phase == "Scheduled" else "False",
                     "reason": status.reason, "message": status.message, "lastTransitionTime": now}
        body = {"status": {"conditions": [condition]}}
        self._client.request("PATCH", path, body, content_type=STRATEGIC_MERGE_PATCH)
