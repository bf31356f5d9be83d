"""The scheduling core alone, no API: decisions per second, per-decision latency, memory, profile.

Every built-in plugin is on (the default set, with GPUTemperature, NodeLoad, Cost, the
InFlightLedger, InterPodAffinity and PodTopologySpread, plus NodeLabelFilter, NodeLabelScore,
CustomMetric and ZoneSpread configured), every node has telemetry in the MetricCache
(gpu_temperature, node_cpu_utilisation, node_load_per_cpu, node_hourly_cost, gpu_utilisation), nodes
are heterogeneous (zone / disk-type / role labels, some taints, a few cordoned, 8 GPUs each). Pods
are scheduler_perf-shaped (100m CPU / 500Mi) with a 1-GPU variant; half belong to one of 20
ReplicaSets (labelled as their selector selects; the ReplicaSets are known to the scheduler, so
PodTopologySpread's system defaults spread them, as ZoneSpread did before it left the default
profile), a few carry a toleration, a nodeSelector or a preferred node affinity.

The collector is set as the scheduler sets it after its initial sync (app.cli.run_cmd.tune_gc). The process keeps to
one CPU while it measures, as `metrics-sched run` does with its default cpuAffinity, one
(app.cli.run_cmd.keep_to_one_cpu); `--cpu-affinity all` leaves the OS to place the threads, as cpuAffinity: all does.

Two measurements per cluster size, each on a fresh scheduler (and at 5,000 nodes once more with the default
profile alone, `default_profile`: what issue 18's core target names):
- cycle:    Framework.schedule + ClusterState.assume under the state lock (the pure decision);
            the Reserve plugins (the ledger) then run untimed, so the state evolves as in the loop.
- decision: Scheduler.schedule_one: queue pop, the cycle, assume, Reserve, and the hand-off to the
            Binder, whose workers bind through a PodWriter that does nothing. The binder and the
            reporter are drained every DRAIN_EVERY decisions, outside the timed calls; their
            threads still share the GIL with the loop while it runs, as in production.
`decisions_per_second` is the measured count over the summed time of the measured calls;
`wall_decisions_per_second` is over the wall time, drains (the bind/report work) included.
Quick mode: 2,000 decisions and 1,000 cycles per size after 100 warm-up ones; full: 10,000 each
after 500. Both runs keep every pod they place (assumed) and every ledger entry (the clock is
frozen), so the state grows during a run: p50 of the first and last tenth are reported apart.

Also: `ledger_scaling`, the cycle latency with the in-flight ledger already holding 10k-100k
placements (what it holds at steady state: ~600 s of placements), which is what bounds the core.

Also: `constraints` (bench/constraints_bench.py), the same decisions at 5,000 nodes (profile_nodes;
in 4 zones) with 20,000 labelled pods already bound (some with required or preferred inter-pod
(anti-)affinity) for a 1,000-replica Deployment with zone spreading (maxSkew 1, DoNotSchedule)
and required hostname anti-affinity, in quick mode too; its outcome is checked, and its decisions/s
reported next to the plain case's at 5,000 nodes. Skipped, with a message, while InterPodAffinity / PodTopologySpread
are not built in.

Also: RSS of a fresh process holding 5,000 nodes, their telemetry and 50,000 bound pods, and a
cProfile of the decision loop at 5,000 nodes (plain, and the constraints case). The machine is small
and noisy: this reports, it asserts nothing about timings (the constraints case's outcome excepted).

    python -m bench.core_bench [--quick] [--sizes 1000 5000] [--decisions N] [--replicas N]
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import gc
import io
import json
import os
import pstats
import random
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bench.scenario import Harness, build_scheduler, node_object, pod_object
from metrics_sched.app.cli.run_cmd import GC_THRESHOLDS, keep_to_one_cpu
from metrics_sched.config.model import DEFAULT_CPU_AFFINITY
from metrics_sched.framework.runtime import CycleResult
from metrics_sched.model.podinfo import parse_pod
from metrics_sched.scheduler.event_handlers import REPLICA_SETS
from metrics_sched.telemetry.ledger import InFlightLedgerStore

SIZES = (1_000, 5_000, 15_000)
DEFAULT_GC_THRESHOLDS = gc.get_threshold()
REPLICASETS = 20  # the owners of make_pod's even pods
DRAIN_EVERY = 250
ZONES = tuple(f"zone-{c}" for c in "abcdefgh")
METRICS = ("gpu_temperature", "node_cpu_utilisation", "node_load_per_cpu", "node_hourly_cost", "gpu_utilisation")
ROOT = Path(__file__).resolve().parent.parent

# The default profile plus the optional plugins, configured (ZoneSpread too: no longer a default, since
# PodTopologySpread's system defaults spread replicas, but still built in).
CORE_CONFIG: dict[str, Any] = {
    "profiles": [{
        "plugins": {
            "filter": {"enabled": [{"name": "NodeLabelFilter"}, {"name": "CustomMetric"}]},
            "score": {"enabled": [{"name": "NodeLabelScore", "weight": 1}, {"name": "CustomMetric", "weight": 1},
                                  {"name": "ZoneSpread", "weight": 1}]},
        },
        "pluginConfig": [
            {"name": "NodeLabelFilter", "args": {"absentLabels": ["maintenance"]}},
            {"name": "NodeLabelScore", "args": {"labelWeights": {"disk-type": {"ssd": 100, "hdd": 20}}}},
            {"name": "CustomMetric", "args": {"metrics": [
                {"metric": "gpu_utilisation", "direction": "lower", "filterAbove": 98,
                 "normalization": {"method": "range", "min": 0, "max": 100}}]}},
        ],
    }],
}


def say(message: str) -> None:
    print(f"[core] {message}", file=sys.stderr, flush=True)


# -- the cluster and the pods --------------------------------------------------------------------
def make_cluster(n_nodes: int, seed: int = 0, zones: Sequence[str] = ZONES,
                 ) -> tuple[list[dict[str, Any]], dict[str, dict[str, float]]]:
    """Heterogeneous 8-GPU nodes and their telemetry (metric -> node -> value), deterministic by seed.

    Node i is in zones[i % len(zones)]; the zones change no other draw.
    """
    rng = random.Random(seed)
    nodes = []
    values: dict[str, dict[str, float]] = {m: {} for m in METRICS}
    for i in range(n_nodes):
        name = f"node-{i:05d}"
        labels = {"topology.kubernetes.io/zone": zones[i % len(zones)],
                  "disk-type": "ssd" if rng.random() < 0.6 else "hdd",
                  "role": rng.choices(("gpu", "general", "special"), (0.7, 0.2, 0.1))[0]}
        if rng.random() < 0.01:
            labels["maintenance"] = "true"
        taints = []
        draw = rng.random()
        if draw < 0.05:
            taints.append({"key": "dedicated", "value": "special", "effect": "NoSchedule"})
        elif draw < 0.10:
            taints.append({"key": "spot", "value": "true", "effect": "PreferNoSchedule"})
        cpu, memory = rng.choice(((32, 128), (64, 256), (96, 512), (128, 1024)))
        nodes.append(node_object(name, cpu=cpu, memory_gib=memory, gpus=8, labels=labels, taints=taints,
                                 unschedulable=rng.random() < 0.01))
        hot = rng.random() < 0.05
        utilisation = rng.betavariate(2.0, 5.0)
        values["gpu_temperature"][name] = rng.uniform(86.0, 95.0) if hot else min(84.0, max(30.0, rng.gauss(60, 12)))
        values["node_cpu_utilisation"][name] = utilisation
        values["node_load_per_cpu"][name] = 2.0 * utilisation * rng.uniform(0.7, 1.3)
        values["node_hourly_cost"][name] = 8 * rng.choice((0.55, 1.2, 2.0, 4.1)) * rng.uniform(0.85, 1.15)
        values["gpu_utilisation"][name] = rng.uniform(0.0, 100.0)
    return nodes, values


def make_pod(i: int, *, node_name: str | None = None, prefix: str = "p") -> dict[str, Any]:
    """scheduler_perf's pod (100m / 500Mi) or, for 3 in 10, a 1-GPU variant; deterministic by index."""
    name = f"{prefix}-{i:06d}"
    gpu = i % 10 in (1, 4, 7)
    spec: dict[str, Any] = {}
    if i % 20 == 3:
        spec["tolerations"] = [{"key": "dedicated", "operator": "Equal", "value": "special",
                                "effect": "NoSchedule"}]
    if i % 10 == 5:
        spec["nodeSelector"] = {"disk-type": "ssd"}
    if i % 20 == 9:
        spec["affinity"] = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 50, "preference": {"matchExpressions": [{"key": "role", "operator": "In",
                                                                 "values": ["gpu"]}]}}]}}
    owner = replicaset_name(i) if i % 2 == 0 else None
    return pod_object(name, cpu="1" if gpu else "100m", memory="4Gi" if gpu else "500Mi", gpus=1 if gpu else 0,
                      owner=owner, labels={"app": owner} if owner else None, node_name=node_name, **spec)


