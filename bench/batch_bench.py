"""Opportunistic batching in the core: a 1,000-replica Deployment placed on 5,000 nodes, batched and not.

What is timed, per pod: Framework.schedule + ClusterState.assume under the state lock (the core bench's
`cycle`); the Reserve plugins (the in-flight ledger) run untimed after each, so the state evolves as in the
loop. Both runs start from the same fresh cluster (the core bench's nodes and telemetry, every built-in
plugin), with the profile's random tie-break seeded alike; the placements of the two runs are compared and
must be the same. `placements_per_second` is the pods placed over the summed time of the timed calls.

The Deployment arrives at a running scheduler: WARMUP_PODS pod of another template (200m / 1Gi, no owner) is
placed first, untimed, in both modes. A fresh scheduler's first cycle ever builds what every later one reuses (each
metric's node-to-row map, the label columns: 12-18 ms at 5,000 nodes, more than a hundred batched placements); it is
reported apart (`cold_first_cycle_ms`). The Deployment's own first two cycles (the full one, and the one that
stores its batch: `first_cycles_us`) are timed as the others.

Two profiles:
- `core`: the core bench's profile as is. The Deployment's ReplicaSet is known, so PodTopologySpread's
  system defaults spread it, and ZoneSpread counts its pods per zone: both read domain counts over every
  node (Reads.CLUSTER; upstream makes such pods unbatchable). A batched cycle keeps their scores from the
  per-row counts (framework.incremental) and recomputes every candidate's total from the first of them on.
- `no_default_spread`: the same with PodTopologySpread's `defaultingType: List` and no default constraints,
  ZoneSpread not enabled: what kube-scheduler needs for a Deployment to be batched at all.

    python -m bench.batch_bench [--nodes 5000] [--replicas 1000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from bench.core_bench import CORE_CONFIG, as_the_scheduler_runs, make_cluster, released, replicaset, synced
from bench.scenario import Harness, build_scheduler, pod_object
from metrics_sched.framework.runtime import CycleResult, Framework
from metrics_sched.framework.runtime.batching import Batcher
from metrics_sched.model.podinfo import PodInfo, parse_pod
from metrics_sched.scheduler.event_handlers import REPLICA_SETS
from metrics_sched.state.cluster_state import ClusterState

OWNER = "web"
WARMUP_PODS = 1  # placed before the Deployment, untimed (module docstring)


def no_default_spread() -> dict[str, Any]:
    config = copy.deepcopy(CORE_CONFIG)
    profile = config["profiles"][0]
    profile["plugins"]["score"]["enabled"] = [p for p in profile["plugins"]["score"]["enabled"]
                                              if p["name"] != "ZoneSpread"]
    profile["pluginConfig"].append({"name": "PodTopologySpread",
                                    "args": {"defaultingType": "List", "defaultConstraints": []}})
    return config


PROFILES: dict[str, dict[str, Any]] = {"core": CORE_CONFIG, "no_default_spread": no_default_spread()}


def say(message: str) -> None:
    print(f"[batch] {message}", file=sys.stderr, flush=True)


def _cluster(config: dict[str, Any], n_nodes: int, seed: int) -> Harness:
    harness = build_scheduler(config, seed=seed)
    nodes, values = make_cluster(n_nodes, seed)
    for node in nodes:
        harness.scheduler.handlers.on_node_event("ADDED", node)
    harness.feed(values)
    harness.scheduler.handlers.on_object_event(REPLICA_SETS, "ADDED", replicaset(OWNER))
    return harness


def deployment(replicas: int) -> list[dict[str, Any]]:
    """The Deployment's pods as its ReplicaSet creates them (scheduler_perf's 100m / 500Mi)."""
    return [pod_object(f"{OWNER}-{i:05d}", cpu="100m", memory="500Mi", owner=OWNER, labels={"app": OWNER})
            for i in range(replicas)]


def warmup_pods(count: int = WARMUP_PODS) -> list[dict[str, Any]]:
    """What the scheduler placed before the Deployment came: plain pods of another template."""
    return [pod_object(f"warm-{i:03d}", cpu="200m", memory="1Gi") for i in range(count)]


def place(config: dict[str, Any], n_nodes: int, pods: list[dict[str, Any]], *, batching: bool,
          seed: int = 0, warmup: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    harness = _cluster(config, n_nodes, seed)
    try:
        framework = harness.framework
        if not batching:
            framework.batcher = None
        state = harness.scheduler.state
        infos = [parse_pod(p) for p in pods]
        warm = [parse_pod(p) for p in warmup]
        clock = time.perf_counter
        seconds = np.zeros(len(infos))
        cpu = np.zeros(len(infos))
        thread_clock = time.thread_time
        nodes: list[str | None] = []
        synced()  # the collector as the scheduler sets it after its initial sync (the core bench's measurement too)
        warm_nodes: list[str | None] = []
        cold: float | None = None
        try:
            for info in warm:
                t0 = clock()
                result = _cycle(framework, state, info)
                cold = clock() - t0 if cold is None else cold
                warm_nodes.append(_reserve(framework, info, result))
            for i, info in enumerate(infos):
                t0, c0 = clock(), thread_clock()
                result = _cycle(framework, state, info)
                seconds[i], cpu[i] = clock() - t0, thread_clock() - c0
                nodes.append(_reserve(framework, info, result))
        finally:
            released()
        placed = sum(node is not None for node in nodes)
        out: dict[str, Any] = {
            "cold_first_cycle_ms": None if cold is None else round(cold * 1e3, 2),
            "first_cycles_us": [round(float(x) * 1e6, 1) for x in seconds[:2]],
            "placed": placed,
            "seconds": round(float(seconds.sum()), 4),
            "placements_per_second": round(placed / float(seconds.sum()), 1),
            # the same over the thread's CPU time: steadier than wall time on a shared machine
            "cpu_placements_per_second": round(placed / float(cpu.sum()), 1),
            "p50_us": round(float(np.percentile(seconds, 50)) * 1e6, 1),
            "p99_us": round(float(np.percentile(seconds, 99)) * 1e6, 1),
            "nodes": nodes,
            "warm_nodes": warm_nodes,  # compared too: a warm-up placed otherwise would tell the runs apart
        }
        batcher = framework.batcher
        if isinstance(batcher, Batcher):
            out["batched"] = batcher.stats.batched
            out["full_cycles"] = len(infos) - batcher.stats.batched
            out["totals_recomputed"] = batcher.stats.totals_recomputed
            out["refused"] = dict(batcher.stats.refused)
        return out
    finally:
        harness.stop()


def _cycle(framework: Framework, state: ClusterState, info: PodInfo) -> CycleResult:
    """What is timed: the cycle and the assume, under the state lock."""
    with state.lock:
        result = framework.schedule(info, state.table)
        if result.node is not None:
            state.assume(info, result.node)
    return result


def _reserve(framework: Framework, info: PodInfo, result: CycleResult) -> str | None:
    """The Reserve plugins, untimed, as the loop runs them after the assume; the node placed on."""
    if result.node is not None:
        for plugin in framework.reserves:
            plugin.reserve(result.cycle, info, result.node)
    return result.node


def _spread(values: Sequence[float]) -> dict[str, float]:
    return {"median": round(float(np.median(values)), 1), "min": round(min(values), 1), "max": round(max(values), 1)}


def run(n_nodes: int = 5_000, replicas: int = 1_000, repeat: int = 3, seed: int = 0,
        profiles: Sequence[str] = tuple(PROFILES), warmup: int = WARMUP_PODS) -> dict[str, Any]:
    pods = deployment(replicas)
    before = warmup_pods(warmup)
    result: dict[str, Any] = {
        "nodes": n_nodes, "replicas": replicas, "repeat": repeat, "warmup_pods": warmup,
        "method": "Framework.schedule + ClusterState.assume under the state lock per pod (Reserve untimed); "
                  "placements / summed time of the timed calls (wall; cpu: the thread's CPU time), the "
                  "Deployment's first two cycles included; batched and unbatched runs alternate; on a running "
                  f"scheduler: {warmup} pod(s) of another template placed first, untimed (cold_first_cycle_ms: a "
                  "fresh scheduler's first cycle, which builds what every later one reuses)",
    }
    for name in profiles:
        runs: dict[str, list[dict[str, Any]]] = {"unbatched": [], "batched": []}
        for attempt in range(repeat):
            for mode in ("unbatched", "batched"):
                say(f"{name} {mode} #{attempt + 1}: {replicas} replicas on {n_nodes} nodes")
                runs[mode].append(place(PROFILES[name], n_nodes, pods, batching=mode == "batched", seed=seed,
                                        warmup=before))
        first = runs["unbatched"][0]
        same = all((r["nodes"], r["warm_nodes"]) == (first["nodes"], first["warm_nodes"])
                   for r in runs["batched"] + runs["unbatched"])
        row: dict[str, Any] = {"same_placements": same}
        for mode, done in runs.items():
            rates = [r["placements_per_second"] for r in done]
            cpu_rates = [r["cpu_placements_per_second"] for r in done]
            row[mode] = {"placements_per_second": _spread(rates), "cpu_placements_per_second": _spread(cpu_rates),
                         "runs": [
                {k: v for k, v in r.items() if k not in ("nodes", "warm_nodes")} for r in done]}
        unbatched = row["unbatched"]["placements_per_second"]["median"]
        row["speedup"] = round(row["batched"]["placements_per_second"]["median"] / unbatched, 2) if unbatched else None
        say(f"{name}: unbatched {row['unbatched']['placements_per_second']} batched "
            f"{row['batched']['placements_per_second']} same placements: {same}")
        result[name] = row
    return result


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--nodes", type=int, default=5_000)
    parser.add_argument("--replicas", type=int, default=1_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--profiles", nargs="+", choices=tuple(PROFILES), default=tuple(PROFILES))
    parser.add_argument("--warmup", type=int, default=WARMUP_PODS,
                        help=f"pods of another template placed first, untimed (default {WARMUP_PODS})")
    args = parser.parse_args(argv)
    with as_the_scheduler_runs():  # as the core bench measures it, whose part this is
        result = run(args.nodes, args.replicas, args.repeat, profiles=args.profiles, warmup=args.warmup)
    print(json.dumps(result, indent=2))
    if not all(result[name]["same_placements"] for name in args.profiles):
        sys.exit(1)


if __name__ == "__main__":
    main()
