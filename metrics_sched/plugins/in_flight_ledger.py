"""InFlightLedger (Reserve): records the estimated effect of each placed pod on its node's metrics
until a sample measured after the placement covers it (see metrics_sched.telemetry.ledger).

    estimates:                          # metric: {from: resource, factor: F}
      node_cpu_utilisation: {from: cpu, factor: 1.0}      # + pod cpu / node cpu
      node_load_per_cpu: {from: cpu, factor: 1.0}
      gpu_utilisation: {from: nvidia.com/gpu, factor: 100}
      gpu_temperature: {from: nvidia.com/gpu, factor: 15} # °C for a node whose GPUs all get busy
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from metrics_sched.config.errors import ArgsError
from metrics_sched.framework.interfaces import SUCCESS, CycleState, ReservePlugin, Status
from metrics_sched.plugins.metric_terms import number
from metrics_sched.podinfo import PodInfo
from metrics_sched.telemetry.ledger import InFlightLedgerStore

DEFAULT_ESTIMATES: dict[str, tuple[str, float]] = {
    "node_cpu_utilisation": ("cpu", 1.0),
    "node_load_per_cpu": ("cpu", 1.0),
    "gpu_utilisation": ("nvidia.com/gpu", 100.0),
    "gpu_temperature": ("nvidia.com/gpu", 15.0),
}


class InFlightLedger(ReservePlugin):
    name = "InFlightLedger"

    def __init__(self, args: Mapping[str, Any], handle: Any) -> None:
        super().__init__(args, handle)
        raw = args.get("estimates")
        self.estimates = DEFAULT_ESTIMATES if raw is None else {
            metric: (spec["from"], float(spec.get("factor", 1.0))) for metric, spec in raw.items()}
        self.store: InFlightLedgerStore = handle.service("ledger")
        self._reserved = 0

    @classmethod
    def check_args(cls, args: Mapping[str, Any]) -> None:
        for key in args:
            if key != "estimates":
                raise ArgsError(key, "unknown field (expected estimates)")
        raw = args.get("estimates")
        if raw is None:
            return
        if not isinstance(raw, Mapping):
            raise ArgsError("estimates", "must map metric names to {from: resource, factor: number}")
        for metric, spec in raw.items():
            if not isinstance(spec, Mapping) or not isinstance(spec.get("from"), str):
                raise ArgsError(f"estimates.{metric}.from", "must name a resource (cpu, memory, nvidia.com/gpu...)")
            number(spec.get("factor", 1.0), f"estimates.{metric}.factor")

    def reserve(self, cycle: CycleState, pod: PodInfo, node: str) -> Status:
        table = self.handle.table
        row = table.index.get(node)
        if row is None:
            return SUCCESS
        deltas = {}
        for metric, (resource, factor) in self.estimates.items():
            requested = pod.requests.get(resource, 0)
            col = table.resource_index.get(resource)
            capacity = float(table.allocatable[row, col]) if col is not None else 0.0
            if requested and capacity > 0:
                deltas[metric] = factor * requested / capacity
        if deltas:
            self.store.add(pod.uid, node, deltas)
        self._reserved += 1
        if self._reserved % 1000 == 0:
            self.store.prune()
        return SUCCESS

    def unreserve(self, cycle: CycleState, pod: PodInfo, node: str) -> None:
        self.store.remove(pod.uid)
