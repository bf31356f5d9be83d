"""The metric plugins keep their reads and scores between cycles and patch the rows a placement changed:
decisions and every score term are the same, bit for bit, as when everything is computed afresh."""

from __future__ import annotations

import numpy as np
import pytest

from bench.core_bench import cluster, make_pod
from metrics_sched.framework.metric_score import MetricScorePlugin
from metrics_sched.model.podinfo import parse_pod

pytestmark = pytest.mark.unit


def _cycles(forget: bool, pods: int = 120) -> list[tuple[str | None, list[np.ndarray]]]:
    harness = cluster(300, seed=3)
    try:
        metric_plugins = [p for p in harness.framework.instances.values() if isinstance(p, MetricScorePlugin)]
        assert metric_plugins
        out = []
        for i in range(pods):
            if forget:  # what a plugin without memory computes
                for plugin in metric_plugins:
                    plugin._memos.clear()
                    plugin._combined = None
            result = harness.place(parse_pod(make_pod(i)))  # Reserve adds the ledger's entry: the next cycle's patch
            out.append((result.node, [t.normalized for t in result.terms] + [result.total]))
        return out
    finally:
        harness.stop()


def test_patched_scores_equal_fresh_ones() -> None:
    kept, fresh = _cycles(forget=False), _cycles(forget=True)
    assert [node for node, _ in kept] == [node for node, _ in fresh]
    assert all(node is not None for node, _ in kept)
    for (_, a), (_, b) in zip(kept, fresh, strict=True):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            np.testing.assert_array_equal(x, y)
