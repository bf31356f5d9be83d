"""Rebalancing quality: GPU nodes heat up after their pods were placed; the placed pods' GPU temperature and $/h
over time, with and without the rebalancer, in memory on the real core.

The scenario is bench/scenario.py's quality scenario (heterogeneous GPU nodes, 10 % of them above 85 °C from the
start, a stream of 1- and 2-GPU pods and a burst of one ReplicaSet, 60 % of the GPUs asked for), with owners:
each stream pod is the one replica of its own ReplicaSet (the rebalancer never moves standalone pods). All pods
are placed at time 0 by metrics-sched's default profile (bench.quality_bench.METRICS_SCHED). Then, over
`steps` steps of STEP simulated seconds, HEAT_SHARE of the nodes, drawn among the cooler half (the ones the
scheduler filled first), heat up: each from a random step in the first half of the run, by 1.5-3 °C a step,
up to 95 °C. Telemetry (the scenario's other values, unchanged) is fed fresh at every step.

Contenders, on the same timeline:
- without the rebalancer: the pods stay where they were placed;
- with the rebalancer (REBALANCE, docs/rebalancing.md's example rule and limits), at the default margin (10 points) and
  at 5: a tick per step through the real Rebalancer and RebalanceRunner; an eviction deletes the pod, its owner
  re-creates it at once and metrics-sched places the replacement (the same profile, so a hot node is filtered
  for it).

Measured at every step, over the placed pods (each pod once, as bench/quality_bench.py counts them): the
mean and max GPU temperature of their nodes, the pods on nodes above 85 °C, and their $/h (a node's price
times the pod's share of its GPUs); the evictions and the rebalancer's other verdicts.

    python -m bench.rebalance_bench [--quick] [--nodes N] [--steps N] [--seed S]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bench.quality_bench import METRICS_SCHED
from bench.scenario import NOW, Harness, PodSpec, Scenario, build_scheduler, make_scenario, pod_object
from metrics_sched.audit import DecisionRing
from metrics_sched.config.loader import parse_rebalance
from metrics_sched.ports import ApiError, KubeObject
from metrics_sched.rebalance import Rebalancer, Verdict
from metrics_sched.rebalance.runner import RebalanceRunner

RESULTS = Path(__file__).parent / "results"
STEP = 300.0  # simulated seconds per step: the rebalance interval
HEAT_SHARE = 0.25
PEAK = 95.0  # °C a heating node climbs to
REBALANCE: dict[str, Any] = {
    "enabled": True, "dryRun": False, "interval": f"{STEP:g}s", "margin": 10,
    "rules": [{"name": "hot-gpu", "metric": "gpu_temperature", "above": 85, "for": "10m"}],
    "limits": {"perNode": 1, "perNamespace": 5, "cluster": 5, "cooldown": "30m"},  # one namespace here
}
NAMESPACE = "bench"
CONTENDERS: dict[str, float | None] = {  # name -> the rebalancer's margin (None: no rebalancer)
    "without the rebalancer": None,
    "with the rebalancer (margin 10, the default)": 10.0,
    "with the rebalancer (margin 5)": 5.0,
}


def say(message: str) -> None:
    print(f"[rebalance] {message}", file=sys.stderr, flush=True)


# -- the scenario over time ------------------------------------------------------------------------
@dataclass(frozen=True)
class Heating:
    node: int  # index in scenario.nodes
    start: int  # the step it starts climbing at
    rate: float  # °C per step


def heat_up(scenario: Scenario, steps: int, seed: int) -> list[Heating]:
    """HEAT_SHARE of the nodes, drawn among those below the median temperature, each with its start and rate."""
    rng = random.Random(seed + 1)
    temps = [n.temperature for n in scenario.nodes]
    median = float(np.median(temps))
    cooler = [i for i, t in enumerate(temps) if t < median]
    chosen = sorted(rng.sample(cooler, min(len(cooler), max(1, round(HEAT_SHARE * len(temps))))))
    return [Heating(i, rng.randrange(max(1, steps // 2)), round(rng.uniform(1.5, 3.0), 3)) for i in chosen]


def temperatures(scenario: Scenario, heating: Sequence[Heating], step: int) -> np.ndarray:
    temps = np.array([n.temperature for n in scenario.nodes], dtype=np.float64)
    for h in heating:
        temps[h.node] = min(PEAK, temps[h.node] + max(0, step - h.start) * h.rate)
    return temps


# -- the cluster the scheduler and the rebalancer act on -------------------------------------------
@dataclass
class Cluster:
    """What the API server and the controllers would do: pods by key, each owner re-creating its evicted pod."""

    harness: Harness
    scenario: Scenario
    pods: dict[str, dict[str, Any]] = field(default_factory=dict)  # namespace/name -> the pod as the API has it
    specs: dict[str, PodSpec] = field(default_factory=dict)  # namespace/name -> its shape
    evicted: int = 0
    _generation: Counter[str] = field(default_factory=Counter)

    def create(self, spec: PodSpec, name: str) -> None:
        body = pod_object(name, cpu=str(spec.cpu), memory=f"{spec.memory_gib}Gi", gpus=spec.gpus,
                          owner=spec.owner or f"{spec.name}-rs", namespace=NAMESPACE, uid=f"uid-{name}")
        key = f"{NAMESPACE}/{name}"
        self.pods[key], self.specs[key] = body, spec
        self.harness.scheduler.handlers.on_pod_event("ADDED", body)

    def schedule_pending(self) -> int:
        """Schedules every pending pod, then delivers the binds as the watch would; returns how many were placed."""
        scheduler = self.harness.scheduler
        placed: list[tuple[str, str]] = []
        while (result := scheduler.schedule_one(timeout=0)) is not None:
            if result.node is not None:
                placed.append((f"{result.pod.namespace}/{result.pod.name}", result.node))
        scheduler.binder.drain(60)
        for key, node in placed:
            body = self.pods.get(key)
            if body is None:
                continue
            body = {**body, "spec": {**body["spec"], "nodeName": node}, "status": {"phase": "Running"}}
            self.pods[key] = body
            scheduler.handlers.on_pod_event("MODIFIED", body)
        return len(placed)

    # PodReader, for the rebalancer's simulation
    def get_pod(self, namespace: str, name: str) -> KubeObject | None:
        return self.pods.get(f"{namespace}/{name}")

    # Evictor: the pod goes, and its owner makes a new one at once
    def evict(self, namespace: str, name: str, uid: str, *, dry_run: bool = False) -> None:
        key = f"{namespace}/{name}"
        body = self.pods.get(key)
        if body is None:
            raise ApiError(404, f"pods {name!r} not found")
        if body["metadata"]["uid"] != uid:
            raise ApiError(409, "uid precondition failed")
        if dry_run:  # checked, nothing changed
            return
        del self.pods[key]
        spec = self.specs.pop(key)
        self.harness.scheduler.handlers.on_pod_event("DELETED", body)
        self.evicted += 1
        self._generation[spec.name] += 1
        self.create(spec, f"{spec.name}-r{self._generation[spec.name]}")

    def placed(self) -> list[tuple[PodSpec, int]]:
        """Every bound pod with its node's index."""
        index = {n.name: i for i, n in enumerate(self.scenario.nodes)}
        return [(self.specs[key], index[body["spec"]["nodeName"]]) for key, body in self.pods.items()
                if body["spec"].get("nodeName")]


