"""Opportunistic batching's pieces: the staged totals are WeightedMean's, bit for bit, before and after a batched
cycle patches them; a batched cycle's light result is the CycleResult its constructor would make."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

from bench.core_bench import cluster
from bench.scenario import pod_object
from metrics_sched.framework.interfaces import Normalized, ScorePlugin, unchanged
from metrics_sched.framework.runtime import CycleResult, ScoreTerm
from metrics_sched.framework.runtime.batching.batch import light_result
from metrics_sched.framework.runtime.batching.signature import template_of
from metrics_sched.framework.runtime.batching.terms import Term
from metrics_sched.framework.runtime.batching.totals import (
    FEW,
    restage,
    row_total,
    rows_total,
    staged_total,
    stages_of,
)
from metrics_sched.framework.scoring import WeightedMean
from metrics_sched.model.podinfo import parse_pod


class _Scorer(ScorePlugin):
    name = "S"
    normalized = Normalized.IN_RANGE
    normalize = unchanged

    def __init__(self) -> None:  # no args, no handle: only its normalize() and promise are read
        pass


def _term(values: Any, weight: int, everywhere: bool) -> Term:
    values = np.asarray(values, dtype=np.float64)
    gaps = bool(np.isnan(values).any())
    return Term(ScoreTerm("S", weight, values, values), _Scorer(), cluster=everywhere, pods=not everywhere,
                 ledger=(), gaps=gaps, per_node=True, everywhere=everywhere, identity=True)


def _weighted_mean(terms: list[Term]) -> np.ndarray[Any, Any]:
    mean = WeightedMean(terms[0].term.normalized.size)
    for entry in terms:
        mean.add(entry.term.normalized, entry.term.weight, gaps=entry.gaps)
    return mean.result(empty=0.0)


@pytest.mark.parametrize("seed", range(6))
def test_staged_totals_are_weighted_means_before_and_after_a_patch(seed: int) -> None:
    rng = np.random.default_rng(seed)
    size = 257
    layout = [(1, False), (2, False), (3, True), (1, False), (2, True), (1, False)]  # (weight, may move everywhere)

    def values(gaps: bool) -> np.ndarray[Any, Any]:
        drawn = rng.random(size) * 100
        if gaps:
            drawn[rng.random(size) < 0.2] = np.nan
        return drawn

    terms = [_term(values(gaps=i in (1, 3)), weight, everywhere) for i, (weight, everywhere) in enumerate(layout)]
    stages = stages_of(terms)
    assert staged_total(stages).tobytes() == _weighted_mean(terms).tobytes()
    # Batched cycles: a few rows of the local terms move (up to FEW one by one in Python, more in numpy), the terms
    # that move everywhere move.
    for _ in range(5):
        positions = np.sort(rng.choice(size, size=int(rng.integers(1, 24)), replace=False)).astype(np.int64)
        changed: list[int] = []
        regaps = False
        for index, entry in enumerate(terms):
            if entry.everywhere:
                fresh = values(gaps=seed % 2 == 1 and bool(rng.random() < 0.5))  # even seeds: never gaps
            elif rng.random() < 0.6:
                fresh = entry.term.normalized.copy()
                fresh[positions] = values(gaps=index in (1, 3))[: positions.size]
            else:
                continue
            gaps = bool(np.isnan(fresh).any())
            if entry.everywhere:  # as Batcher._rescore: the weights are recomputed when it had or has gaps
                regaps = regaps or gaps or entry.gaps
                entry.gaps = gaps
            else:  # a local term's gaps stay once it had some
                entry.gaps = entry.gaps or gaps
            entry.term = ScoreTerm("S", entry.term.weight, fresh, fresh)
            changed.append(index)
        restage(stages, terms, changed, regaps, positions)
        assert staged_total(stages).tobytes() == _weighted_mean(terms).tobytes()


@pytest.mark.parametrize("seed", range(4))
def test_the_totals_of_many_rows_at_once_are_each_rows_total(seed: int) -> None:
    """rows_total (numpy, beyond FEW changed candidates) gives row_total's doubles: NaN terms left out, a row
    with no term at all 0."""
    rng = np.random.default_rng(seed)
    size = 300
    terms = []
    for weight in (1, 2, 3, 1, 2):
        drawn = rng.random(size) * 100
        drawn[rng.random(size) < 0.3] = np.nan
        terms.append(_term(drawn, weight, everywhere=False))
    for entry in terms:
        entry.term.normalized[:4] = np.nan  # rows without any term
    positions = np.sort(rng.choice(size, size=FEW + 20, replace=False)).astype(np.int64)
    positions[0] = 0
    many = rows_total(terms, positions)
    assert many.tobytes() == np.array([row_total(terms, p) for p in positions.tolist()]).tobytes()
    assert many[0] == 0.0


def test_a_batched_cycles_light_result_is_the_constructors() -> None:
    harness = cluster(30, seed=0)
    try:
        framework, state = harness.framework, harness.scheduler.state
        batcher = framework.batcher
        assert batcher is not None
        for i in range(3):  # the second pod stores a batch
            info = parse_pod(pod_object(f"web-{i}", cpu="100m", memory="500Mi"))
            with state.lock:
                result = framework.schedule(info, state.table)
                assert result.node is not None
                state.assume(info, result.node)
        batch = batcher._batches[-1]
        pod = parse_pod(pod_object("web-x", cpu="100m", memory="500Mi"))
        light = light_result(batch, pod, len(state.table))
        made = CycleResult(pod=pod, profile=framework.name, nodes_total=len(state.table), cycle=batch.cycle.clone())
        made.feasible_rows, made.filter_skipped = batch.rows, batch.filter_skipped
        made.rejections.update(batch.rejections)
        made.rejected_by, made.skipped = set(batch.rejected_by), set(batch.score_skipped)
        for f in dataclasses.fields(CycleResult):
            mine, theirs = getattr(light, f.name), getattr(made, f.name)
            if f.name == "cycle":
                assert mine is not batch.cycle and mine._data == theirs._data
            elif isinstance(mine, np.ndarray):
                assert mine.tobytes() == theirs.tobytes(), f.name
            else:
                assert mine == theirs, f.name
            if isinstance(mine, list | dict | set):  # every mutable field is the result's own
                assert mine is not getattr(light_result(batch, pod, 1), f.name), f.name
        assert type(light.rejections) is type(made.rejections)
    finally:
        harness.stop()


def test_pods_of_one_template_share_it_whatever_names_one_pod() -> None:
    """A StatefulSet's pods differ by hostname (and a bound one by nodeName): the template leaves them out."""
    def pod(name: str, **spec: Any) -> Any:
        return template_of(parse_pod(pod_object(name, cpu="100m", memory="500Mi", labels={"app": "db"}, **spec)))

    plain = pod("db-0")
    assert plain == pod("db-1")
    assert pod("db-0", hostname="db-0") == pod("db-1", hostname="db-1") == plain
    assert pod("db-0", nodeName="node-1") == plain
    assert pod("db-0", hostname="db-0", priorityClassName="high") != plain  # any other field is the template's
