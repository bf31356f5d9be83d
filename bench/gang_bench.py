"""A 64-member gang on 5,000 nodes, next to 64 independent pods: the time to place each, the core alone.

The same cluster for both (5,000 nodes in 8 zones, 8 GPUs each, telemetry on every node, the default profile with
Coscheduling's QueueSort), each case on a fresh scheduler with a no-op writer:
- independent: 64 pods (1 GPU, 4 cpu) queued at once, until the 64th is handed to the binder and all are bound;
- gang: the same 64 pods as the members of one PodGroup (minMember 64), until the quorum allows them all and
  all are bound. The first member's cycle also chooses the zone that holds all 64 and scores best (the
  Placement timing reported), and every member is kept there.
Reported: the wall time from the first pop to the last bind (median of `--repeats` runs), the per-pod cycle time
(p50, max), and for the gang the domain choice's time and the zone it chose. Reports, asserts nothing about
timings; checks that every pod bound and that the gang landed in one zone.

    python -m bench.gang_bench [--nodes 5000] [--members 64] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

from bench.scenario import Harness, build_scheduler, node_object, pod_object
from metrics_sched.plugins.coscheduling.pod_groups import POD_GROUP_KINDS

ZONES = tuple(f"zone-{c}" for c in "abcdefgh")
GROUP = "bench-gang"
CONFIG: dict[str, Any] = {"profiles": [{
    "plugins": {"queueSort": {"enabled": [{"name": "Coscheduling"}], "disabled": [{"name": "PrioritySort"}]}},
}]}


def _cluster(nodes: int) -> Harness:
    harness = build_scheduler(CONFIG)
    temps: dict[str, float] = {}
    cost: dict[str, float] = {}
    util: dict[str, float] = {}
    for i in range(nodes):
        name = f"n{i:05d}"
        zone = ZONES[i % len(ZONES)]
        harness.scheduler.handlers.on_node_event(
            "ADDED", node_object(name, cpu=64, memory_gib=512, gpus=8, labels={"topology.kubernetes.io/zone": zone}))
        # One zone runs cooler: the gang's objective should pick it.
        temps[name] = 45.0 + (i * 37 % 20) + (0.0 if zone == "zone-c" else 15.0)
        cost[name] = 2.0 + (i % 5) * 0.5
        util[name] = 0.2 + (i * 13 % 50) / 100
    harness.feed({"gpu_temperature": temps, "node_hourly_cost": cost, "node_cpu_utilisation": util})
    return harness


def _pods(count: int, gang: bool) -> list[dict[str, Any]]:
    labels = {"scheduling.x-k8s.io/pod-group": GROUP} if gang else None
    return [pod_object(f"{'g' if gang else 'p'}{i:03d}", cpu="4", memory="8Gi", gpus=1, labels=labels)
            for i in range(count)]


def _run(nodes: int, members: int, gang: bool) -> dict[str, Any]:
    harness = _cluster(nodes)
    scheduler = harness.scheduler
    try:
        if gang:
            scheduler.handlers.on_object_event(POD_GROUP_KINDS[0], "ADDED", {  # the CRD's (scheduling.x-k8s.io)
                "metadata": {"namespace": "bench", "name": GROUP, "uid": "uid-gang",
                             "creationTimestamp": "2026-11-30T12:00:00Z"},
                "spec": {"minMember": members, "scheduleTimeoutSeconds": 60}})
        for body in _pods(members, gang):
            scheduler.handlers.on_pod_event("ADDED", body)
        cycles: list[float] = []
        nodes_used: set[str] = set()
        placement: list[float] = []
        started = time.perf_counter()
        while harness.writer.binds < members:
            before = time.perf_counter()
            result = scheduler.schedule_one(timeout=0)
            if result is not None:
                cycles.append(time.perf_counter() - before)
                if result.node is not None:
                    nodes_used.add(result.node)
                placement.extend(s for _, point, s, _ in result.timings if point == "Placement")
            elif scheduler.queue.lengths()["active"] == 0 and scheduler.binder.in_flight() == 0 and \
                    time.perf_counter() - started > 120:
                raise RuntimeError(f"stuck: {harness.writer.binds} of {members} bound")
        wall = time.perf_counter() - started
        zones = {ZONES[int(n[1:]) % len(ZONES)] for n in nodes_used}
        report: dict[str, Any] = {
            "seconds": wall, "pods": members, "cycle_p50_ms": statistics.median(cycles) * 1e3,
            "cycle_max_ms": max(cycles) * 1e3, "zones": sorted(zones),
        }
        if gang:
            if len(zones) != 1:
                raise AssertionError(f"the gang spread over {zones}")
            report["domain_choice_ms"] = max(placement) * 1e3 if placement else None
        return report
    finally:
        harness.stop()


def run(nodes: int = 5_000, members: int = 64, repeats: int = 3) -> dict[str, Any]:
    out: dict[str, Any] = {"nodes": nodes, "members": members, "repeats": repeats}
    for case, gang in (("independent", False), ("gang", True)):
        runs = [_run(nodes, members, gang) for _ in range(repeats)]
        best = sorted(runs, key=lambda r: r["seconds"])[len(runs) // 2]
        out[case] = {**best, "seconds_all": [round(r["seconds"], 4) for r in runs]}
    out["gang_over_independent"] = out["gang"]["seconds"] / out["independent"]["seconds"]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=5_000)
    parser.add_argument("--members", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print(json.dumps(run(args.nodes, args.members, args.repeats), indent=2))


if __name__ == "__main__":
    main()
