"""CycleResult.filter_trace: each filter that ran with the feasible mask after it, so the filter a row's
rejection is counted under (the first that turned it down) can be told afterwards (opportunistic batching)."""

from __future__ import annotations

import numpy as np
import pytest

from bench.core_bench import cluster, make_pod
from metrics_sched.model.podinfo import parse_pod

pytestmark = pytest.mark.unit


def test_first_rejecter_is_the_filter_the_rejection_is_counted_under() -> None:
    harness = cluster(300, seed=4)
    try:
        table = harness.scheduler.state.table
        pod = parse_pod(make_pod(5))  # nodeSelector disk-type=ssd
        result = harness.place(pod)
        names = [step.name for step in result.filter_trace]
        assert names and len(set(names)) == len(names)
        feasible = set(result.feasible_rows.tolist())
        counted: dict[str, int] = {}
        for row in np.flatnonzero(table.present[: table.capacity]).tolist():
            first = result.first_rejecter(row)
            if row in feasible:
                assert first is None
                continue
            assert first is not None
            name = names[first]
            counted[name] = counted.get(name, 0) + 1
            record = table.records[row]
            assert record is not None
            if name == "NodeAffinity":
                assert record.labels.get("disk-type") != "ssd"
            if name == "NodeUnschedulable":
                assert record.unschedulable
        assert counted.get("NodeAffinity", 0) > 50  # ~40 % of the nodes are hdd
        assert sum(counted.values()) == table.present.sum() - len(feasible)
        by_filter = {plugin: 0 for plugin in names}
        for plugin, _, _, status in result.timings:
            if status == "Unschedulable":
                by_filter[plugin] = by_filter.get(plugin, 0) + 1
        assert {name for name in counted} == {name for name, n in by_filter.items() if n}
        result.release_arrays()
        assert result.filter_trace == [] and result.first_rejecter(0) is None
    finally:
        harness.stop()