def measure(cluster: Cluster, temps: np.ndarray, threshold: float) -> dict[str, Any]:
    nodes = cluster.scenario.nodes
    placed = cluster.placed()
    on = np.array([temps[i] for _, i in placed], dtype=np.float64)
    return {
        "placed": len(placed),
        "mean_gpu_temp": round(float(on.mean()), 2) if on.size else None,
        "max_gpu_temp": round(float(on.max()), 2) if on.size else None,
        "pods_above_threshold": int((on > threshold).sum()),
        "hourly_cost": round(sum(nodes[i].price * spec.gpus / nodes[i].gpus for spec, i in placed), 2),
    }


def simulate(scenario: Scenario, heating: Sequence[Heating], steps: int, *, margin: float | None,
             seed: int) -> dict[str, Any]:
    """One contender: margin None runs no rebalancer."""
    harness = build_scheduler(METRICS_SCHED, seed=seed)
    cluster = Cluster(harness, scenario)
    verdicts: Counter[str] = Counter()
    skipped: Counter[str] = Counter()  # pod-ticks skipped, by why
    timeline: list[dict[str, Any]] = []
    try:
        for node in scenario.node_objects():
            harness.scheduler.handlers.on_node_event("ADDED", node)
        other = {m: v for m, v in scenario.metric_values().items() if m != "gpu_temperature"}
        names = [n.name for n in scenario.nodes]

        def feed(step: int) -> np.ndarray:
            harness.clock.now = NOW + step * STEP
            temps = temperatures(scenario, heating, step)
            harness.feed({**other, "gpu_temperature": dict(zip(names, temps.tolist(), strict=True))})
            return temps

        temps = feed(0)
        for pod in scenario.workload:  # in arrival order, as the quality bench places them
            cluster.create(pod, pod.name)
            cluster.schedule_pending()
        runner = None
        if margin is not None:
            config = parse_rebalance({**REBALANCE, "margin": margin})
            framework = harness.framework
            rebalancer = Rebalancer(config, framework, harness.scheduler.state, harness.cache,
                                    frozenset({"metrics-sched"}), harness.clock, pods=cluster)
            runner = RebalanceRunner(rebalancer, cluster, DecisionRing(1000), dry_run=False,
                                     clock=harness.clock)
        timeline.append({"step": 0, "minutes": 0.0, **measure(cluster, temps, scenario.threshold), "evictions": 0})
        for step in range(1, steps + 1):
            temps = feed(step)
            evicted_before = cluster.evicted
            if runner is not None:
                done = runner.tick()
                verdicts.update(v.verdict.value for v in done)
                skipped.update(why_skipped(v.reason) for v in done if v.verdict == Verdict.SKIPPED)
                cluster.schedule_pending()
            timeline.append({"step": step, "minutes": step * STEP / 60, **measure(cluster, temps, scenario.threshold),
                             "evictions": cluster.evicted - evicted_before})
    finally:
        harness.stop()
    return {"timeline": timeline, "evictions": cluster.evicted, "verdicts": dict(sorted(verdicts.items())),
            "skipped_by": dict(skipped.most_common()),
            "summary": summarise(timeline)}


