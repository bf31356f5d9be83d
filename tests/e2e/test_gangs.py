"""Gang scheduling against the real API server: scheduler-plugins' PodGroup CRD (installed by the dev cluster from
deploy/crds) and the 1.36 Workload API's PodGroup (scheduling.k8s.io/v1alpha2, GenericWorkload on), all or nothing;
and a gang placed as a whole in the cold zone of two that could each hold it."""

from __future__ import annotations

import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from devcluster import DevCluster, NodeSpec
from devcluster.kubeapi import KubeAPI
from devcluster.nodes import node_ip
from tests.e2e import kube
from tests.e2e.pools import POOL_LABEL, in_pool, node_pool
from tests.e2e.scheduler_proc import SchedulerProcess, schedulers
from tests.e2e.telemetry_setup import decisions, telemetry_config, wait_for_values

pytestmark = pytest.mark.e2e

CRD_API = "/apis/scheduling.x-k8s.io/v1alpha1"


def gang_profile(**args: Any) -> dict[str, Any]:
    """Coscheduling's QueueSort (members contiguous) and a short group backoff, so a test waits seconds."""
    return {"plugins": {"queueSort": {"enabled": [{"name": "Coscheduling"}], "disabled": [{"name": "PrioritySort"}]}},
            "pluginConfig": [{"name": "Coscheduling", "args": {"podGroupBackoffSeconds": 1, **args}}]}


def create_members(api: KubeAPI, namespace: str, names: list[str], scheduler: str, *, labels: dict[str, str],
                   **spec: Any) -> None:
    def create(name: str) -> None:
        body = kube.pod_manifest(name, scheduler=scheduler, **spec)
        body["metadata"]["labels"].update(labels)
        api.post(f"/api/v1/namespaces/{namespace}/pods", body)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(create, names))


