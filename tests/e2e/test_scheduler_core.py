"""The scheduler core against the real apiserver: correctness, failure reporting, HA and recovery."""

from __future__ import annotations

import collections
import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from devcluster import DevCluster, NodeSpec
from devcluster.kubeapi import KubeAPI
from devcluster.nodes import node_ip
from metrics_sched.model.quantity import to_milli
from tests.e2e import kube
from tests.e2e.pools import POOL_LABEL, in_pool, node_pool
from tests.e2e.scheduler_proc import leader_of, schedulers


def create_pods(api: KubeAPI, namespace: str, names: list[str], scheduler: str, **spec: Any) -> None:
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda n: api.post(f"/api/v1/namespaces/{namespace}/pods",
                                         kube.pod_manifest(n, scheduler=scheduler, **spec)), names))


def scheduled_events(api: KubeAPI, namespace: str, controller: str,
                     instance: str | None = None) -> collections.Counter[str]:
    events = api.get(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")["items"]
    return collections.Counter(e["regarding"]["name"] for e in events
                               if e.get("reason") == "Scheduled" and e.get("reportingController") == controller
                               and (instance is None or e.get("reportingInstance") == instance))


def all_bound(api: KubeAPI, namespace: str, count: int) -> list[dict[str, Any]] | None:
    pods = kube.list_pods(api, namespace)
    if len(pods) == count and all(p["spec"].get("nodeName") for p in pods):
        return pods
    return None


def test_200_pods_on_20_nodes_never_overcommitted(cluster: DevCluster, api: KubeAPI, namespace: str) -> None:
    with node_pool(cluster, 20, cpu="1") as (pool, specs), schedulers(cluster) as (name, _):
        names = [f"p{i:03d}" for i in range(200)]
        over: list[str] = []
        stop = threading.Event()

        def sample() -> None:
            while not stop.is_set():
                used: dict[str, int] = collections.Counter()
                for p in kube.list_pods(api, namespace):
                    if p["spec"].get("nodeName"):
                        requests = p["spec"]["containers"][0]["resources"]["requests"]
                        used[p["spec"]["nodeName"]] += to_milli(requests["cpu"])
                over.extend(f"{n}={m}m" for n, m in used.items() if m > 1000)
                stop.wait(0.1)

        sampler = threading.Thread(target=sample)
        sampler.start()
        try:
            create_pods(api, namespace, names, name, cpu="100m", memory="100Mi", **in_pool(pool))
            pods = kube.poll(lambda: all_bound(api, namespace, 200), 60, "200 pods bound")
        finally:
            stop.set()
            sampler.join()
        assert not over, f"nodes above allocatable during the run: {over[:5]}"
        per_node = collections.Counter(p["spec"]["nodeName"] for p in pods)
        assert per_node == {s.name: 10 for s in specs}
        counts = kube.poll(lambda: (c := scheduled_events(api, namespace, name)) and sum(c.values()) >= 200 and c,
                           20, "200 Scheduled events")
        assert set(counts) == set(names) and set(counts.values()) == {1}, "a pod was bound more than once"
        assert not [p for p in kube.list_pods(api, namespace) if p["status"].get("phase") == "Pending"] or \
            kube.poll(lambda: all(p["status"].get("phase") == "Running" for p in kube.list_pods(api, namespace)),
                      30, "pods Running")


def test_unfit_pod_is_reported_then_bound_when_a_node_fits(cluster: DevCluster, api: KubeAPI,
                                                            namespace: str) -> None:
    with node_pool(cluster, 2, gpus=1) as (pool, _), schedulers(cluster) as (name, _):
        created = time.monotonic()
        create_pods(api, namespace, ["big"], name, gpus=2, **in_pool(pool))

        def condition() -> dict[str, Any] | None:
            pod = api.get(f"/api/v1/namespaces/{namespace}/pods/big")
            return next((c for c in pod["status"].get("conditions", []) if c["type"] == "PodScheduled"), None)

        cond = kube.poll(condition, 5, "PodScheduled=False")
        assert cond["status"] == "False" and cond["reason"] == "Unschedulable"
        assert "Insufficient nvidia.com/gpu" in cond["message"]

        def failed_scheduling() -> list[dict[str, Any]]:
            events = api.get(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")["items"]
            return [e for e in events if e["reason"] == "FailedScheduling" and e["regarding"]["name"] == "big"]

        failed = kube.poll(failed_scheduling, max(0.5, 5 - (time.monotonic() - created)), "FailedScheduling event")
        assert failed[0]["reportingController"] == name and failed[0]["type"] == "Warning"
        assert time.monotonic() - created < 5

        big = NodeSpec(name=f"{pool}-big", internal_ip=node_ip(64999), cpu="8", gpus=4,
                       labels={POOL_LABEL: pool}, taints=({"key": POOL_LABEL, "value": pool, "effect": "NoSchedule"},))
        cluster.add_nodes([big])
        try:
            added = time.monotonic()
            kube.poll(lambda: api.get(f"/api/v1/namespaces/{namespace}/pods/big")["spec"].get("nodeName"), 5,
                      "bound after a fitting node was added")
            assert api.get(f"/api/v1/namespaces/{namespace}/pods/big")["spec"]["nodeName"] == big.name
            assert time.monotonic() - added < 5
        finally:
            cluster.remove_nodes([big.name])


def test_gpu_pods_land_only_where_two_gpus_are_free(cluster: DevCluster, api: KubeAPI, namespace: str) -> None:
    with node_pool(cluster, 3, cpu="8", gpus=[1, 2, 4]) as (pool, specs), schedulers(cluster) as (name, _):
        create_pods(api, namespace, [f"g{i}" for i in range(4)], name, gpus=2, **in_pool(pool))
        kube.poll(lambda: sum(1 for p in kube.list_pods(api, namespace) if p["spec"].get("nodeName")) == 3, 15,
                  "three GPU pods bound")
        time.sleep(1)  # the fourth must stay pending: give the scheduler a chance to misbehave
        placed = collections.Counter(p["spec"].get("nodeName") for p in kube.list_pods(api, namespace))
        assert placed == {specs[1].name: 1, specs[2].name: 2, None: 1}


def test_pods_not_ours_are_never_touched(cluster: DevCluster, api: KubeAPI, namespace: str) -> None:
    with node_pool(cluster, 2) as (pool, specs), schedulers(cluster) as (name, _):
        create_pods(api, namespace, ["theirs"], "default-scheduler", **in_pool(pool))
        create_pods(api, namespace, ["gated"], name, schedulingGates=[{"name": "example.com/wait"}], **in_pool(pool))
        api.post(f"/api/v1/namespaces/{namespace}/pods",
                 kube.pod_manifest("prebound", scheduler=name, nodeName=specs[0].name, **in_pool(pool)))
        create_pods(api, namespace, ["sentinel"], name, **in_pool(pool))
        kube.poll(lambda: api.get(f"/api/v1/namespaces/{namespace}/pods/sentinel")["spec"].get("nodeName"), 10,
                  "sentinel bound")
        kube.poll(lambda: scheduled_events(api, namespace, name).get("sentinel"), 10, "the sentinel's Scheduled event")
        time.sleep(1)  # the others must stay untouched: give the scheduler a chance to misbehave
        pods = {p["metadata"]["name"]: p for p in kube.list_pods(api, namespace)}
        assert not pods["theirs"]["spec"].get("nodeName")
        assert not pods["gated"]["spec"].get("nodeName")
        assert pods["prebound"]["spec"]["nodeName"] == specs[0].name
        events = api.get(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")["items"]
        touched = {e["regarding"]["name"] for e in events if e.get("reportingController") == name}
        assert touched == {"sentinel"}
        for untouched in ("theirs", "gated"):
            # (the apiserver itself marks a gated pod PodScheduled=False/SchedulingGated; that one is fine)
            ours = [c for c in pods[untouched]["status"].get("conditions", [])
                    if c["type"] == "PodScheduled" and c.get("reason") in ("Unschedulable", "SchedulerError")]
            assert not ours, ours


def test_leader_killed_mid_burst_the_standby_binds_the_rest(cluster: DevCluster, api: KubeAPI,
                                                             namespace: str) -> None:
    with node_pool(cluster, 10, cpu="4", memory="64Gi") as (pool, _), schedulers(cluster, replicas=2) as (name, procs):
        leader_id = kube.poll(lambda: leader_of(cluster, name), 20, "a leader")
        leader = next(p for p in procs if p.identity == leader_id)
        standby = next(p for p in procs if p.identity != leader_id)
        names = [f"b{i:03d}" for i in range(300)]
        creator = threading.Thread(target=create_pods, args=(api, namespace, names, name), kwargs=in_pool(pool))
        creator.start()
        kube.poll(lambda: sum(1 for p in kube.list_pods(api, namespace) if p["spec"].get("nodeName")) >= 30, 30,
                  "the burst under way")
        os.kill(leader.managed.pid, signal.SIGKILL)
        killed = time.monotonic()
        time.sleep(1)  # binds the dead leader had on the wire land (or not) by now
        bound_by_leader = {p["metadata"]["name"] for p in kube.list_pods(api, namespace) if p["spec"].get("nodeName")}
        creator.join()
        try:
            kube.poll(lambda: all_bound(api, namespace, 300), 45, "all pods bound after the leader died")
        except AssertionError as exc:
            bound = sum(1 for p in kube.list_pods(api, namespace) if p["spec"].get("nodeName"))
            log = cluster.log_tail(standby.name, 60)
            raise AssertionError(f"{exc}; {bound}/300 bound; standby log:\n{log}") from None
        assert time.monotonic() - killed < 30 + 5, "the standby took too long"
        assert leader_of(cluster, name) == standby.identity
        # The killed leader may die between a bind and its (asynchronous) Scheduled event, so pods it bound can
        # lack one. Every other pod was bound by the standby, which reports each exactly once; no pod may have
        # two Scheduled events (two replicas binding it).
        by_standby = set(names) - bound_by_leader
        counts = kube.poll(lambda: (c := scheduled_events(api, namespace, name, standby.identity)) and
                           set(c) >= by_standby and c, 20, "a Scheduled event from the standby for each of its pods")
        assert not set(counts) & bound_by_leader, "the standby reported binding a pod the leader had bound"
        everyone = scheduled_events(api, namespace, name)
        assert max(everyone.values()) == 1, f"bound twice: {[n for n, c in everyone.items() if c > 1]}"
        assert standby.alive()


def test_watch_expiry_and_apiserver_restart_miss_nothing(cluster: DevCluster, api: KubeAPI, namespace: str) -> None:
    # One replica without leader election: an apiserver down longer than renewDeadline would (rightly) make a
    # leader exit, and this test is about the watches.
    with node_pool(cluster, 10, cpu="8", memory="64Gi") as (pool, _), \
            schedulers(cluster, leader_elect=False) as (name, procs):
        create_pods(api, namespace, [f"a{i:03d}" for i in range(100)], name, **in_pool(pool))
        # Compact etcd to its current revision so the restarted apiserver answers old resourceVersions with 410.
        assert cluster.endpoints is not None
        etcd = cluster.endpoints.etcd
        revision = int(httpx.post(f"{etcd}/v3/kv/range", json={"key": "Lw=="}, timeout=5).json()["header"]["revision"])
        cluster.restart_apiserver(down_for=1.0)
        httpx.post(f"{etcd}/v3/kv/compaction", json={"revision": revision, "physical": True}, timeout=10)
        doomed = [f"a{i:03d}" for i in range(90, 100)]
        for pod_name in doomed:
            api.request("DELETE", f"/api/v1/namespaces/{namespace}/pods/{pod_name}",
                        params={"gracePeriodSeconds": "0"}, ok=(404,))
        create_pods(api, namespace, [f"b{i:03d}" for i in range(100)], name, **in_pool(pool))
        try:
            pods = kube.poll(lambda: all_bound(api, namespace, 190), 60, "190 pods bound after the restart")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{cluster.log_tail(procs[0].name, 40)}") from None
        expected = {f"a{i:03d}" for i in range(90)} | {f"b{i:03d}" for i in range(100)}
        assert {p["metadata"]["name"] for p in pods} == expected
        counts = kube.poll(lambda: (c := scheduled_events(api, namespace, name)) and
                           set(c) >= {p["metadata"]["name"] for p in pods} and c, 20, "Scheduled events")
        assert max(counts.values()) == 1
        assert procs[0].alive()
        # What the scheduler holds must match the API: every bound pod counted once, nothing assumed left (the
        # watch confirms each bind a moment after the API shows it).
        kube.poll(lambda: procs[0].status()["assumed"] == 0, 10, "no assumed pods left in the scheduler")
