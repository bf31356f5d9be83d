"""Differential test of preemption: the real kube-scheduler and metrics-sched each get the same case on a copy
of its nodes, pods and PodDisruptionBudgets, and must agree on whether preemption happens, on the victims'
count and priorities, and on the nominated node whenever kube-scheduler's criteria single one out.

A case (derived from (DIFF_SEED, case number) alone) is 1-4 nodes of 2 or 4 cpu, filled (or nearly) with
running pods of priorities 0/10/100/500 (PriorityClasses made for the run); on one node, the pods of one
priority all have one size, since upstream orders equal-priority pods by a start time that has one-second
granularity (a tie it breaks arbitrarily, which could change which of two sizes is reprieved). 0-2
PodDisruptionBudgets select an app's pods of the case with status.disruptionsAllowed 0-2, written by the test
through the status subresource (the dev cluster runs no disruption controller; both schedulers read what is
there). The pod to place has priority 500 or 1000 and requests 1-3 cpu, so it usually fits nowhere without
preemption; 10% have preemptionPolicy: Never.

Verdicts: bound (after a preemption or not) with the pods deleted from the copy, or PodScheduled=False with no
pod deleted (kube-scheduler's message then carries its "preemption: ..." reason; metrics-sched's decision record
has a preemption note that is not a nomination). The nominated node is the node the pod is bound to. It is
compared when metrics-sched's record says kube-scheduler's criteria 1-4 (PDB violations, highest victim
priority, priority sum, victim count) singled out the node, or there was one candidate; criterion 5 (the latest
start of the highest-priority victims) is not compared: the two copies' pods start at different seconds.

Only resource plugins decide: metrics-sched runs with no telemetry plugin. All cases run at once, each on its
own pools, with one kube-scheduler and one metrics-sched:

    DIFF_SEED=1234 pytest tests/e2e/test_differential_preemption.py
    DIFF_PREEMPTION_CASES=200 pytest tests/e2e/test_differential_preemption.py
    DIFF_SEED=1234 DIFF_PREEMPTION_CASE=17 pytest tests/e2e/test_differential_preemption.py   # one case again
"""

from __future__ import annotations

import collections
import os
import random
import re
import secrets
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from devcluster import DevCluster
from devcluster.kubeapi import KubeAPI
from devcluster.nodes import create_nodes, delete_nodes
from tests.e2e import kube
from tests.e2e.kube_scheduler import kube_scheduler
from tests.e2e.pools import POOL_LABEL, CaseCopy, case_pairs
from tests.e2e.scheduler_proc import schedulers

pytestmark = pytest.mark.e2e

SEED = int(os.environ.get("DIFF_SEED", "20261201"))
CASES = int(os.environ.get("DIFF_PREEMPTION_CASES", "60"))
ONLY = os.environ.get("DIFF_PREEMPTION_CASE")  # e.g. "17" or "3,17": re-run those cases of the seed
SCHEDULERS = ("kube", "ms")
VICTIM_PRIORITIES = (0, 10, 100, 500)
PREEMPTOR_PRIORITIES = (500, 1000)
# metrics-sched's decision notes that say preemption cannot help (upstream's FitError, or the pod's policy).
FINAL_NO = ("preemption: 0/", "preemption: not eligible due to preemptionPolicy=Never.")
# metrics-sched's record says which criterion chose the node; these are upstream's first four.
DECIDING = ("the only candidate", "fewest PDB violations", "lowest highest victim priority",
            "smallest sum of victim priorities", "fewest victims")


def generate(seed: int, number: int) -> dict[str, Any]:
    rng = random.Random(f"{seed}/preemption/{number}")
    nodes: list[dict[str, Any]] = []
    existing: list[dict[str, Any]] = []
    for i in range(rng.randint(1, 4)):
        cpu = rng.choice([2000, 4000])
        nodes.append({"cpu": cpu})
        size = {p: rng.choice([500, 1000]) for p in VICTIM_PRIORITIES}  # one size per priority on a node
        used = 0
        room = 0 if rng.random() < 0.6 else 500  # full, or half a cpu left
        while True:
            priority = rng.choice(VICTIM_PRIORITIES)
            if used + size[priority] > cpu - room:
                break
            existing.append({"node": i, "cpu": size[priority], "priority": priority, "app": rng.choice("ab")})
            used += size[priority]
    budgets = [{"app": app, "allowed": rng.randint(0, 2)} for app in rng.sample("ab", rng.randint(0, 2))]
    pod = {"priority": rng.choice(PREEMPTOR_PRIORITIES), "cpu": rng.choice([1000, 1500, 2000, 3000]),
           "never": rng.random() < 0.1}
    return {"case": number, "nodes": nodes, "existing": existing, "budgets": budgets, "pod": pod}


