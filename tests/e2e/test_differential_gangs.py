"""Differential test of gang scheduling with the Workload API: the real kube-scheduler (GenericWorkload and
GangScheduling on, which add its GangScheduling plugin and pod-group cycle to the default profile) and
metrics-sched each get the same case on their own copy of its nodes, and must agree on all or nothing.

A case (derived from (DIFF_SEED, case number) alone) is 1-4 fresh nodes of 2 or 4 cpu and one PodGroup
(scheduling.k8s.io, the version the cluster serves) of 2-8 members joined by spec.schedulingGroup.podGroupName,
with a drawn schedulingPolicy.gang.minCount and one drawn cpu request for every member. Members are equal, so
the nodes hold `room` = sum of floor(node cpu / member cpu) of them: the gang is placed when room >= minCount,
and then min(size, room) members bind, the others (and every member when it is not placed) end with
PodScheduled=False.

Each scheduler's verdict is the number of bound members once every member is decided (bound, or
PodScheduled=False from its scheduler). Both must be 0 or >= minCount, agree on whether the gang was placed,
and match the count above. Only resource plugins decide: metrics-sched runs with no telemetry plugin.

    DIFF_SEED=1234 pytest tests/e2e/test_differential_gangs.py
    DIFF_GANG_CASES=100 pytest tests/e2e/test_differential_gangs.py
"""

from __future__ import annotations

import collections
import os
import random
import secrets
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from devcluster import DevCluster
from devcluster.kubeapi import KubeAPI
from devcluster.nodes import create_nodes, delete_nodes
from tests.e2e import kube
from tests.e2e.kube_scheduler import kube_scheduler
from tests.e2e.pools import CaseCopy, case_pairs, in_pool
from tests.e2e.scheduler_proc import schedulers
from tests.e2e.test_differential import WITHOUT_TELEMETRY

pytestmark = pytest.mark.e2e

SEED = int(os.environ.get("DIFF_SEED", "20261201"))
CASES = int(os.environ.get("DIFF_GANG_CASES", "20"))
SCHEDULERS = ("kube", "ms")
# Upstream's gang scheduling: the Workload API (GenericWorkload) and the GangScheduling plugin, alpha in 1.36.
KUBE_GATES = ("GenericWorkload", "GangScheduling")


def generate(seed: int, number: int) -> dict[str, Any]:
    rng = random.Random(f"{seed}/gangs/{number}")
    nodes = [rng.choice([2000, 4000]) for _ in range(rng.randint(1, 4))]
    size = rng.randint(2, 8)
    return {"case": number, "nodes": nodes, "size": size, "min": rng.randint(1, size),
            "cpu": rng.choice([500, 1000, 1500, 2000])}


