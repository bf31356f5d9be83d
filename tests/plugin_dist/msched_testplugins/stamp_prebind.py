"""StampPreBind: adds an annotation naming the node to what the Binding carries (typed cycle state), or
refuses pods labelled test.metrics-sched.io/prebind=fail, which must then be unreserved and retried."""

from __future__ import annotations

from metrics_sched.framework import SUCCESS, CycleState, PodInfo, PreBindPlugin, Status, annotate_binding

STAMP = "test.metrics-sched.io/prebind"


class StampPreBind(PreBindPlugin):
    name = "StampPreBind"

    def pre_bind(self, cycle: CycleState, pod: PodInfo, node: str) -> Status:
        if pod.labels.get(STAMP) == "fail":
            return Status.error("refused by the test PreBind")
        annotate_binding(cycle, {STAMP: node})
        return SUCCESS