class Copy(CaseCopy):
    prefix = "dp"

    @property
    def namespace(self) -> str:
        return f"dp-{self.run}-{self.scheduler}"

    @property
    def tag(self) -> str:
        return f"c{self.case['case']:03d}"

    @property
    def pod_name(self) -> str:
        return f"{self.tag}-probe"

    def existing_pods(self, classes: dict[int, str]) -> list[dict[str, Any]]:
        return [{
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{self.tag}-e{j}", "namespace": self.namespace,
                         "labels": {"case": self.tag, "app": e["app"], "dp-run": self.run, "dp": "existing"}},
            "spec": {"nodeName": self.names[e["node"]], "schedulerName": "nobody",
                     "priorityClassName": classes[e["priority"]], "terminationGracePeriodSeconds": 0,
                     "tolerations": [{"operator": "Exists"}],
                     "containers": [{"name": "c", "image": "registry.local/pause:3.10",
                                     "resources": {"requests": {"cpu": f"{e['cpu']}m", "memory": "10Mi"}}}]},
        } for j, e in enumerate(self.case["existing"])]

    def budgets(self) -> list[dict[str, Any]]:
        return [{"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                 "metadata": {"name": f"{self.tag}-{b['app']}", "namespace": self.namespace},
                 "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"case": self.tag, "app": b["app"]}}}}
                for b in self.case["budgets"]]

    def probe(self, scheduler_name: str, classes: dict[int, str], never: str) -> dict[str, Any]:
        want = self.case["pod"]
        return {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": self.pod_name, "namespace": self.namespace,
                         "labels": {"case": self.tag, "dp-run": self.run, "dp": "probe"}},
            "spec": {"schedulerName": scheduler_name, "terminationGracePeriodSeconds": 0,
                     "priorityClassName": never if want["never"] else classes[want["priority"]],
                     "nodeSelector": {POOL_LABEL: self.pool},
                     "tolerations": [{"key": POOL_LABEL, "operator": "Equal", "value": self.pool,
                                      "effect": "NoSchedule"}],
                     "containers": [{"name": "c", "image": "registry.local/pause:3.10",
                                     "resources": {"requests": {"cpu": f"{want['cpu']}m", "memory": "10Mi"}}}]},
        }


@dataclass(frozen=True)
class Verdict:
    node: int | None  # index in the pool when bound
    deleted: tuple[int, ...]  # the indices of the existing pods deleted
    message: str = ""

    def victims(self, case: dict[str, Any]) -> tuple[int, ...]:
        """The deleted pods' priorities, sorted."""
        return tuple(sorted(case["existing"][j]["priority"] for j in self.deleted))


def one_round(case: dict[str, Any], verdict: Verdict) -> bool:
    """Whether the deleted pods can be one preemption's victims: upstream's reprieve keeps every victim whose
    return still lets the pod fit, so with all the others kept, each victim must be needed (cpu alone decides
    here). A set where one could come back is what two preemptions in a row leave (kube-scheduler's async
    preemption can start a second one before the first's deletions reach its cache: kubernetes#141694)."""
    if verdict.node is None or not verdict.deleted:
        return True
    node = verdict.node
    on_node = [j for j, e in enumerate(case["existing"]) if e["node"] == node]
    kept = sum(case["existing"][j]["cpu"] for j in on_node if j not in verdict.deleted)
    room = case["nodes"][node]["cpu"] - case["pod"]["cpu"]
    return all(kept + case["existing"][j]["cpu"] > room for j in verdict.deleted)


def _post_all(api: KubeAPI, bodies: list[dict[str, Any]]) -> None:
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda b: api.post(f"/api/v1/namespaces/{b['metadata']['namespace']}/pods", b), bodies))