def expected_bound(case: dict[str, Any]) -> int:
    room = sum(cpu // case["cpu"] for cpu in case["nodes"])
    return min(case["size"], room) if room >= case["min"] else 0


class Copy(CaseCopy):
    prefix = "dg"

    @property
    def namespace(self) -> str:
        return f"dg-{self.run}-{self.case['case']:03d}-{self.scheduler}"


@pytest.fixture
def gang_cases(cluster: DevCluster, api: KubeAPI) -> Iterator[tuple[str, list[dict[str, Copy]]]]:
    """The cases' pools and namespaces, deleted at the end."""
    run = secrets.token_hex(2)
    pairs = case_pairs((generate(SEED, n) for n in range(CASES)), SCHEDULERS,
                       lambda case, scheduler: Copy(case, scheduler, run), int,
                       700000 + secrets.randbelow(4000) * 256)
    copies = [copy for pair in pairs for copy in pair.values()]
    specs = [s for copy in copies for s in copy.nodes]
    try:
        for copy in copies:
            api.post("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                            "metadata": {"name": copy.namespace}})
        create_nodes(api, specs, concurrency=32)
        yield run, pairs
    finally:
        kube.concurrently([lambda: delete_nodes(api, [s.name for s in specs], concurrency=32),
                           *(lambda ns=copy.namespace: kube.delete_namespace(api, ns) for copy in copies)])
        kube.release_pod_groups(api, cluster.versions.workload_api.group_version, [c.namespace for c in copies])


def decided(pod: dict[str, Any]) -> bool:
    """Bound, or told unschedulable by its scheduler."""
    conditions = (pod.get("status") or {}).get("conditions") or ()
    return bool(pod["spec"].get("nodeName")) or any(
        c["type"] == "PodScheduled" and c["status"] == "False" for c in conditions)


def test_kube_scheduler_and_metrics_sched_agree_on_gangs(
        cluster: DevCluster, api: KubeAPI, gang_cases: tuple[str, list[dict[str, Copy]]]) -> None:
    started = time.monotonic()
    run, pairs = gang_cases
    version = cluster.versions.workload_api.group_version  # v1alpha2 in 1.36
    copies = [copy for pair in pairs for copy in pair.values()]
    kube_name = f"kube-dg-{secrets.token_hex(3)}"
    with kube_scheduler(cluster, kube_name, qps=5000, burst=5000, percentage_of_nodes_to_score=100,
                        feature_gates=KUBE_GATES), \
            schedulers(cluster, extra={"profile": WITHOUT_TELEMETRY}, leader_elect=False) as (ms_name, _):
        names = {"kube": kube_name, "ms": ms_name}
        for copy in copies:  # the group first: members of a group that does not exist yet wait for it
            api.post(f"/apis/{version}/namespaces/{copy.namespace}/podgroups", {
                "apiVersion": version, "kind": "PodGroup", "metadata": {"name": "gang", "namespace": copy.namespace},
                "spec": {"schedulingPolicy": {"gang": {"minCount": copy.case["min"]}}}})
        bodies = []
        for copy in copies:
            for i in range(copy.case["size"]):
                body = kube.pod_manifest(f"m{i}", scheduler=names[copy.scheduler], cpu=f"{copy.case['cpu']}m",
                                         memory="10Mi", schedulingGroup={"podGroupName": "gang"},
                                         **in_pool(copy.pool))
                body["metadata"]["labels"]["dg-run"] = run
                body["metadata"]["namespace"] = copy.namespace
                bodies.append(body)
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(lambda b: api.post(f"/api/v1/namespaces/{b['metadata']['namespace']}/pods", b), bodies))

        verdicts: dict[str, int] = {}

        def all_decided() -> bool:
            pods = api.get("/api/v1/pods", labelSelector=f"dg-run={run}")["items"]
            by_namespace: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
            for p in pods:
                by_namespace[p["metadata"]["namespace"]].append(p)
            verdicts.clear()
            for copy in copies:
                members = by_namespace[copy.namespace]
                if len(members) != copy.case["size"] or not all(decided(p) for p in members):
                    return False
                verdicts[copy.namespace] = sum(1 for p in members if p["spec"].get("nodeName"))
            return True

        kube.poll(all_decided, 120, "every member of every gang bound or PodScheduled=False", interval=1.0)
    elapsed = time.monotonic() - started

    failures = []
    stats: collections.Counter[str] = collections.Counter()
    for pair in pairs:
        k, m = pair["kube"], pair["ms"]
        case = k.case
        kb, mb = verdicts[k.namespace], verdicts[m.namespace]
        want = expected_bound(case)
        stats["cases"] += 1
        stats["placed (by the arithmetic)"] += want > 0
        stats["partly placed (minCount < bound < size)"] += 0 < want < case["size"]
        # Where a scheduler without gangs would bind some members: all or nothing decides these.
        stats["held back (0 < room < minCount)"] += 0 < sum(c // case["cpu"] for c in case["nodes"]) < case["min"]
        problems = [f"{who} bound {n} of {case['size']} (minCount {case['min']}): neither 0 nor >= minCount"
                    for who, n in (("kube-scheduler", kb), ("metrics-sched", mb)) if 0 < n < case["min"]]
        if (kb > 0) != (mb > 0):
            problems.append(f"placed: kube-scheduler {kb > 0} ({kb} bound), metrics-sched {mb > 0} ({mb} bound)")
        elif kb != want or mb != want:
            problems.append(f"bound: kube-scheduler {kb}, metrics-sched {mb}, the nodes' room says {want}")
        if problems:
            failures.append(f"--- DIFF_SEED={SEED} case {case['case']}: {'; '.join(problems)}\n{case}")
    print(f"\nDIFF_SEED={SEED} {len(pairs)} gang cases in {elapsed:.1f}s"
          + "".join(f"\n  {key}: {value}" for key, value in sorted(stats.items())))
    assert not failures, f"{len(failures)} of {len(pairs)} cases disagree:\n" + "\n".join(failures)
