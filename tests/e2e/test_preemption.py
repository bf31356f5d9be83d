"""Preemption against the dev cluster (issue 13's acceptance): a pool full of priority-0 training pods, then a
priority-1000 inference pod: exactly the minimal victims are deleted, the pod is nominated and then bound there;
a PodDisruptionBudget with maxUnavailable: 0 steers preemption to another node; preemptionPolicy: Never never
preempts. PriorityClasses are cluster-scoped: each test creates its own, named after it, and deletes them."""

from __future__ import annotations

import secrets
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx

from devcluster import DevCluster
from devcluster.kubeapi import KubeAPI
from tests.e2e import kube
from tests.e2e.pools import in_pool, node_pool
from tests.e2e.scheduler_proc import SchedulerProcess, schedulers

NODES = 3
PER_NODE = 4  # training pods of 1 cpu on each 4-cpu node: the pool is full


@contextmanager
def priority_classes(api: KubeAPI) -> Iterator[dict[str, str]]:
    """train (0), infer (1000) and infer-never (1000, preemptionPolicy Never), under names of their own."""
    suffix = secrets.token_hex(3)
    specs = {"train": (0, "PreemptLowerPriority"), "infer": (1000, "PreemptLowerPriority"),
             "infer-never": (1000, "Never")}
    names = {key: f"e2e-{key}-{suffix}" for key in specs}
    try:
        for key, (value, policy) in specs.items():
            api.post("/apis/scheduling.k8s.io/v1/priorityclasses", {
                "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": names[key]},
                "value": value, "preemptionPolicy": policy})
        yield names
    finally:
        for name in names.values():
            api.request("DELETE", f"/apis/scheduling.k8s.io/v1/priorityclasses/{name}", ok=(404,))


def create(api: KubeAPI, namespace: str, name: str, pool: str, scheduler: str, priority_class: str, cpu: str,
           labels: dict[str, str] | None = None, node: str | None = None) -> None:
    body = kube.pod_manifest(name, scheduler=scheduler, cpu=cpu, memory="100Mi", priorityClassName=priority_class,
                             **in_pool(pool))
    body["metadata"]["labels"] = labels or {"app": "test"}
    if node is not None:  # placed directly (the training pods): the pool is full before the test starts
        body["spec"]["nodeName"] = node
    api.post(f"/api/v1/namespaces/{namespace}/pods", body)


def fill(api: KubeAPI, namespace: str, pool: str, nodes: list[str], scheduler: str, classes: dict[str, str]
         ) -> dict[str, str]:
    """Four running priority-0 training pods on each node; returns pod name -> node."""
    placed: dict[str, str] = {}
    for node in nodes:
        for j in range(PER_NODE):
            name = f"train-{node[-2:]}-{j}"
            create(api, namespace, name, pool, scheduler, classes["train"], "1",
                   labels={"app": "train", "node": node}, node=node)
            placed[name] = node

    def running() -> bool:
        pods = kube.list_pods(api, namespace)
        return len(pods) == len(placed) and all(p["status"].get("phase") == "Running" for p in pods)

    kube.poll(running, 60, "the training pods Running")
    return placed


def pods_by_name(api: KubeAPI, namespace: str) -> dict[str, dict[str, Any]]:
    return {p["metadata"]["name"]: p for p in kube.list_pods(api, namespace)}


def remaining(api: KubeAPI, namespace: str, count: int) -> dict[str, dict[str, Any]] | None:
    """The namespace's pods once exactly `count` are left (deleted ones gone from the API, not just terminating)."""
    pods = pods_by_name(api, namespace)
    return pods if len(pods) == count else None


def bound_node(api: KubeAPI, namespace: str, name: str) -> str | None:
    node: str | None = api.get(f"/api/v1/namespaces/{namespace}/pods/{name}")["spec"].get("nodeName")
    return node


def decision(proc: SchedulerProcess, pod: str, *, containing: str) -> dict[str, Any] | None:
    """The latest decision record of the pod with a note containing `containing`."""
    body = httpx.get(f"{proc.url}/decisions", params={"pod": pod}, timeout=5).json()
    for record in body["decisions"]:
        if any(containing in note for note in record.get("notes") or ()):
            return dict(record)
    return None


