"""Placement quality on one seeded scenario (bench/scenario.py), every contender in memory on the real core.

Contenders:
- metrics-sched: the default profile (GPUTemperature 3, NodeLoad 2, Cost 2, NodeResourcesFit 1,
  TaintToleration 3, NodeAffinity 2, ZoneSpread 1) with the in-flight ledger; telemetry frozen at
  the scenario's values for the whole run (no refresh).
- metrics-sched without the ledger (ablation): the same, InFlightLedger disabled; shows the herding
  the ledger prevents on frozen telemetry.
- kube-scheduler default, EMULATED: the same core with only kube-scheduler's default-equivalent
  plugins (filters without GPUTemperature; scores NodeResourcesFit LeastAllocated 1, TaintToleration 3,
  NodeAffinity 2, ZoneSpread 2 standing in for PodTopologySpread; no telemetry, no ledger). It is an
  emulation of kube-scheduler's default scoring, not kube-scheduler (NodeResourcesBalancedAllocation,
  ImageLocality and InterPodAffinity are absent); bench/e2e_bench.py runs the real binary.
- random: each pod on a uniformly drawn node with enough free GPUs, blind to telemetry (a floor).
- reference optimum, offline (see `solve_optimum`).

The objective of a placement is the sum over placed pods of the node's weighted, normalised telemetry
score: (3 GPUTemperature + 2 NodeLoad + 2 Cost) / 7, each term normalised exactly as metrics-sched's
plugins do (weights, ranges and directions read from the instantiated default profile), on the
scenario's static values (no ledger): GPUTemperature range 30-85 °C, NodeLoad the mean of CPU
utilisation (0-1) and load per CPU (0-2), Cost minmax over the admissible nodes (the plugin does
minmax over each decision's candidates). The optimum maximises it with GPU capacity as the only
constraint and nodes above the threshold forbidden.

    python -m bench.quality_bench [--quick] [--nodes N] [--seed S]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp  # type: ignore[import-untyped]

from bench.scenario import GPU, Scenario, build_scheduler, make_scenario
from metrics_sched.framework import Scale

TARGET_PCT = 95.0

METRICS_SCHED: dict[str, Any] = {}  # the defaults
METRICS_SCHED_NO_LEDGER: dict[str, Any] = {
    "profiles": [{"plugins": {"reserve": {"disabled": [{"name": "InFlightLedger"}]}}}]}
KUBE_DEFAULT_EMULATED: dict[str, Any] = {
    "profiles": [{"plugins": {
        "filter": {"disabled": [{"name": "GPUTemperature"}]},
        "score": {"disabled": [{"name": "*"}], "enabled": [
            {"name": "NodeResourcesFit", "weight": 1}, {"name": "TaintToleration", "weight": 3},
            {"name": "NodeAffinity", "weight": 2}, {"name": "ZoneSpread", "weight": 2}]},
        "reserve": {"disabled": [{"name": "InFlightLedger"}]},
    }}]}
CONTENDERS: dict[str, dict[str, Any]] = {
    "metrics-sched": METRICS_SCHED,
    "metrics-sched (no ledger)": METRICS_SCHED_NO_LEDGER,
    "kube-scheduler default (emulated)": KUBE_DEFAULT_EMULATED,
}


def say(message: str) -> None:
    print(f"[quality] {message}", file=sys.stderr, flush=True)


# -- the objective -------------------------------------------------------------------------------
@dataclass(frozen=True)
class ObjectiveModel:
    """The telemetry terms of metrics-sched's profile: weights, normalisations, the GPU threshold."""

    weights: dict[str, int]
    threshold: float
    temperature: Scale
    load: tuple[tuple[str, Scale], ...]
    cost_metric: str
    cost: Scale
    cost_per_resource: str | None

    @classmethod
    def from_framework(cls, framework: Any) -> ObjectiveModel:
        weights = {plugin.name: weight for plugin, weight in framework.scores}
        gt, nl, cost = (framework.instances[n] for n in ("GPUTemperature", "NodeLoad", "Cost"))
        [temperature], [cost_term] = gt.terms(), cost.terms()
        return cls(weights={n: weights[n] for n in ("GPUTemperature", "NodeLoad", "Cost")},
                   threshold=gt.args.threshold, temperature=temperature.scale,
                   load=tuple((t.metric, t.scale) for t in nl.terms()),
                   cost_metric=cost_term.metric, cost=cost_term.scale, cost_per_resource=cost_term.per_resource)

    @classmethod
    def default(cls) -> ObjectiveModel:
        harness = build_scheduler(METRICS_SCHED)
        try:
            return cls.from_framework(harness.framework)
        finally:
            harness.stop()

    def describe(self) -> dict[str, Any]:
        return {"weights": self.weights, "threshold_c": self.threshold,
                "GPUTemperature": vars(self.temperature),
                "NodeLoad": {metric: vars(norm) for metric, norm in self.load},
                "Cost": {"metric": self.cost_metric, "perResource": self.cost_per_resource, **vars(self.cost)}}


