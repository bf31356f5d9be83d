"""The opt-in Batchable protocol: a plugin that is not Batchable keeps batching on for the rest of its profile where
that is sound (its Score re-run over every candidate in each batched cycle, the same decisions as the full cycle),
and a pod its Filter has something to check for runs in full, the refusal counted for that plugin."""

from __future__ import annotations

from typing import Any

import numpy as np

import metrics_sched.framework as sdk
from metrics_sched.config import parse_config
from metrics_sched.framework import CycleState, Filtered, FilterPlugin, NodeTable, PodInfo, ScorePlugin
from metrics_sched.framework.runtime import CycleResult
from metrics_sched.framework.runtime.batching import Batcher
from metrics_sched.model.podinfo import parse_pod
from metrics_sched.plugins import in_tree_registry
from metrics_sched.scheduler.scheduler import Scheduler
from tests.unit.fakes import FakeAPI, node, pod


class Crowded(ScorePlugin):
    """Third-party, not Batchable: prefers the nodes whose CPU is most requested (moves with every placement)."""

    name = "Crowded"
    scored = 0

    def score(self, cycle: CycleState, pod: PodInfo, table: NodeTable, rows: Any) -> Any:
        Crowded.scored += 1
        cpu = table.resource_index["cpu"]
        return table.requested[rows, cpu] * 100.0 / np.maximum(table.allocatable[rows, cpu], 1)


class EvenRows(FilterPlugin):
    """Third-party, not Batchable: a Filter with something to check for every pod."""

    name = "EvenRows"

    def filter(self, cycle: CycleState, pod: PodInfo, table: NodeTable) -> Filtered:
        return Filtered.single(np.arange(table.capacity) % 2 == 0, "odd row")


class Legacy(FilterPlugin):
    """Written against the hook before the Batchable protocol: a batch_scope of its own, no Batchable base."""

    name = "Legacy"

    def batch_scope(self, pod: PodInfo) -> sdk.BatchScope | None:
        return sdk.BatchScope(sdk.Reads.NODE)

    def filter(self, cycle: CycleState, pod: PodInfo, table: NodeTable) -> Filtered:
        return Filtered.single(np.arange(table.capacity) % 2 == 0, "odd row")


def _placed(batching: bool, enabled: dict[str, Any], count: int) -> tuple[list[CycleResult], Batcher | None]:
    registry = in_tree_registry(third_party=False)
    registry.register(Crowded)
    registry.register(EvenRows)
    registry.register(Legacy)
    config = {"profiles": [{"opportunisticBatching": batching, "plugins": enabled}]}
    scheduler = Scheduler(parse_config(config, registry.catalog()), registry.plugins, FakeAPI())
    for i in range(12):
        scheduler.handlers.on_node_event("ADDED", node(f"n{i:02d}", cpu="8"))
    framework, state = scheduler.frameworks["metrics-sched"], scheduler.state
    framework.random.seed(3)
    results = []
    for i in range(count):
        info = parse_pod(pod(f"p{i}", cpu="500m"))
        with state.lock:
            result = framework.schedule(info, state.table)
            if result.node is not None:
                state.assume(info, result.node)
        results.append(result)
    return results, framework.batcher


def _decision(result: CycleResult) -> tuple[Any, ...]:
    return (result.node, result.total.tobytes(), result.feasible_rows.tobytes(), dict(result.rejections),
            tuple((t.plugin, t.raw.tobytes(), t.normalized.tobytes()) for t in result.terms))


def test_a_score_plugin_that_is_not_batchable_keeps_batching_on_and_is_scored_afresh() -> None:
    enabled = {"score": {"enabled": [{"name": "Crowded", "weight": 5}]}}
    plain, _ = _placed(False, enabled, 40)
    Crowded.scored = 0
    batched, batcher = _placed(True, enabled, 40)
    assert [_decision(r) for r in plain] == [_decision(r) for r in batched]
    assert isinstance(batcher, Batcher)
    assert batcher.stats.batched > 30, batcher.stats
    assert Crowded.scored == 40  # every cycle, batched or not, scored it over every candidate
    assert not [plugin for plugin, _ in batcher.stats.refusals if plugin], batcher.stats  # no plugin refused


def test_a_filter_that_is_not_batchable_refuses_the_pod_and_is_counted() -> None:
    enabled = {"filter": {"enabled": [{"name": "EvenRows"}]}}
    plain, _ = _placed(False, enabled, 6)
    batched, batcher = _placed(True, enabled, 6)
    assert [_decision(r) for r in plain] == [_decision(r) for r in batched]
    assert isinstance(batcher, Batcher)
    assert batcher.stats.batched == 0
    assert batcher.stats.refusals["EvenRows", "not batchable"] == 5, batcher.stats
    assert batcher.stats.refused["EvenRows not batchable"] == 5


def test_a_filter_with_the_hook_but_not_the_protocol_keeps_its_answer() -> None:
    """A plugin that defines batch_scope without listing Batchable (written before the protocol) is taken at its
    word where no other hook is asked of it: a Filter reading only the node keeps batching on."""
    enabled = {"filter": {"enabled": [{"name": "Legacy"}]}}
    plain, _ = _placed(False, enabled, 12)
    batched, batcher = _placed(True, enabled, 12)
    assert [_decision(r) for r in plain] == [_decision(r) for r in batched]
    assert isinstance(batcher, Batcher) and batcher.stats.batched == 10, batcher.stats


def test_the_sdk_exports_the_batching_protocol() -> None:
    for name in ("Batchable", "BatchScope", "Reads", "IncrementalScorer", "IncrementalScores"):
        assert name in sdk.__all__ and hasattr(sdk, name)
    assert not isinstance(Crowded, sdk.Batchable) and issubclass(sdk.MetricScorePlugin, sdk.Batchable)
