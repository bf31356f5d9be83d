"""The quality bench's scenario and reference optimum (no timings)."""

from __future__ import annotations

import itertools
import json
import random

import numpy as np
import pytest

from bench.quality_bench import ObjectiveModel, node_scores, run, solve_optimum
from bench.scenario import THRESHOLD, make_scenario

pytestmark = pytest.mark.unit


def test_scenario_is_deterministic_by_seed() -> None:
    a, b, other = make_scenario(30, seed=7), make_scenario(30, seed=7), make_scenario(30, seed=8)
    assert a.as_dict() == b.as_dict()
    assert a.as_dict() != other.as_dict()
    assert a.summary() == b.summary()


def test_scenario_shape() -> None:
    scenario = make_scenario(40, seed=3)
    hot = [n for n in scenario.nodes if n.temperature > THRESHOLD]
    assert len(hot) == 4  # 10 % of the nodes, above the threshold
    assert all(n.temperature <= 84.0 for n in scenario.nodes if n not in hot)
    assert {p.gpus for p in scenario.pods} == {1, 2}
    assert len({(p.gpus, p.cpu, p.memory_gib, p.owner) for p in scenario.burst}) == 1  # identical pods
    assert 0.57 <= scenario.summary()["gpu_fill"] <= 0.63
    assert scenario.workload == scenario.pods + scenario.burst


def brute_force(scores: list[float], allowed: list[bool], capacity: list[int], pods: list[int],
                per_gpu: bool) -> tuple[int, float]:
    """(most pods placed, best objective with that many) over every assignment, None = not placed."""
    best = (-1, -np.inf)
    for combo in itertools.product([None, *range(len(scores))], repeat=len(pods)):
        used = [0] * len(scores)
        ok = True
        for gpus, node in zip(pods, combo, strict=True):
            if node is None:
                continue
            if not allowed[node]:
                ok = False
                break
            used[node] += gpus
        if not ok or any(u > c for u, c in zip(used, capacity, strict=True)):
            continue
        placed = sum(node is not None for node in combo)
        value = sum(scores[n] * (g if per_gpu else 1) for g, n in zip(pods, combo, strict=True) if n is not None)
        if placed > best[0] or (placed == best[0] and value > best[1] + 1e-9):
            best = (placed, value)
    return best


@pytest.mark.parametrize("per_gpu", [False, True])
@pytest.mark.parametrize("seed", range(8))
def test_optimum_matches_brute_force_and_respects_capacity_and_threshold(seed: int, per_gpu: bool) -> None:
    rng = random.Random(seed)
    n_nodes = rng.choice([3, 4])
    scores = [round(rng.uniform(0, 100), 3) for _ in range(n_nodes)]
    allowed = [rng.random() > 0.3 for _ in range(n_nodes)]
    capacity = [rng.randint(0, 4) for _ in range(n_nodes)]
    pods = [rng.choice([1, 2]) for _ in range(rng.choice([4, 5]))]
    assignment, objective = solve_optimum(scores, allowed, capacity, pods, per_gpu=per_gpu)

    used = [0] * n_nodes
    for gpus, node in zip(pods, assignment, strict=True):
        if node is not None:
            assert allowed[node], "a pod on a node above the threshold"
            used[node] += gpus
    assert all(u <= c for u, c in zip(used, capacity, strict=True)), (used, capacity)

    placed, best = brute_force(scores, allowed, capacity, pods, per_gpu)
    assert sum(node is not None for node in assignment) == placed
    assert objective == pytest.approx(best, abs=1e-6)


def test_optimum_gives_the_best_admissible_slots_to_single_gpu_pods_per_pod_but_not_per_gpu() -> None:
    # node 0 is the best but hot (not allowed); node 1 has two free GPUs; pods: one 2-GPU, two 1-GPU
    scores, allowed, capacity, pods = [99.0, 80.0, 10.0], [False, True, True], [8, 2, 8], [2, 1, 1]
    assignment, objective = solve_optimum(scores, allowed, capacity, pods)
    assert assignment == [2, 1, 1] and objective == pytest.approx(80 + 80 + 10)  # a pod counts once
    _, weighted = solve_optimum(scores, allowed, capacity, pods, per_gpu=True)
    assert weighted == pytest.approx(2 * 80 + 10 + 10)  # either way the same GPUs are used


def test_node_scores_follow_the_plugins_directions() -> None:
    scenario = make_scenario(20, seed=1)
    scores, allowed = node_scores(scenario, ObjectiveModel.default())
    assert scores.shape == (20,) and ((scores >= 0) & (scores <= 100)).all()
    assert list(allowed) == [n.temperature <= THRESHOLD for n in scenario.nodes]


def test_quality_run_on_a_tiny_scenario() -> None:
    result = run(True, nodes=12, seed=0)
    json.dumps(result)
    contenders = result["contenders"]
    for name in ("metrics-sched", "kube-scheduler default (emulated)", "reference optimum (offline)"):
        row = contenders[name]
        for key in ("mean_gpu_temp", "max_gpu_temp", "hourly_cost", "load_std", "max_burst_share", "objective",
                    "objective_pct_of_optimum", "gpu_pods_above_threshold"):
            assert key in row, (name, key)
        assert row["nodes_over_gpu_capacity"] == 0
    assert contenders["reference optimum (offline)"]["objective_pct_of_optimum"] == 100.0
    assert contenders["metrics-sched"]["gpu_pods_above_threshold"] == 0
    assert result["metrics_sched_gpu_pods_above_threshold"] == 0
    assert contenders["metrics-sched"]["objective"] <= result["optimum"]["objective"] + 1e-6
