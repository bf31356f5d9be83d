"""The dev cluster's KWOK stands in for kubelet heartbeats when asked (the benchmarks' realistic load): node
Leases renewed at a quarter of their duration, and periodic node status reports."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from devcluster import DevCluster
from devcluster.heartbeats import NodeHeartbeats
from devcluster.kubeapi import KubeAPI
from tests.polling import poll

pytestmark = pytest.mark.e2e

NODES = 5
# Short periods so the test sees several rounds: renewals every 2 s, a status report every 2-6 s.
HEARTBEATS = NodeHeartbeats(lease_duration_seconds=8, status_report_seconds=4.0, lease_parallelism=2)


@pytest.fixture(scope="module")
def heartbeat_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeAPI]:
    run_dir: Path = tmp_path_factory.mktemp("heartbeats")
    with DevCluster(run_dir, nodes=NODES, with_prometheus=False, with_emulator=False,
                    with_controller_manager=False, node_heartbeats=HEARTBEATS, quiet=True) as cluster, \
            cluster.api() as api:
        yield api


def renew_times(api: KubeAPI) -> dict[str, str]:
    leases = api.get("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases")["items"]
    return {lease["metadata"]["name"]: lease["spec"]["renewTime"] for lease in leases
            if lease.get("spec", {}).get("renewTime")}


def ready_heartbeats(api: KubeAPI) -> dict[str, str]:
    nodes = api.get("/api/v1/nodes")["items"]
    return {node["metadata"]["name"]: next(c.get("lastHeartbeatTime") or "" for c in node["status"]["conditions"]
                                           if c["type"] == "Ready") for node in nodes}


def test_every_node_lease_is_renewed_every_quarter_of_its_duration(heartbeat_api: KubeAPI) -> None:
    def every_lease() -> dict[str, str] | None:
        times = renew_times(heartbeat_api)
        return times if len(times) == NODES else None

    first = poll(every_lease, 60, f"a Lease for each of the {NODES} nodes")
    leases = heartbeat_api.get("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases")["items"]
    assert {lease["spec"]["leaseDurationSeconds"] for lease in leases} == {8}
    # Renewed every 2 s: within 10 s every Lease has a newer renewTime.
    poll(lambda: all(renew_times(heartbeat_api).get(n, t) > t for n, t in first.items()), 10,
         "every node Lease renewed")


def test_every_node_reports_its_status_periodically(heartbeat_api: KubeAPI) -> None:
    def every_report() -> dict[str, str] | None:  # a node reports its first status a few seconds in
        times = ready_heartbeats(heartbeat_api)
        return times if len(times) == NODES and all(times.values()) else None

    first = poll(every_report, 30, f"a status report from each of the {NODES} nodes")
    # Reports come every 2-6 s; lastHeartbeatTime has 1 s resolution: within 15 s each has moved on.
    poll(lambda: all(ready_heartbeats(heartbeat_api)[n] > t for n, t in first.items()), 15,
         "a new status report (Ready's lastHeartbeatTime) from every node")