@pytest.fixture
def preemption_cases(cluster: DevCluster, api: KubeAPI) -> Iterator[tuple[str, list[dict[str, Copy]]]]:
    """The cases' pools, namespaces and PriorityClasses, deleted at the end."""
    run = secrets.token_hex(2)
    numbers = [int(n) for n in ONLY.split(",")] if ONLY else list(range(CASES))
    cases = [generate(SEED, n) for n in numbers]
    pairs = case_pairs(cases, SCHEDULERS, lambda case, scheduler: Copy(case, scheduler, run),
                       lambda node: int(node["cpu"]), 300000 + secrets.randbelow(4000) * 256)
    specs = [s for pair in pairs for copy in pair.values() for s in copy.nodes]
    namespaces = [f"dp-{run}-{s}" for s in SCHEDULERS]
    classes = [f"dp-{run}-p{v}" for v in (*VICTIM_PRIORITIES, 1000)] + [f"dp-{run}-never"]
    try:
        for ns in namespaces:
            api.post("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        for v in (*VICTIM_PRIORITIES, 1000):
            api.post("/apis/scheduling.k8s.io/v1/priorityclasses", {
                "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": f"dp-{run}-p{v}"},
                "value": v})
        api.post("/apis/scheduling.k8s.io/v1/priorityclasses", {
            "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": f"dp-{run}-never"},
            "value": 1000, "preemptionPolicy": "Never"})
        create_nodes(api, specs, concurrency=32)
        yield run, pairs
    finally:
        kube.concurrently([lambda: delete_nodes(api, [s.name for s in specs], concurrency=32),
                           *(lambda ns=ns: kube.delete_namespace(api, ns) for ns in namespaces)])
        for name in classes:
            api.request("DELETE", f"/apis/scheduling.k8s.io/v1/priorityclasses/{name}", ok=(404,))


def ms_notes(url: str) -> dict[str, list[str]]:
    """Per pod (namespace/name), the preemption notes of metrics-sched's decision records (newest first)."""
    notes: dict[str, list[str]] = collections.defaultdict(list)
    params = {"limit": "1000"}
    while True:
        body = httpx.get(f"{url}/decisions", params=params, timeout=30).json()
        for record in body["decisions"]:
            notes[record["pod"]] += [n for n in record.get("notes") or () if n.startswith("preemption: ")]
        if not body.get("next"):
            return notes
        params = {"limit": "1000", "before": str(body["next"])}


