"""The rebalancer on the dev cluster (issue 15's acceptance): real Deployments (the controller manager makes their
ReplicaSets and pods, and replaces what is evicted), telemetry from the emulator through Prometheus, the
in-process rebalancer of a metrics-sched process (`rebalance.enabled`), and `metrics-sched rebalance --once`.

Each test has its own pool of 3 GPU nodes: `hot`, `cool`, `warm`. Pods are placed on `hot` while it is still
cool (the other two cordoned meanwhile, so the placement does not depend on scores); then `hot` heats up.
The rebalance interval is the shortest the config allows (5 s); `for` is shorter than one interval, so a node
turns bad at the second tick that sees it above.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from devcluster import DevCluster, NodeSpec
from devcluster.kubeapi import KubeAPI
from metrics_sched.config.loader import MIN_REBALANCE_INTERVAL
from tests.e2e import kube
from tests.e2e.pools import in_pool, node_pool
from tests.e2e.scheduler_proc import SchedulerProcess, schedulers
from tests.e2e.telemetry_setup import sources_health, telemetry_config, values, wait_for_values

pytestmark = pytest.mark.e2e

INTERVAL = MIN_REBALANCE_INTERVAL  # seconds between ticks
RULE = "hot-gpu"
HOT_RULE = {"name": RULE, "metric": "gpu_temperature", "above": 85, "for": "3s"}
TEMPERATURES = {"hot": 40.0, "cool": 40.0, "warm": 55.0}  # before `hot` heats up
HOT = 95.0
HOSTNAME = "kubernetes.io/hostname"


# -- set-up ---------------------------------------------------------------------------------------------
def rebalance_config(cluster: DevCluster, *, rules: list[dict[str, Any]] | None = None,
                     limits: dict[str, Any] | None = None, enabled: bool = True, metrics_server: bool = False,
                     contracts: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """Scores by GPU temperature alone (hot nodes score 0, filtered for GPU pods), so the simulation's gain is
    plain: the margin is 10 points of the 0-100 score."""
    config = telemetry_config(cluster, weights={"GPUTemperature": 1}, cmdb=False, metrics_server=metrics_server,
                              contracts=contracts)
    config["rebalance"] = {
        "enabled": enabled, "dryRun": False, "interval": f"{INTERVAL:g}s", "margin": 10,
        "rules": rules or [HOT_RULE],
        # No cooldown unless a test asks: a replica holds owners whose pods started less than a cooldown ago until
        # it has rebalanced for one (it cannot know what a previous leader evicted), and these pods are new.
        "limits": {"perNode": 1, "perNamespace": 10, "cluster": 10, "cooldown": "0s", **(limits or {})},
    }
    return config


def outlive_cooldown(api: KubeAPI, pods: list[dict[str, Any]], cooldown: float) -> None:
    """Waits until every pod started at least `cooldown` ago: what a replica that has not yet rebalanced for a
    cooldown holds them for."""
    def started(body: dict[str, Any]) -> float:
        stamp = (body.get("status") or {}).get("startTime") or body["metadata"]["creationTimestamp"]
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()

    paths = [f"/api/v1/namespaces/{p['metadata']['namespace']}/pods/{p['metadata']['name']}" for p in pods]
    kube.poll(lambda: all(time.time() - started(api.get(path)) >= cooldown for path in paths), cooldown + 10,
              f"the pods started {cooldown:g}s ago")


@contextmanager
def gpu_pool(cluster: DevCluster, extra: int = 0) -> Iterator[tuple[str, dict[str, NodeSpec]]]:
    """`hot`, `cool`, `warm` (8 GPUs each) at TEMPERATURES, and `extra` GPU-less nodes (`extra-0`, ...)."""
    with node_pool(cluster, 3 + extra, cpu="32", memory="256Gi", gpus=[8, 8, 8] + [0] * extra) as (pool, specs):
        nodes = dict(zip([*TEMPERATURES, *(f"extra-{i}" for i in range(extra))], specs, strict=True))
        with cluster.emulator() as emulator:
            emulator.set_many({nodes[k].name: {"gpu_temp": t, "cpu_util": 0.1} for k, t in TEMPERATURES.items()})
        yield pool, nodes


def deployment(name: str, scheduler: str, pool: str, *, replicas: int = 1, gpus: int = 1,
               **spec: Any) -> dict[str, Any]:
    labels = {"app": name}
    template = kube.pod_manifest(name, scheduler=scheduler, gpus=gpus, **{**in_pool(pool), **spec})
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels}, "spec": template["spec"]}}}


def cordon(api: KubeAPI, nodes: list[NodeSpec], on: bool) -> None:
    for node in nodes:
        api.merge_patch(f"/api/v1/nodes/{node.name}", {"spec": {"unschedulable": on or None}})


def live_pods(api: KubeAPI, namespace: str) -> list[dict[str, Any]]:
    return [p for p in kube.list_pods(api, namespace) if not p["metadata"].get("deletionTimestamp")]


def bound(api: KubeAPI, namespace: str, count: int) -> list[dict[str, Any]] | None:
    pods = live_pods(api, namespace)
    return pods if len(pods) == count and all(p["spec"].get("nodeName") for p in pods) else None


def place_on_hot(api: KubeAPI, namespace: str, nodes: dict[str, NodeSpec], deployments: list[dict[str, Any]],
                 pods: int) -> list[dict[str, Any]]:
    """Creates the Deployments with only `hot` schedulable; returns their `pods` pods, all bound there (but those
    with a hostname of their own in their nodeSelector)."""
    others = [nodes["cool"], nodes["warm"]]
    cordon(api, others, True)
    try:
        for body in deployments:
            api.post(f"/apis/apps/v1/namespaces/{namespace}/deployments", body)
        placed = kube.poll(lambda: bound(api, namespace, pods), 30, f"{pods} pods bound")
    finally:
        cordon(api, others, False)
    assert {p["spec"]["nodeName"] for p in placed if HOSTNAME not in p["spec"]["nodeSelector"]} == {nodes["hot"].name}
    # Schedulable again (the node lifecycle controller also drops its unschedulable taint): the rebalancer's
    # simulation must see both as targets.
    kube.poll(lambda: not any(t["key"] == "node.kubernetes.io/unschedulable"
                              for n in others for t in api.get(f"/api/v1/nodes/{n.name}")["spec"].get("taints", [])),
              10, "the other nodes uncordoned")
    return placed


def heat(cluster: DevCluster, proc: SchedulerProcess, node: NodeSpec, temperature: float = HOT) -> None:
    with cluster.emulator() as emulator:
        emulator.set_values(node.name, gpu_temp=temperature)
    wait_for_values(proc, {node.name: {"gpu_temperature": temperature}})


# -- reading the scheduler ------------------------------------------------------------------------------
def evictions(proc: SchedulerProcess, **params: str) -> list[dict[str, Any]]:
    """The eviction records, oldest first."""
    body = httpx.get(f"{proc.url}/decisions", params={"kind": "eviction", "limit": "1000", **params},
                     timeout=5).json()
    records: list[dict[str, Any]] = body["decisions"]
    return records[::-1]


def counted(proc: SchedulerProcess, outcome: str, rule: str = RULE) -> float:
    """metrics_sched_evictions_total{reason=rule, outcome}: counts every verdict, one per pod and tick."""
    return sample(proc, "metrics_sched_evictions_total", reason=rule, outcome=outcome)


def sample(proc: SchedulerProcess, name: str, **labels: str) -> float:
    text = httpx.get(f"{proc.url}/metrics", timeout=5).text
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and s.labels == labels:
                return float(s.value)
    raise AssertionError(f"{name}{labels} not on /metrics")


def verdicts(proc: SchedulerProcess, verdict: str, count: int) -> list[dict[str, Any]] | None:
    """The records of `verdict` once there are `count` of them."""
    records = [e for e in evictions(proc) if e["verdict"] == verdict]
    return records if len(records) == count else None


def replaced(api: KubeAPI, namespace: str, count: int, gone: set[str]) -> list[dict[str, Any]] | None:
    """`count` pods bound, none of them one of the `gone` uids."""
    pods = bound(api, namespace, count)
    return pods if pods and not {p["metadata"]["uid"] for p in pods} & gone else None


def events(api: KubeAPI, namespace: str, reason: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = api.get(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")["items"]
    return [e for e in items if e.get("reason") == reason]


def by_tick(records: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Records grouped by the tick that wrote them: ticks are an interval apart, a tick's records within it."""
    groups: list[list[dict[str, Any]]] = []
    for record in sorted(records, key=lambda r: r["time"]):
        if groups and record["time"] - groups[-1][0]["time"] < INTERVAL / 2:
            groups[-1].append(record)
        else:
            groups.append([record])
    return groups