def replicaset_name(i: int) -> str:
    return f"rs-{i % REPLICASETS:02d}"


def replicaset(name: str, namespace: str = "bench") -> dict[str, Any]:
    """A ReplicaSet as the watch delivers it; only its selector matters (PodTopologySpread's DefaultSelector)."""
    return {"apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": name, "namespace": namespace, "uid": f"rs-{name}"},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}}}}


def cluster(n_nodes: int, seed: int = 0, *, replicasets: bool = True,
            config: dict[str, Any] | None = None) -> Harness:
    """The scheduler (CORE_CONFIG unless `config`; {} is the default profile) with the nodes and their telemetry,
    and (unless replicasets=False) make_pod's ReplicaSets."""
    harness = build_scheduler(CORE_CONFIG if config is None else config, seed=seed)
    nodes, values = make_cluster(n_nodes, seed)
    for node in nodes:
        harness.scheduler.handlers.on_node_event("ADDED", node)
    harness.feed(values)
    if replicasets:
        for i in range(REPLICASETS):
            harness.scheduler.handlers.on_object_event(REPLICA_SETS, "ADDED", replicaset(replicaset_name(i)))
    return harness


# -- measuring -----------------------------------------------------------------------------------
def latency_stats(seconds: Sequence[float], wall: float | None = None) -> dict[str, Any]:
    ms = np.asarray(seconds, dtype=np.float64) * 1000.0
    if ms.size == 0:
        return {"decisions": 0}
    tenth = max(1, ms.size // 10)
    out: dict[str, Any] = {
        "decisions": int(ms.size),
        "decisions_per_second": round(float(ms.size / (ms.sum() / 1000.0)), 1),
        "p50_ms": round(float(np.percentile(ms, 50)), 3),
        "p99_ms": round(float(np.percentile(ms, 99)), 3),
        "max_ms": round(float(ms.max()), 3),
        "mean_ms": round(float(ms.mean()), 3),
        # the state grows during the run (assumed pods, ledger entries): first and last tenth apart
        "p50_first_tenth_ms": round(float(np.percentile(ms[:tenth], 50)), 3),
        "p50_last_tenth_ms": round(float(np.percentile(ms[-tenth:], 50)), 3),
    }
    if wall is not None:
        out["wall_seconds"] = round(wall, 3)
        out["wall_decisions_per_second"] = round(ms.size / wall, 1)
    return out


def drain(harness: Harness) -> None:
    harness.scheduler.binder.drain(120)
    harness.scheduler.reporter.wait_idle(120)


def run_cycles(harness: Harness, pods: list[dict[str, Any]], warmup: int) -> dict[str, Any]:
    """Framework.schedule + assume, timed; Reserve untimed; per-plugin times from the cycle's own timings."""
    framework = harness.framework
    state = harness.scheduler.state
    infos = [parse_pod(p) for p in pods]
    clock = time.perf_counter
    latencies: list[float] = []
    per_plugin: dict[str, float] = defaultdict(float)
    unscheduled = 0
    started = clock()
    for i, info in enumerate(infos):
        if i == warmup:
            started = clock()
        t0 = clock()
        with state.lock:
            result = framework.schedule(info, state.table)
            if result.node is not None:
                state.assume(info, result.node)
        t1 = clock()
        if result.node is not None:
            for plugin in framework.reserves:
                plugin.reserve(result.cycle, info, result.node)
        if i < warmup:
            continue
        latencies.append(t1 - t0)
        unscheduled += result.node is None
        for plugin, point, seconds, _ in result.timings:
            per_plugin[f"{point}/{plugin}"] += seconds
    wall = clock() - started
    stats = latency_stats(latencies, wall)
    stats["unscheduled"] = unscheduled
    measured = max(1, len(latencies))
    breakdown = sorted(((key, total / measured * 1e6) for key, total in per_plugin.items()), key=lambda kv: -kv[1])
    stats["plugin_us_per_cycle"] = {key: round(us, 1) for key, us in breakdown}
    stats["plugins_us_total"] = round(sum(us for _, us in breakdown), 1)
    return stats


def run_decisions(harness: Harness, pods: list[dict[str, Any]], warmup: int,
                  profiler: cProfile.Profile | None = None, compare_first: int = 0,
                  observe: Callable[[int, CycleResult | None], None] | None = None) -> dict[str, Any]:
    """Scheduler.schedule_one with a no-op writer, the binder drained every DRAIN_EVERY decisions.

    compare_first: also report the first N measured decisions alone (to compare with a shorter cycle run
    at the same state size).
    observe: called untimed with (index, what schedule_one returned) after each call, warm-up ones included.
    """
    scheduler = harness.scheduler
    for pod in pods:
        scheduler.handlers.on_pod_event("ADDED", pod)
    clock = time.perf_counter
    latencies: list[float] = []
    full: list[bool] = []  # per measured decision: it ran the full cycle (not a batched one)
    stats_of = harness.framework.batcher.stats if harness.framework.batcher is not None else None
    unscheduled = 0
    drained = 0.0
    started = clock()
    for i in range(len(pods)):
        if i == warmup:
            drain(harness)
            if profiler is not None:
                profiler.enable()
            started = clock()
        fulls = stats_of.full if stats_of is not None else 0
        t0 = clock()
        result = scheduler.schedule_one(timeout=0)
        t1 = clock()
        if i >= warmup:
            latencies.append(t1 - t0)
            full.append(stats_of is None or stats_of.full != fulls)
            unscheduled += result is None or result.node is None
        if observe is not None:
            observe(i, result)
        if (i + 1) % DRAIN_EVERY == 0:
            d0 = clock()
            drain(harness)
            drained += clock() - d0
    drain(harness)
    if profiler is not None:
        profiler.disable()
    stats = latency_stats(latencies, clock() - started)
    if compare_first and 0 < compare_first < len(latencies):
        first = latency_stats(latencies[:compare_first])
        stats[f"first_{compare_first}"] = {k: first[k] for k in ("decisions_per_second", "p50_ms", "p99_ms", "max_ms")}
    stats["unscheduled"] = unscheduled
    stats.update(cycle_kinds(latencies, full))
    stats["drain_seconds"] = round(drained, 3)
    stats["binds"] = harness.writer.binds
    stats["ledger_entries"] = len(harness.ledger)
    return stats


def cycle_kinds(seconds: Sequence[float], full: Sequence[bool]) -> dict[str, Any]:
    """The decisions that ran a full cycle apart from the batched ones (the p99 is the full cycles' when more than
    1 % run one)."""
    ms = np.asarray(seconds, dtype=np.float64) * 1000.0
    kind = np.asarray(full, dtype=bool)
    out: dict[str, Any] = {"full_cycles": int(kind.sum())}
    if kind.any():
        out["full_p50_ms"] = round(float(np.percentile(ms[kind], 50)), 3)
    if (~kind).any():
        out["batched_p50_ms"] = round(float(np.percentile(ms[~kind], 50)), 3)
        out["batched_p99_ms"] = round(float(np.percentile(ms[~kind], 99)), 3)
    return out


def synced() -> None:
    """The collector as the scheduler sets it once its caches are synced (app.cli.run_cmd.tune_gc): larger young
    generations, and what is alive now (the nodes, their telemetry) frozen out of the full collections. Undone by
    released() when the measurement ends, so the next cluster of this process is not kept alive."""
    gc.set_threshold(*GC_THRESHOLDS)
    gc.collect()
    gc.freeze()


def released() -> None:
    gc.unfreeze()
    gc.set_threshold(*DEFAULT_GC_THRESHOLDS)
    gc.collect()


def measure_size(n_nodes: int, decisions: int, cycles: int, warmup: int, seed: int = 0, *,
                 replicasets: bool = True, config: dict[str, Any] | None = None) -> dict[str, Any]:
    pods = [make_pod(i) for i in range(warmup + max(decisions, cycles))]
    row: dict[str, Any] = {"nodes": n_nodes, "warmup": warmup}
    t0 = time.perf_counter()
    harness = cluster(n_nodes, seed, replicasets=replicasets, config=config)
    row["setup_seconds"] = round(time.perf_counter() - t0, 2)
    say(f"{n_nodes} nodes: cycle x {warmup}+{cycles}")
    synced()
    try:
        row["cycle"] = run_cycles(harness, pods[: warmup + cycles], warmup)
    finally:
        harness.stop()
        released()
    harness = cluster(n_nodes, seed, replicasets=replicasets, config=config)
    say(f"{n_nodes} nodes: decision x {warmup}+{decisions}")
    synced()
    try:
        row["decision"] = run_decisions(harness, pods[: warmup + decisions], warmup,
                                        compare_first=cycles if cycles < decisions else 0)
    finally:
        harness.stop()
        released()
    for key in ("decisions_per_second", "p50_ms", "p99_ms", "max_ms"):  # the headline: schedule_one
        row[key] = row["decision"].get(key)
    row["seconds"] = round(time.perf_counter() - t0, 1)
    say(f"{n_nodes} nodes: cycle {row['cycle'].get('decisions_per_second')}/s p50 {row['cycle'].get('p50_ms')} ms"
        f" | decision {row['decisions_per_second']}/s p50 {row['p50_ms']} ms p99 {row['p99_ms']} ms"
        f" ({row['decision'].get('full_cycles')} full cycles, p50 {row['decision'].get('full_p50_ms')} ms)")
    return row


# -- the in-flight ledger's size -----------------------------------------------------------------
def ledger_scaling(n_nodes: int, entries: Sequence[int], decisions: int, seed: int = 0) -> list[dict[str, Any]]:
    """Cycle latency with the ledger already holding `entries` placements that newer samples cover.

    The store keeps a placement until prune() drops it after its horizon (600 s; pruned every 1,000
    reserves), whether or not a newer sample covers it, and the score plugins rebuild their per-metric
    arrays from every entry whenever the ledger changed - i.e. after each Reserve. At R placements
    per second it holds about 600 * R entries; this shows what a decision costs then.
    """
    rows = []
    names = [f"node-{i:05d}" for i in range(n_nodes)]
    for count in entries:
        harness = cluster(n_nodes, seed)
        rng = random.Random(seed)
        for j in range(count):
            gpu = j % 10 in (1, 4, 7)
            deltas = ({"node_cpu_utilisation": 1 / 64, "node_load_per_cpu": 1 / 64, "gpu_utilisation": 12.5,
                       "gpu_temperature": 1.875} if gpu else
                      {"node_cpu_utilisation": 0.1 / 64, "node_load_per_cpu": 0.1 / 64})
            # placed 30 s ago, before the nodes' latest samples (observed 1 s ago): covered, adds nothing
            harness.ledger.add(f"old-{j}", names[rng.randrange(n_nodes)], deltas, at=harness.clock.now - 30.0)
        say(f"ledger scaling: {n_nodes} nodes, {count} covered entries, {decisions} cycles")
        try:
            stats = run_cycles(harness, [make_pod(i) for i in range(decisions + 10)], warmup=10)
        finally:
            harness.stop()
        plugins = stats.pop("plugin_us_per_cycle")
        rows.append({"nodes": n_nodes, "ledger_entries": count, "p50_ms": stats["p50_ms"], "mean_ms": stats["mean_ms"],
                     "p99_ms": stats["p99_ms"], "decisions_per_second": stats["decisions_per_second"],
                     "top_plugins_us": dict(list(plugins.items())[:4])})
        gc.collect()
    return rows


def ledger_bound(rows: Sequence[dict[str, Any]], horizon: float) -> dict[str, Any]:
    """Mean cycle time as base + slope * ledger entries, and the sustained rate that allows.

    base is the run with the fewest entries; slope the least-squares line through it and the others.
    At a steady R decisions/s the ledger holds about R * horizon entries, so R is bounded by
    R * (base + slope * R * horizon) = 1. An estimate from a handful of points on a noisy machine.
    """
    if len({r["ledger_entries"] for r in rows}) < 2:
        return {}
    first = min(rows, key=lambda r: r["ledger_entries"])
    x = np.array([r["ledger_entries"] - first["ledger_entries"] for r in rows], dtype=np.float64)
    y = np.array([r["mean_ms"] - first["mean_ms"] for r in rows], dtype=np.float64)
    slope = float(x @ y / (x @ x))  # ms per entry
    base = first["mean_ms"] - slope * first["ledger_entries"]
    a, b = slope * horizon / 1000.0, base / 1000.0  # in seconds: a R^2 + b R - 1 = 0
    rate = (-b + (b * b + 4 * a) ** 0.5) / (2 * a) if a > 0 else (1.0 / b if b > 0 else float("inf"))
    return {"base_ms": round(base, 3), "ms_per_1000_entries": round(slope * 1000, 3),
            "horizon_seconds": horizon, "sustained_decisions_per_second_estimate": round(rate, 1),
            "note": "mean cycle ms ~ base + slope * entries; entries ~ rate * horizon at a steady arrival rate"}


# -- memory, in a fresh process ------------------------------------------------------------------
def proc_status() -> dict[str, float]:
    """VmRSS and VmHWM of this process, in MB."""
    out = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = round(int(rest.split()[0]) / 1024.0, 1)
    return out


def rss_child(n_nodes: int, n_pods: int, decisions: int = 100) -> dict[str, Any]:
    stages: dict[str, Any] = {"imported": proc_status()}
    harness = cluster(n_nodes)
    names = [f"node-{i:05d}" for i in range(n_nodes)]
    gc.collect()
    stages["nodes_and_metrics"] = proc_status()
    handlers = harness.scheduler.handlers
    for i in range(n_pods):
        handlers.on_pod_event("ADDED", make_pod(i, node_name=names[i % n_nodes], prefix="bound"))
    gc.collect()
    stages["bound_pods"] = proc_status()
    pods = [make_pod(i, prefix="pending") for i in range(decisions)]
    run_decisions(harness, pods, warmup=0)
    del pods
    gc.collect()
    stages["after_decisions"] = proc_status()
    placed = len(harness.scheduler.state.pods)
    harness.stop()
    return {"nodes": n_nodes, "pods": n_pods, "pods_in_state": placed, "decisions": decisions,
            "rss_mb": stages["after_decisions"]["VmRSS"], "hwm_mb": stages["after_decisions"]["VmHWM"],
            "stages": stages}


def measure_rss(n_nodes: int, n_pods: int) -> dict[str, Any]:
    say(f"RSS: fresh process, {n_nodes} nodes + {n_pods} bound pods")
    command = [sys.executable, "-m", "bench.core_bench", "--rss-child", str(n_nodes), str(n_pods)]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=900)
    if done.returncode != 0:
        return {"nodes": n_nodes, "pods": n_pods, "error": done.stderr.strip()[-2000:]}
    result: dict[str, Any] = json.loads(done.stdout)
    return result


