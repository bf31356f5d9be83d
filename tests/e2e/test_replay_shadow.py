"""What-if replay and the shadow profile end to end: 200 GPU pods placed with the default weights on nodes where
the cool ones cost more, their decisions exported as JSONL and replayed with the Cost weight raised 2 → 20 (the
winners move to cheaper nodes, and the report says so); a shadow profile for default-scheduler (no kube-scheduler
runs in the session) records where its pods would go and binds none of them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import yaml

from devcluster import DevCluster
from devcluster.kubeapi import KubeAPI
from tests.e2e import kube
from tests.e2e.pools import in_pool, node_pool
from tests.e2e.scheduler_proc import SchedulerProcess, schedulers
from tests.e2e.telemetry_setup import telemetry_config, wait_for_values
from tests.e2e.test_scheduler_core import all_bound, create_pods

NODES = 10
GPUS = 20  # 200 GPUs: the 200 one-GPU pods fill the pool


def replay_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "metrics_sched.app.cli", "replay", *args], capture_output=True,
                          text=True, timeout=120)


def placements(proc: SchedulerProcess, **params: str) -> list[dict[str, Any]]:
    body = httpx.get(f"{proc.url}/decisions", params={"kind": "placement", "limit": "1000", **params},
                     timeout=10).json()
    result: list[dict[str, Any]] = body["decisions"]
    return result


def test_replay_with_the_cost_weight_raised_moves_winners_to_cheaper_nodes(
        cluster: DevCluster, api: KubeAPI, namespace: str, tmp_path: Path) -> None:
    with node_pool(cluster, NODES, cpu="64", memory="512Gi", gpus=GPUS) as (pool, specs), \
            cluster.emulator() as emulator:
        # Cool nodes cost more: the default weights (GPUTemperature 3, Cost 2) prefer them.
        temps = {s.name: 40.0 + 4 * i for i, s in enumerate(specs)}
        costs = {s.name: 20.0 - 1.8 * i for i, s in enumerate(specs)}
        emulator.set_many({s.name: {"gpu_temp": temps[s.name], "hourly_cost": costs[s.name], "cpu_util": 0.3}
                           for s in specs})
        config = telemetry_config(cluster)
        sink = tmp_path / "audit" / "decisions.jsonl"
        # Every feasible node recorded (minmax terms replay exactly), and the file sink on.
        config["audit"] = {"topCandidates": NODES, "file": {"path": str(sink)}}
        with schedulers(cluster, extra=config) as (name, (proc,)):
            wait_for_values(proc, {n: {"gpu_temperature": temps[n], "node_hourly_cost": costs[n]} for n in temps})
            create_pods(api, namespace, [f"p{i:03d}" for i in range(200)], name, gpus=1, **in_pool(pool))
            kube.poll(lambda: all_bound(api, namespace, 200), 180, "200 pods bound", interval=0.5)

            export = tmp_path / "decisions.jsonl"
            resp = httpx.get(f"{proc.url}/decisions", params={"format": "jsonl"}, timeout=60)
            assert resp.status_code == 200 and resp.headers["content-type"].startswith("application/jsonl")
            export.write_text(resp.text)
            records = [json.loads(line) for line in export.read_text().splitlines()]
            assert sum(1 for r in records if r["result"] == "scheduled") >= 200

            new = tmp_path / "new.yaml"
            new.write_text(yaml.safe_dump({"profiles": [{"schedulerName": name, "plugins": {"score": {
                "enabled": [{"name": "Cost", "weight": 20}]}}}]}))
            out = replay_cli("--decisions", str(export), "--config", str(new), "--json")
            assert out.returncode == 0, out.stderr
            report = json.loads(out.stdout)
            assert report["replayed"] >= 200 and report["changed"] > 0, report["changed"]
            cost = report["winners_mean"]["node_hourly_cost"]
            assert cost["after"] < cost["before"], cost
            changed = [d for d in report["decisions"] if d["changed"]]
            assert all(costs[d["after"]] < costs[d["before"]] for d in changed), changed[:5]

            # The file sink holds the same decisions.
            def sunk() -> bool:
                return sink.exists() and sum(1 for line in sink.read_text().splitlines()
                                             if json.loads(line)["result"] == "scheduled") >= 200

            kube.poll(sunk, 30, "the file sink to hold every placement", interval=0.3)
            from_file = replay_cli("--decisions", str(sink), "--config", str(new), "--json")
            assert from_file.returncode == 0, from_file.stderr
            assert json.loads(from_file.stdout)["changed"] == report["changed"]

            # The same from the URL, as people read it.
            text = replay_cli("--decisions", f"{proc.url}/decisions", "--config", str(new))
            assert text.returncode == 0, text.stderr
            assert "CHANGED" in text.stdout and f"winner changed in {report['changed']} " in text.stdout
            assert "node_hourly_cost" in text.stdout


def test_shadow_profile_records_default_scheduler_pods_and_binds_nothing(
        cluster: DevCluster, api: KubeAPI, namespace: str) -> None:
    with node_pool(cluster, 3, cpu="32", memory="256Gi", gpus=2) as (pool, specs), cluster.emulator() as emulator:
        emulator.set_many({s.name: {"gpu_temp": 40.0 + 20 * i, "hourly_cost": 3.0, "cpu_util": 0.2}
                           for i, s in enumerate(specs)})
        config = telemetry_config(cluster)
        config["profile"] = {**config["profile"], "shadow": True}
        with schedulers(cluster, extra=config, name="default-scheduler") as (name, (proc,)):
            wait_for_values(proc, {s.name: {"gpu_temperature": 40.0 + 20 * i} for i, s in enumerate(specs)})
            names = [f"s{i}" for i in range(4)]
            create_pods(api, namespace, names, "default-scheduler", gpus=1, **in_pool(pool))

            def recorded() -> dict[str, dict[str, Any]] | None:
                found = {r["pod"]: r for r in placements(proc) if r["pod"].startswith(f"{namespace}/")}
                return found if len(found) == len(names) else None

            shadow = kube.poll(recorded, 30, "a shadow record of every pod", interval=0.3)
            assert {r["result"] for r in shadow.values()} == {"shadow"}
            # Nothing assumed: all four would go to the coolest node (two GPUs), none counted as placed there.
            assert {r["node"] for r in shadow.values()} == {specs[0].name}, shadow
            assert all(r["candidates"] and r["bind"] is None for r in shadow.values())
            pods = kube.list_pods(api, namespace)
            assert len(pods) == 4 and not any(p["spec"].get("nodeName") for p in pods)
            assert not any(c.get("type") == "PodScheduled" for p in pods for c in (p.get("status") or {}).get(
                "conditions") or [])
            events = api.get(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")["items"]
            assert not events, events
            metrics = httpx.get(f"{proc.url}/metrics", timeout=5).text
            assert "metrics_sched_bind_results_total{" not in metrics
            assert name == "default-scheduler"
