"""Forecast quality (issue 48): GPU nodes heat up while pods keep arriving; with GPUThermalForecast, fewer pods land
on nodes about to cross 85 °C, the rebalancer evicts less, and the placement objective stays where it was. In memory
on the real core, as bench/rebalance_bench.py.

The scenario is bench/scenario.py's quality scenario (heterogeneous GPU nodes, some above 85 °C from the start, 1-
and 2-GPU pods asking for 60 % of the GPUs), but the pods arrive minute by minute over the first ARRIVAL_SHARE of
the run instead of all at once, and temperatures move: a node's GPUs warm with the work placed on them (equilibrium:
idle + HEAT_FULL_C x the share of its GPUs in use, reached with a TAU_MIN-minute lag: the pods just placed show in
the readings minutes later, after the in-flight ledger has let go of them), and HEAT_SHARE of the nodes, drawn among
the cooler half, heat up ambiently (a failing fan) from a random minute at 0.3-1 °C a minute, up to PEAK. Readings
carry gaussian noise (NOISE_C). Each simulated minute the scheduler is fed the readings and
`gpu_temperature_forecast`: what the `dcgm_gpu_temp_forecast` preset asks Prometheus (predict_linear, a least-squares
line over the last WINDOW_MIN minutes of readings, HORIZON_MIN ahead). The rebalancer
(bench.rebalance_bench.REBALANCE: gpu_temperature above 85 for 10 minutes) ticks every 5 minutes in both runs; an
evicted pod's owner re-creates it at once, and the contender places it.

Contenders, on the same timeline and the same arrivals:
- today: metrics-sched's default profile;
- with GPUThermalForecast: the default profile plus GPUThermalForecast (score weight 3, filter on, at reserve: the
  heat of the pods it placed within the window added to their nodes' forecasts, recentHeat 15 as the ledger's).

Measured over every placement (replacements included): how many land on a node whose true temperature crosses 85 °C
within 30 minutes after it (the issue's measure); the rebalancer's evictions; and, for the pods of the workload's
first placements, the placement objective of bench/quality_bench.py ((3 GPUTemperature + 2 NodeLoad + 2 Cost) / 7,
normalised as the plugins do) on the values at placement time.

    python -m bench.forecast_bench [--quick] [--nodes N] [--seed S] [--heat C]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench.quality_bench import METRICS_SCHED, ObjectiveModel
from bench.rebalance_bench import REBALANCE, Cluster
from bench.scenario import NOW, Scenario, build_scheduler, make_scenario
from metrics_sched.audit import DecisionRing
from metrics_sched.config.loader import parse_rebalance
from metrics_sched.framework import Scale
from metrics_sched.rebalance import Rebalancer
from metrics_sched.rebalance.runner import RebalanceRunner

RESULTS = Path(__file__).parent / "results"
MINUTE = 60.0
THRESHOLD = 85.0
HEAT_SHARE = 0.15
PEAK = 95.0
# A node's GPUs heat with the work placed on them: its equilibrium is its idle temperature plus HEAT_FULL_C times the
# share of its GPUs in use, approached with a first-order lag of TAU_MIN minutes (a GPU takes minutes to warm up).
HEAT_FULL_C = 20.0
TAU_MIN = 12.0
NOISE_C = 0.7
WINDOW_MIN = 10  # dcgm_gpu_temp_forecast's window
HORIZON_MIN = 30  # ... and its horizon
ARRIVAL_SHARE = 0.6
LOOKAHEAD_MIN = 30  # the "crosses 85 °C within 30 minutes of the placement"
TICK_EVERY_MIN = 5  # the rebalancer's interval (REBALANCE)
WITH_FORECAST: dict[str, Any] = {"profiles": [{
    "plugins": {"filter": {"enabled": [{"name": "GPUThermalForecast"}]},
                "score": {"enabled": [{"name": "GPUThermalForecast", "weight": 3}]},
                "reserve": {"enabled": [{"name": "GPUThermalForecast"}]}},
    "pluginConfig": [{"name": "GPUThermalForecast", "args": {
        "filter": True, "window": f"{WINDOW_MIN}m", "horizon": f"{HORIZON_MIN}m"}}]}]}
CONTENDERS: dict[str, dict[str, Any]] = {"today (default profile)": METRICS_SCHED,
                                          "with GPUThermalForecast": WITH_FORECAST}


def say(message: str) -> None:
    print(f"[forecast] {message}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Heating:
    node: int
    start: int  # minute
    rate: float  # °C per minute


def heat_up(scenario: Scenario, minutes: int, seed: int) -> list[Heating]:
    """Ambient heating (a failing fan, a hot aisle): HEAT_SHARE of the cooler half climb from a random minute."""
    rng = random.Random(seed + 2)
    temps = [n.temperature for n in scenario.nodes]
    median = float(np.median(temps))
    cooler = [i for i, t in enumerate(temps) if t < median]
    chosen = sorted(rng.sample(cooler, min(len(cooler), max(1, round(HEAT_SHARE * len(temps))))))
    return [Heating(i, rng.randrange(minutes), round(rng.uniform(0.3, 1.0), 3)) for i in chosen]


def ambient(scenario: Scenario, heating: Sequence[Heating], span: int) -> np.ndarray:
    """span x nodes: each node's idle temperature minute by minute (its scenario value, plus its ambient climb)."""
    temps = np.tile(np.array([n.temperature for n in scenario.nodes], dtype=np.float64), (span, 1))
    for h in heating:
        climb = np.maximum(0, np.arange(span) - h.start) * h.rate
        temps[:, h.node] = np.minimum(np.maximum(PEAK, temps[0, h.node]), temps[:, h.node] + climb)
    return temps


