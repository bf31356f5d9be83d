"""NodePorts: the host-port index in the cluster state and the plugin, table-driven from kube-scheduler's own
cases (framework/types_test.go TestHostPortInfo_Check, plugins/nodeports/node_ports_test.go), then through the
Scheduler: two pods with the same hostPort never share a node, and the port is free again after a delete."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from metrics_sched.framework import Code, CycleState, Handle, QueueingHint
from metrics_sched.model.podinfo import parse_pod
from metrics_sched.plugins.node_ports.plugin import ERR_REASON, NodePorts, ports_conflict
from metrics_sched.state.cluster_state import ClusterState
from metrics_sched.state.pod_record import PodRecord
from metrics_sched.state.pod_shape import host_ports
from metrics_sched.telemetry.cache import MetricCache
from metrics_sched.telemetry.ledger import InFlightLedgerStore
from tests.unit.fakes import FakeAPI, node, pod
from tests.unit.test_scheduler import drain, make

pytestmark = pytest.mark.unit


def ported(name: str, *specs: str, node_name: str | None = None) -> dict[str, Any]:
    """A pod whose container has the given "PROTOCOL/hostIP/hostPort" ports (upstream's newPod helper)."""
    ports = []
    for spec in specs:
        protocol, ip, port = spec.split("/")
        ports.append({"containerPort": int(port), "hostPort": int(port), "hostIP": ip, "protocol": protocol})
    body = pod(name, node_name=node_name)
    body["spec"]["containers"][0]["ports"] = ports
    return body


def one_node(*placed: dict[str, Any]) -> tuple[ClusterState, Handle]:
    state = ClusterState()
    state.upsert_node(node("m1"))
    for p in placed:
        state.observe_bound_pod(parse_pod(p))
    return state, Handle(state, MetricCache(), InFlightLedgerStore(), FakeAPI())


# types_test.go TestHostPortInfo_Check: (added (protocol, ip, port)..., checked (protocol, ip, port), conflict)
CHECK = [
    ("empty check should check 0.0.0.0 and TCP", [("TCP", "127.0.0.1", 80)], ("", "", 81), False),
    ("empty check should check 0.0.0.0 and TCP (conflicted)", [("TCP", "127.0.0.1", 80)], ("", "", 80), True),
    ("empty port check should pass", [("TCP", "127.0.0.1", 80)], ("", "", 0), False),
    ("0.0.0.0 should check all registered IPs", [("TCP", "127.0.0.1", 80)], ("TCP", "0.0.0.0", 80), True),
    ("0.0.0.0 with different protocol should be allowed", [("UDP", "127.0.0.1", 80)], ("TCP", "0.0.0.0", 80), False),
    ("0.0.0.0 with different port should be allowed",
     [("TCP", "127.0.0.1", 79), ("TCP", "127.0.0.1", 81), ("TCP", "127.0.0.1", 82)], ("TCP", "0.0.0.0", 80), False),
    ("normal ip should check all registered 0.0.0.0", [("TCP", "0.0.0.0", 80)], ("TCP", "127.0.0.1", 80), True),
    ("normal ip with different port/protocol should be allowed (0.0.0.0)",
     [("TCP", "0.0.0.0", 79), ("UDP", "0.0.0.0", 80), ("TCP", "0.0.0.0", 81), ("TCP", "0.0.0.0", 82)],
     ("TCP", "127.0.0.1", 80), False),
    ("normal ip with different port/protocol should be allowed",
     [("TCP", "127.0.0.1", 79), ("UDP", "127.0.0.1", 80), ("TCP", "127.0.0.1", 81), ("TCP", "127.0.0.1", 82)],
     ("TCP", "127.0.0.1", 80), False),
    # not in upstream's table: an empty hostIP and protocol on the placed side read as 0.0.0.0 / TCP too
    ("empty hostIP and protocol held count as 0.0.0.0/TCP", [("", "", 80)], ("TCP", "10.0.0.1", 80), True),
]


@pytest.mark.parametrize(("name", "added", "check", "conflict"), CHECK, ids=[c[0] for c in CHECK])
def test_host_port_info_check(name: str, added: list[tuple[str, str, int]], check: tuple[str, str, int],
                              conflict: bool) -> None:
    holder = pod("holder", node_name="m1")
    holder["spec"]["containers"][0]["ports"] = [
        {"containerPort": port, "hostPort": port, "hostIP": ip, "protocol": protocol} for protocol, ip, port in added]
    state, _ = one_node(holder)
    protocol, ip, port = check
    row = state.table.index["m1"]
    assert bool(state.host_port_conflicts([(ip, protocol, port)])[row]) is conflict
    # the plugin's own pairwise check (used by the queueing hint) agrees with the index
    wanted = [(ip or "0.0.0.0", protocol or "TCP", port)]
    assert ports_conflict(wanted, host_ports(holder)) is conflict


# node_ports_test.go TestNodePorts: (name, the pod's ports, ports held on the node, fits)
NODE_PORTS = [
    ("other port", ["UDP/127.0.0.1/8080"], ["UDP/127.0.0.1/9090"], True),
    ("same udp port", ["UDP/127.0.0.1/8080"], ["UDP/127.0.0.1/8080"], False),
    ("same tcp port", ["TCP/127.0.0.1/8080"], ["TCP/127.0.0.1/8080"], False),
    ("different host ip", ["TCP/127.0.0.1/8080"], ["TCP/127.0.0.2/8080"], True),
    ("different protocol", ["UDP/127.0.0.1/8080"], ["TCP/127.0.0.1/8080"], True),
    ("second udp port conflict", ["UDP/127.0.0.1/8000", "UDP/127.0.0.1/8080"], ["UDP/127.0.0.1/8080"], False),
    ("first tcp port conflict", ["TCP/127.0.0.1/8001", "UDP/127.0.0.1/8080"],
     ["TCP/127.0.0.1/8001", "UDP/127.0.0.1/8081"], False),
    ("first tcp port conflict due to 0.0.0.0 hostIP", ["TCP/0.0.0.0/8001"], ["TCP/127.0.0.1/8001"], False),
    ("TCP hostPort conflict due to 0.0.0.0 hostIP", ["TCP/10.0.10.10/8001", "TCP/0.0.0.0/8001"],
     ["TCP/127.0.0.1/8001"], False),
    ("second tcp port conflict to 0.0.0.0 hostIP", ["TCP/127.0.0.1/8001"], ["TCP/0.0.0.0/8001"], False),
    ("second different protocol", ["UDP/127.0.0.1/8001"], ["TCP/0.0.0.0/8001"], True),
    ("UDP hostPort conflict due to 0.0.0.0 hostIP", ["UDP/127.0.0.1/8001"],
     ["TCP/0.0.0.0/8001", "UDP/0.0.0.0/8001"], False),
]


@pytest.mark.parametrize(("name", "wanted", "held", "fits"), NODE_PORTS, ids=[c[0] for c in NODE_PORTS])
def test_node_ports_filter(name: str, wanted: list[str], held: list[str], fits: bool) -> None:
    state, handle = one_node(ported("existing", *held, node_name="m1"))
    plugin = NodePorts({}, handle)
    incoming = parse_pod(ported("incoming", *wanted))
    cycle = CycleState()
    assert plugin.pre_filter(cycle, incoming).code == Code.SUCCESS
    verdict = plugin.filter(cycle, incoming, state.table)
    row = state.table.index["m1"]
    assert bool(verdict.feasible[row]) is fits
    assert bool(verdict.reasons[ERR_REASON][row]) is (not fits)


def test_pod_without_host_ports_is_skipped_at_pre_filter() -> None:
    state, handle = one_node(ported("existing", "TCP/0.0.0.0/80", node_name="m1"))
    plugin = NodePorts({}, handle)
    plain = pod("plain")
    plain["spec"]["containers"][0]["ports"] = [{"containerPort": 80}]  # no hostPort: not a host port
    assert plugin.pre_filter(CycleState(), parse_pod(plain)).code == Code.SKIP
    # a what-if run (PostFilter) calls the filter anyway: it lets every node through
    verdict = plugin.filter(CycleState(), parse_pod(plain), state.table)
    assert verdict.feasible.all()


def test_host_ports_of_containers_and_sidecars_only() -> None:
    # TestGetContainerPorts: only ports with a hostPort; util.GetHostPorts: sidecars count, other init containers not
    body = pod("p")
    body["spec"]["containers"] = [
        {"name": "a", "ports": [{"containerPort": 8001, "hostPort": 8001, "protocol": "TCP"},
                                {"containerPort": 8002, "hostPort": 8002, "protocol": "TCP"}]},
        {"name": "b", "ports": [{"containerPort": 8005, "protocol": "TCP"}]},
    ]
    body["spec"]["initContainers"] = [
        {"name": "init", "ports": [{"containerPort": 9000, "hostPort": 9000}]},
        {"name": "sidecar", "restartPolicy": "Always", "ports": [{"containerPort": 9001, "hostPort": 9001,
                                                                  "hostIP": "10.0.0.1", "protocol": "UDP"}]},
    ]
    assert host_ports(body) == (("10.0.0.1", "UDP", 9001), ("0.0.0.0", "TCP", 8001), ("0.0.0.0", "TCP", 8002))


def test_index_follows_assume_forget_confirm_remove_and_node_churn() -> None:
    state = ClusterState()
    for name in ("a", "b"):
        state.upsert_node(node(name))
    web = parse_pod(ported("web", "TCP/0.0.0.0/80"))
    wanted = [("0.0.0.0", "TCP", 80)]

    def busy() -> list[str]:
        return sorted(state.table.names_of(np.flatnonzero(state.host_port_conflicts(wanted) & state.table.present)))

    assert busy() == []
    state.assume(web, "a")
    assert busy() == ["a"]
    state.forget(web.uid)
    assert busy() == []
    state.assume(web, "b")
    web.node_name = "b"
    assert state.observe_bound_pod(web) == "confirmed"
    assert busy() == ["b"]
    state.remove_node("b")  # the bound pod waits for its node; its row is cleared (and may be reused)
    assert busy() == []
    state.upsert_node(node("c"))  # takes b's old row: nothing is held there
    assert busy() == []
    state.upsert_node(node("b"))
    assert busy() == ["b"]
    assert state.remove_pod(web.uid) is not None
    assert busy() == []
    # two pods holding the same port on one node (possible for pods bound by others): freed only when both go
    first, second = (parse_pod(ported(n, "TCP/0.0.0.0/80", node_name="a")) for n in ("x", "y"))
    state.observe_bound_pod(first)
    state.observe_bound_pod(second)
    state.remove_pod(first.uid)
    assert busy() == ["a"]
    state.remove_pod(second.uid)
    assert busy() == []


def test_queueing_hint_after_pod_deleted() -> None:
    # node_ports_test.go Test_isSchedulableAfterPodDeleted (an assigned pod's record; None = port unknown)
    _, handle = one_node()
    hint = next(h for h in NodePorts({}, handle).events_to_register() if h.hint is not None)
    waiting = parse_pod(ported("waiting", "TCP/0.0.0.0/8080"))

    def released(*specs: str) -> PodRecord:
        return PodRecord(uid="u", namespace="default", name="gone", node="n", vector=np.zeros(4, dtype=np.int64),
                         nonzero=(0, 0), owner_key=None, assumed=False, host_ports=host_ports(ported("gone", *specs)))

    assert hint.hint is not None
    assert hint.hint(waiting, released()) == QueueingHint.SKIP  # skip-queue-on-non-hostport
    assert hint.hint(waiting, released("TCP/0.0.0.0/8081")) == QueueingHint.SKIP  # unrelated hostport
    assert hint.hint(waiting, released("TCP/0.0.0.0/8080")) == QueueingHint.QUEUE  # released hostport
    assert hint.hint(waiting, None) == QueueingHint.QUEUE


def test_scheduler_never_puts_two_pods_with_one_host_port_on_a_node() -> None:
    scheduler, api = make()
    for name in ("n0", "n1"):
        scheduler.handlers.on_node_event("ADDED", node(name))
    for i in range(3):
        api.add_pod(ported(f"web{i}", "TCP/0.0.0.0/8080"))
    api.add_pod(ported("other", "TCP/0.0.0.0/9090"))
    drain(scheduler, api)
    bound = dict(api.binds)
    webs = [bound[f"default/web{i}"] for i in range(3) if f"default/web{i}" in bound]
    assert sorted(webs) == ["n0", "n1"]  # one per node; the third waits
    assert "default/other" in bound
    [left] = [f"default/web{i}" for i in range(3) if f"default/web{i}" not in bound]
    [event] = api.events_for(left, "FailedScheduling")
    assert event.note == f"0/2 nodes are available: 2 {ERR_REASON}."
    assert scheduler.queue.lengths()["unschedulable"] == 1

    # deleting a pod that holds another port does not help; deleting a web pod frees its node's port
    api.delete_pod("default/other")
    assert scheduler.queue.lengths()["unschedulable"] == 1
    freed = next(key for key in bound if key not in (left, "default/other"))
    api.delete_pod(freed)
    assert scheduler.queue.lengths()["unschedulable"] == 0
    drain(scheduler, api)
    assert dict(api.binds)[left] == bound[freed]