def metric(proc: SchedulerProcess, name: str, labels: str = "") -> float:
    text = httpx.get(f"{proc.url}/metrics", timeout=2).text
    pattern = rf"^{re.escape(name)}{re.escape('{' + labels + '}') if labels else ''}\s+(\S+)$"
    found = re.search(pattern, text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


def bound(api: KubeAPI, namespace: str) -> dict[str, str]:
    return {p["metadata"]["name"]: p["spec"]["nodeName"] for p in kube.list_pods(api, namespace)
            if p["spec"].get("nodeName")}


def all_unschedulable(api: KubeAPI, namespace: str, count: int) -> bool:
    pods = kube.list_pods(api, namespace)
    def waiting(p: dict[str, Any]) -> bool:
        conditions = (p.get("status") or {}).get("conditions") or ()
        return not p["spec"].get("nodeName") and any(
            c["type"] == "PodScheduled" and c["status"] == "False" for c in conditions)

    return len(pods) == count and all(waiting(p) for p in pods)


def more_nodes(cluster: DevCluster, pool: str, count: int, first: int, **resources: Any) -> list[NodeSpec]:
    base = 40000 + first * 7
    specs = [NodeSpec(name=f"{pool}-x{first + i:02d}", internal_ip=node_ip(base + i),
                      labels={POOL_LABEL: pool}, taints=({"key": POOL_LABEL, "value": pool, "effect": "NoSchedule"},),
                      **resources) for i in range(count)]
    cluster.add_nodes(specs)
    return specs


def run_partial_then_whole(cluster: DevCluster, api: KubeAPI, namespace: str, *, group_path: str,
                           group: dict[str, Any], join: dict[str, Any], labels: dict[str, str],
                           status_of: Any) -> None:
    """8 members of one cpu on 3 two-cpu nodes (room for 6): nothing binds, every member stays pending, the group
    is reported unschedulable; one more node: all 8 bind in one attempt."""
    # Member by member (no topology domain), so six members reach Permit before the seventh finds no node.
    with node_pool(cluster, 3, cpu="2", memory="8Gi") as (pool, _), \
            schedulers(cluster, extra={"profile": gang_profile(gangPlacement="MemberByMember")}) as (name, procs):
        proc = procs[0]
        api.post(f"{group_path}/namespaces/{namespace}/podgroups", group)
        names = [f"m{i}" for i in range(8)]
        create_members(api, namespace, names, name, labels=labels, cpu="1", memory="100Mi", **join, **in_pool(pool))
        kube.poll(lambda: metric(proc, "metrics_sched_gang_timeouts_total", 'reason="member_unschedulable"') >= 1,
                  60, "a gang attempt to fail with all its waiting members")
        kube.poll(lambda: all_unschedulable(api, namespace, 8), 60, "all 8 members pending and Unschedulable")
        assert bound(api, namespace) == {}
        group_url = f"{group_path}/namespaces/{namespace}/podgroups/{group['metadata']['name']}"
        kube.poll(lambda: status_of(api.get(group_url)) == "unschedulable", 30,
                  "the group's status to say it is not placed")
        assert bound(api, namespace) == {}  # still nothing: no member ever binds alone

        specs = more_nodes(cluster, pool, 1, 0, cpu="2", memory="8Gi")
        try:
            placed = kube.poll(lambda: (b := bound(api, namespace)) and len(b) == 8 and b, 60, "all 8 members bound")
            assert set(placed) == set(names)
            # One attempt placed them all: the quorum was reached once.
            assert metric(proc, "metrics_sched_gang_wait_duration_seconds_count", 'outcome="scheduled"') == 1
            kube.poll(lambda: status_of(api.get(group_url)) == "scheduled", 30, "the group's status Scheduled")
        finally:
            cluster.remove_nodes([s.name for s in specs])


def crd_status(group: dict[str, Any]) -> str:
    status = group.get("status") or {}
    if status.get("phase") == "Scheduled" and status.get("scheduled") == 8:
        return "scheduled"
    return "unschedulable" if status.get("phase") == "Pending" else ""


def workload_status(group: dict[str, Any]) -> str:
    conditions = {c["type"]: c for c in (group.get("status") or {}).get("conditions") or ()}
    scheduled = conditions.get("PodGroupScheduled")
    if scheduled is None:
        return ""
    return "scheduled" if scheduled["status"] == "True" else "unschedulable"


def test_a_crd_gang_binds_nothing_until_all_fit_then_all_at_once(cluster: DevCluster, api: KubeAPI,
                                                                 namespace: str) -> None:
    group = {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
             "metadata": {"name": "train", "namespace": namespace},
             "spec": {"minMember": 8, "scheduleTimeoutSeconds": 20}}
    run_partial_then_whole(cluster, api, namespace, group_path=CRD_API, group=group, join={},
                           labels={"scheduling.x-k8s.io/pod-group": "train"}, status_of=crd_status)


def test_a_workload_api_gang_binds_nothing_until_all_fit_then_all_at_once(cluster: DevCluster, api: KubeAPI,
                                                                          namespace: str) -> None:
    # The version the cluster serves: v1alpha2 in 1.36, v1beta1 in 1.37 (the same fields for this).
    version = cluster.versions.workload_api.group_version
    group = {"apiVersion": version, "kind": "PodGroup", "metadata": {"name": "train", "namespace": namespace},
             "spec": {"schedulingPolicy": {"gang": {"minCount": 8}}}}
    try:
        run_partial_then_whole(cluster, api, namespace, group_path=f"/apis/{version}", group=group,
                               join={"schedulingGroup": {"podGroupName": "train"}}, labels={},
                               status_of=workload_status)
    finally:
        kube.release_pod_groups(api, version, [namespace])


def test_a_gang_lands_entirely_in_the_cold_zone(cluster: DevCluster, api: KubeAPI, namespace: str) -> None:
    # Two zones of 4 nodes with 2 GPUs each: either holds the 8-GPU gang. Zone 0 runs hot (below the GPU filter's
    # threshold, so admissible) but has the single coolest node; zone 1 is cool throughout. Member by member, the
    # first members would take that coolest node and split the gang; as a whole, zone 1 scores best.
    with node_pool(cluster, 8, cpu="8", memory="32Gi", gpus=2, own_zones=2) as (pool, specs), \
            cluster.emulator() as emulator:
        temps = {s.name: (30.0 if i == 0 else 80.0) if i % 2 == 0 else 45.0 for i, s in enumerate(specs)}
        emulator.set_many({n: {"gpu_temp": t, "hourly_cost": 2.0} for n, t in temps.items()})
        # The objective: temperature and cost (equal everywhere here), without the emulator's moving load and
        # utilisation waves, so the outcome depends on the temperatures alone.
        config = telemetry_config(cluster, weights={"GPUTemperature": 3, "Cost": 2, "NodeResourcesFit": 1})
        gang = gang_profile()
        config["profile"] = {"plugins": {**config["profile"]["plugins"], **gang["plugins"]},
                             "pluginConfig": gang["pluginConfig"]}
        with schedulers(cluster, extra=config) as (name, procs):
            proc = procs[0]
            wait_for_values(proc, {n: {"gpu_temperature": t, "node_hourly_cost": 2.0} for n, t in temps.items()})
            api.post(f"{CRD_API}/namespaces/{namespace}/podgroups", {
                "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
                "metadata": {"name": "train", "namespace": namespace}, "spec": {"minMember": 8}})
            create_members(api, namespace, [f"w{i}" for i in range(8)], name,
                           labels={"scheduling.x-k8s.io/pod-group": "train"}, cpu="1", memory="1Gi", gpus=1,
                           **in_pool(pool))
            placed = kube.poll(lambda: (b := bound(api, namespace)) and len(b) == 8 and b, 60, "the gang bound")
            cold = {s.name for i, s in enumerate(specs) if i % 2 == 1}
            assert set(placed.values()) <= cold, placed
            # Every member's decision links to the one gang decision, which names the cold zone and why.
            notes = {n for w in placed for d in decisions(proc, f"{namespace}/{w}") if d.get("node")
                     for n in d.get("notes", ()) if n.startswith(f"gang {namespace}/train")}
            assert len(notes) == 1, notes
            [note] = notes
            assert f"topology.kubernetes.io/zone={pool}-zone-1" in note and "scores best" in note, note
            # `explain` shows the link on every member's record.
            out = subprocess.run([sys.executable, "-m", "metrics_sched.app.cli", "explain", f"{namespace}/w0",
                                  "--url", proc.url], capture_output=True, text=True, timeout=30)
            assert out.returncode == 0 and note in out.stdout, out.stdout + out.stderr


def test_a_gang_that_asked_for_no_topology_binds_whole_across_two_zones(cluster: DevCluster, api: KubeAPI,
                                                                       namespace: str) -> None:
    # Issue 47: 4 nodes in two zones, one member's room each; no zone holds the gang of 4, both together do. A zone
    # the group did not ask for is a preference: it binds whole across both, as Coscheduling and GangScheduling do.
    with node_pool(cluster, 4, cpu="2", memory="8Gi", own_zones=2) as (pool, specs), \
            schedulers(cluster, extra={"profile": gang_profile()}) as (name, procs):
        api.post(f"{CRD_API}/namespaces/{namespace}/podgroups", {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
            "metadata": {"name": "spread", "namespace": namespace}, "spec": {"minMember": 4}})
        names = [f"s{i}" for i in range(4)]
        create_members(api, namespace, names, name, labels={"scheduling.x-k8s.io/pod-group": "spread"}, cpu="2",
                       memory="100Mi", **in_pool(pool))
        placed = kube.poll(lambda: (b := bound(api, namespace)) and len(b) == 4 and b, 60, "the gang bound")
        assert sorted(placed.values()) == sorted(s.name for s in specs)
        # One attempt placed them all, and the gang's decision says why it is not in one zone (the record and the
        # metric may land after the binds the API shows: waited for themselves).
        def gang_notes() -> set[str]:
            return {n for d in decisions(procs[0], f"{namespace}/s0") for n in d.get("notes", ())
                    if n.startswith(f"gang {namespace}/spread")}

        notes = kube.poll(gang_notes, 30, "s0's decision record with the gang's note")
        assert any("no topology.kubernetes.io/zone domain can hold the 4 members" in n for n in notes), notes
        kube.poll(lambda: metric(procs[0], "metrics_sched_gang_wait_duration_seconds_count",
                                 'outcome="scheduled"') >= 1, 30, "the gang's wait observed")
        assert metric(procs[0], "metrics_sched_gang_wait_duration_seconds_count", 'outcome="scheduled"') == 1
