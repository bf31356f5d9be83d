"""InFlightLedger (Reserve): records the estimated effect of each placed pod on its node's metrics
until a sample measured after the placement covers it (see metrics_sched.telemetry.ledger).

    estimates:                          # metric: {from: resource, factor: F}
      node_cpu_utilisation: {from: cpu, factor: 1.0}      # + pod cpu / node cpu
      node_load_per_cpu: {from: cpu, factor: 1.0}
      gpu_utilisation: {from: nvidia.com/gpu, factor: 100}
      gpu_temperature: {from: nvidia.com/gpu, factor: 15} # °C for a node whose GPUs all get busy
"""

from __future__ import annotations

from dataclasses import dataclass, field

from metrics_sched.framework import SUCCESS, CycleState, Handle, PodInfo, ReservePlugin, Status


@dataclass(frozen=True)
class Estimate:
    """The metric grows by factor * (pod's request of `from` / node's allocatable of it)."""

    resource: str = field(metadata={"key": "from"})
    factor: float = 1.0


DEFAULT_ESTIMATES: dict[str, Estimate] = {
    "node_cpu_utilisation": Estimate("cpu", 1.0),
    "node_load_per_cpu": Estimate("cpu", 1.0),
    "gpu_utilisation": Estimate("nvidia.com/gpu", 100.0),
    "gpu_temperature": Estimate("nvidia.com/gpu", 15.0),
}


class InFlightLedger(ReservePlugin):
    name = "InFlightLedger"

    @dataclass(frozen=True)
    class Args:
        estimates: dict[str, Estimate] = field(default_factory=lambda: dict(DEFAULT_ESTIMATES))

    args: Args

    def __init__(self, args: Args, handle: Handle) -> None:
        super().__init__(args, handle)
        self.estimates = {metric: (e.resource, e.factor) for metric, e in self.args.estimates.items()}
        self.store = handle.ledger
        self._reserved = 0

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
