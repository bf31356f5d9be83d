"""NodeResourcesFit and NodeResourcesBalancedAllocation keep their scores per row between cycles and recompute
only the rows whose pods changed (framework.row_memo): what they return is, bit for bit, what a computation over
the scored rows alone gives, through placements, pod deletions, node updates, removals and additions."""

from __future__ import annotations

import random
from collections.abc import Callable

import numpy as np
import pytest

from bench.core_bench import cluster, make_pod
from bench.scenario import node_object
from metrics_sched.framework.cycle_state import CycleState
from metrics_sched.framework.row_memo import RowScores
from metrics_sched.model.podinfo import parse_pod
from metrics_sched.plugins.node_resources_balanced_allocation.plugin import NodeResourcesBalancedAllocation
from metrics_sched.plugins.node_resources_fit.plugin import NodeResourcesFit
from metrics_sched.state.node_table import NodeTable

pytestmark = pytest.mark.unit


def _fresh(plugin: NodeResourcesFit | NodeResourcesBalancedAllocation, pod_index: int, table: NodeTable,
           rows: np.ndarray) -> np.ndarray:
    pod = parse_pod(make_pod(pod_index))
    if isinstance(plugin, NodeResourcesFit):
        return plugin._score_rows(pod, table, rows)
    return plugin._score_rows(plugin._pod_requests(pod), table, rows)


def test_kept_scores_equal_fresh_ones_through_pod_and_node_changes() -> None:
    harness = cluster(200, seed=5)
    rng = random.Random(5)
    try:
        plugins = [p for p in harness.framework.instances.values()
                   if isinstance(p, NodeResourcesFit | NodeResourcesBalancedAllocation)]
        assert len(plugins) == 2
        state, handlers = harness.scheduler.state, harness.scheduler.handlers
        placed: list[dict[str, object]] = []
        compared = 0
        for i in range(160):
            pod = make_pod(i)
            result = harness.place(parse_pod(pod))
            if result.node is not None:
                placed.append({**pod, "spec": {**pod["spec"], "nodeName": result.node}})
            draw = rng.random()
            if draw < 0.15 and placed:  # a bound pod goes away: its node's requests drop
                handlers.on_pod_event("DELETED", placed.pop(rng.randrange(len(placed))))
            elif draw < 0.22:  # a node changes size, or a new one comes
                name = f"node-{rng.randrange(220):05d}"
                handlers.on_node_event("ADDED" if name not in state.table.index else "MODIFIED",
                                       node_object(name, cpu=rng.choice((16, 64)), memory_gib=128, gpus=8))
            elif draw < 0.25 and len(state.table) > 150:
                name = rng.choice(sorted(state.table.index))
                handlers.on_node_event("DELETED", node_object(name, cpu=1, memory_gib=1, gpus=0))
            table = state.table
            rows = np.flatnonzero(table.present[: table.capacity]).astype(np.int64)
            rows = np.sort(rng.sample(list(rows), k=min(rows.size, 120))).astype(np.int64)
            for plugin in plugins:
                for other in (i + 1, i + 2):  # the next pods (either shape), as their cycles would ask
                    kept = plugin.score(CycleState(), parse_pod(make_pod(other)), table, rows)
                    np.testing.assert_array_equal(kept, _fresh(plugin, other, table, rows))
                    compared += 1
        assert compared == 160 * 2 * 2
    finally:
        harness.stop()


def _counting(table: NodeTable, asked: list[int]) -> Callable[[np.ndarray], np.ndarray]:
    """A compute over the first resource's requested amounts that notes how many rows it was asked for."""
    def compute(rows: np.ndarray) -> np.ndarray:
        asked.append(int(rows.size))
        values: np.ndarray = table.requested_by_resource[0][rows].astype(np.float64)
        return values
    return compute

def test_values_are_recomputed_only_where_pods_changed() -> None:
    harness = cluster(50, seed=1)
    try:
        table = harness.scheduler.state.table
        asked: list[int] = []
        compute = _counting(table, asked)

        kept = RowScores()
        every = np.flatnonzero(table.present[: table.capacity]).astype(np.int64)
        kept.scores("k", table, every, compute)
        assert asked == [table.capacity]
        result = harness.place(parse_pod(make_pod(0)))
        assert result.node is not None
        got = kept.scores("k", table, every, compute)
        assert asked[1:] == [1]  # the one row the pod went to
        np.testing.assert_array_equal(got, table.requested_by_resource[0][every].astype(np.float64))
        kept.scores("k", table, every, compute)
        assert asked[2:] == []  # nothing changed since
    finally:
        harness.stop()


