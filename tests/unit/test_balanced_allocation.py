"""NodeResourcesBalancedAllocation: kube-scheduler's balanced_allocation_test.go cases, node for node."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from metrics_sched.config.errors import ArgsError
from metrics_sched.framework import Code, CycleState, Handle
from metrics_sched.model.podinfo import parse_pod
from metrics_sched.plugins.node_resources_balanced_allocation.plugin import NodeResourcesBalancedAllocation
from metrics_sched.state.cluster_state import ClusterState
from metrics_sched.telemetry.cache import MetricCache
from metrics_sched.telemetry.ledger import InFlightLedgerStore
from tests.unit.fakes import FakeAPI, node, pod
from tests.unit.test_scheduler import make

pytestmark = pytest.mark.unit

GPU_ARGS = {"resources": [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1},
                          {"name": "nvidia.com/gpu", "weight": 1}]}


def cpu_only(name: str, on: str | None = None) -> dict[str, Any]:
    return pod(name, cpu="3000m", memory="0", node_name=on)  # upstream: 1000m + 2000m, memory 0


def cpu_and_memory(name: str, on: str | None = None, gpus: int = 0) -> dict[str, Any]:
    return pod(name, cpu="3000m", memory="5000", gpus=gpus, node_name=on)  # 1000m/2000 + 2000m/3000


def scores(nodes: list[dict[str, Any]], placed: list[dict[str, Any]], incoming: dict[str, Any],
           args: dict[str, Any] | None = None, pre_score: bool = True) -> tuple[Code, list[float]]:
    state = ClusterState()
    for n in nodes:
        state.upsert_node(n)
    for p in placed:
        state.observe_bound_pod(parse_pod(p))
    plugin = NodeResourcesBalancedAllocation(args or {}, Handle(state, MetricCache(), InFlightLedgerStore(),
                                                                 FakeAPI()))
    table = state.table
    rows = np.array([table.index[n["metadata"]["name"]] for n in nodes], dtype=np.int64)
    cycle = CycleState()
    info = parse_pod(incoming)
    code = plugin.pre_score(cycle, info, table, rows).code if pre_score else Code.SUCCESS
    if code == Code.SKIP:
        return code, []
    return code, plugin.score(cycle, info, table, rows).tolist()


CASES = [
    # (name, nodes (cpu, memory[, gpus]), placed pods, incoming pod, args, expected scores)
    ("nothing scheduled, resources requested, differently sized nodes",
     [("node1", "4", "10000", 0), ("node2", "6", "10000", 0)], [], cpu_and_memory("p"), None, [87, 100]),
    ("resources requested, pods scheduled with resources",
     [("node1", "10", "20000", 0), ("node2", "10", "20000", 0)],
     [cpu_only("a", "node1"), cpu_and_memory("b", "node2")], cpu_and_memory("p"), None, [82, 95]),
    ("resources requested, pods scheduled with resources, differently sized nodes",
     [("node1", "10", "20000", 0), ("node2", "10", "50000", 0)],
     [cpu_only("a", "node1"), cpu_and_memory("b", "node2")], cpu_and_memory("p"), None, [82, 80]),
    ("requested resources at node capacity",
     [("node1", "6", "10000", 0), ("node2", "6", "10000", 0)],
     [cpu_only("a", "node1"), cpu_and_memory("b", "node2")], cpu_only("p"), None, [50, 75]),
    ("include scalar resource on a node for balanced resource allocation",
     [("node1", "3500m", "40000", 8), ("node2", "3500m", "40000", 8)],
     [cpu_and_memory("a", "node2"), cpu_and_memory("b", "node1", gpus=3)],
     pod("p", cpu="0", memory="0", gpus=1), GPU_ARGS, [70, 65]),
    ("node without the scalar resource should skip the scalar resource",
     [("node1", "3500m", "40000", 8), ("node2", "3500m", "40000", 0)], [], cpu_and_memory("p"), GPU_ARGS, [63, 63]),
    # not upstream's: a node offering none of the resources scores as balanced (no fraction: std 0)
    ("zero allocatable leaves the resource out", [("node1", "0", "0", 0)], [], cpu_and_memory("p"), None, [100]),
]


@pytest.mark.parametrize(("name", "nodes", "placed", "incoming", "args", "expected"), CASES,
                         ids=[c[0] for c in CASES])
@pytest.mark.parametrize("pre_score", [True, False], ids=["with-prescore", "prescore-not-called"])
def test_upstream_cases(name: str, nodes: list[tuple[str, str, str, int]], placed: list[dict[str, Any]],
                        incoming: dict[str, Any], args: dict[str, Any] | None, expected: list[int],
                        pre_score: bool) -> None:
    node_objects = [node(n, cpu=cpu, memory=memory, gpus=gpus) for n, cpu, memory, gpus in nodes]
    code, got = scores(node_objects, placed, incoming, args, pre_score)
    assert code == Code.SUCCESS
    assert got == expected


def test_best_effort_pod_is_skipped_at_pre_score() -> None:
    best_effort = pod("p")
    best_effort["spec"]["containers"][0]["resources"] = {}
    nodes = [node("node1", cpu="4", memory="10000"), node("node2", cpu="4", memory="10000")]
    code, _ = scores(nodes, [], best_effort)
    assert code == Code.SKIP
    _, got = scores(nodes, [], best_effort, pre_score=False)  # Score alone answers 0, as upstream
    assert got == [0, 0]


def test_three_fractions_use_the_population_std() -> None:
    # cpu 1/4, memory 1/2, gpu 1/1: mean 7/12; std = sqrt(((4/12)^2 + (1/12)^2 + (5/12)^2) / 3) = 0.3118 -> 68
    nodes = [node("n", cpu="4", memory="4Gi", gpus=1)]
    _, got = scores(nodes, [], pod("p", cpu="1", memory="2Gi", gpus=1), GPU_ARGS)
    assert got == [68]


@pytest.mark.parametrize(("args", "field"), [
    ({"resources": [{"name": "cpu", "weight": 2}]}, "resources[0].weight"),
    ({"resources": [{"name": "cpu"}, {"name": "cpu"}]}, "resources[1].name"),
    ({"resources": []}, "resources"),
])
def test_args_are_validated_as_upstream(args: dict[str, Any], field: str) -> None:
    with pytest.raises(ArgsError) as caught:
        NodeResourcesBalancedAllocation.parse_args(args)
    assert caught.value.field == field


def test_default_profile_scores_with_it_and_skips_it_for_best_effort_pods() -> None:
    scheduler, _ = make()
    scheduler.handlers.on_node_event("ADDED", node("n0"))
    framework = scheduler.frameworks["metrics-sched"]
    result = framework.schedule(parse_pod(pod("p")), scheduler.state.table)
    assert "NodeResourcesBalancedAllocation" in [t.plugin for t in result.terms]
    best_effort = pod("q")
    best_effort["spec"]["containers"][0]["resources"] = {}
    result = framework.schedule(parse_pod(best_effort), scheduler.state.table)
    assert "NodeResourcesBalancedAllocation" in result.skipped
    assert "NodeResourcesBalancedAllocation" not in [t.plugin for t in result.terms]
