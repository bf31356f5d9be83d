"""Inter-pod (anti-)affinity and topology spreading against the real apiserver.

The bursts are real: every pod is created (and checked pending) before metrics-sched starts, so its first
LIST hands it all of them at once and it places pod N+1 while the binds of the pods before it are still in
flight. Each placement must therefore count the pods assumed before it, not only those the watch has shown
bound. A NodeLabelScore preference (weight 1000) pulls every pod to one node or zone, so a constraint that
missed an assumed pod would show as two pods on the preferred node or a skewed zone, not be hidden by the
default spreading scores. The scheduler's /decisions records (feasible node count, decision time, bind
duration) show what each placement saw.
"""

from __future__ import annotations

import collections
import re
import secrets
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import httpx

from devcluster import DevCluster
from devcluster.kubeapi import KubeAPI
from tests.e2e import kube
from tests.e2e.pools import in_pool, node_pool
from tests.e2e.scheduler_proc import SchedulerProcess, schedulers

ZONE = "topology.kubernetes.io/zone"
HOSTNAME = "kubernetes.io/hostname"
ANTI_AFFINITY_REASON = "node(s) didn't match pod anti-affinity rules"  # kube-scheduler's wording
AFFINITY_REASON = "node(s) didn't match pod affinity rules"


# -- nodes, scheduler, pods ---------------------------------------------------------------------------
@contextmanager
def zoned_pool(cluster: DevCluster, zones: int, per_zone: int) -> Iterator[tuple[str, list[str], dict[str, str]]]:
    """A pool whose zones are its own (no other node shares their domains): the pool, its zones, each node's zone."""
    with node_pool(cluster, zones * per_zone, own_zones=zones) as (pool, specs):
        zone_of = {s.name: s.labels[ZONE] for s in specs}
        yield pool, sorted(set(zone_of.values())), zone_of


@contextmanager
def metrics_sched(cluster: DevCluster, scheduler_name: str,
                  profile: dict[str, Any] | None = None) -> Iterator[SchedulerProcess]:
    """One replica under a name chosen by the test (its pods exist before it starts)."""
    with schedulers(cluster, extra={"profile": profile} if profile else None, name=scheduler_name) as (_, [proc]):
        yield proc


def prefer(label: str, value: str) -> dict[str, Any]:
    """A profile whose scores all but force nodes with label=value whenever the filters allow one."""
    return {"plugins": {"score": {"enabled": [{"name": "NodeLabelScore", "weight": 1000}]}},
            "pluginConfig": [{"name": "NodeLabelScore", "args": {"labelWeights": {label: {value: 100}}}}]}


def pods(names: list[str], scheduler: str, labels: dict[str, str], **spec: Any) -> list[dict[str, Any]]:
    """Pods without an ownerReference: an owner that does not exist would have the garbage collector delete
    them (the dev cluster runs it), and one that exists would have its controller manage them."""
    out = []
    for name in names:
        body = kube.pod_manifest(name, scheduler=scheduler, **spec)
        body["metadata"]["labels"] = dict(labels)
        out.append(body)
    return out


def create_all(api: KubeAPI, namespace: str, bodies: list[dict[str, Any]]) -> None:
    with ThreadPoolExecutor(16) as workers:
        list(workers.map(lambda body: api.post(f"/api/v1/namespaces/{namespace}/pods", body), bodies))


def all_pending(api: KubeAPI, namespace: str, count: int) -> None:
    """Every pod of the burst exists and none is bound: the scheduler will get them all at once."""
    listed = kube.list_pods(api, namespace)
    assert len(listed) == count and not [p for p in listed if p["spec"].get("nodeName")]


def placements(api: KubeAPI, namespace: str, bound: int, total: int | None = None) -> dict[str, str] | None:
    """pod -> node once at least `bound` of the namespace's `total` pods are bound (a test asserts how many)."""
    listed = kube.list_pods(api, namespace)
    placed = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in listed if p["spec"].get("nodeName")}
    return placed if len(listed) == (total or bound) and len(placed) >= bound else None


def wait_bound(cluster: DevCluster, proc: SchedulerProcess, api: KubeAPI, namespace: str, bound: int,
               total: int | None = None, timeout: float = 15) -> dict[str, str]:
    """placements() polled; on a timeout the failure says how far it got and what the scheduler logged."""
    try:
        return kube.poll(lambda: placements(api, namespace, bound, total), timeout,
                         f"{bound} of {total or bound} pods bound")
    except AssertionError as exc:
        queue = proc.status() if proc.alive() else "exited"
        raise AssertionError(f"{exc}: {len(bound_now(api, namespace))} bound; scheduler {queue}; log:\n"
                             f"{cluster.log_tail(proc.name, 30)}") from None


