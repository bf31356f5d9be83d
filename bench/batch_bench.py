"""Opportunistic batching in the core: a 1,000-replica Deployment placed on 5,000 nodes, batched and not.

What is timed, per pod: Framework.schedule + ClusterState.assume under the state lock (the core bench's
`cycle`); the Reserve plugins (the in-flight ledger) run untimed after each, so the state evolves as in the
loop. Both runs start from the same fresh cluster (the core bench's nodes and telemetry, every built-in
plugin), with the profile's random tie-break seeded alike; the placements of the two runs are compared and
must be the same. `placements_per_second` is the pods placed over the summed time of the timed calls.

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

from bench.core_bench import CORE_CONFIG, make_cluster, released, replicaset, synced
from bench.scenario import Harness, build_scheduler, pod_object
from metrics_sched.framework.batching import Batcher
from metrics_sched.model.podinfo import parse_pod

OWNER = "web"


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
    harness.scheduler.handlers.on_workload_event("replicasets", "ADDED", replicaset(OWNER))
    return harness


def deployment(replicas: int) -> list[dict[str, Any]]:
    """The Deployment's pods as its ReplicaSet creates them (scheduler_perf's 100m / 500Mi)."""
    return [pod_object(f"{OWNER}-{i:05d}", cpu="100m", memory="500Mi", owner=OWNER, labels={"app": OWNER})
            for i in range(replicas)]


def place(config: dict[str, Any], n_nodes: int, pods: list[dict[str, Any]], *, batching: bool,
          seed: int = 0) -> dict[str, Any]:
    harness = _cluster(config, n_nodes, seed)
    try:
        framework = harness.framework
        if not batching:
            framework.batcher = None
        state = harness.scheduler.state
        infos = [parse_pod(p) for p in pods]
        clock = time.perf_counter
        seconds = np.zeros(len(infos))
        cpu = np.zeros(len(infos))
        thread_clock = time.thread_time
        nodes: list[str | None] = []
        synced()  # the collector as the scheduler sets it after its initial sync (the core bench's measurement too)
        try:
            for i, info in enumerate(infos):
                t0, c0 = clock(), thread_clock()
                with state.lock:
                    result = framework.schedule(info, state.table)
                    if result.node is not None:
                        state.assume(info, result.node)
                seconds[i], cpu[i] = clock() - t0, thread_clock() - c0
                if result.node is not None:
                    for plugin in framework.reserves:
                        plugin.reserve(result.cycle, info, result.node)
                nodes.append(result.node)
        finally:
            released()
        placed = sum(node is not None for node in nodes)
        out: dict[str, Any] = {
            "placed": placed,
            "seconds": round(float(seconds.sum()), 4),
            "placements_per_second": round(placed / float(seconds.sum()), 1),
            # the same over the thread's CPU time: steadier than wall time on a shared machine
            "cpu_placements_per_second": round(placed / float(cpu.sum()), 1),
            "p50_us": round(float(np.percentile(seconds, 50)) * 1e6, 1),
            "p99_us": round(float(np.percentile(seconds, 99)) * 1e6, 1),
            "nodes": nodes,
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


def _spread(values: Sequence[float]) -> dict[str, float]:
    return {"median": round(float(np.median(values)), 1), "min": round(min(values), 1), "max": round(max(values), 1)}


def run(n_nodes: int = 5_000, replicas: int = 1_000, repeat: int = 3, seed: int = 0,
        profiles: Sequence[str] = tuple(PROFILES)) -> dict[str, Any]:
    pods = deployment(replicas)
    result: dict[str, Any] = {
        "nodes": n_nodes, "replicas": replicas, "repeat": repeat,
        "method": "Framework.schedule + ClusterState.assume under the state lock per pod (Reserve untimed); "
                  "placements / summed time of the timed calls (wall; cpu: the thread's CPU time); batched and "
                  "unbatched runs alternate",
    }
    for name in profiles:
        runs: dict[str, list[dict[str, Any]]] = {"unbatched": [], "batched": []}
        for attempt in range(repeat):
            for mode in ("unbatched", "batched"):
                say(f"{name} {mode} #{attempt + 1}: {replicas} replicas on {n_nodes} nodes")
                runs[mode].append(place(PROFILES[name], n_nodes, pods, batching=mode == "batched", seed=seed))
        same = all(b["nodes"] == runs["unbatched"][0]["nodes"] for b in runs["batched"] + runs["unbatched"])
        row: dict[str, Any] = {"same_placements": same}
        for mode, done in runs.items():
            rates = [r["placements_per_second"] for r in done]
            cpu_rates = [r["cpu_placements_per_second"] for r in done]
            row[mode] = {"placements_per_second": _spread(rates), "cpu_placements_per_second": _spread(cpu_rates),
                         "runs": [
                {k: v for k, v in r.items() if k != "nodes"} for r in done]}
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
    args = parser.parse_args(argv)
    result = run(args.nodes, args.replicas, args.repeat, profiles=args.profiles)
    print(json.dumps(result, indent=2))
    if not all(result[name]["same_placements"] for name in args.profiles):
        sys.exit(1)


if __name__ == "__main__":
    main()
