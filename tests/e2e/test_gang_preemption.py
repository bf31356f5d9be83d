"""A gang preempts as a whole against the dev cluster (issue 44, defect 2's acceptance): three 4-cpu nodes full
of priority-0 training pods, then a PodGroup (minMember 3) of three priority-1000 members of 4 cpu each: every
training pod is preempted and the three members bind, one per node. Before, the gang never preempted. The three
nodes share one zone: Coscheduling places a gang in one zone (gangPlacement Domain, the default), so in three
zones there is no room to make for it (test_gang_preemption.py in the unit tests covers that)."""

from __future__ import annotations

import httpx
import pytest

from devcluster import DevCluster
from devcluster.kubeapi import KubeAPI
from tests.e2e import kube
from tests.e2e.pools import in_pool, node_pool
from tests.e2e.scheduler_proc import SchedulerProcess, schedulers
from tests.e2e.test_preemption import decision, fill, priority_classes, remaining

pytestmark = pytest.mark.e2e

CRD_API = "/apis/scheduling.x-k8s.io/v1alpha1"


def bound(api: KubeAPI, namespace: str, names: list[str]) -> dict[str, str]:
    return {p["metadata"]["name"]: p["spec"]["nodeName"] for p in kube.list_pods(api, namespace)
            if p["metadata"]["name"] in names and p["spec"].get("nodeName")}


def diagnosis(api: KubeAPI, proc: SchedulerProcess, namespace: str, members: list[str]) -> str:
    """What each member's pod and latest decisions say (printed when the test fails)."""
    lines = []
    for p in kube.list_pods(api, namespace):
        conditions = {c["type"]: c.get("message", "") for c in (p.get("status") or {}).get("conditions") or ()}
        lines.append(f"{p['metadata']['name']}: node={p['spec'].get('nodeName')} "
                     f"nominated={(p.get('status') or {}).get('nominatedNodeName')} "
                     f"deleting={bool(p['metadata'].get('deletionTimestamp'))} "
                     f"scheduled={conditions.get('PodScheduled', '')!r}")
    for member in members:
        body = httpx.get(f"{proc.url}/decisions", params={"pod": f"{namespace}/{member}"}, timeout=5).json()
        for record in body["decisions"][:4]:
            lines.append(f"  {member} {record.get('result')}: {record.get('message')} | {record.get('notes')}")
    return "\n".join(lines)


def test_a_pod_group_of_three_preempts_on_three_full_nodes_and_binds_all_three(
        cluster: DevCluster, api: KubeAPI, namespace: str) -> None:
    with (priority_classes(api) as classes, node_pool(cluster, 3, cpu="4", memory="16Gi", own_zones=1) as (pool, specs),
          schedulers(cluster, leader_elect=False) as (name, [proc])):
        placed = fill(api, namespace, pool, [s.name for s in specs], name, classes)
        api.post(f"{CRD_API}/namespaces/{namespace}/podgroups", {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
            "metadata": {"name": "train-gang", "namespace": namespace},
            "spec": {"minMember": 3, "scheduleTimeoutSeconds": 30}})
        members = [f"gang-{i}" for i in range(3)]
        for member in members:
            body = kube.pod_manifest(member, scheduler=name, cpu="4", memory="100Mi",
                                     priorityClassName=classes["infer"], **in_pool(pool))
            body["metadata"]["labels"] = {"scheduling.x-k8s.io/pod-group": "train-gang"}
            api.post(f"/api/v1/namespaces/{namespace}/pods", body)
        def all_bound() -> dict[str, str] | None:
            found = bound(api, namespace, members)
            return found if len(found) == 3 else None

        try:
            nodes = kube.poll(all_bound, 90, "all three members bound")
        except AssertionError:
            print(diagnosis(api, proc, namespace, members))
            raise
        assert sorted(nodes.values()) == sorted(s.name for s in specs)  # one per node
        left = kube.poll(lambda: remaining(api, namespace, len(members)), 30, "every training pod gone")
        assert set(left) == set(members) and not set(placed) & set(left)
        record = kube.poll(lambda: decision(proc, f"{namespace}/gang-0", containing="member(s) of pod group")
                           or decision(proc, f"{namespace}/gang-1", containing="member(s) of pod group")
                           or decision(proc, f"{namespace}/gang-2", containing="member(s) of pod group"), 10,
                           "the record of the preemption made for the whole gang")
        assert record["nominated_node"] in nodes.values()
