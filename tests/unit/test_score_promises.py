"""Every built-in score plugin keeps what its `normalized` promises (0-100 on every row; or 0-100 with NaN where
there is no value): the runtime trusts the promise and skips its own bounding, so a broken one must fail here.
Seeded pods of every shape the plugins treat apart, on a heterogeneous cluster with telemetry, and with pods
already placed (so the spreading and affinity plugins count something)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from bench.core_bench import cluster, make_pod
from bench.scenario import Harness, pod_object
from metrics_sched.framework import Normalized
from metrics_sched.framework.interfaces import top_score
from metrics_sched.framework.runtime import CycleResult
from metrics_sched.model.podinfo import PodInfo, parse_pod

pytestmark = pytest.mark.unit


def _shaped(i: int) -> dict[str, Any]:
    """make_pod's pods, and every fourth one with inter-pod (anti-)affinity or its own spread constraints."""
    if i % 4:
        return make_pod(i)
    app = f"app-{i % 3}"
    spec: dict[str, Any] = {}
    if i % 8 == 0:
        spec["affinity"] = {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 40, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname",
                                               "labelSelector": {"matchLabels": {"app": app}}}}]},
            "podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 10, "podAffinityTerm": {"topologyKey": "topology.kubernetes.io/zone",
                                                   "labelSelector": {"matchLabels": {"app": app}}}}]}}
    else:
        spec["topologySpreadConstraints"] = [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                                              "whenUnsatisfiable": "ScheduleAnyway",
                                              "labelSelector": {"matchLabels": {"app": app}}}]
    return pod_object(f"s-{i:04d}", cpu="200m", memory="1Gi", labels={"app": app}, **spec)


def test_builtin_score_plugins_keep_their_promise() -> None:
    harness = cluster(200, seed=7)
    try:
        promises = {scorer.name: scorer.normalized for scorer, _ in harness.framework.scores}
        assert Normalized.UNCHECKED not in promises.values(), promises  # every built-in one promises something
        seen: set[str] = set()
        for i in range(160):
            info = parse_pod(_shaped(i))
            result = harness.place(info)
            for term in result.terms:
                seen.add(term.plugin)
                values = term.normalized
                present = ~np.isnan(values)
                if promises[term.plugin] is Normalized.COMPLETE:
                    assert present.all(), (term.plugin, info.name)
                assert (values[present] >= 0).all() and (values[present] <= 100).all(), (term.plugin, info.name)
                assert not np.isinf(values).any(), (term.plugin, info.name)
        # DynamicResources scores only pods with firstAvailable requests (none here): tests/unit/test_dra_plugin.py.
        assert seen == set(promises) - {"DynamicResources"}
    finally:
        harness.stop()


def _cycles(harness: Harness, count: int) -> Iterator[tuple[int, PodInfo, CycleResult]]:
    """The full cycles of `count` shaped pods, each yielded under the state lock (the table as it scored it), then
    the pod placed as the loop places it (assume, Reserve)."""
    framework, state = harness.framework, harness.scheduler.state
    for i in range(count):
        info = parse_pod(_shaped(i))
        with state.lock:
            result = framework.schedule(info, state.table)
            yield i, info, result
            if result.node is not None:
                state.assume(info, result.node)
        if result.node is not None:
            for plugin in framework.reserves:
                plugin.reserve(result.cycle, info, result.node)


def test_row_local_scores_read_no_other_row() -> None:
    """A plugin whose row_local_scores() is True gives a row the same raw score whichever other rows are scored
    with it (opportunistic batching keeps the others' scores when a candidate leaves a batch on that word)."""
    harness = cluster(200, seed=7)
    rng = np.random.default_rng(5)
    try:
        framework, state = harness.framework, harness.scheduler.state
        scorers = {scorer.name: scorer for scorer, _ in framework.scores}
        local = {name for name, scorer in scorers.items() if scorer.row_local_scores()}
        assert {"NodeResourcesFit", "TaintToleration", "GPUTemperature", "NodeLoad"} <= local, local
        assert "Cost" not in local  # its default minmax scale reads the candidates' lowest and highest
        for _, info, result in _cycles(harness, 80):
            for term in result.terms:
                if term.plugin not in local or result.feasible_rows.size < 2:
                    continue
                picked = np.sort(rng.choice(result.feasible_rows.size, size=result.feasible_rows.size // 2,
                                            replace=False))
                scored = scorers[term.plugin].score(result.cycle, info, state.table, result.feasible_rows[picked])
                raw = np.asarray(getattr(scored, "scores", scored), dtype=np.float64)
                assert np.array_equal(raw, term.raw[picked], equal_nan=True), (term.plugin, info.name)
    finally:
        harness.stop()


def test_normalize_by_top_maps_each_value_with_the_highest_alone() -> None:
    """A plugin whose normalize_by_top is True gives a value the same normalised value among any candidates with
    the same highest raw score (top_score): a batch that loses candidates keeps the others' on that word."""
    harness = cluster(50, seed=3)
    rng = np.random.default_rng(9)
    try:
        by_top = {scorer.name: scorer for scorer, _ in harness.framework.scores if scorer.normalize_by_top}
        assert set(by_top) == {"NodeAffinity", "TaintToleration"}, by_top
        checked = 0
        for scorer in by_top.values():
            for case in range(200):
                raw = rng.integers(0, 4, size=30).astype(np.float64) * float(rng.choice([1.0, 0.5, 7.0]))
                if case % 4 == 0:
                    raw[:] = 0.0  # no preference anywhere: the highest is 0
                keep = rng.random(30) < 0.7
                if not keep.any() or top_score(raw[keep]) != top_score(raw):
                    continue
                checked += 1
                whole = np.asarray(scorer.normalize(raw), dtype=np.float64)
                assert np.array_equal(whole[keep], scorer.normalize(raw[keep]), equal_nan=True), scorer.name
        assert checked > 200
    finally:
        harness.stop()


def test_scores_kept_without_holds_the_others_scores() -> None:
    """A plugin whose scores read the candidates and that answers True to scores_kept_without gives the other
    candidates the same raw scores once the rows `gone` are left out (checked with the cheapest candidates gone
    too, where a minmax scale must answer False)."""
    harness = cluster(200, seed=7)
    rng = np.random.default_rng(4)
    answers: set[bool] = set()
    try:
        framework, state = harness.framework, harness.scheduler.state
        scorers = {scorer.name: scorer for scorer, _ in framework.scores}
        for i, info, result in _cycles(harness, 60):
            rows = result.feasible_rows
            for term in result.terms:
                scorer = scorers[term.plugin]
                if scorer.row_local_scores() or rows.size < 4:
                    continue
                finite = np.where(np.isnan(term.raw), -np.inf, term.raw)
                picked = [int(np.argmax(finite))] if i % 2 else rng.choice(rows.size, size=2, replace=False).tolist()
                gone = np.sort(rows[picked])
                kept = np.ones(rows.size, dtype=bool)
                kept[picked] = False
                answer = scorer.scores_kept_without(state.table, rows, gone)
                answers.add(answer)
                if answer:
                    scored = scorer.score(result.cycle, info, state.table, rows[kept])
                    raw = np.asarray(getattr(scored, "scores", scored), dtype=np.float64)
                    assert np.array_equal(raw, term.raw[kept], equal_nan=True), (term.plugin, info.name)
        assert answers == {True, False}, answers
    finally:
        harness.stop()