# -- profile -------------------------------------------------------------------------------------
def _where(filename: str, line: int, func: str) -> str:
    path = filename
    for base in (str(ROOT) + os.sep, os.sep + "site-packages" + os.sep):
        if base in path:
            path = path.split(base, 1)[1]
    return f"{path}:{line}({func})" if line else func


def profile(n_nodes: int, decisions: int, warmup: int, top: int = 15) -> dict[str, Any]:
    say(f"profile: {n_nodes} nodes, {decisions} decisions under cProfile")
    harness = cluster(n_nodes)
    pods = [make_pod(i) for i in range(warmup + decisions)]
    profiler = cProfile.Profile()
    try:
        stats_run = run_decisions(harness, pods, warmup, profiler=profiler)
    finally:
        harness.stop()
    return {"nodes": n_nodes, "decisions": decisions, **profile_summary(profiler, decisions, top),
            "decision_p50_ms_under_profiler": stats_run.get("p50_ms")}


def profile_summary(profiler: cProfile.Profile, decisions: int, top: int = 15) -> dict[str, Any]:
    """The profiled time and the top functions by cumulative and by own time (per decision too)."""
    stats = pstats.Stats(profiler, stream=io.StringIO())
    raw = stats.stats  # type: ignore[attr-defined]
    total = max((ct for (_, _, _, ct, _) in raw.values()), default=0.0)
    entries = [{"function": _where(*key), "calls": nc, "tottime_s": round(tt, 4), "cumtime_s": round(ct, 4),
                "cum_pct": round(100.0 * ct / total, 1) if total else 0.0,
                "cum_us_per_decision": round(ct / decisions * 1e6, 1)}
               for key, (_, nc, tt, ct, _) in raw.items()]
    by_cum = sorted(entries, key=lambda e: -e["cumtime_s"])[:top]
    by_own = sorted(entries, key=lambda e: -e["tottime_s"])[:top]
    return {"profiled_seconds": round(total, 3), "top_cumulative": by_cum,
            "top_own_time": [{k: e[k] for k in ("function", "calls", "tottime_s")} for e in by_own]}


