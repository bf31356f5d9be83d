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
