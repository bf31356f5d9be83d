"""The cluster state's memory follows the current cluster, not its history (issue 14 item 4): per-owner counts,
host-port counts and pods waiting for an unknown node are dropped when their last pod leaves."""

from __future__ import annotations

import uuid
from typing import Any

import numpy as np
import pytest

from metrics_sched.model.podinfo import parse_pod
from metrics_sched.state.cluster_state import ClusterState
from tests.unit.fakes import node, pod

pytestmark = pytest.mark.unit


def owned(name: str, owner: str, node_name: str, **kw: Any) -> dict[str, Any]:
    body = pod(name, node_name=node_name, **kw)
    body["metadata"]["ownerReferences"] = [{"kind": "Job", "uid": owner, "controller": True}]
    return body


def state_with_nodes(count: int) -> ClusterState:
    state = ClusterState()
    for i in range(count):
        state.upsert_node(node(f"n{i}"))
    return state


def test_owners_that_come_and_go_leave_nothing_behind() -> None:
    state = state_with_nodes(10)
    for job in range(1000):  # 1,000 finished Jobs
        owner = str(uuid.uuid4())
        info = parse_pod(owned(f"j{job}", owner, f"n{job % 10}"))
        state.observe_bound_pod(info)
        assert state.owner_counts(f"Job/{owner}").sum() == 1
        state.remove_pod(info.uid)
    assert state._owner_counts == {} and state._owner_totals == {}
    assert state.pods == {}


def test_owner_counts_stay_right_while_pods_come_go_and_nodes_vanish() -> None:
    state = state_with_nodes(3)
    live = [parse_pod(owned(f"p{i}", "web", f"n{i % 3}")) for i in range(6)]
    for info in live:
        state.observe_bound_pod(info)
    state.remove_pod(live[0].uid)
    counts = state.owner_counts("Job/web")
    assert counts[[state.table.index[n] for n in ("n0", "n1", "n2")]].tolist() == [1, 2, 2]
    # A node goes with two of the owner's pods on it: they wait (uncounted) for it; the owner stays known.
    state.remove_node("n1")
    assert int(state.owner_counts("Job/web").sum()) == 3
    # The node comes back: counted again.
    state.upsert_node(node("n1"))
    assert int(state.owner_counts("Job/web")[state.table.index["n1"]]) == 2
    state.remove_node("n1")
    for info in live[1:]:
        state.remove_pod(info.uid)
    assert state._owner_counts == {} and state._owner_totals == {}
    assert state._waiting == {}, "pods of a node that never came back left an empty set behind"


def test_host_ports_are_forgotten_when_no_pod_holds_them() -> None:
    state = state_with_nodes(2)
    pods = []
    for port in range(30000, 30200):
        body = pod(f"p{port}", node_name="n0")
        body["spec"]["containers"][0]["ports"] = [{"containerPort": 80, "hostPort": port}]
        info = parse_pod(body)
        state.observe_bound_pod(info)
        pods.append(info)
    assert state.host_port_conflicts([("", "TCP", 30007)])[state.table.index["n0"]]
    for info in pods[:100]:
        state.remove_pod(info.uid)
    state.remove_node("n0")  # the rest leave with their node
    assert state._port_counts == {}
    assert not np.any(state.host_port_conflicts([("", "TCP", 30150)]))


def test_an_assumed_pod_keeps_its_room_when_its_node_leaves_and_comes_back() -> None:
    """Found by the chaos test: a pod assumed (bind on its way) on a node that is deleted and re-added before the
    bind lands must still count there, or another pod is placed into the room the bind will take."""
    state = state_with_nodes(1)
    info = parse_pod(pod("p", cpu="900m"))
    state.assume(info, "n0")
    row = state.table.index["n0"]
    cpu = state.table.resource_index["cpu"]
    assert state.table.requested[row, cpu] == 900
    assert [p.uid for p in state.remove_node("n0")] == [info.uid]  # still assumed, waiting for its node
    state.upsert_node(node("n0"))
    assert state.table.requested[state.table.index["n0"], cpu] == 900
    # The bind lands: the watch confirms it where it is.
    bound = parse_pod(pod("p", cpu="900m", node_name="n0"))
    bound.uid = info.uid
    assert state.observe_bound_pod(bound) == "confirmed"
    # Had the bind failed instead, forgetting the pod frees the room and leaves nothing behind.
    other = parse_pod(pod("q", cpu="50m"))
    state.assume(other, "n0")
    state.remove_node("n0")
    state.forget(other.uid)
    assert other.uid not in state.pods and other.uid not in state._waiting.get("n0", set())