def bound_now(api: KubeAPI, namespace: str) -> set[str]:
    return {p["metadata"]["name"] for p in kube.list_pods(api, namespace) if p["spec"].get("nodeName")}


def scheduled_decisions(proc: SchedulerProcess, namespace: str, count: int) -> list[dict[str, Any]] | None:
    """The namespace's `scheduled` decision records, oldest first, once there are `count` with a bind outcome."""
    body = httpx.get(f"{proc.url}/decisions", params={"limit": "1000"}, timeout=5).json()
    records = sorted((r for r in body["decisions"]
                      if r["pod"].startswith(f"{namespace}/") and r["result"] == "scheduled"), key=lambda r: r["id"])
    if len(records) < count or any(r["bind"] is None for r in records):
        return None
    return records


def placed_while_an_earlier_bind_ran(records: list[dict[str, Any]]) -> int:
    """How many pods were placed before the bind of a pod placed earlier had returned. A record's time is
    taken before its bind is queued and bind_ms runs from the worker's start, so time + bind_ms is no later
    than the end of that bind: a decision made before it could not have seen that pod bound by the watch,
    only assumed."""
    return sum(1 for k, record in enumerate(records)
               if any(record["time"] < earlier["time"] + earlier["bind_ms"] / 1000 for earlier in records[:k]))


def rejections(message: str) -> dict[str, int]:
    """kube-scheduler's "0/N nodes are available: 50 reason, 60 other reason." as {reason: count}. In these
    tests each node has a single reason (the first filter it fails; of InterPodAffinity's rules, only the
    first it fails, as in kube-scheduler), so the counts must add up to N."""
    match = re.fullmatch(r"0/(\d+) nodes are available: (.*)\.", message)
    assert match, message
    counts = {reason: int(count) for count, reason in re.findall(r"(\d+) ([^,]+)(?:, |$)", match[2])}
    assert sum(counts.values()) == int(match[1]), f"nodes counted more than once: {message}"
    return counts


def scheduled_condition(api: KubeAPI, namespace: str, name: str) -> dict[str, Any] | None:
    pod = api.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
    return next((c for c in pod["status"].get("conditions", []) if c["type"] == "PodScheduled"), None)