def node_scores(scenario: Scenario, model: ObjectiveModel) -> tuple[np.ndarray, np.ndarray]:
    """Each node's weighted telemetry score (0-100) on the scenario's values, and which nodes are admissible."""
    values = {metric: np.array([node.telemetry()[metric] for node in scenario.nodes], dtype=np.float64)
              for metric in scenario.nodes[0].telemetry()}
    temps = values["gpu_temperature"]
    allowed = ~(temps > model.threshold)
    temperature = model.temperature.apply(temps, "lower")
    load = np.mean([norm.apply(values[metric], "lower") for metric, norm in model.load], axis=0)
    price = values[model.cost_metric].copy()
    if model.cost_per_resource == GPU:
        price = price / np.array([node.gpus for node in scenario.nodes], dtype=np.float64)
    cost_norm = model.cost
    if cost_norm.method == "minmax":  # bounds from the admissible nodes, as the plugin takes them from its candidates
        base = price[allowed] if allowed.any() else price
        low, high = float(base.min()), float(base.max())
        cost_norm = Scale("range", low, high) if high > low else cost_norm
    cost = cost_norm.apply(price, "lower")
    w = model.weights
    total = (w["GPUTemperature"] * temperature + w["NodeLoad"] * load + w["Cost"] * cost) / sum(w.values())
    return total, allowed


