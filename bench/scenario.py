"""Seeded scenarios and the in-memory harness the benchmarks share.

- `make_scenario(n_nodes, seed)`: heterogeneous GPU nodes with frozen telemetry (GPU temperature,
  some above the 85 °C threshold; hourly price; CPU utilisation and load per CPU), a stream of 1- and
  2-GPU pods and a burst of identical 1-GPU pods (one ReplicaSet scaling up). Stream + burst ask for
  `fill` (60 %) of all GPUs. The same seed always gives the same scenario.
- The harness: a PodWriter that does nothing (`NullWriter`), a frozen clock, and `build_scheduler`,
  which wires the real core (config parsing, registry, Scheduler, MetricCache, in-flight ledger) in
  memory, as tests/unit/test_telemetry_scoring.py does, without any API.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from metrics_sched.config import parse_config
from metrics_sched.model.podinfo import PodInfo
from metrics_sched.plugins import in_tree_registry
from metrics_sched.ports import EventSeries, FetchResult, KubeObject, Sample, SchedulingEvent
from metrics_sched.scheduler import Scheduler
from metrics_sched.telemetry import MetricCache, SourceHealth
from metrics_sched.telemetry.ledger import InFlightLedgerStore

NOW = 1_800_000_000.0  # the frozen "now" of every bench run (unix seconds)
SOURCE = "bench"
ZONE_LABEL = "topology.kubernetes.io/zone"
GPU = "nvidia.com/gpu"
THRESHOLD = 85.0  # GPUTemperature's default threshold, °C

# GPU model -> (GPUs per node, $/h per GPU, CPU cores per node, memory GiB per node)
GPU_MODELS: dict[str, tuple[int, float, int, int]] = {
    "a100": (8, 4.10, 96, 1024),
    "l40s": (8, 2.00, 64, 512),
    "a10g": (4, 1.20, 48, 192),
    "t4": (4, 0.55, 32, 128),
}
ZONES = ("zone-a", "zone-b", "zone-c")


# -- the in-memory harness -----------------------------------------------------------------------
class FrozenClock:
    """A clock that stands still: telemetry stays fresh and in-flight placements never age out."""

    def __init__(self, now: float = NOW) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class NullWriter:
    """A PodWriter whose writes do nothing (the bind hand-off costs the core only its own work)."""

    def __init__(self) -> None:
        self.binds = 0

    def bind(self, namespace: str, name: str, uid: str, node: str,
             annotations: Mapping[str, str] | None = None) -> None:
        self.binds += 1

    def get_pod(self, namespace: str, name: str) -> KubeObject | None:
        return None

    def record_event(self, event: SchedulingEvent, series: EventSeries | None = None) -> str:
        return f"{event.pod_name}.bench"

    def update_event_series(self, event: SchedulingEvent, name: str, series: EventSeries) -> None:
        pass

    def set_pod_scheduled_condition(self, namespace: str, name: str, *, status: Literal["True", "False"],
                                    reason: str, message: str, resource_version: str | None = None) -> None:
        pass


@dataclass
class Harness:
    scheduler: Scheduler
    cache: MetricCache
    ledger: InFlightLedgerStore
    writer: NullWriter
    clock: FrozenClock

    @property
    def framework(self) -> Any:
        return next(iter(self.scheduler.frameworks.values()))

    def feed(self, values: Mapping[str, Mapping[str, float]], *, observed: float | None = None) -> None:
        """One ingest of `values` (metric -> node -> value), measured just before now."""
        observed = self.clock.now - 1.0 if observed is None else observed
        samples = [Sample(metric, node, float(value), observed) for metric, per in values.items()
                   for node, value in per.items()]
        self.cache.ingest(SOURCE, FetchResult(samples, {}, {}), fetched_at=self.clock.now)

    def place(self, pod: PodInfo) -> Any:
        """One pod's scheduling cycle and assume under the state lock, then its Reserve plugins (no bind): the
        state moves on as in the loop. Returns the CycleResult."""
        framework, state = self.framework, self.scheduler.state
        with state.lock:
            result = framework.schedule(pod, state.table)
            if result.node is not None:
                state.assume(pod, result.node)
        if result.node is not None:
            for plugin in framework.reserves:
                plugin.reserve(result.cycle, pod, result.node)
        return result

    def stop(self) -> None:
        self.scheduler.stop(drain_timeout=60)


def build_scheduler(config: Mapping[str, Any] | None = None, *, seed: int | None = 0) -> Harness:
    """The real core (all built-in plugins, no third-party ones) with a no-op writer and a frozen clock."""
    registry = in_tree_registry(third_party=False)
    parsed = parse_config(dict(config or {}), registry.catalog())
    clock = FrozenClock()
    cache = MetricCache(parsed.metrics, clock=clock)
    ledger = InFlightLedgerStore(clock=clock)
    writer = NullWriter()
    scheduler = Scheduler(parsed, registry.plugins, writer, metrics=cache, ledger=ledger)
    cache.health[SOURCE] = SourceHealth(SOURCE, 5.0, [])
    if seed is not None:
        for framework in scheduler.frameworks.values():
            framework.random.seed(seed)  # ties between equal totals break the same way every run
    return Harness(scheduler, cache, ledger, writer, clock)


def node_object(name: str, *, cpu: int, memory_gib: int, gpus: int, labels: Mapping[str, str] | None = None,
                taints: list[dict[str, str]] | None = None, unschedulable: bool = False,
                pods: int = 110) -> dict[str, Any]:
    alloc = {"cpu": str(cpu), "memory": f"{memory_gib}Gi", "pods": str(pods), "ephemeral-storage": "500Gi"}
    if gpus:
        alloc[GPU] = str(gpus)
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
        "spec": {"taints": taints or [], "unschedulable": unschedulable},
        "status": {"allocatable": alloc, "capacity": alloc,
                   "conditions": [{"type": "Ready", "status": "True"}]},
    }


def pod_object(name: str, *, cpu: str, memory: str, gpus: int = 0, uid: str | None = None,
               owner: str | None = None, node_name: str | None = None, namespace: str = "bench",
               scheduler: str = "metrics-sched", labels: Mapping[str, str] | None = None,
               **spec: Any) -> dict[str, Any]:
    requests = {"cpu": cpu, "memory": memory}
    if gpus:
        requests[GPU] = str(gpus)
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "uid": uid or f"uid-{name}",
                                "creationTimestamp": "2026-11-30T12:00:00Z"}
    if labels:
        metadata["labels"] = dict(labels)
    if owner:
        metadata["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": owner,
                                        "uid": f"rs-{owner}", "controller": True}]
    body: dict[str, Any] = {
        "metadata": metadata,
        "spec": {"schedulerName": scheduler, "containers": [{"name": "c", "resources": {"requests": requests}}],
                 **spec},
        "status": {"phase": "Pending"},
    }
    if node_name:
        body["spec"]["nodeName"] = node_name
    return body


# -- the quality scenario --------------------------------------------------------------------------
@dataclass(frozen=True)
class NodeSpec:
    name: str
    model: str
    zone: str
    gpus: int
    cpu: int  # cores
    memory_gib: int
    temperature: float  # hottest GPU, °C
    price: float  # $/h for the whole node
    cpu_utilisation: float  # 0-1
    load_per_cpu: float  # load1 / cpus

    def telemetry(self) -> dict[str, float]:
        return {"gpu_temperature": self.temperature, "node_hourly_cost": self.price,
                "node_cpu_utilisation": self.cpu_utilisation, "node_load_per_cpu": self.load_per_cpu}


@dataclass(frozen=True)
class PodSpec:
    name: str
    gpus: int
    cpu: int  # cores
    memory_gib: int
    owner: str | None = None
    burst: bool = False


@dataclass
class Scenario:
    seed: int
    threshold: float
    nodes: list[NodeSpec]
    pods: list[PodSpec]  # the stream, in arrival order
    burst: list[PodSpec]  # identical pods, arriving after the stream
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def workload(self) -> list[PodSpec]:
        """Every pod in the order it is scheduled: the stream, then the burst."""
        return self.pods + self.burst

    def metric_values(self) -> dict[str, dict[str, float]]:
        """metric -> node -> value, as a telemetry source would report them."""
        out: dict[str, dict[str, float]] = {}
        for node in self.nodes:
            for metric, value in node.telemetry().items():
                out.setdefault(metric, {})[node.name] = value
        return out

    def node_objects(self) -> list[dict[str, Any]]:
        return [node_object(n.name, cpu=n.cpu, memory_gib=n.memory_gib, gpus=n.gpus,
                            labels={ZONE_LABEL: n.zone, "gpu-model": n.model}) for n in self.nodes]

    def pod_object(self, pod: PodSpec) -> dict[str, Any]:
        return pod_object(pod.name, cpu=str(pod.cpu), memory=f"{pod.memory_gib}Gi", gpus=pod.gpus, owner=pod.owner)

    def summary(self) -> dict[str, Any]:
        total = sum(n.gpus for n in self.nodes)
        hot = [n for n in self.nodes if n.temperature > self.threshold]
        asked = sum(p.gpus for p in self.workload)
        return {
            "seed": self.seed, "nodes": len(self.nodes), "hot_nodes": len(hot), "threshold_c": self.threshold,
            "gpus_total": total, "gpus_on_hot_nodes": sum(n.gpus for n in hot),
            "stream_pods": len(self.pods), "stream_2gpu_pods": sum(1 for p in self.pods if p.gpus == 2),
            "burst_pods": len(self.burst), "gpus_requested": asked, "gpu_fill": round(asked / total, 4),
            "models": {m: sum(1 for n in self.nodes if n.model == m) for m in GPU_MODELS},
        }

    def as_dict(self) -> dict[str, Any]:
        return {"seed": self.seed, "threshold": self.threshold, "nodes": [asdict(n) for n in self.nodes],
                "pods": [asdict(p) for p in self.pods], "burst": [asdict(p) for p in self.burst]}


def make_scenario(n_nodes: int, seed: int = 0, *, fill: float = 0.6, burst_share: float = 0.1,
                  hot_share: float = 0.1, two_gpu_share: float = 0.3, threshold: float = THRESHOLD) -> Scenario:
    """N heterogeneous GPU nodes and pods asking for `fill` of their GPUs (`burst_share` of them as the burst).

    Exactly round(hot_share * N) nodes run above the threshold (86-95 °C); the others are 32-84 °C.
    A node's price is its GPUs times its model's price per GPU, +-15 % (region, spot). Pods ask for
    4 cores and 32 GiB per GPU, so GPUs, not CPU or memory, are what runs out.
    """
    rng = random.Random(seed)
    models = list(GPU_MODELS)
    hot = set(rng.sample(range(n_nodes), round(hot_share * n_nodes)))
    nodes = []
    for i in range(n_nodes):
        model = models[i % len(models)] if i < len(models) else rng.choice(models)
        gpus, per_gpu, cpu, memory = GPU_MODELS[model]
        temperature = rng.uniform(86.0, 95.0) if i in hot else min(84.0, max(32.0, rng.gauss(62.0, 12.0)))
        utilisation = min(0.95, max(0.02, rng.betavariate(2.0, 5.0)))
        nodes.append(NodeSpec(
            name=f"gpu-{i:04d}", model=model, zone=ZONES[i % len(ZONES)], gpus=gpus, cpu=cpu, memory_gib=memory,
            temperature=round(temperature, 2), price=round(gpus * per_gpu * rng.uniform(0.85, 1.15), 3),
            cpu_utilisation=round(utilisation, 4),
            load_per_cpu=round(min(3.0, 2.0 * utilisation * rng.uniform(0.7, 1.3)), 4),
        ))
    total = sum(n.gpus for n in nodes)
    burst_gpus = max(1, round(total * burst_share))
    stream_gpus = max(0, round(total * fill) - burst_gpus)
    pods: list[PodSpec] = []
    asked = 0
    while asked < stream_gpus:
        gpus = 2 if rng.random() < two_gpu_share and stream_gpus - asked >= 2 else 1
        pods.append(PodSpec(f"job-{len(pods):04d}", gpus, cpu=4 * gpus, memory_gib=32 * gpus))
        asked += gpus
    burst = [PodSpec(f"burst-{i:03d}", 1, cpu=4, memory_gib=32, owner="burst", burst=True)
             for i in range(burst_gpus)]
    scenario = Scenario(seed, threshold, nodes, pods, burst)
    scenario.meta = scenario.summary()
    return scenario
