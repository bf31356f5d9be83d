"""Plugins from outside the package, on the real control plane: a distribution in tests/plugin_dist,
found only through its `metrics_sched.plugins` entry points, brings a Permit plugin that holds pods
until their pair arrives, a PostFilter that nominates a node when nothing fits, a PreBind that writes
through typed cycle state (or refuses), and a telemetry score of a few lines that shows in /decisions,
`explain` and /metrics with no other change."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx

from devcluster import DevCluster
from devcluster.kubeapi import KubeAPI
from tests.e2e import kube
from tests.e2e.pools import in_pool, node_pool
from tests.e2e.scheduler_proc import schedulers
from tests.e2e.telemetry_setup import decisions, telemetry_config, wait_for_values

PLUGIN_DIST = Path(__file__).resolve().parent.parent / "plugin_dist"
PAIR = "test.metrics-sched.io/pair"
STAMP = "test.metrics-sched.io/prebind"


def create(api: KubeAPI, namespace: str, name: str, scheduler: str, pool: str, *, gpus: int = 1,
           labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None) -> None:
    body = kube.pod_manifest(name, scheduler=scheduler, gpus=gpus, **in_pool(pool))
    body["metadata"]["labels"].update(labels or {})
    body["metadata"]["annotations"] = annotations or {}
    api.post(f"/api/v1/namespaces/{namespace}/pods", body)


def node_of(api: KubeAPI, namespace: str, name: str) -> str | None:
    node: str | None = api.get(f"/api/v1/namespaces/{namespace}/pods/{name}")["spec"].get("nodeName")
    return node


def failed_note(api: KubeAPI, namespace: str, name: str, text: str) -> str | None:
    for event in api.get(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")["items"]:
        note = event.get("note") or ""
        if event["regarding"]["name"] == name and event.get("reason") == "FailedScheduling" and text in note:
            return str(note)
    return None


def decision(proc: Any, key: str) -> dict[str, Any] | None:
    found = decisions(proc, key)
    return found[0] if found else None


def test_third_party_permit_postfilter_prebind_and_score_plugins_end_to_end(
        cluster: DevCluster, api: KubeAPI, namespace: str) -> None:
    utilisation = {0: 80.0, 1: 10.0, 2: 50.0}
    with node_pool(cluster, 3, cpu="32", memory="256Gi", gpus=2) as (pool, specs), cluster.emulator() as emulator:
        nodes = [s.name for s in specs]
        emulator.set_many({s.name: {"gpu_util": utilisation[i], "gpu_temp": 50.0, "hourly_cost": 3.0}
                           for i, s in enumerate(specs)})
        config = telemetry_config(cluster)
        config["profile"] = {
            "plugins": {
                "permit": {"enabled": [{"name": "PairPermit"}]},
                "postFilter": {"enabled": [{"name": "NominateRoomiest"}]},
                "preBind": {"enabled": [{"name": "StampPreBind"}]},
                "score": {"enabled": [{"name": "GPUBusy", "weight": 50}]},
            },
            "pluginConfig": [{"name": "PairPermit", "args": {"size": 2, "timeoutSeconds": 60}}],
        }
        with schedulers(cluster, extra=config, env={"PYTHONPATH": str(PLUGIN_DIST)}) as (name, [proc]):
            # Every input of the choice asserted below, at the set value: GPUBusy's term, and the temperature
            # filter and cost term it must not be outweighed or filtered by.
            wait_for_values(proc, {n: {"gpu_utilisation": utilisation[i], "gpu_temperature": 50.0,
                                       "node_hourly_cost": 3.0} for i, n in enumerate(nodes)})

            # A telemetry score of a few lines decides, and is explained like the built-ins.
            create(api, namespace, "solo", name, pool)
            assert kube.poll(lambda: node_of(api, namespace, "solo"), 20, "solo bound") == nodes[1]
            pod = api.get(f"/api/v1/namespaces/{namespace}/pods/solo")
            assert pod["metadata"]["annotations"][STAMP] == nodes[1]  # written by PreBind, carried by the Binding
            record = kube.poll(lambda: decision(proc, f"{namespace}/solo"), 10, "solo's decision")
            busy = next(t for t in record["candidates"][0]["terms"] if t["plugin"] == "GPUBusy")
            assert busy["weight"] == 50 and busy["metrics"][0]["metric"] == "gpu_utilisation"
            assert busy["metrics"][0]["value"] == utilisation[1]
            out = subprocess.run([sys.executable, "-m", "metrics_sched.app.cli", "explain", f"{namespace}/solo",
                                  "--url", proc.url], capture_output=True, text=True, timeout=30)
            assert out.returncode == 0, out.stderr
            assert "GPUBusy" in out.stdout and f"gpu_utilisation={utilisation[1]:.2f}" in out.stdout, out.stdout
            exposition = httpx.get(f"{proc.url}/metrics", timeout=5).text
            assert 'metrics_sched_decision_metric_value_count{metric="gpu_utilisation"}' in exposition
            assert 'plugin="GPUBusy"' in exposition

            # Permit: the first of a pair is decided, assumed and held; the second releases both.
            create(api, namespace, "pair-a", name, pool, labels={PAIR: "x"})
            held = kube.poll(lambda: decision(proc, f"{namespace}/pair-a"), 20, "pair-a decided")
            assert held["result"] == "waiting" and held["bind"] is None, held
            assert node_of(api, namespace, "pair-a") is None  # held at Permit: no bind can happen before pair-b
            create(api, namespace, "pair-b", name, pool, labels={PAIR: "x"})
            kube.poll(lambda: node_of(api, namespace, "pair-a") and node_of(api, namespace, "pair-b"), 20,
                      "both of the pair bound")

            # A pod whose pair never comes is rejected when its wait times out (unwinding: tests/unit/test_framework).
            create(api, namespace, "lonely", name, pool, labels={PAIR: "y"},
                   annotations={"test.metrics-sched.io/permit-timeout": "1"})
            note = kube.poll(lambda: failed_note(api, namespace, "lonely", "PairPermit"), 20, "lonely rejected")
            assert "waited 1s at Permit" in note
            assert node_of(api, namespace, "lonely") is None

            # PreBind failing: not bound, reported as a scheduler error, retried with backoff.
            create(api, namespace, "refused", name, pool, labels={STAMP: "fail"})
            note = kube.poll(lambda: failed_note(api, namespace, "refused", "refused by the test PreBind"), 20,
                             "refused reported")
            assert "StampPreBind" in note and node_of(api, namespace, "refused") is None

            # PostFilter: nothing fits 8 GPUs; the nomination is recorded with the decision.
            create(api, namespace, "huge", name, pool, gpus=8)
            unfit = kube.poll(lambda: decision(proc, f"{namespace}/huge"), 20, "huge decided")
            assert unfit["result"] == "unschedulable" and unfit["nominated_node"] in nodes, unfit
