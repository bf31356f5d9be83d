"""DefaultBinder: POST pods/binding (carrying the pod UID) through the PodWriter port."""

from __future__ import annotations

from metrics_sched.framework.interfaces import SUCCESS, BindPlugin, CycleState, Status
from metrics_sched.podinfo import PodInfo
from metrics_sched.ports import PodWriter


class DefaultBinder(BindPlugin):
    name = "DefaultBinder"

    def bind(self, cycle: CycleState, pod: PodInfo, node: str) -> Status:
        writer: PodWriter = self.handle.service("pod_writer")
        # ApiError is handled by the bind loop; annotations (the decision summary) ride on the Binding.
        writer.bind(pod.namespace, pod.name, pod.uid, node, cycle.get("annotations"))
        return SUCCESS