# -- the tests ------------------------------------------------------------------------------------------
def test_a_hot_node_is_drained_at_the_configured_rate_and_its_pods_replaced_on_cooler_nodes(
        cluster: DevCluster, api: KubeAPI, namespace: str) -> None:
    config = rebalance_config(cluster, limits={"perNode": 2})
    with gpu_pool(cluster) as (pool, nodes), schedulers(cluster, extra=config, leader_elect=False) as (name, [proc]):
        wait_for_values(proc, {n.name: {"gpu_temperature": TEMPERATURES[k]} for k, n in nodes.items()})
        # Four owners (a per-tick budget never takes two pods of one owner), so perNode is what limits; and a
        # standalone pod of ours, which nothing would re-create: never evicted.
        placed = place_on_hot(api, namespace, nodes, [deployment(f"d{i}", name, pool) for i in range(4)], 4)
        api.post(f"/api/v1/namespaces/{namespace}/pods",
                 kube.pod_manifest("alone", scheduler=name, gpus=1, nodeName=nodes["hot"].name, **in_pool(pool)))
        before = {p["metadata"]["uid"]: p["metadata"]["name"] for p in placed}

        heat(cluster, proc, nodes["hot"])
        evicted = kube.poll(lambda: verdicts(proc, "evicted", 4), 4 * INTERVAL + 10, "4 evictions")
        # The rate: 2 (perNode) per tick, ticks an interval apart; the first tick said why the others waited.
        ticks = by_tick(evicted)
        assert [len(t) for t in ticks] == [2, 2], evicted
        assert ticks[1][0]["time"] - ticks[0][0]["time"] >= INTERVAL - 0.5
        first = {e["pod"] for e in ticks[0]}
        waited = [e for e in evictions(proc) if e["verdict"] == "skipped" and e["pod"] not in first
                  and abs(e["time"] - ticks[0][0]["time"]) < INTERVAL / 2]
        assert len(waited) == 2 and all("limit: 2 per node per interval" in e["reason"] for e in waited), waited
        for record in evicted:
            assert record["node"] == nodes["hot"].name and record["rule"] == RULE
            assert record["uid"] in before and record["target"] in (nodes["cool"].name, nodes["warm"].name)
            assert record["reason"].startswith("gpu_temperature 95.0 > 85 for "), record
            assert record["gain"] >= 10
        assert not [e for e in evictions(proc) if e["pod"] == f"{namespace}/alone"]

        # Replaced by the ReplicaSets, and the replacements placed by metrics-sched on the cooler nodes.
        pods = kube.poll(lambda: replaced(api, namespace, 5, set(before)), 20, "4 replacements bound")
        cooler = {nodes["cool"].name, nodes["warm"].name}
        replacements = [p for p in pods if p["metadata"]["name"] != "alone"]
        assert all(p["spec"]["nodeName"] in cooler for p in replacements), [p["spec"]["nodeName"] for p in pods]
        assert all(p["spec"]["schedulerName"] == name for p in replacements)
        # Events are written after each eviction, best-effort and apart from the replacement's placement: wait.
        kube.poll(lambda: {e["regarding"]["name"] for e in events(api, namespace, "Evicted")} == set(before.values()),
                  15, "an Evicted event per evicted pod")
        assert counted(proc, "evicted") == 4

        # explain: why the pod was moved, and where its replacement went.
        record = evicted[0]
        out = subprocess.run([sys.executable, "-m", "metrics_sched.app.cli", "explain", record["pod"],
                              "--url", proc.url], capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out.stderr
        owner = record["owner"]
        [replacement] = [p for p in replacements
                         if f"ReplicaSet/{namespace}/{p['metadata']['ownerReferences'][0]['name']}" == owner]
        assert f"result: evicted on node {nodes['hot'].name}" in out.stdout, out.stdout
        assert "why: gpu_temperature 95.0 > 85 for " in out.stdout, out.stdout
        assert (f"then: its replacement {namespace}/{replacement['metadata']['name']} went to "
                f"{replacement['spec']['nodeName']}") in out.stdout, out.stdout


def test_a_pod_disruption_budget_blocks_the_eviction_and_the_pod_backs_off(
        cluster: DevCluster, api: KubeAPI, namespace: str) -> None:
    config = rebalance_config(cluster, limits={"cooldown": "10s"})  # back-offs: 2 intervals, at most 10 s
    with gpu_pool(cluster) as (pool, nodes), schedulers(cluster, extra=config, leader_elect=False) as (name, [proc]):
        wait_for_values(proc, {n.name: {} for n in nodes.values()})
        api.post(f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets", {
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "keep"},
            "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "web"}}}})
        [pod] = place_on_hot(api, namespace, nodes, [deployment("web", name, pool)], 1)
        key = f"{namespace}/{pod['metadata']['name']}"
        outlive_cooldown(api, [pod], 10)

        heat(cluster, proc, nodes["hot"])
        [blocked] = kube.poll(lambda: [e for e in evictions(proc, pod=key) if e["verdict"] == "blocked"],
                              4 * INTERVAL + 10, "the eviction blocked")
        assert "429" in blocked["reason"] and blocked["target"] in (nodes["cool"].name, nodes["warm"].name)
        # Reported: an Event on the pod.
        kube.poll(lambda: [e for e in events(api, namespace, "EvictionBlocked")
                           if e["regarding"]["name"] == pod["metadata"]["name"]], 10, "an EvictionBlocked event")
        # Not retried hot: the next tick backs off (2 intervals after a first refusal) ...
        [backing] = kube.poll(lambda: [e for e in evictions(proc, pod=key) if e["verdict"] == "skipped"],
                              2 * INTERVAL + 5, "the back-off")
        assert backing["reason"].startswith("gpu_temperature 95.0 > 85 for "), backing
        assert "back-off: eviction blocked (429: a PodDisruptionBudget)" in backing["reason"], backing
        assert counted(proc, "blocked") == 1
        # ... and the next attempt comes no sooner than that.
        # The record is what is asserted (the counter moves a moment before it is written): wait for the records.
        def two_attempts() -> list[dict[str, Any]] | None:
            blocked = [e for e in evictions(proc, pod=key) if e["verdict"] == "blocked"]
            return blocked if len(blocked) >= 2 else None

        attempts = kube.poll(two_attempts, 3 * INTERVAL + 5, "the second attempt")
        assert len(attempts) == 2 and attempts[1]["time"] - attempts[0]["time"] >= 2 * INTERVAL - 0.5, attempts
        assert counted(proc, "evicted") == 0
        [still] = live_pods(api, namespace)
        assert still["metadata"]["uid"] == pod["metadata"]["uid"] and still["spec"]["nodeName"] == nodes["hot"].name


def test_a_hot_node_with_no_better_target_evicts_nothing(cluster: DevCluster, api: KubeAPI, namespace: str) -> None:
    config = rebalance_config(cluster, limits={"perNode": 2})
    with gpu_pool(cluster) as (pool, nodes), schedulers(cluster, extra=config, leader_elect=False) as (name, [proc]):
        wait_for_values(proc, {n.name: {} for n in nodes.values()})
        placed = place_on_hot(api, namespace, nodes, [deployment(f"d{i}", name, pool) for i in range(2)], 2)
        with cluster.emulator() as emulator:  # every node hot: nowhere better to go
            emulator.set_many({nodes["cool"].name: {"gpu_temp": 92.0}, nodes["warm"].name: {"gpu_temp": 90.0}})
        wait_for_values(proc, {nodes["cool"].name: {"gpu_temperature": 92.0},
                               nodes["warm"].name: {"gpu_temperature": 90.0}})
        heat(cluster, proc, nodes["hot"])

        skipped = kube.poll(lambda: verdicts(proc, "skipped", 2), 4 * INTERVAL + 10, "2 skipped verdicts")
        for record in skipped:
            assert record["node"] == nodes["hot"].name and record["target"] is None
            assert "no other node fits (" in record["reason"], record
            assert "node(s) had a GPU above 85°C" in record["reason"], record
        # A further tick says the same (counted, recorded once), and still nothing moves.
        kube.poll(lambda: counted(proc, "skipped") >= 4, 2 * INTERVAL + 5, "another tick")
        assert counted(proc, "evicted") == counted(proc, "planned") == 0
        assert [e["verdict"] for e in evictions(proc)] == ["skipped", "skipped"]
        assert {p["metadata"]["uid"] for p in live_pods(api, namespace)} == {p["metadata"]["uid"] for p in placed}


def test_prometheus_dead_means_no_eviction(cluster: DevCluster, api: KubeAPI, namespace: str) -> None:
    # A second rule on a metric of another source (the metrics API) keeps one "canary" pod skipped every tick:
    # its count tells how many ticks ran, so the test waits for ticks, not for time.
    canary_rule = {"name": "busy", "metric": "node_cpu_utilisation", "above": 0.9, "for": "0s"}
    contracts = {"gpu_temperature": {"ttl": "2s", "maxAge": "60s"}}
    config = rebalance_config(cluster, rules=[{**HOT_RULE, "for": "6s"}, canary_rule], metrics_server=True,
                              contracts=contracts)
    with gpu_pool(cluster, extra=1) as (pool, nodes), \
            schedulers(cluster, extra=config, leader_elect=False) as (name, [proc]):
        canary = nodes["extra-0"]
        with cluster.emulator() as emulator:
            emulator.set_values(canary.name, cpu_util=0.95)
        wait_for_values(proc, {nodes["hot"].name: {"gpu_temperature": TEMPERATURES["hot"]},
                               canary.name: {"node_cpu_utilisation": 0.95}})
        placed = place_on_hot(api, namespace, nodes, [
            deployment("work", name, pool, replicas=2),
            deployment("canary", name, pool, gpus=0, nodeSelector={**in_pool(pool)["nodeSelector"],
                                                                     HOSTNAME: canary.name})], 3)
        assert {p["spec"]["nodeName"] for p in placed if p["metadata"]["labels"]["app"] == "canary"} == {canary.name}
        work = {p["metadata"]["uid"] for p in placed if p["spec"]["nodeName"] == nodes["hot"].name}
        kube.poll(lambda: counted(proc, "skipped", "busy") >= 1, 2 * INTERVAL + 5, "the rebalancer ticking")

        # The scheduler sees `hot` hot, then Prometheus dies before any streak could last `for` (6 s: three
        # ticks; the value stays fresh for at most ttl + a refresh after the last scrape).
        heat(cluster, proc, nodes["hot"])
        cluster.stop_prometheus()
        try:
            ticks = counted(proc, "skipped", "busy")
            kube.poll(lambda: not values(proc, nodes["hot"].name)["gpu_temperature"]["fresh"], 10,
                      "the hot value to go stale")
            kube.poll(lambda: not sources_health(proc)["prometheus"]["up"], 10, "the source shown down")
            # Long enough for a streak on the stale value to have turned bad and evicted: the tick that first saw
            # `hot` hot comes at most one interval after `heat`, the streak lasts `for` at the third.
            kube.poll(lambda: counted(proc, "skipped", "busy") >= ticks + 3, 4 * INTERVAL + 5, "3 more ticks")
            hot_records = [e for e in evictions(proc) if e["node"] == nodes["hot"].name]
            assert hot_records == [], hot_records
            assert sample(proc, "metrics_sched_rebalance_candidates") == 1  # the canary only: `hot` is not bad
            assert counted(proc, "evicted") == counted(proc, "evicted", "busy") == 0
            assert {p["metadata"]["uid"] for p in live_pods(api, namespace)
                    if p["spec"].get("nodeName") == nodes["hot"].name} == work
        finally:
            cluster.start_prometheus()


def test_a_dry_run_prints_the_plan_and_changes_nothing(cluster: DevCluster, api: KubeAPI, namespace: str) -> None:
    # The scheduler places the pods (its rebalancer off); the CLI runs one tick of the plan with `for: 0s`.
    config = rebalance_config(cluster, enabled=False)
    with gpu_pool(cluster) as (pool, nodes), schedulers(cluster, extra=config, leader_elect=False) as (name, [proc]):
        wait_for_values(proc, {n.name: {} for n in nodes.values()})
        placed = place_on_hot(api, namespace, nodes, [deployment("web", name, pool, replicas=2)], 2)
        heat(cluster, proc, nodes["hot"])  # the CLI reads the same Prometheus: it will see this too

        cli_config = {**config, "profiles": [{"schedulerName": name, **config["profile"]}],
                      "rebalance": {**config["rebalance"], "rules": [{**HOT_RULE, "for": "0s"}], "dryRun": True}}
        del cli_config["profile"]
        path = cluster.run_dir / f"{namespace}-rebalance.yaml"
        path.write_text(yaml.safe_dump(cli_config))
        out = subprocess.run([sys.executable, "-m", "metrics_sched.app.cli", "rebalance", "--config", str(path),
                              "--once", "--kubeconfig", str(cluster.kubeconfig)], capture_output=True, text=True,
                             timeout=60)
        assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
        lines = out.stdout.splitlines()
        assert "(dry run): 2 candidate pod(s) on bad nodes, 2 verdict(s)" in lines[0], out.stdout
        assert lines[1].split() == ["POD", "NODE", "RULE", "VERDICT", "TARGET", "GAIN", "REASON"], out.stdout
        rows = {line.split()[0]: line.split() for line in lines[3:]}
        assert set(rows) == {f"{namespace}/{p['metadata']['name']}" for p in placed}, out.stdout
        verdicts = sorted(row[3] for row in rows.values())
        assert verdicts == ["planned", "skipped"], out.stdout  # one pod of an owner per tick
        [plan] = [line for line in lines[3:] if line.split()[3] == "planned"]
        assert plan.split()[1:3] == [nodes["hot"].name, RULE] and plan.split()[4] == nodes["cool"].name, plan
        assert "dry run: would evict; gpu_temperature 95.0 > 85 for 0s" in plan, plan

        # Nothing changed: the same pods where they were, and no Event (a dry run writes nothing).
        pods = live_pods(api, namespace)
        assert {(p["metadata"]["uid"], p["spec"]["nodeName"]) for p in pods} == {
            (p["metadata"]["uid"], nodes["hot"].name) for p in placed}
        assert not [e for e in api.get(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")["items"]
                    if e["reason"].startswith("Evict")]


def test_a_gang_and_a_safe_to_evict_false_pod_stay_on_a_hot_node(cluster: DevCluster, api: KubeAPI,
                                                                  namespace: str) -> None:
    """Issue 44: a gang (a PodGroup of 2, its members a Deployment's) is never split: by default not moved at all;
    a pod annotated cluster-autoscaler.kubernetes.io/safe-to-evict: "false" stays; an ordinary pod beside them
    on the same hot node is moved (the rebalancer did run)."""
    config = rebalance_config(cluster, limits={"perNode": 10})
    with gpu_pool(cluster) as (pool, nodes), schedulers(cluster, extra=config, leader_elect=False) as (name, [proc]):
        wait_for_values(proc, {n.name: {} for n in nodes.values()})
        api.post(f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{namespace}/podgroups", {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
            "metadata": {"name": "train", "namespace": namespace}, "spec": {"minMember": 2}})
        gang = deployment("train", name, pool, replicas=2)
        gang["spec"]["template"]["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] = "train"
        safe = deployment("safe", name, pool)
        safe["spec"]["template"]["metadata"]["annotations"] = {
            "cluster-autoscaler.kubernetes.io/safe-to-evict": "false"}
        placed = place_on_hot(api, namespace, nodes, [gang, safe, deployment("plain", name, pool)], 4)
        kept = {f"{namespace}/{p['metadata']['name']}": p["metadata"]["uid"] for p in placed
                if p["metadata"]["labels"]["app"] != "plain"}

        heat(cluster, proc, nodes["hot"])
        [moved] = kube.poll(lambda: verdicts(proc, "evicted", 1), 4 * INTERVAL + 10, "the plain pod evicted")
        assert moved["pod"].startswith(f"{namespace}/plain-"), moved
        skipped = {e["pod"]: e["reason"] for e in evictions(proc) if e["verdict"] == "skipped"}
        assert set(skipped) == set(kept), skipped
        for key, reason in skipped.items():
            if "/train-" in key:
                assert reason.endswith(f"a member of gang {namespace}/train (scheduling.x-k8s.io PodGroup): "
                                       "a gang is never split"), reason
            else:
                assert reason.endswith('annotated cluster-autoscaler.kubernetes.io/safe-to-evict: "false"'), reason
        # A further tick changes nothing: the gang and the annotated pod are where they were.
        kube.poll(lambda: counted(proc, "skipped") >= 6, 2 * INTERVAL + 5, "another tick")
        assert counted(proc, "evicted") == 1
        on_hot = {f"{namespace}/{p['metadata']['name']}": p["metadata"]["uid"] for p in live_pods(api, namespace)
                  if p["spec"].get("nodeName") == nodes["hot"].name}
        assert on_hot == kept, on_hot



def test_with_gangs_whole_a_gang_moves_whole_in_one_tick_and_a_budget_on_one_member_keeps_it_all(
        cluster: DevCluster, api: KubeAPI, namespace: str) -> None:
    """Issue 44, `rebalance.gangs: whole`: a PodGroup of 3 (a Deployment's pods) on a hot node. While a
    PodDisruptionBudget protects one member, the Eviction dry run of that member is refused and no member is
    evicted (all 3 blocked); once the budget is gone, all 3 are evicted in one tick and the gang is placed again."""
    config = rebalance_config(cluster, limits={"perNode": 10})
    config["rebalance"]["gangs"] = "whole"
    with gpu_pool(cluster) as (pool, nodes), schedulers(cluster, extra=config, leader_elect=False) as (name, [proc]):
        wait_for_values(proc, {n.name: {} for n in nodes.values()})
        api.post(f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{namespace}/podgroups", {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
            "metadata": {"name": "train", "namespace": namespace}, "spec": {"minMember": 3}})
        gang = deployment("train", name, pool, replicas=3)
        gang["spec"]["template"]["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] = "train"
        placed = place_on_hot(api, namespace, nodes, [gang], 3)
        members = {f"{namespace}/{p['metadata']['name']}": p["metadata"]["uid"] for p in placed}
        guarded = placed[1]["metadata"]["name"]
        api.merge_patch(f"/api/v1/namespaces/{namespace}/pods/{guarded}", {"metadata": {"labels": {"guard": "yes"}}})
        pdb = f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets"
        api.post(pdb, {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "keep"},
                       "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"guard": "yes"}}}})

        heat(cluster, proc, nodes["hot"])
        blocked = kube.poll(lambda: verdicts(proc, "blocked", 3), 4 * INTERVAL + 10, "the gang's 3 members blocked")
        assert {e["pod"] for e in blocked} == set(members) and {e["gang"] for e in blocked} == {f"{namespace}/train"}
        [refused] = [e for e in blocked if e["pod"] == f"{namespace}/{guarded}"]
        assert "429" in refused["reason"] and "gang " + f"{namespace}/train stays whole, nothing evicted" in \
            refused["reason"], refused
        assert all(f"the eviction dry run of {namespace}/{guarded} answered" in e["reason"]
                   for e in blocked if e is not refused), blocked
        assert counted(proc, "evicted") == 0
        assert {f"{namespace}/{p['metadata']['name']}": p["metadata"]["uid"] for p in live_pods(api, namespace)
                if p["spec"].get("nodeName") == nodes["hot"].name} == members

        api.delete(f"{pdb}/keep")
        evicted = kube.poll(lambda: verdicts(proc, "evicted", 3), 4 * INTERVAL + 10, "the gang's 3 members evicted")
        assert {e["uid"] for e in evicted} == set(members.values())
        assert len(by_tick(evicted)) == 1, evicted  # one tick: all of them together
        for record in evicted:
            assert record["gang"] == f"{namespace}/train" and record["node"] == nodes["hot"].name, record
            assert record["target"] in (nodes["cool"].name, nodes["warm"].name), record
            assert "gang " + f"{namespace}/train moves whole (3 members" in record["reason"], record
        # The ReplicaSet's replacements are placed as a gang again, off the hot node.
        pods = kube.poll(lambda: replaced(api, namespace, 3, set(members.values())), 30, "3 replacements bound")
        assert all(p["spec"]["nodeName"] != nodes["hot"].name for p in pods), [p["spec"]["nodeName"] for p in pods]