def test_kube_scheduler_and_metrics_sched_agree_on_preemption(
        cluster: DevCluster, api: KubeAPI, preemption_cases: tuple[str, list[dict[str, Copy]]]) -> None:
    started = time.monotonic()
    run, pairs = preemption_cases
    priorities = {v: f"dp-{run}-p{v}" for v in (*VICTIM_PRIORITIES, 1000)}
    never = f"dp-{run}-never"
    copies = [copy for pair in pairs for copy in pair.values()]
    _post_all(api, [p for copy in copies for p in copy.existing_pods(priorities)])
    for copy in copies:
        for budget in copy.budgets():
            api.post(f"/apis/policy/v1/namespaces/{copy.namespace}/poddisruptionbudgets", budget)
    for copy in copies:  # disruptionsAllowed as the case says (no disruption controller runs here)
        for b in copy.case["budgets"]:
            api.request("PATCH", f"/apis/policy/v1/namespaces/{copy.namespace}/poddisruptionbudgets/"
                                 f"{copy.tag}-{b['app']}/status",
                        {"status": {"disruptionsAllowed": b["allowed"], "currentHealthy": 0, "desiredHealthy": 0,
                                    "expectedPods": 0, "observedGeneration": 1}},
                        content_type="application/merge-patch+json")
    expected = {(c.namespace, f"{c.tag}-e{j}") for c in copies for j in range(len(c.case["existing"]))}
    kube.poll(lambda: {(p["metadata"]["namespace"], p["metadata"]["name"]) for p in api.get(
        "/api/v1/pods", labelSelector=f"dp=existing,dp-run={run}")["items"]
        if p["status"].get("phase") == "Running"} == expected, 120, "every existing pod Running")

    kube_name = f"kube-dp-{secrets.token_hex(3)}"
    ms_extra = {"profile": {"plugins": {"filter": {"disabled": [{"name": "GPUTemperature"}]},
                                        "score": {"disabled": [{"name": "GPUTemperature"}, {"name": "NodeLoad"},
                                                               {"name": "Cost"}]}}}}
    with kube_scheduler(cluster, kube_name, qps=5000, burst=5000, percentage_of_nodes_to_score=100), \
            schedulers(cluster, extra=ms_extra, leader_elect=False) as (ms_name, (ms_proc,)):
        names = {"kube": kube_name, "ms": ms_name}
        _post_all(api, [c.probe(names[c.scheduler], priorities, never) for c in copies])
        by_key = {(c.namespace, c.pod_name): c for c in copies}
        verdicts: dict[tuple[str, str], Verdict] = {}
        notes: dict[str, list[str]] = {}

        def all_decided() -> bool:
            pods = api.get("/api/v1/pods", labelSelector=f"dp-run={run}")["items"]
            present: dict[tuple[str, str], dict[str, Any]] = {
                (p["metadata"]["namespace"], p["metadata"]["name"]): p for p in pods}
            ms_notes_now = ms_notes(ms_proc.url)
            notes.update(ms_notes_now)
            for key, copy in by_key.items():
                if key in verdicts or key not in present:
                    continue
                gone = tuple(j for j in range(len(copy.case["existing"]))
                             if (p := present.get((copy.namespace, f"{copy.tag}-e{j}"))) is None
                             or p["metadata"].get("deletionTimestamp"))
                probe = present[key]
                if node := probe["spec"].get("nodeName"):
                    verdicts[key] = Verdict(copy.names.index(node), gone)
                    continue
                condition = next((c for c in probe["status"].get("conditions") or []
                                  if c["type"] == "PodScheduled" and c["status"] == "False"), None)
                if condition is None or gone or probe["status"].get("nominatedNodeName"):
                    continue  # undecided, or a preemption under way
                if copy.scheduler == "kube":
                    if any(f" {no}" in condition.get("message", "") for no in FINAL_NO):
                        verdicts[key] = Verdict(None, (), condition["message"])
                else:
                    # Definitive answers only: "waiting for the preemption" or "a terminating pod on the nominated
                    # node" are a preemption under way (the API may not show its writes yet).
                    said = ms_notes_now.get(f"{copy.namespace}/{copy.pod_name}", [])
                    if said and said[0].startswith(FINAL_NO):
                        verdicts[key] = Verdict(None, (), said[0])
            return len(verdicts) == len(by_key)

        kube.poll(all_decided, 120 + 1.0 * len(pairs), "a verdict from each scheduler for every case", interval=1.0)
    elapsed = time.monotonic() - started

    failures = []
    twice: list[int] = []
    stats: collections.Counter[str] = collections.Counter()
    for pair in pairs:
        k, m = pair["kube"], pair["ms"]
        case = k.case
        kv, mv = verdicts[(k.namespace, k.pod_name)], verdicts[(m.namespace, m.pod_name)]
        k_victims, m_victims = kv.victims(case), mv.victims(case)
        stats["cases"] += 1
        stats[f"{len(case['nodes'])} nodes"] += 1
        stats["with budgets"] += bool(case["budgets"])
        stats["preemptionPolicy Never"] += case["pod"]["never"]
        stats["preempted (kube-scheduler)"] += bool(k_victims)
        stats["bound without preemption"] += kv.node is not None and not k_victims
        stats["unschedulable"] += kv.node is None
        problem = None
        if not one_round(case, mv):
            problem = f"metrics-sched deleted more than one preemption would: {mv}"
        elif not one_round(case, kv):
            twice.append(case["case"])  # upstream's race, not a verdict: reported below, bounded
            continue
        elif (kv.node is None) != (mv.node is None) or bool(k_victims) != bool(m_victims):
            problem = f"kube-scheduler {kv} {k_victims}; metrics-sched {mv} {m_victims}"
        elif k_victims != m_victims:
            problem = f"victims differ: kube-scheduler {k_victims}, metrics-sched {m_victims}"
        elif k_victims:
            said = notes.get(f"{m.namespace}/{m.pod_name}", [])
            chosen = next((n for n in said if n.startswith("preemption: nominated")), "")
            decided = re.search(r"chosen by (.*?)(?: among .*)?$", chosen)
            by = decided[1] if decided else ""
            stats[f"node chosen by: {by}"] += 1
            if by in DECIDING:
                stats["nominated node compared"] += 1
                if kv.node != mv.node:
                    problem = f"nominated node differs: kube-scheduler {kv.node}, metrics-sched {mv.node} ({chosen})"
        if problem:
            failures.append(f"--- DIFF_SEED={SEED} case {case['case']}: {problem}\n{case}")
    stats["compared"] = len(pairs) - len(twice)
    if twice:
        print(f"\nkube-scheduler preempted twice in cases {twice} (its async-preemption race); re-run one alone with "
              f"DIFF_SEED={SEED} DIFF_PREEMPTION_CASE=n")
    # The race is rare: more than a few cases would be a harness (or scheduler) problem, not luck.
    assert len(twice) <= max(1, len(pairs) // 20), f"kube-scheduler preempted twice in {len(twice)} cases: {twice}"
    print(f"\nDIFF_SEED={SEED} {len(pairs)} preemption cases in {elapsed:.1f}s"
          + "".join(f"\n  {key}: {value}" for key, value in sorted(stats.items())))
    assert not failures, f"{len(failures)} of {len(pairs)} cases disagree:\n" + "\n".join(failures)