def predict_linear(readings: np.ndarray, minute: int) -> np.ndarray:
    """Prometheus' predict_linear over the readings of the last WINDOW_MIN minutes (each node's least-squares line),
    HORIZON_MIN ahead of `minute`; with one reading, the reading itself."""
    start = max(0, minute - WINDOW_MIN + 1)
    window = readings[start:minute + 1]
    if window.shape[0] < 2:
        last: np.ndarray = window[-1].copy()
        return last
    x = np.arange(start, minute + 1, dtype=np.float64)
    x_mean = x.mean()
    slope = ((x - x_mean)[:, None] * (window - window.mean(axis=0))).sum(axis=0) / ((x - x_mean) ** 2).sum()
    intercept = window.mean(axis=0) - slope * x_mean
    result: np.ndarray = intercept + slope * (minute + HORIZON_MIN)
    return result


def objective_of(scenario: Scenario, model: ObjectiveModel, node: int, temperature: float) -> float:
    """quality_bench's per-node objective, with the node's temperature at placement time."""
    values = scenario.nodes[node].telemetry()
    if temperature > model.threshold:
        return 0.0
    t = float(model.temperature.apply(np.array([temperature]), "lower")[0])
    load = float(np.mean([norm.apply(np.array([values[m]]), "lower")[0] for m, norm in model.load]))
    prices = np.array([n.price / (n.gpus if model.cost_per_resource else 1) for n in scenario.nodes])
    cost_scale = model.cost if model.cost.method == "range" else Scale("range", float(prices.min()),
                                                                       float(prices.max()))
    cost = float(cost_scale.apply(np.array([prices[node]]), "lower")[0])
    w = model.weights
    return (w["GPUTemperature"] * t + w["NodeLoad"] * load + w["Cost"] * cost) / sum(w.values())


