"""NominateRoomiest: when no node fits, nominate the node among those the pod's nodeSelector allows
with the most allocatable of the resource the filters found short (what preemption would try first).
It re-runs the filters on a clone of the cycle state, as a what-if, to check that nothing fits."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from metrics_sched.framework import (
    Code,
    CycleState,
    NodeTable,
    PodInfo,
    PostFilterPlugin,
    PostFilterResult,
    Status,
)


class NominateRoomiest(PostFilterPlugin):
    name = "NominateRoomiest"

    def post_filter(self, cycle: CycleState, pod: PodInfo, table: NodeTable,
                    rejections: Mapping[str, int]) -> tuple[PostFilterResult, Status]:
        if self.handle.run_filters(cycle.clone(), pod).feasible.any():
            return PostFilterResult(), Status(Code.ERROR, "a node fits after all", self.name)
        short = [r.removeprefix("Insufficient ") for r in rejections if r.startswith("Insufficient ")]
        column = table.resource_index.get(short[0]) if short else None
        if column is None:
            return PostFilterResult(), Status(Code.UNSCHEDULABLE, "nothing to nominate", self.name)
        allowed = table.present[: table.capacity].copy()
        for key, value in pod.node_selector.items():
            allowed &= table.label_in(key, [value])
        if not allowed.any():
            return PostFilterResult(), Status(Code.UNSCHEDULABLE, "no node matches the selector", self.name)
        room = np.where(allowed, table.allocatable[: table.capacity, column], -1)
        return PostFilterResult(table.name(int(np.argmax(room)))), Status()