# -- entry points --------------------------------------------------------------------------------
@contextlib.contextmanager
def as_the_scheduler_runs(cpu_affinity: str = DEFAULT_CPU_AFFINITY) -> Iterator[str]:
    """This process as the scheduler's cpuAffinity keeps it: `one` keeps it (and the threads it starts, the binder's)
    to one CPU meanwhile, as `metrics-sched run` does then, and gives its CPUs back afterwards. Yields what it did."""
    previous = os.sched_getaffinity(0)
    cpu = keep_to_one_cpu() if cpu_affinity == "one" else None
    try:
        yield "all" if cpu is None else f"one (CPU {cpu} of {len(previous)})"
    finally:
        os.sched_setaffinity(0, previous)


def run(quick: bool, cpu_affinity: str = DEFAULT_CPU_AFFINITY, **options: Any) -> dict[str, Any]:
    """The core bench, on the CPUs the scheduler's cpuAffinity gives it (as_the_scheduler_runs)."""
    with as_the_scheduler_runs(cpu_affinity) as affinity:
        result = _run(quick, **options)
    result["cpu_affinity"] = affinity
    return result


def _run(quick: bool, *, sizes: Sequence[int] | None = None, decisions: int | None = None,
         cycles: int | None = None, warmup: int | None = None, rss_nodes: int = 5_000, rss_pods: int = 50_000,
         profile_nodes: int = 5_000, profile_decisions: int | None = None, ledger_nodes: int = 5_000,
         ledger_entries: Sequence[int] | None = None, constraints_replicas: int | None = None,
         seed: int = 0) -> dict[str, Any]:
    sizes = tuple(sizes or SIZES)
    decisions = decisions or (2_000 if quick else 10_000)
    cycles = cycles or (decisions // 2 if quick else decisions)
    warmup = warmup if warmup is not None else (100 if quick else 500)
    started = time.perf_counter()
    result: dict[str, Any] = {
        "quick": quick,
        "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
        "config": CORE_CONFIG,
        "method": {
            "cycle": "Framework.schedule + ClusterState.assume under the state lock (Reserve untimed)",
            "decision": "Scheduler.schedule_one: pop, cycle, assume, Reserve, hand-off to the Binder "
                        f"(no-op writer; binder drained every {DRAIN_EVERY}, untimed)",
            "decisions_per_second": "measured decisions / summed time of the measured calls",
            "wall_decisions_per_second": "measured decisions / wall time including the binder drains",
        },
        "sizes": [measure_size(n, decisions, cycles, warmup, seed) for n in sizes],
    }
    # What the target names: the default profile alone (every default plugin, telemetry and constraint ones
    # included; not the optional NodeLabelFilter, NodeLabelScore, CustomMetric and ZoneSpread CORE_CONFIG adds).
    say(f"default profile at {profile_nodes} nodes")
    result["default_profile"] = {"plugins": "the default profile (config {})",
                                 **measure_size(profile_nodes, decisions, cycles, warmup, seed, config={})}
    from bench import constraints_bench  # not at the top: it imports this module

    # The constraints case at profile_nodes (5,000 nodes, 4 bound pods a node, a 1,000-replica Deployment with
    # zone spread and hostname anti-affinity), next to the plain case at the same size.
    replicas = constraints_replicas or min(1_000, profile_nodes // 5)
    constraints = constraints_bench.measure(profile_nodes, 4 * profile_nodes, replicas, min(warmup, 50), seed)
    plain = next((row for row in result["sizes"] if row["nodes"] == constraints["nodes"]), None)
    if plain is not None and constraints.get("decisions_per_second"):
        constraints["plain_decisions_per_second"] = plain["decisions_per_second"]
        constraints["vs_plain"] = round(constraints["decisions_per_second"] / plain["decisions_per_second"], 3)
    result["constraints"] = constraints
    result["ledger_scaling"] = ledger_scaling(
        ledger_nodes, ledger_entries or ((0, 10_000, 30_000) if quick else (0, 10_000, 50_000, 100_000)),
        30 if quick else 100, seed)
    result["ledger_bound"] = ledger_bound(result["ledger_scaling"], InFlightLedgerStore().horizon)
    from bench import batch_bench  # opportunistic batching: a Deployment placed batched and not (same placements)

    result["batching"] = batch_bench.run(profile_nodes, replicas, 1 if quick else 3, seed)
    result["rss"] = measure_rss(rss_nodes, rss_pods)
    result["profile"] = profile(profile_nodes, profile_decisions or (300 if quick else 2_000), min(warmup, 100))
    if "skipped" not in constraints:
        result["constraints_profile"] = constraints_bench.profile(profile_nodes, 4 * profile_nodes,
                                                                  min(300, replicas) if quick else replicas,
                                                                  min(warmup, 50), seed=seed)
    result["loadavg_at_end"] = [round(x, 2) for x in os.getloadavg()]
    result["seconds"] = round(time.perf_counter() - started, 1)
    return result


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true",
                        help="2,000 decisions (1,000 cycles) per size instead of 10,000 each")
    parser.add_argument("--sizes", type=int, nargs="+", help=f"node counts (default {' '.join(map(str, SIZES))})")
    parser.add_argument("--decisions", type=int, help="measured decisions per size")
    parser.add_argument("--replicas", type=int, help="the constraints case's Deployment (default 1,000)")
    parser.add_argument("--cpu-affinity", choices=("one", "all"), default=DEFAULT_CPU_AFFINITY,
                        help=f"as the scheduler's cpuAffinity (default {DEFAULT_CPU_AFFINITY}, as the scheduler's)")
    parser.add_argument("--rss-child", type=int, nargs=2, metavar=("NODES", "PODS"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.rss_child:
        print(json.dumps(rss_child(*args.rss_child)))
        return
    result = run(args.quick, args.cpu_affinity, sizes=args.sizes, decisions=args.decisions,
                 constraints_replicas=args.replicas)
    print(json.dumps(result, indent=2))
    if result["constraints"].get("violations"):
        sys.exit(1)


if __name__ == "__main__":
    main()