def simulate(scenario: Scenario, config: Mapping[str, Any], idle: np.ndarray, noise: np.ndarray, minutes: int,
             model: ObjectiveModel, seed: int, heat_full: float = HEAT_FULL_C) -> dict[str, Any]:
    """One contender over minutes + LOOKAHEAD_MIN minutes (no arrivals in the last ones): the temperatures follow
    the pods it placed, so each contender has its own."""
    harness = build_scheduler(config, seed=seed)
    cluster = Cluster(harness, scenario)
    names = [n.name for n in scenario.nodes]
    index = {n: i for i, n in enumerate(names)}
    gpus = np.array([n.gpus for n in scenario.nodes], dtype=np.float64)
    other = {m: v for m, v in scenario.metric_values().items() if m != "gpu_temperature"}
    workload = scenario.workload
    arrive_until = max(1, int(minutes * ARRIVAL_SHARE))
    per_minute = -(-len(workload) // arrive_until)
    span = minutes + LOOKAHEAD_MIN + 1
    truth = np.zeros((span, len(names)))
    readings = np.zeros((span, len(names)))
    temperature = idle[0].copy()
    lag = 1.0 - float(np.exp(-1.0 / TAU_MIN))
    placements: list[tuple[int, int, bool]] = []  # (minute, node, a workload pod's first placement)
    objective = 0.0
    try:
        for node_object in scenario.node_objects():
            harness.scheduler.handlers.on_node_event("ADDED", node_object)
        rebalancer = Rebalancer(parse_rebalance(REBALANCE), harness.framework, harness.scheduler.state,
                                harness.cache, frozenset({"metrics-sched"}), harness.clock, pods=cluster)
        runner = RebalanceRunner(rebalancer, cluster, DecisionRing(1000), dry_run=False, clock=harness.clock)
        for minute in range(span):
            busy = np.zeros(len(names))
            for spec, node in cluster.placed():
                busy[node] += spec.gpus
            temperature += (idle[minute] + heat_full * busy / gpus - temperature) * lag
            truth[minute] = temperature
            readings[minute] = np.round(temperature + noise[minute], 1)
            harness.clock.now = NOW + minute * MINUTE
            harness.feed({**other, "gpu_temperature": dict(zip(names, readings[minute].tolist(), strict=True)),
                          "gpu_temperature_forecast": dict(zip(names, predict_linear(readings, minute).tolist(),
                                                               strict=True))})
            if minute and minute % TICK_EVERY_MIN == 0:
                runner.tick()
            if minute <= minutes:
                for pod in workload[minute * per_minute:(minute + 1) * per_minute]:
                    cluster.create(pod, pod.name)
            before = {k for k, b in cluster.pods.items() if b["spec"].get("nodeName")}
            cluster.schedule_pending()
            for key, body in cluster.pods.items():
                if key in before or not body["spec"].get("nodeName"):
                    continue
                node = index[body["spec"]["nodeName"]]
                fresh = "-r" not in key.rsplit("/", 1)[1]
                placements.append((minute, node, fresh))
                if fresh:  # quality_bench's objective, on the reading the scheduler had
                    objective += objective_of(scenario, model, node, float(readings[minute, node]))
    finally:
        harness.stop()
    judged = [(m, n) for m, n, _ in placements if m + LOOKAHEAD_MIN < span]
    crossing = [(m, n) for m, n in judged if (truth[m + 1:m + LOOKAHEAD_MIN + 1, n] > THRESHOLD).any()]
    bad = len(crossing)
    # Why: already above the threshold when placed (a reading below it, noise), or below it.
    above_now = sum(1 for m, n in crossing if truth[m, n] > THRESHOLD)
    first = sum(1 for *_, fresh in placements if fresh)
    return {"placements": len(placements), "first_placements": first, "bad_placements": bad,
            "bad_share_pct": round(100.0 * bad / len(judged), 2) if judged else None,
            "evictions": cluster.evicted, "objective": round(objective, 2),
            "objective_per_pod": round(objective / first, 3) if first else None,
            "max_temperature": round(float(truth.max()), 1), "bad_already_above_85": above_now}



def run(quick: bool, *, nodes: int | None = None, seed: int = 0, heat_full: float = HEAT_FULL_C) -> dict[str, Any]:
    started = time.perf_counter()
    scenario = make_scenario(nodes or (60 if quick else 200), seed)
    minutes = 150 if quick else 240
    heating = heat_up(scenario, minutes, seed)
    span = minutes + LOOKAHEAD_MIN + 1
    idle = ambient(scenario, heating, span)
    noise = np.random.default_rng(seed).normal(0.0, NOISE_C, idle.shape)
    model = ObjectiveModel.default()
    say(f"scenario: {scenario.meta['nodes']} nodes, {len(scenario.workload)} pods over "
        f"{int(minutes * ARRIVAL_SHARE)} min, {len(heating)} nodes heating, {minutes} min")
    contenders = {}
    for name, config in CONTENDERS.items():
        say(f"simulating {name}")
        contenders[name] = simulate(scenario, config, idle, noise, minutes, model, seed, heat_full)
    today, forecast = contenders["today (default profile)"], contenders["with GPUThermalForecast"]
    return {
        "quick": quick,
        "scenario": {**scenario.meta, "minutes": minutes, "heating_nodes": len(heating), "noise_c": NOISE_C,
                     "heat_full_c": heat_full, "tau_min": TAU_MIN, "window_min": WINDOW_MIN,
                     "horizon_min": HORIZON_MIN},
        "contenders": contenders,
        "comparison": {
            "bad_placements_change_pct": _change(today["bad_placements"], forecast["bad_placements"]),
            "evictions_change_pct": _change(today["evictions"], forecast["evictions"]),
            "objective_per_pod_change_pct": _change(today["objective_per_pod"], forecast["objective_per_pod"]),
        },
        "seconds": round(time.perf_counter() - started, 2),
    }


def _change(before: float | None, after: float | None) -> float | None:
    if before in (None, 0) or after is None:
        return None
    return round(100.0 * (after - before) / before, 2)


def markdown(result: Mapping[str, Any]) -> str:
    s, c = result["scenario"], result["comparison"]
    lines = [f"**Thermal forecast** ({s['nodes']} GPU nodes, {s['stream_pods'] + s['burst_pods']} pods arriving "
             f"over the run's first {int(s['minutes'] * ARRIVAL_SHARE)} min, {s['heating_nodes']} nodes heating "
             f"0.3-1 °C/min, every node up to +{s['heat_full_c']:g} °C with its GPUs' work (lag {s['tau_min']:g} min); "
             f"forecast predict_linear over {s['window_min']}m, {s['horizon_min']}m ahead)", "",
             "| profile | placements | on a node crossing 85 °C within 30 min | evictions | objective per pod |",
             "|---|---|---|---|---|"]
    for name, r in result["contenders"].items():
        lines.append(f"| {name} | {r['placements']} | {r['bad_placements']} ({r['bad_share_pct']} %) | "
                     f"{r['evictions']} | {r['objective_per_pod']} |")
    lines += ["", f"Change with GPUThermalForecast: placements on nodes about to cross 85 °C "
                  f"{c['bad_placements_change_pct']} %, evictions {c['evictions_change_pct']} %, objective per pod "
                  f"{c['objective_per_pod_change_pct']} %."]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="60 nodes and 150 minutes instead of 200 and 240")
    parser.add_argument("--nodes", type=int)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--heat", type=float, default=HEAT_FULL_C,
                        help=f"°C a node's GPUs add when all are busy (default {HEAT_FULL_C:g})")
    args = parser.parse_args(argv)
    result = run(args.quick, nodes=args.nodes, seed=args.seed, heat_full=args.heat)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "forecast.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    md = markdown(result)
    (RESULTS / "forecast.md").write_text(md + "\n")
    print(md)


if __name__ == "__main__":
    main()
