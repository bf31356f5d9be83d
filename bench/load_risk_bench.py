"""Load variance (issue 48): nodes whose CPU load swings are worse homes than steady ones with the same mean; with
LoadRiskBalancing (Trimaran's risk = mean + margin x stddev), fewer pods land on nodes whose load peaks above 90 %. In
memory on the real core.

Nodes are bench/scenario.py's quality-scenario nodes (32-96 cores); each has a background CPU utilisation: a mean of
15-55 %, and for half of them (the swinging ones) a swing of ±20-40 points over a PERIOD_MIN-minute cycle, for the
others ±0-5. CPU pods asking for 2 cores (using 80 % of it from the minute they are placed) arrive minute by minute
over the first ARRIVAL_SHARE of the run until they ask for FILL of the cluster's cores. Each simulated minute the
scheduler is fed every node's current utilisation (node_cpu_utilisation, load per CPU alike) and what the
`node_cpu_utilisation_mean`/`_stddev` presets ask Prometheus: the mean and the standard deviation of the last
WINDOW_MIN minutes of it.

Contenders, on the same timeline and arrivals:
- today: metrics-sched's default profile (NodeLoad on the current utilisation);
- today + LoadRiskBalancing (weight 2, Trimaran's default args: margin 1, sensitivity 1);
- Trimaran's recommended setting: NodeLoad replaced by LoadRiskBalancing with the args its README recommends
  (safeVarianceMargin 1, safeVarianceSensitivity 2).

Measured per pod: whether its node's utilisation peaks above 90 % within the PEAK_LOOKAHEAD_MIN minutes after its
placement (later pods included), the issue's measure; and the highest utilisation any node reaches.

    python -m bench.load_risk_bench [--quick] [--nodes N] [--seed S] [--fill F]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bench.scenario import NOW, build_scheduler, make_scenario, pod_object

RESULTS = Path(__file__).parent / "results"
MINUTE = 60.0
PERIOD_MIN = 60
WINDOW_MIN = 15  # node_cpu_utilisation_mean / _stddev's window
ARRIVAL_SHARE = 0.6
FILL = 0.3  # of the cluster's cores, asked for by the pods
POD_CORES = 2
USE = 0.8  # of its request a pod uses
PEAK = 0.9
PEAK_LOOKAHEAD_MIN = 60
CONTENDERS: dict[str, dict[str, Any]] = {
    "today (default profile)": {},
    "today + LoadRiskBalancing": {"profiles": [{"plugins": {"score": {"enabled": [
        {"name": "LoadRiskBalancing", "weight": 2}]}}}]},
    "Trimaran's recommended (LoadRiskBalancing for NodeLoad, sensitivity 2)": {"profiles": [{
        "plugins": {"score": {"disabled": [{"name": "NodeLoad"}], "enabled": [{"name": "LoadRiskBalancing",
                                                                                "weight": 2}]}},
        "pluginConfig": [{"name": "LoadRiskBalancing", "args": {"safeVarianceMargin": 1,
                                                                "safeVarianceSensitivity": 2}}]}]},
}


def say(message: str) -> None:
    print(f"[load-risk] {message}", file=sys.stderr, flush=True)


def background(n: int, span: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """span x n background utilisation (0-1), and which nodes swing."""
    rng = np.random.default_rng(seed + 3)
    mean = rng.uniform(0.15, 0.55, n)
    swinging = np.arange(n) % 2 == 1
    amplitude = np.where(swinging, rng.uniform(0.2, 0.4, n), rng.uniform(0.0, 0.05, n))
    phase = rng.uniform(0, 2 * np.pi, n)
    minutes = np.arange(span)[:, None]
    util = mean + amplitude * np.sin(2 * np.pi * minutes / PERIOD_MIN + phase) + rng.normal(0, 0.01, (span, n))
    return np.clip(util, 0.0, 1.0), swinging


def simulate(config: Mapping[str, Any], nodes: Any, util_bg: np.ndarray, pods: int, minutes: int,
             seed: int) -> dict[str, Any]:
    harness = build_scheduler(config, seed=seed)
    names = [n.name for n in nodes]
    index = {n: i for i, n in enumerate(names)}
    cores = np.array([n.cpu for n in nodes], dtype=np.float64)
    static = {"gpu_temperature": {n.name: n.temperature for n in nodes},
              "node_hourly_cost": {n.name: n.price for n in nodes}}
    span = util_bg.shape[0]
    used = np.zeros(len(names))  # cores the placed pods use
    util = np.zeros((span, len(names)))
    arrive_until = max(1, int(minutes * ARRIVAL_SHARE))
    per_minute = -(-pods // arrive_until)
    placed: list[tuple[int, int]] = []
    made = 0
    try:
        for node in nodes:
            harness.scheduler.handlers.on_node_event("ADDED", {
                "metadata": {"name": node.name, "labels": {"kubernetes.io/hostname": node.name}},
                "spec": {}, "status": {"allocatable": {"cpu": str(node.cpu), "memory": f"{node.memory_gib}Gi",
                                                       "pods": "110"},
                                       "capacity": {"cpu": str(node.cpu), "memory": f"{node.memory_gib}Gi",
                                                    "pods": "110"},
                                       "conditions": [{"type": "Ready", "status": "True"}]}})
        for minute in range(span):
            util[minute] = np.clip(util_bg[minute] + used / cores, 0.0, 1.0)
            window = util[max(0, minute - WINDOW_MIN + 1):minute + 1]
            harness.clock.now = NOW + minute * MINUTE
            harness.feed({**static,
                          "node_cpu_utilisation": dict(zip(names, util[minute].tolist(), strict=True)),
                          "node_load_per_cpu": dict(zip(names, util[minute].tolist(), strict=True)),
                          "node_cpu_utilisation_mean": dict(zip(names, window.mean(axis=0).tolist(), strict=True)),
                          "node_cpu_utilisation_stddev": dict(zip(names, window.std(axis=0).tolist(), strict=True))})
            if minute > minutes:
                continue
            for _ in range(min(per_minute, pods - made)):
                body = pod_object(f"cpu-{made:04d}", cpu=str(POD_CORES), memory="4Gi")
                made += 1
                harness.scheduler.handlers.on_pod_event("ADDED", body)
            while (result := harness.scheduler.schedule_one(timeout=0)) is not None:
                if result.node is not None:
                    row = index[result.node]
                    used[row] += POD_CORES * USE
                    placed.append((minute, row))
            harness.scheduler.binder.drain(60)
    finally:
        harness.stop()
    judged = [(m, n) for m, n in placed if m + PEAK_LOOKAHEAD_MIN < span]
    peaking = sum(1 for m, n in judged if (util[m:m + PEAK_LOOKAHEAD_MIN + 1, n] > PEAK).any())
    return {"placed": len(placed), "judged": len(judged), "on_nodes_peaking_above_90": peaking,
            "share_pct": round(100.0 * peaking / len(judged), 2) if judged else None,
            "max_utilisation": round(float(util.max()), 3),
            "node_minutes_above_90": int((util > PEAK).sum())}


def run(quick: bool, *, nodes: int | None = None, seed: int = 0, fill: float = FILL) -> dict[str, Any]:
    started = time.perf_counter()
    scenario = make_scenario(nodes or (60 if quick else 200), seed)
    minutes = 120 if quick else 180
    span = minutes + PEAK_LOOKAHEAD_MIN + 1
    util_bg, swinging = background(len(scenario.nodes), span, seed)
    pods = int(fill * sum(n.cpu for n in scenario.nodes) / POD_CORES)
    say(f"{len(scenario.nodes)} nodes ({int(swinging.sum())} swinging), {pods} pods over "
        f"{int(minutes * ARRIVAL_SHARE)} min")
    contenders = {}
    for name, config in CONTENDERS.items():
        say(f"simulating {name}")
        contenders[name] = simulate(config, scenario.nodes, util_bg, pods, minutes, seed)
    return {"quick": quick, "scenario": {"nodes": len(scenario.nodes), "swinging_nodes": int(swinging.sum()),
                                         "pods": pods, "fill": fill, "minutes": minutes, "window_min": WINDOW_MIN,
                                         "period_min": PERIOD_MIN},
            "contenders": contenders, "seconds": round(time.perf_counter() - started, 2),
            "notes": ["Trimaran's README gives the formula, its args and the recommended values (margin 1, "
                      "sensitivity 2), and no figures for such a scenario: its behaviour is shown here by running "
                      "the plugin with those values."]}


def markdown(result: Mapping[str, Any]) -> str:
    s = result["scenario"]
    lines = [f"**Load variance** ({s['nodes']} nodes, {s['swinging_nodes']} of them swinging ±20-40 points every "
             f"{s['period_min']} min; {s['pods']} 2-core pods asking {s['fill']:.0%} of the cores; "
             f"risk from the last {s['window_min']} min)", "",
             "| profile | pods judged | on a node peaking > 90 % within 60 min | node-minutes > 90 % | max util |",
             "|---|---|---|---|---|"]
    for name, r in result["contenders"].items():
        lines.append(f"| {name} | {r['judged']} | {r['on_nodes_peaking_above_90']} ({r['share_pct']} %) | "
                     f"{r['node_minutes_above_90']} | {r['max_utilisation']} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="60 nodes and 120 minutes instead of 200 and 180")
    parser.add_argument("--nodes", type=int)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--fill", type=float, default=FILL, help=f"share of the cores the pods ask (default {FILL:g})")
    args = parser.parse_args(argv)
    result = run(args.quick, nodes=args.nodes, seed=args.seed, fill=args.fill)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "load_risk.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    md = markdown(result)
    (RESULTS / "load_risk.md").write_text(md + "\n")
    print(md)


if __name__ == "__main__":
    main()