def test_rows_changed_since_is_the_compare_over_every_row() -> None:
    """From the log of recent pod changes while it reaches back, else the compare; the same rows either way."""
    from metrics_sched.state.node_table import POD_LOG

    harness = cluster(40, seed=2)
    rng = random.Random(2)
    try:
        table = harness.scheduler.state.table
        vector = table.vector({"cpu": 100})
        stamps = [table.pod_stamp]
        for _ in range(POD_LOG + 60):
            table.add_requests(rng.randrange(40), vector, (100, 0), rng.choice((1, -1)))
            stamps.append(table.pod_stamp)
            for since in (stamps[-1], stamps[-2], rng.choice(stamps), stamps[0]):
                expected = np.flatnonzero(table.row_pod_stamp[: table.capacity] > since)
                np.testing.assert_array_equal(table.rows_changed_since(since), expected)
    finally:
        harness.stop()


@pytest.mark.parametrize("strategy", ["LeastAllocated", "MostAllocated"])
def test_one_row_in_python_floats_is_the_vector_computation(strategy: str) -> None:
    """_score_one (a placement's row, Python floats) gives the double _score_rows gives for that row, on every row of
    a cluster with pods placed, resources some nodes do not offer (zero allocatable) and both strategies; and
    NodeResourcesFit.filter_rows on a few rows (Python ints) agrees with the vector form."""
    from metrics_sched.plugins.node_resources_fit.plugin import ScoringStrategy

    harness = cluster(120, seed=9)
    rng = random.Random(9)
    try:
        state, handlers = harness.scheduler.state, harness.scheduler.handlers
        for i in range(10):  # nodes without GPUs, or with odd sizes: zero and uneven allocatable
            handlers.on_node_event("MODIFIED", node_object(f"node-{i:05d}", cpu=rng.choice((1, 3, 96)),
                                                          memory_gib=rng.choice((1, 7, 512)), gpus=rng.choice((0, 3))))
        for i in range(300):
            harness.place(parse_pod(make_pod(i)))
        table = state.table
        every = np.flatnonzero(table.present[: table.capacity]).astype(np.int64)
        fit = NodeResourcesFit(NodeResourcesFit.Args(ScoringStrategy(strategy)), harness.framework.handle)  # type: ignore[arg-type]
        balanced = next(p for p in harness.framework.instances.values()
                        if isinstance(p, NodeResourcesBalancedAllocation))
        for i in (0, 1, 2, 3, 7):
            pod = parse_pod(make_pod(i))
            vector = fit._score_rows(pod, table, every)
            one = np.array([fit._score_one(pod, table, row) for row in every.tolist()])
            np.testing.assert_array_equal(one, vector)
            requests = balanced._pod_requests(pod)
            vector = balanced._score_rows(requests, table, every)
            one = np.array([balanced._score_one(requests, table, row) for row in every.tolist()])
            np.testing.assert_array_equal(one, vector)
            cycle = CycleState()
            fit.pre_filter(cycle, pod)
            whole = fit.filter_rows(cycle, pod, table, every)
            if i == 1:  # the GPU pod: nodes without GPUs turn it down
                assert whole.any() and not whole.all()
            for start in range(0, every.size, 3):
                few = every[start: start + 3]
                np.testing.assert_array_equal(fit.filter_rows(cycle, pod, table, few), whole[start: start + 3])
    finally:
        harness.stop()


def test_a_few_rows_are_computed_straight_and_the_kept_values_catch_up() -> None:
    """compute_one on a few rows (a batched cycle's changed ones) reads the table as it is and leaves the kept values
    behind; the next call over many rows patches them where pods changed meanwhile."""
    harness = cluster(50, seed=3)
    try:
        table = harness.scheduler.state.table
        asked: list[int] = []
        compute = _counting(table, asked)

        def one(row: int) -> float:
            return float(table.requested_by_resource[0][row])

        kept = RowScores()
        every = np.flatnonzero(table.present[: table.capacity]).astype(np.int64)
        kept.scores("k", table, every, compute, one)
        placed = [table.index[node] for node in (harness.place(parse_pod(make_pod(i))).node for i in range(3))
                  if node is not None]
        few = np.array(sorted(set(placed)), dtype=np.int64)
        got = kept.scores("k", table, few, compute, one)
        assert asked == [table.capacity]  # nothing kept was touched
        np.testing.assert_array_equal(got, table.requested_by_resource[0][few].astype(np.float64))
        got = kept.scores("k", table, every, compute, one)
        np.testing.assert_array_equal(got, table.requested_by_resource[0][every].astype(np.float64))
    finally:
        harness.stop()