def failed_scheduling(api: KubeAPI, namespace: str, name: str) -> list[dict[str, Any]]:
    events = api.get(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")["items"]
    return [e for e in events if e["reason"] == "FailedScheduling" and e["regarding"]["name"] == name]


def required(kind: str, labels: dict[str, str], topology_key: str) -> dict[str, Any]:
    """spec.affinity with one required podAffinity or podAntiAffinity term."""
    return {kind: {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": labels}, "topologyKey": topology_key}]}}


# -- anti-affinity -----------------------------------------------------------------------------------
def test_50_anti_affine_replicas_in_one_burst_land_on_50_distinct_nodes(cluster: DevCluster, api: KubeAPI,
                                                                          namespace: str) -> None:
    with node_pool(cluster, 60) as (pool, specs):
        app, name = f"web-{secrets.token_hex(3)}", f"ms-{secrets.token_hex(3)}"
        labels = {"app": app, "pod-template-hash": "5d8f7c"}
        create_all(api, namespace, pods([f"{app}-{i:02d}" for i in range(50)], name, labels,
                                        affinity=required("podAntiAffinity", {"app": app}, HOSTNAME),
                                        **in_pool(pool)))
        all_pending(api, namespace, 50)
        preferred = specs[0].name
        with metrics_sched(cluster, name, prefer(HOSTNAME, preferred)) as proc:
            placed = wait_bound(cluster, proc, api, namespace, 50)
            per_node = collections.Counter(placed.values())
            assert len(per_node) == 50, f"nodes holding two replicas: {[n for n, c in per_node.items() if c > 1]}"
            assert per_node[preferred] == 1
            records = kube.poll(lambda: scheduled_decisions(proc, namespace, 50), 10, "50 decisions with binds")
            assert [r["bind"] for r in records] == ["bound"] * 50
            # Each placement saw every pod placed before it, assumed or bound: one node fewer each time.
            assert [r["feasible"] for r in records] == list(range(60, 10, -1))
            assert placed_while_an_earlier_bind_ran(records) > 0, "no overlap: the burst was not a burst"


def test_61_anti_affine_replicas_on_60_nodes_leave_one_pending(cluster: DevCluster, api: KubeAPI,
                                                               namespace: str) -> None:
    with node_pool(cluster, 60) as (pool, specs):
        app, name = f"web-{secrets.token_hex(3)}", f"ms-{secrets.token_hex(3)}"
        names = [f"{app}-{i:02d}" for i in range(61)]
        create_all(api, namespace, pods(names, name, {"app": app},
                                        affinity=required("podAntiAffinity", {"app": app}, HOSTNAME),
                                        **in_pool(pool)))
        all_pending(api, namespace, 61)
        with metrics_sched(cluster, name, prefer(HOSTNAME, specs[0].name)) as proc:
            placed = wait_bound(cluster, proc, api, namespace, 60, 61)
            assert len(placed) == 60 and len(set(placed.values())) == 60
            (left,) = set(names) - set(placed)

            def reported() -> tuple[dict[str, Any], dict[str, Any]] | None:
                cond = scheduled_condition(api, namespace, left)
                events = failed_scheduling(api, namespace, left)
                return (cond, events[0]) if cond and events else None

            cond, event = kube.poll(reported, 10, f"{left}: PodScheduled=False and a FailedScheduling event")
            assert cond["status"] == "False" and cond["reason"] == "Unschedulable"
            assert rejections(cond["message"])[ANTI_AFFINITY_REASON] == 60, cond["message"]
            assert rejections(event["note"])[ANTI_AFFINITY_REASON] == 60, event["note"]
            assert event["reportingController"] == name and event["type"] == "Warning"
            # Every bind confirmed by the watch: from here the scheduler sees all 60 pods as bound. The pod left
            # over was never placed (a placement is recorded before its bind) and is still not bound.
            kube.poll(lambda: (s := proc.status())["assumed"] == 0 and s["binds_in_flight"] == 0, 10,
                      "every bind confirmed by the watch")
            decided = httpx.get(f"{proc.url}/decisions", params={"pod": f"{namespace}/{left}"}, timeout=5).json()
            assert decided["decisions"] and {d["result"] for d in decided["decisions"]} == {"unschedulable"}
            assert bound_now(api, namespace) == set(placed)


# -- topology spread ---------------------------------------------------------------------------------
def test_a_30_pod_job_spreads_10_10_10_over_3_zones_with_max_skew_1(cluster: DevCluster, api: KubeAPI,
                                                                      namespace: str) -> None:
    # Only the pool's nodes are domains: nodeAffinityPolicy defaults to Honor, and in_pool confines the pods by
    # nodeSelector. The pods carry a Job's labels but no ownerReference: the dev cluster's KWOK moves pods
    # owned by a Job to Succeeded the moment they run, and a finished pod no longer counts (here as in
    # kube-scheduler), so the spread would depend on how fast KWOK is.
    with zoned_pool(cluster, zones=3, per_zone=4) as (pool, zones, zone_of):
        job, name, controller_uid = f"job-{secrets.token_hex(3)}", f"ms-{secrets.token_hex(3)}", str(uuid.uuid4())
        labels = {"batch.kubernetes.io/job-name": job, "job-name": job,
                  "batch.kubernetes.io/controller-uid": controller_uid, "controller-uid": controller_uid}
        spread = [{"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule",
                   "labelSelector": {"matchLabels": {"job-name": job}}}]
        create_all(api, namespace, pods([f"{job}-{i:02d}" for i in range(30)], name, labels,
                                        restartPolicy="Never", topologySpreadConstraints=spread, **in_pool(pool)))
        all_pending(api, namespace, 30)
        with metrics_sched(cluster, name, prefer(ZONE, zones[0])) as proc:
            placed = wait_bound(cluster, proc, api, namespace, 30)
            per_zone = collections.Counter(zone_of[node] for node in placed.values())
            assert per_zone == {zone: 10 for zone in zones}
            records = kube.poll(lambda: scheduled_decisions(proc, namespace, 30), 10, "30 decisions with binds")
            # Zones at the minimum count are feasible: all 3 (12 nodes), then 2 (8), then 1 (4), and again.
            assert [r["feasible"] for r in records] == [4 * (3 - k % 3) for k in range(30)]
            assert placed_while_an_earlier_bind_ran(records) > 0, "no overlap: the burst was not a burst"


# -- affinity ----------------------------------------------------------------------------------------
def test_clients_with_required_pod_affinity_join_the_servers_zone(cluster: DevCluster, api: KubeAPI,
                                                                  namespace: str) -> None:
    with zoned_pool(cluster, zones=3, per_zone=2) as (pool, zones, zone_of):
        app, name = f"db-{secrets.token_hex(3)}", f"ms-{secrets.token_hex(3)}"
        # Every pod prefers zone 0; the server is pinned to zone 2, so only the affinity brings clients there.
        with metrics_sched(cluster, name, prefer(ZONE, zones[0])) as proc:
            server_spec = in_pool(pool)
            server_spec["nodeSelector"][ZONE] = zones[2]
            create_all(api, namespace, pods(["server"], name, {"app": app}, **server_spec))
            wait_bound(cluster, proc, api, namespace, 1)
            clients = [f"client-{i}" for i in range(5)]
            create_all(api, namespace, pods(clients, name, {"app": f"{app}-client"},
                                            affinity=required("podAffinity", {"app": app}, ZONE), **in_pool(pool)))
            placed = wait_bound(cluster, proc, api, namespace, 6)
            assert {pod: zone_of[node] for pod, node in placed.items()} == dict.fromkeys(["server", *clients],
                                                                                           zones[2])


def test_clients_created_before_their_server_wait_then_follow_it(cluster: DevCluster, api: KubeAPI,
                                                                 namespace: str) -> None:
    with zoned_pool(cluster, zones=3, per_zone=2) as (pool, zones, zone_of):
        app, name = f"db-{secrets.token_hex(3)}", f"ms-{secrets.token_hex(3)}"
        with metrics_sched(cluster, name, prefer(ZONE, zones[0])) as proc:
            clients = [f"client-{i}" for i in range(3)]
            create_all(api, namespace, pods(clients, name, {"app": f"{app}-client"},
                                            affinity=required("podAffinity", {"app": app}, ZONE), **in_pool(pool)))

            def refused() -> list[dict[str, Any]] | None:
                conds = [scheduled_condition(api, namespace, c) for c in clients]
                return [c for c in conds if c] if all(conds) else None

            for cond in kube.poll(refused, 10, "the clients reported unschedulable"):
                assert cond["status"] == "False" and cond["reason"] == "Unschedulable"
                assert rejections(cond["message"])[AFFINITY_REASON] == 6, cond["message"]
            assert not bound_now(api, namespace)
            # The server's arrival (an assigned pod added) must bring the parked clients back, well before the
            # periodic flush of parked pods.
            server_spec = in_pool(pool)
            server_spec["nodeSelector"][ZONE] = zones[2]
            create_all(api, namespace, pods(["server"], name, {"app": app}, **server_spec))
            placed = wait_bound(cluster, proc, api, namespace, 4)
            assert {pod: zone_of[node] for pod, node in placed.items()} == dict.fromkeys(["server", *clients],
                                                                                           zones[2])


def test_the_first_pod_of_a_self_affine_group_is_scheduled_and_the_rest_follow_it(
        cluster: DevCluster, api: KubeAPI, namespace: str) -> None:
    # LeastAllocated at weight 1000 spreads pods over nodes and outweighs InterPodAffinity's own score (which
    # pulls towards pods whose required affinity the pod matches): only the filter puts the group together.
    spread_out = {"plugins": {"score": {"enabled": [{"name": "NodeResourcesFit", "weight": 1000}]}}}
    with node_pool(cluster, 6) as (pool, _):
        name = f"ms-{secrets.token_hex(3)}"
        alone, group = f"solo-{secrets.token_hex(3)}", f"group-{secrets.token_hex(3)}"
        create_all(api, namespace, pods([alone], name, {"app": alone},
                                        affinity=required("podAffinity", {"app": alone}, HOSTNAME), **in_pool(pool)))
        # A burst of a group with no member anywhere yet: the first one placed is matched by nothing but itself,
        # each later one must find it (assumed or bound) and join its node.
        members = [f"{group}-{i}" for i in range(5)]
        create_all(api, namespace, pods(members, name, {"app": group},
                                        affinity=required("podAffinity", {"app": group}, HOSTNAME), **in_pool(pool)))
        all_pending(api, namespace, 6)
        with metrics_sched(cluster, name, spread_out) as proc:
            placed = wait_bound(cluster, proc, api, namespace, 6)
            assert len({placed[m] for m in members}) == 1, {m: placed[m] for m in members}
