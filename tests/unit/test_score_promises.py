"""Every built-in score plugin keeps what its `normalized` promises (0-100 on every row; or 0-100 with NaN where
there is no value): the runtime trusts the promise and skips its own bounding, so a broken one must fail here.
Seeded pods of every shape the plugins treat apart, on a heterogeneous cluster with telemetry, and with pods
already placed (so the spreading and affinity plugins count something)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from bench.core_bench import cluster, make_pod
from bench.scenario import pod_object
from metrics_sched.framework import Normalized
from metrics_sched.model.podinfo import parse_pod

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
        assert seen == set(promises)
    finally:
        harness.stop()


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
        for i in range(80):
            info = parse_pod(_shaped(i))
            with state.lock:
                result = framework.schedule(info, state.table)
                for term in result.terms:
                    if term.plugin not in local or result.feasible_rows.size < 2:
                        continue
                    picked = np.sort(rng.choice(result.feasible_rows.size, size=result.feasible_rows.size // 2,
                                                replace=False))
                    scored = scorers[term.plugin].score(result.cycle, info, state.table,
                                                        result.feasible_rows[picked])
                    raw = np.asarray(getattr(scored, "scores", scored), dtype=np.float64)
                    assert np.array_equal(raw, term.raw[picked], equal_nan=True), (term.plugin, info.name)
                if result.node is not None:
                    state.assume(info, result.node)
            if result.node is not None:
                for plugin in framework.reserves:
                    plugin.reserve(result.cycle, info, result.node)
    finally:
        harness.stop()