# -- the reference optimum -----------------------------------------------------------------------
def solve_optimum(scores: Sequence[float] | np.ndarray, allowed: Sequence[bool] | np.ndarray,
                  capacity: Sequence[int] | np.ndarray, pod_gpus: Sequence[int], *,
                  per_gpu: bool = False) -> tuple[list[int | None], float]:
    """The placement of `pod_gpus` maximising the sum of scores[node] over placed pods (per_gpu: of
    gpus * scores[node], i.e. each pod weighted by its GPUs).

    Constraints: sum of the GPUs placed on a node <= capacity[node]; no pod on a node that is not
    allowed; as many pods placed as possible (all of them when they fit), then the best score.

    Exact, by integer programming (scipy.optimize.milp / HiGHS). A pod's value depends only on its
    node, so pods of equal size are interchangeable: the pod x GPU-slot assignment collapses to
    integers y[s, n] = pods of size s on node n, with sum_s s * y[s, n] <= capacity[n] and
    sum_n y[s, n] <= pods of size s. This is what a slot-level linear_sum_assignment cannot express
    exactly: a 2-GPU pod needs two slots of the same node, and whether a node's free GPUs go to pairs
    or singles is part of the decision. Solved in two phases: the largest number of pods that fit,
    then the best score among placements with that many (gap 0, so the optimum is proven).
    Returns the node index of each pod (None = not placed) and the objective.
    """
    scores = np.asarray(scores, dtype=np.float64)
    allowed = np.asarray(allowed, dtype=bool)
    capacity = np.asarray(capacity, dtype=np.int64)
    sizes = sorted({int(g) for g in pod_gpus})
    wanted = [sum(1 for g in pod_gpus if g == s) for s in sizes]
    nodes = np.flatnonzero(allowed & (capacity > 0))
    assignment: list[int | None] = [None] * len(pod_gpus)
    if nodes.size == 0 or not sizes:
        return assignment, 0.0
    k, n = len(sizes), nodes.size
    upper = np.concatenate([capacity[nodes] // s for s in sizes]).astype(np.float64)
    capacity_rows = np.zeros((n, k * n))
    count_rows = np.zeros((k, k * n))
    for i, s in enumerate(sizes):
        capacity_rows[np.arange(n), i * n + np.arange(n)] = s
        count_rows[i, i * n:(i + 1) * n] = 1.0
    constraints = [LinearConstraint(capacity_rows, 0, capacity[nodes].astype(np.float64)),
                   LinearConstraint(count_rows, 0, np.asarray(wanted, dtype=np.float64))]
    options = {"mip_rel_gap": 0.0}
    integrality = np.ones(k * n)
    first = milp(-np.ones(k * n), constraints=constraints, integrality=integrality, bounds=Bounds(0, upper),
                 options=options)
    if not first.success:
        raise RuntimeError(f"optimum, phase 1: {first.message}")
    most = round(-first.fun)
    constraints.append(LinearConstraint(np.ones((1, k * n)), most, most))
    value = np.concatenate([scores[nodes] * (s if per_gpu else 1) for s in sizes])
    second = milp(-value, constraints=constraints, integrality=integrality,
                  bounds=Bounds(0, upper), options=options)
    if not second.success:
        raise RuntimeError(f"optimum, phase 2: {second.message}")
    y = np.rint(second.x).astype(np.int64).reshape(k, n)
    for i, s in enumerate(sizes):
        slots = [int(nodes[j]) for j in range(n) for _ in range(y[i, j])]
        pods = [p for p, g in enumerate(pod_gpus) if g == s]
        for pod, slot in zip(pods, slots, strict=False):
            assignment[pod] = slot
    used = np.zeros(capacity.shape[0], dtype=np.int64)
    for pod, placed in enumerate(assignment):
        if placed is not None:
            used[placed] += pod_gpus[pod]
    if (used > capacity).any() or any(node is not None and not allowed[node] for node in assignment):
        raise RuntimeError("optimum violates capacity or the threshold")  # cannot happen; never report it
    objective = float(sum(scores[node] * (pod_gpus[pod] if per_gpu else 1)
                          for pod, node in enumerate(assignment) if node is not None))
    return assignment, objective


# -- contenders ----------------------------------------------------------------------------------
def place_with_core(scenario: Scenario, config: Mapping[str, Any], seed: int) -> dict[str, str | None]:
    """Runs the real core in memory: nodes, frozen telemetry, then the pods one by one, in arrival order."""
    harness = build_scheduler(config, seed=seed)
    scheduler = harness.scheduler
    try:
        for node in scenario.node_objects():
            scheduler.handlers.on_node_event("ADDED", node)
        harness.feed(scenario.metric_values())
        placement: dict[str, str | None] = {}
        for pod in scenario.workload:
            scheduler.handlers.on_pod_event("ADDED", scenario.pod_object(pod))
            result = scheduler.schedule_one(timeout=0)
            placement[pod.name] = None if result is None else result.node
    finally:
        harness.stop()
    return placement


def place_randomly(scenario: Scenario, seed: int) -> dict[str, str | None]:
    rng = random.Random(seed)
    free = {node.name: node.gpus for node in scenario.nodes}
    placement: dict[str, str | None] = {}
    for pod in scenario.workload:
        fits = [name for name, left in free.items() if left >= pod.gpus]
        node = rng.choice(fits) if fits else None
        if node is not None:
            free[node] -= pod.gpus
        placement[pod.name] = node
    return placement


def place_greedily(scenario: Scenario, scores: np.ndarray, allowed: np.ndarray) -> dict[str, str | None]:
    """Online reference: each pod, in arrival order, on the admissible node with free GPUs that scores best
    by the objective itself (what a scheduler scoring exactly the objective, without a ledger, would do)."""
    free = np.array([node.gpus for node in scenario.nodes], dtype=np.int64)
    placement: dict[str, str | None] = {}
    for pod in scenario.workload:
        candidates = np.flatnonzero(allowed & (free >= pod.gpus))
        if candidates.size == 0:
            placement[pod.name] = None
            continue
        best = int(candidates[np.argmax(scores[candidates])])
        free[best] -= pod.gpus
        placement[pod.name] = scenario.nodes[best].name
    return placement


def evaluate(scenario: Scenario, placement: Mapping[str, str | None], scores: np.ndarray) -> dict[str, Any]:
    index = {node.name: i for i, node in enumerate(scenario.nodes)}
    nodes = scenario.nodes
    placed = [(pod, index[name]) for pod in scenario.workload if (name := placement.get(pod.name)) is not None]
    used: Counter[int] = Counter()
    load = np.array([node.cpu_utilisation for node in nodes], dtype=np.float64)
    for pod, i in placed:
        used[i] += pod.gpus
        load[i] += pod.cpu / nodes[i].cpu  # the ledger's estimate of a pod's CPU, on the node's scale
    over = [i for i, gpus in used.items() if gpus > nodes[i].gpus]
    temps = np.array([nodes[i].temperature for _, i in placed], dtype=np.float64)
    hot = [pod.name for pod, i in placed if nodes[i].temperature > scenario.threshold]
    burst = Counter(i for pod, i in placed if pod.burst)
    return {
        "placed": len(placed),
        "unplaced": len(scenario.workload) - len(placed),
        "mean_gpu_temp": round(float(temps.mean()), 2) if temps.size else None,
        "max_gpu_temp": round(float(temps.max()), 2) if temps.size else None,
        "hourly_cost": round(sum(nodes[i].price * pod.gpus / nodes[i].gpus for pod, i in placed), 2),
        "load_std": round(float(load.std()), 4),
        "max_burst_share": round(max(burst.values()) / len(scenario.burst), 4) if burst else 0.0,
        "burst_nodes_used": len(burst),
        "objective": round(float(sum(scores[i] for _, i in placed)), 2),
        "objective_gpu_weighted": round(float(sum(scores[i] * pod.gpus for pod, i in placed)), 2),
        "gpu_pods_above_threshold": len(hot),
        "nodes_over_gpu_capacity": len(over),
    }


def run(quick: bool, *, nodes: int | None = None, seed: int = 0) -> dict[str, Any]:
    started = time.perf_counter()
    scenario = make_scenario(nodes or (50 if quick else 200), seed)
    model = ObjectiveModel.default()
    scores, allowed = node_scores(scenario, model)
    say(f"scenario: {scenario.meta}")

    t0 = time.perf_counter()
    capacity = [n.gpus for n in scenario.nodes]
    pod_gpus = [pod.gpus for pod in scenario.workload]
    assignment, optimum = solve_optimum(scores, allowed, capacity, pod_gpus)
    weighted_assignment, weighted_optimum = solve_optimum(scores, allowed, capacity, pod_gpus, per_gpu=True)
    solve_seconds = time.perf_counter() - t0

    def named(assigned: list[int | None]) -> dict[str, str | None]:
        return {pod.name: None if node is None else scenario.nodes[node].name
                for pod, node in zip(scenario.workload, assigned, strict=True)}

    placements: dict[str, dict[str, str | None]] = {}
    for name, config in CONTENDERS.items():
        say(f"placing with {name}")
        placements[name] = place_with_core(scenario, config, seed)
    placements["random (capacity only)"] = place_randomly(scenario, seed)
    placements["greedy on the objective (online reference)"] = place_greedily(scenario, scores, allowed)
    placements["reference optimum (offline)"] = named(assignment)
    placements["reference optimum, GPU-weighted (offline)"] = named(weighted_assignment)

    contenders = {}
    floor = evaluate(scenario, placements["random (capacity only)"], scores)["objective"]
    for name, placement in placements.items():
        row = evaluate(scenario, placement, scores)
        row["objective_pct_of_optimum"] = round(100.0 * row["objective"] / optimum, 2) if optimum else None
        row["gpu_weighted_pct_of_optimum"] = (round(100.0 * row["objective_gpu_weighted"] / weighted_optimum, 2)
                                              if weighted_optimum else None)
        span = optimum - floor
        row["gap_closed_vs_random_pct"] = round(100.0 * (row["objective"] - floor) / span, 1) if span > 0 else None
        contenders[name] = row
    ours = contenders["metrics-sched"]
    pct, weighted_pct = ours["objective_pct_of_optimum"], ours["gpu_weighted_pct_of_optimum"]
    return {
        "quick": quick,
        "scenario": scenario.meta,
        "objective": {
            "definition": "sum over placed pods of the node's (3 GPUTemperature + 2 NodeLoad + 2 Cost) / 7, "
                          "each 0-100 as metrics-sched normalises it, on the scenario's static telemetry",
            "gpu_weighted": "the same with each pod weighted by its GPUs (a 2-GPU pod counts twice)",
            **model.describe(),
        },
        "optimum": {
            "solver": "scipy.optimize.milp (HiGHS) on integer pods-per-(size, node) counts, gap 0; "
                      "most pods placed first, then the best objective; GPU capacity, no node above the threshold",
            "objective": round(optimum, 2), "objective_gpu_weighted": round(weighted_optimum, 2),
            "solve_seconds": round(solve_seconds, 3),
        },
        "contenders": contenders,
        "metrics_sched_pct_of_optimum": pct,
        "metrics_sched_gpu_weighted_pct_of_optimum": weighted_pct,
        "target_pct": TARGET_PCT,
        "target_met": pct is not None and pct >= TARGET_PCT,
        "target_met_gpu_weighted": weighted_pct is not None and weighted_pct >= TARGET_PCT,
        "metrics_sched_gpu_pods_above_threshold": ours["gpu_pods_above_threshold"],
        "notes": [
            "kube-scheduler default is emulated on this core (NodeResourcesFit LeastAllocated 1, TaintToleration 3, "
            "NodeAffinity 2, ZoneSpread 2 for PodTopologySpread; no BalancedAllocation/ImageLocality); "
            "bench/e2e_bench.py runs the real kube-scheduler binary.",
            "Per pod, a pod counts once whatever its GPUs, so the offline optimum gives the best nodes' GPUs to "
            "1-GPU pods and sends 2-GPU pods to worse nodes; an online scheduler cannot, not knowing what comes "
            "next: 'greedy on the objective' shows that bound. The GPU-weighted objective has no such artefact.",
            "Telemetry is frozen for the whole run, so only the in-flight ledger keeps metrics-sched from "
            "herding; the optimum sees no ledger and fills the best nodes to capacity.",
            "Pods arrive in order: the stream, then the burst (one ReplicaSet of identical 1-GPU pods).",
            "load_std: per node, CPU utilisation + the placed pods' CPU requests / node CPUs (the ledger's estimate).",
        ],
        "seconds": round(time.perf_counter() - started, 2),
    }


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="50 nodes instead of 200")
    parser.add_argument("--nodes", type=int)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    print(json.dumps(run(args.quick, nodes=args.nodes, seed=args.seed), indent=2))


if __name__ == "__main__":
    main()