def events(api: KubeAPI, namespace: str, reason: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = api.get(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")["items"]
    return [e for e in items if e["reason"] == reason]


def test_a_high_priority_pod_preempts_the_minimal_victims_is_nominated_then_bound(
        cluster: DevCluster, api: KubeAPI, namespace: str) -> None:
    with (priority_classes(api) as classes, node_pool(cluster, NODES, cpu="4", memory="16Gi") as (pool, specs),
          schedulers(cluster, leader_elect=False) as (name, [proc])):
        placed = fill(api, namespace, pool, [s.name for s in specs], name, classes)
        create(api, namespace, "infer", pool, name, classes["infer"], "2")
        node = kube.poll(lambda: bound_node(api, namespace, "infer"), 60, "the inference pod bound")

        # Exactly the minimal set: two training pods of the node it went to, and nothing else.
        left = kube.poll(lambda: remaining(api, namespace, len(placed) - 1), 30, "two victims gone")
        gone = sorted(set(placed) - set(left))
        assert len(gone) == 2 and {placed[g] for g in gone} == {node}, (gone, node)
        assert all(placed[p] == bound_node(api, namespace, p) for p in left if p != "infer")
        infer = left["infer"]
        assert infer["spec"]["priority"] == 1000
        # status.nominatedNodeName is cleared by the API server's binding: that it was set is the record's and the
        # FailedScheduling event's to show (below).

        # The Preempted events on the victims, FailedScheduling saying preemption was under way, the record.
        preempted = kube.poll(lambda: found if len(found := events(api, namespace, "Preempted")) == 2 else None, 20,
                              "a Preempted event on each victim")
        assert sorted(e["regarding"]["name"] for e in preempted) == gone
        assert all(e["note"] == f"Preempted by pod {infer['metadata']['uid']} on node {node}" for e in preempted)
        failed = kube.poll(lambda: [e for e in events(api, namespace, "FailedScheduling")
                                    if e["regarding"]["name"] == "infer"], 20, "FailedScheduling on the pod")
        assert failed and "preemption: 2 lower-priority pod(s) on node" in failed[0]["note"], failed
        record = kube.poll(lambda: decision(proc, f"{namespace}/infer", containing="preemption: nominated"), 10,
                           "the preemption's decision record")
        assert record["nominated_node"] == node
        # `explain --all`: the attempt that preempted (its victims, their priorities, why that node), then the bind.
        out = subprocess.run([sys.executable, "-m", "metrics_sched.app.cli", "explain", f"{namespace}/infer", "--all",
                              "--url", proc.url], capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out.stderr
        assert f"nominated by PostFilter: {node}" in out.stdout, out.stdout
        assert f"preemption: nominated to {node} out of 3 candidate node(s); victims: " in out.stdout, out.stdout
        assert "(priority 0)" in out.stdout and "PDB violations: 0; chosen by " in out.stdout, out.stdout

        exposition = httpx.get(f"{proc.url}/metrics", timeout=5).text.splitlines()
        # Every PostFilter run counts (a retry while the victims leave too); one preemption, of two victims.
        assert float(next(v for line in exposition if (v := line.partition("scheduler_preemption_attempts_total ")[2])
                          and line.startswith("scheduler_preemption_attempts_total "))) >= 1
        assert "scheduler_preemption_victims_count 1.0" in exposition
        assert "scheduler_preemption_victims_sum 2.0" in exposition


def test_a_budget_with_max_unavailable_zero_steers_preemption_to_another_node(
        cluster: DevCluster, api: KubeAPI, namespace: str) -> None:
    with priority_classes(api) as classes, node_pool(cluster, NODES, cpu="4", memory="16Gi") as (pool, specs):
        nodes = [s.name for s in specs]
        free = nodes[1]
        for protected in (nodes[0], nodes[2]):
            api.post(f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets", {
                "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": f"keep-{protected}"},
                "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"node": protected}}}})
        # The scheduler must see both budgets before the pod comes (its PDB watch is what steers it): they exist
        # before it starts, so its first LIST holds them, and schedulers() waits for /readyz, which waits for
        # that LIST of every watched resource.
        with schedulers(cluster, leader_elect=False) as (name, [proc]):
            placed = fill(api, namespace, pool, nodes, name, classes)
            create(api, namespace, "infer", pool, name, classes["infer"], "2")
            node = kube.poll(lambda: bound_node(api, namespace, "infer"), 60, "the inference pod bound")
            assert node == free
            left = kube.poll(lambda: remaining(api, namespace, len(placed) - 1), 30, "two victims gone")
            assert {placed[g] for g in set(placed) - set(left)} == {free}
            record = kube.poll(lambda: decision(proc, f"{namespace}/infer", containing="preemption: nominated"), 10,
                               "the preemption's decision record")
            assert "PDB violations: 0" in " ".join(record["notes"]), record["notes"]


def test_preemption_policy_never_never_preempts(cluster: DevCluster, api: KubeAPI, namespace: str) -> None:
    with (priority_classes(api) as classes, node_pool(cluster, NODES, cpu="4", memory="16Gi") as (pool, specs),
          schedulers(cluster, leader_elect=False) as (name, [proc])):
        placed = fill(api, namespace, pool, [s.name for s in specs], name, classes)
        create(api, namespace, "polite", pool, name, classes["infer-never"], "2")
        kube.poll(lambda: decision(proc, f"{namespace}/polite",
                                   containing="not eligible due to preemptionPolicy=Never."), 30,
                  "the decision that it may not preempt")
        pods = pods_by_name(api, namespace)
        assert set(pods) == {*placed, "polite"}
        assert not any(p["metadata"].get("deletionTimestamp") for p in pods.values())
        assert pods["polite"]["spec"].get("nodeName") is None
        assert not pods["polite"]["status"].get("nominatedNodeName")
        assert events(api, namespace, "Preempted") == []