def why_skipped(reason: str) -> str:
    """A skipped verdict's reason without its numbers: "limit: 1 per node per interval", "cooldown", ..."""
    for words in ("limit: ", "cooldown", "back-off", "no node better", "no other node fits"):
        at = reason.find(words)
        if at >= 0:
            return reason[at:].split(" (")[0] if words == "limit: " else words
    return reason.split("; ")[-1]


def summarise(timeline: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Over the run (after placement): the time-averaged mean temperature, the hottest pod's node at any time,
    pod-hours on nodes above the threshold, the average and final $/h."""
    later = timeline[1:] or timeline
    hours = STEP / 3600
    means = [r["mean_gpu_temp"] for r in later if r["mean_gpu_temp"] is not None]
    return {
        "mean_gpu_temp_avg": round(float(np.mean(means)), 2) if means else None,
        "max_gpu_temp_peak": max((r["max_gpu_temp"] for r in later if r["max_gpu_temp"] is not None), default=None),
        "max_gpu_temp_final": timeline[-1]["max_gpu_temp"],
        "mean_gpu_temp_final": timeline[-1]["mean_gpu_temp"],
        "pod_hours_above_threshold": round(sum(r["pods_above_threshold"] for r in later) * hours, 2),
        "pods_above_threshold_final": timeline[-1]["pods_above_threshold"],
        "hourly_cost_avg": round(float(np.mean([r["hourly_cost"] for r in later])), 2),
        "hourly_cost_final": timeline[-1]["hourly_cost"],
        "placed_final": timeline[-1]["placed"],
    }


def run(quick: bool, *, nodes: int | None = None, steps: int | None = None, seed: int = 0) -> dict[str, Any]:
    started = time.perf_counter()
    scenario = make_scenario(nodes or (50 if quick else 200), seed)
    steps = steps or (24 if quick else 48)
    heating = heat_up(scenario, steps, seed)
    say(f"scenario: {scenario.meta}; {len(heating)} nodes heat up over {steps} steps of {STEP:g}s")
    contenders = {}
    for name, margin in CONTENDERS.items():
        say(f"simulating {name}")
        contenders[name] = simulate(scenario, heating, steps, margin=margin, seed=seed)
    return {
        "quick": quick,
        "scenario": {**scenario.meta, "steps": steps, "step_seconds": STEP, "heating_nodes": len(heating),
                     "heating": [{"node": scenario.nodes[h.node].name, "from_c": scenario.nodes[h.node].temperature,
                                  "start_step": h.start, "c_per_step": h.rate} for h in heating]},
        "rebalance": REBALANCE,
        "contenders": contenders,
        "notes": [
            "Every pod is placed at time 0 by metrics-sched's default profile; nothing else arrives or leaves.",
            "Temperatures, pod-hours and $/h count each placed pod once, as bench/quality_bench.py does; $/h is "
            "the node's price times the pod's share of its GPUs.",
            "An eviction re-creates the pod at once (its owner) and metrics-sched places it in the same step.",
            "skipped_by counts pod-ticks: a pod left on a bad node is skipped again at every tick.",
            "The margin is in points of the profile's 0-100 total: in the default profile GPUTemperature weighs 3 "
            "of 14, so a cooler node alone gains at most ~21 points and cost, load and spread can outweigh it.",
        ],
        "seconds": round(time.perf_counter() - started, 2),
    }


def markdown(result: Mapping[str, Any]) -> str:
    s = result["scenario"]
    lines = [f"**Rebalancing** ({s['nodes']} GPU nodes, {s['stream_pods'] + s['burst_pods']} pods placed at the "
             f"start; {s['heating_nodes']} of the cooler nodes heat up to {PEAK:g} °C over "
             f"{s['steps'] * s['step_seconds'] / 3600:g} simulated hours; rule gpu_temperature > 85 for 10m, "
             f"tick every {s['step_seconds'] / 60:g} min, limits {REBALANCE['limits']})", "",
             "| rebalancer | mean °C (avg) | max °C (peak) | mean °C (end) | max °C (end) | pod-hours > 85 °C | "
             "$/h (avg) | $/h (end) | evictions | skipped: no node better by the margin |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for name, c in result["contenders"].items():
        m = c["summary"]
        lines.append(f"| {name} | {m['mean_gpu_temp_avg']} | {m['max_gpu_temp_peak']} | {m['mean_gpu_temp_final']} | "
                     f"{m['max_gpu_temp_final']} | {m['pod_hours_above_threshold']} | {m['hourly_cost_avg']} | "
                     f"{m['hourly_cost_final']} | {c['evictions']} | {c['skipped_by'].get('no node better', 0)} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="50 nodes and 24 steps instead of 200 and 48")
    parser.add_argument("--nodes", type=int)
    parser.add_argument("--steps", type=int)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    result = run(args.quick, nodes=args.nodes, steps=args.steps, seed=args.seed)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "rebalance.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    md = markdown(result)
    (RESULTS / "rebalance.md").write_text(md + "\n")
    print(md)


if __name__ == "__main__":
    main()
