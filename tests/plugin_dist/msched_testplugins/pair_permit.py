"""PairPermit: pods labelled test.metrics-sched.io/pair=<group> are bound only once `size` of the group
reached Permit (a two-pod gang). The last one to arrive allows the others from the scheduling thread;
a pod left alone is rejected when its wait times out (annotation test.metrics-sched.io/permit-timeout
overrides the args' timeout, in seconds)."""

from __future__ import annotations

from dataclasses import dataclass

from metrics_sched.framework import SUCCESS, CycleState, PermitPlugin, PodInfo, Status

GROUP = "test.metrics-sched.io/pair"
TIMEOUT = "test.metrics-sched.io/permit-timeout"


class PairPermit(PermitPlugin):
    name = "PairPermit"

    @dataclass(frozen=True)
    class Args:
        size: int = 2
        timeout_seconds: float = 60.0

    args: Args

    def permit(self, cycle: CycleState, pod: PodInfo, node: str) -> tuple[Status, float]:
        group = pod.labels.get(GROUP)
        if group is None:
            return SUCCESS, 0.0
        waiting = [w for w in self.handle.waiting_pods
                   if w.pod.namespace == pod.namespace and w.pod.labels.get(GROUP) == group]
        if len(waiting) + 1 >= self.args.size:
            for other in waiting:
                other.allow(self.name)
            return SUCCESS, 0.0
        annotations = (pod.raw.get("metadata") or {}).get("annotations") or {}
        timeout = float(annotations.get(TIMEOUT, self.args.timeout_seconds))
        return Status.wait(f"{self.args.size - 1 - len(waiting)} more of pair {group}"), timeout
