"""`metrics-sched demo`: a local cluster of 20 GPU nodes with emulated telemetry, the scheduler, a batch
of GPU pods, live progress, and a table of where each pod went and why; then a pod asking for one GPU through
DRA (a ResourceClaimTemplate) lands on the coolest GPU of a node whose other GPUs are hot. Ctrl-C stops everything.

Registered by the entry point `demo = "devcluster.demo:register"` (group `metrics_sched.cli`). Dev tooling may
use the core (it runs the scheduler and reuses explain's table); the core never imports this.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

from devcluster.ports import free_port
from metrics_sched.app.cli.explain_cmd import table

DEMO_SCHEDULER = "metrics-sched"
REASONS = {"GPUTemperature": "cold", "Cost": "cheap", "NodeLoad": "lightly loaded"}
THRESHOLD = 85.0
# The DRA scene's node: six hot GPUs and two of the fleet's coolest (indexes 2 and 5).
DRA_GPU_TEMPS = [91.0, 93.0, 33.0, 95.0, 89.0, 31.0, 92.0, 90.0]
DRA_CLASS = "gpu.nvidia.com"


def register(sub: Any) -> None:
    parser = sub.add_parser("demo", help="run the scheduler on a local cluster with emulated GPU telemetry")
    parser.add_argument("--nodes", type=int, default=20)
    parser.add_argument("--pods", type=int, default=30)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--dir", type=Path, default=None, help="run directory (default: a new temp dir)")
    parser.add_argument("--once", action="store_true", help="exit after the placement table")
    parser.set_defaults(handler=_demo)


def _say(message: str) -> None:
    print(f"[demo] {message}", flush=True)


def fleet_values(names: list[str], seed: int) -> dict[str, dict[str, float]]:
    """Varied on purpose: a few hot nodes, a spread of prices and loads."""
    rng = random.Random(seed)
    values = {}
    for i, name in enumerate(names):
        hot = i % 7 == 3
        values[name] = {
            "gpu_temp": round(rng.uniform(88, 94) if hot else rng.uniform(38, 80), 1),
            "hourly_cost": round(rng.choice([8.0, 12.0, 16.0, 24.0, 32.0]) * rng.uniform(0.8, 1.2), 2),
            "cpu_util": round(rng.uniform(0.05, 0.9), 2),
            "load1": round(rng.uniform(1.0, 28.0), 1),
        }
    return values


def scheduler_config(sources: list[dict[str, Any]], port: int) -> dict[str, Any]:
    return {
        "apiVersion": "metrics-sched.io/v1alpha1", "kind": "MetricsSchedulerConfiguration",
        "profiles": [{
            "schedulerName": DEMO_SCHEDULER,
            "plugins": {"score": {"enabled": [{"name": "GPUTemperature", "weight": 4}, {"name": "Cost", "weight": 3},
                                              {"name": "NodeLoad", "weight": 2}]}},
            "pluginConfig": [
                {"name": "GPUTemperature", "args": {"threshold": THRESHOLD, "hysteresis": 5}},
                {"name": "NodeLoad", "args": {"metrics": [{"metric": "node_cpu_utilisation", "min": 0, "max": 1}]}},
                # DRA pods: each GPU's own temperature chooses the devices (deviceLabels below).
                {"name": "DynamicResources", "args": {"deviceMetric": "gpu_temperature"}},
            ],
        }],
        "leaderElection": {"leaderElect": False},
        "server": {"bindAddress": "127.0.0.1", "port": port, "insecure": True},  # local: plain HTTP on loopback
        "sources": [_per_gpu(source) for source in sources],
        "metrics": {m: {"ttl": "30s", "maxAge": "60s"} for m in ("gpu_temperature", "node_hourly_cost",
                                                                 "node_cpu_utilisation")},
    }


def _per_gpu(source: dict[str, Any]) -> dict[str, Any]:
    """The Prometheus source with the GPU temperature kept per GPU too (the DCGM series' UUID, else its index)."""
    metrics = [dict(m, deviceLabels=["UUID", "gpu"]) if m.get("name") == "gpu_temperature" else m
               for m in source.get("metrics") or ()]
    return dict(source, metrics=metrics) if metrics else source


def reason(decision: dict[str, Any]) -> str:
    """The telemetry term that did most for the winner over the runner-up."""
    candidates = decision.get("candidates") or []
    if not candidates:
        return "-"
    winner = candidates[0]
    runner = candidates[1] if len(candidates) > 1 else None
    best, lead = "only feasible node", 0.0
    for i, term in enumerate(winner["terms"]):
        if term["plugin"] not in REASONS or term["normalized"] is None:
            continue
        other = runner["terms"][i]["normalized"] if runner else 0.0
        gain = term["weight"] * (term["normalized"] - (other or 0.0))
        if runner is None or gain > lead:
            best, lead = REASONS[term["plugin"]], gain
    return best


def _holds(held: dict[str, Any], expected: dict[str, float]) -> bool:
    """The scheduler holds, fresh, each expected value (to a relative 1e-6)."""
    for metric, value in expected.items():
        entry = held.get(metric)
        if not entry or not entry.get("fresh") or entry.get("value") is None:
            return False
        if abs(entry["value"] - value) > 1e-6 * max(1.0, abs(value)):
            return False
    return True


def metric_of(decision: dict[str, Any], metric: str) -> float | None:
    for term in decision["candidates"][0]["terms"] if decision.get("candidates") else []:
        for raw in term["metrics"]:
            if raw["metric"] == metric:
                value: float | None = raw["value"]
                return value
    return None


def _dra_scene(cluster: Any, url: str, node: str) -> bool:
    """One GPU through DRA on `node`, which gets six hot GPUs and two cool ones: the node's hottest GPU keeps plain
    GPU pods away, but the claim is judged by the GPU it would get, and gets the coolest."""
    from devcluster.cluster import wait_until

    with cluster.emulator() as emulator:
        emulator.set_many({node: {"gpu_temp": DRA_GPU_TEMPS}})

    def held() -> bool:
        entry = httpx.get(f"{url}/values", params={"node": [node]}, timeout=2).json().get(node, {})
        devices = entry.get("gpu_temperature", {}).get("devices", {})
        return sorted(d.get("value") for d in devices.values() if d.get("fresh")) == sorted(DRA_GPU_TEMPS)

    _say(f"DRA: {node}'s GPUs now {', '.join(f'{t:g}' for t in DRA_GPU_TEMPS)} °C; waiting for each GPU's value")
    wait_until(held, 60, f"{node}'s per-GPU temperatures")
    with cluster.api() as api:
        api.post("/apis/resource.k8s.io/v1/namespaces/demo/resourceclaimtemplates", {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": "one-gpu"},
            "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": DRA_CLASS}}]}}},
        }, ok=(409,))
        api.post("/api/v1/namespaces/demo/pods", {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "dra-claim"},
            # On that node: a plain GPU pod is kept off it (its hottest GPU is above the threshold).
            "spec": {"schedulerName": DEMO_SCHEDULER, "terminationGracePeriodSeconds": 0,
                     "nodeSelector": {"kubernetes.io/hostname": node},
                     "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
                     "containers": [{"name": "trainer", "image": "registry.local/trainer:1.0",
                                     "resources": {"requests": {"cpu": "2", "memory": "8Gi"},
                                                   "claims": [{"name": "gpu"}]}}]},
        })

        def bound() -> dict[str, Any] | None:
            pod: dict[str, Any] = api.get("/api/v1/namespaces/demo/pods/dra-claim")
            return pod if pod["spec"].get("nodeName") and pod["status"].get("resourceClaimStatuses") else None

        wait_until(lambda: bound() is not None, 60, "the DRA pod bound")
        pod = bound()
        assert pod is not None
        claim_name = pod["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
        claim = api.get(f"/apis/resource.k8s.io/v1/namespaces/demo/resourceclaims/{claim_name}")
        [result] = claim["status"]["allocation"]["devices"]["results"]
        slices = api.get("/apis/resource.k8s.io/v1/resourceslices",
                         fieldSelector=f"spec.nodeName={pod['spec']['nodeName']}")["items"]
        index = next(int(d["attributes"]["index"]["int"]) for s in slices for d in s["spec"].get("devices", [])
                     if d["name"] == result["device"])
    on, temp = pod["spec"]["nodeName"], DRA_GPU_TEMPS[index] if pod["spec"]["nodeName"] == node else None
    where = f"GPU {index} ({temp:g}°C)" if temp is not None else f"GPU {index}"
    print(f"\nDRA: dra-claim (1 GPU through a ResourceClaim) -> {on}, {where}; that node's hottest GPU: "
          f"{max(DRA_GPU_TEMPS):g}°C")
    if on != node or temp != min(DRA_GPU_TEMPS):
        _say(f"the DRA pod did not get a cool GPU of {node}")
        return False
    return True


def _demo(args: argparse.Namespace) -> int:
    from devcluster import DevCluster
    from devcluster.cluster import wait_until
    from devcluster.nodes import fleet

    cluster = DevCluster(args.dir, nodes=0, seed=args.seed, scrape_interval=2.0)
    try:
        endpoints = cluster.start()
        specs = fleet(args.nodes, gpus_per_node=8, seed=args.seed, prefix="gpu-node")
        cluster.add_nodes(specs)
        names = [s.name for s in specs]
        values = fleet_values(names, args.seed)
        with cluster.emulator() as emulator:
            emulator.set_many(values)
        port = free_port()
        config_path = cluster.run_dir / "demo-scheduler.yaml"
        config_path.write_text(yaml.safe_dump(scheduler_config(cluster.telemetry_sources(interval=2.0), port)))
        _say("starting metrics-sched")
        cluster.group.start("metrics-sched", [sys.executable, "-m", "metrics_sched.app.cli", "run", "--config",
                                              str(config_path), "--kubeconfig", str(cluster.kubeconfig),
                                              "--log-format", "text"])
        url = f"http://127.0.0.1:{port}"
        cluster.add_scrape_target("metrics-sched", f"127.0.0.1:{port}")

        def ready() -> bool:
            cluster.group.check("metrics-sched")
            return httpx.get(f"{url}/readyz", timeout=1).status_code == 200

        wait_until(ready, 60, "the scheduler")

        # What the table shows and the hot-node check relies on: every node's temperature, cost and CPU load,
        # fresh and at the value just set (an earlier scrape may still hold the emulator's seeded values).
        expected = {n: {"gpu_temperature": v["gpu_temp"], "node_hourly_cost": v["hourly_cost"],
                        "node_cpu_utilisation": v["cpu_util"]} for n, v in values.items()}

        def telemetry() -> bool:
            held = httpx.get(f"{url}/values", params={"node": names}, timeout=2).json()
            return all(_holds(held.get(n, {}), metrics) for n, metrics in expected.items())

        _say("waiting for the first telemetry (Prometheus scrape + source refresh)")
        wait_until(telemetry, 60, "telemetry for every node")
        hot = sorted(n for n in names if values[n]["gpu_temp"] > THRESHOLD)
        _say(f"{len(names)} GPU nodes; too hot for GPU pods (> {THRESHOLD:g}°C): {', '.join(hot) or 'none'}")
        with cluster.api() as api:
            api.post("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "demo"}},
                     ok=(409,))
            for i in range(args.pods):
                gpus = 1 + (i % 3 == 0)
                api.post("/api/v1/namespaces/demo/pods", {
                    "apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"train-{i:02d}"},
                    "spec": {"schedulerName": DEMO_SCHEDULER, "terminationGracePeriodSeconds": 0,
                             "containers": [{"name": "trainer", "image": "registry.local/trainer:1.0",
                                             "resources": {"requests": {"cpu": "2", "memory": "8Gi",
                                                                        "nvidia.com/gpu": str(gpus)},
                                                           "limits": {"nvidia.com/gpu": str(gpus)}}}]},
                })
            _say(f"submitted {args.pods} GPU pods")
            started = time.monotonic()
            while True:
                pods = api.get("/api/v1/namespaces/demo/pods")["items"]
                bound = sum(1 for p in pods if p["spec"].get("nodeName"))
                running = sum(1 for p in pods if p["status"].get("phase") == "Running")
                print(f"\r[demo] bound {bound}/{len(pods)}, running {running}  ({time.monotonic() - started:.1f}s)",
                      end="", flush=True)
                if running == len(pods) or time.monotonic() - started > 120:
                    break
                time.sleep(0.25)
            print()
        rows = []
        for pod in sorted(pods, key=lambda p: p["metadata"]["name"]):
            key = f"demo/{pod['metadata']['name']}"
            decisions = httpx.get(f"{url}/decisions", params={"pod": key}, timeout=5).json()["decisions"]
            d = decisions[0] if decisions else {}
            node = pod["spec"].get("nodeName") or "-"
            temp, cost, load = (metric_of(d, m) for m in ("gpu_temperature", "node_hourly_cost",
                                                           "node_cpu_utilisation"))
            gpus = pod["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"]
            rows.append([pod["metadata"]["name"], gpus, node, "-" if temp is None else f"{temp:.0f}°C",
                         "-" if cost is None else f"${cost:.2f}/h", "-" if load is None else f"{load:.0%}",
                         f"{d['candidates'][0]['total']:.1f}" if d.get("candidates") else "-",
                         reason(d) if node != "-" else d.get("message", "pending")])
        print()
        print(table(["pod", "gpus", "node", "gpu temp", "cost", "cpu load", "score", "why this node"], rows))
        placed = sum(1 for r in rows if r[2] != "-")
        on_hot = [r[0] for r in rows if r[2] in hot]
        print(f"\n{placed}/{len(rows)} pods placed; on nodes above {THRESHOLD:g}°C: {len(on_hot)}")
        print(json.dumps({
            "metrics": f"{url}/metrics", "decisions": f"{url}/decisions", "sources": f"{url}/sources",
            "explain": f"metrics-sched explain demo/train-00 --url {url}", "prometheus": endpoints.prometheus,
            "kubeconfig": str(cluster.kubeconfig), "logs": str(cluster.run_dir / "logs"),
        }, indent=2))
        if placed != len(rows):
            _say("not every pod was placed")
            return 1
        if not _dra_scene(cluster, url, names[0]):
            return 1
        if not args.once:
            _say("running; Ctrl-C stops everything")
            while True:
                time.sleep(1)
                cluster.group.check("metrics-sched")
        return 0
    except KeyboardInterrupt:
        print()
        _say("stopping")
        return 0
    finally:
        cluster.stop()
        _say(f"stopped every process (run dir {cluster.run_dir})")
