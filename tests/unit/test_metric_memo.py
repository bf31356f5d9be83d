"""The metric plugins keep their reads and scores between cycles and patch the rows a placement changed:
decisions and every score term are the same, bit for bit, as when everything is computed afresh."""

from __future__ import annotations

import numpy as np
import pytest

from bench.core_bench import cluster, make_pod
from metrics_sched.framework.metric_score import _FEW, _FEW_SCORED, MetricScorePlugin, MetricTerm, Scale
from metrics_sched.framework.scoring import nan_weighted_mean
from metrics_sched.model.podinfo import parse_pod
from metrics_sched.telemetry.ledger import InFlightView, _Log

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


def test_one_row_arithmetic_is_the_vector_arithmetic() -> None:
    """The Python-float patch of one row (a placement's) gives the doubles the numpy forms give."""
    from metrics_sched.framework.metric_score import Scale, _weighted_mean_one
    from metrics_sched.framework.scoring import nan_weighted_mean

    rng = np.random.default_rng(7)
    specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, 2.0, 0.1, 1e-300, 1e300, 100.0, 85.0, 30.0])
    values = np.concatenate([specials, rng.normal(50, 40, 400), rng.uniform(0, 2, 200)])
    for scale in (Scale("range", 0.0, 1.0), Scale("range", 0.0, 2.0), Scale("range", 30.0, 85.0),
                  Scale("range", -1.5, 0.3)):
        for better in ("lower", "higher"):
            vector = scale.apply(values.copy(), better)
            one = np.array([scale.apply_one(float(v), better) for v in values])
            np.testing.assert_array_equal(one, vector)
            assert np.array_equal(np.signbit(one), np.signbit(vector))
    for weights in ([1, 1], [1.0, 2.0, 0.5], [3, 1, 1, 2], [0.1, 0.2, 0.7]):
        parts = [np.where(rng.random(300) < 0.2, np.nan, rng.uniform(0, 100, 300)) for _ in weights]
        vector = nan_weighted_mean(parts, weights, 300)
        one = np.array([_weighted_mean_one([float(p[i]) for p in parts], weights) for i in range(300)])
        np.testing.assert_array_equal(one, vector)
        gapless = [np.nan_to_num(p, nan=42.0) for p in parts]  # no gaps: the vector form's scalar weight sum
        np.testing.assert_array_equal(
            np.array([_weighted_mean_one([float(p[i]) for p in gapless], weights) for i in range(300)]),
            nan_weighted_mean(gapless, weights, 300))


def test_a_few_rows_scored_without_the_memos_equal_the_memo_path() -> None:
    """score() of a few rows (what a batched cycle asks after a placement) reads the column and the ledger straight,
    leaving the memos behind; its scores and evidence are the memo path's, bit for bit, and the memos catch up with
    every placement made meanwhile when they are next used."""
    from metrics_sched.framework.cycle_state import CycleState

    harness = cluster(300, seed=4)
    rng = np.random.default_rng(4)
    try:
        plugins = [p for p in harness.framework.instances.values()
                   if isinstance(p, MetricScorePlugin) and p._pointwise]
        assert len(plugins) >= 2
        table = harness.scheduler.state.table
        every = np.flatnonzero(table.present[: table.capacity]).astype(np.int64)
        fast = viewed = 0
        for i in range(90):
            result = harness.place(parse_pod(make_pod(i)))
            assert result.node is not None
            pod = parse_pod(make_pod(i + 1))
            # up to _FEW rows in Python floats, more (a batched cycle after several placements) in numpy, up to
            # _FEW_SCORED
            few = np.sort(rng.choice(every, size=int(rng.integers(1, _FEW_SCORED + 1)), replace=False)).astype(np.int64)
            if i % 3 == 0:  # the last placement's row, as a batched cycle asks
                few = np.array([table.index[result.node]], dtype=np.int64)
            for plugin in plugins:
                if not plugin.applies(pod):
                    continue
                fast += plugin._score_few(table, few) is not None
                small = plugin.score(CycleState(), pod, table, few)
                if i % 4 == 0:
                    continue  # the memos fall several placements behind before the next full score
                whole = plugin.score(CycleState(), pod, table, every)
                np.testing.assert_array_equal(small.scores, whole.scores[np.searchsorted(every, few)])
                assert len(small.evidence) == len(whole.evidence)
                for a, b in zip(small.evidence, whole.evidence, strict=True):
                    assert (a.metric, a.sources) == (b.metric, b.sources)
                    assert a.values is b.values and a.observed_at is b.observed_at
                    # The ledger's part: a view of the settled adjustment plus the placements since (no copy), whose
                    # rows are the memo path's settled array's, bit for bit.
                    assert (a.in_flight is None) == (b.in_flight is None)
                    if a.in_flight is not None and b.in_flight is not None:
                        viewed += isinstance(a.in_flight, InFlightView) and a.in_flight.size > 0
                        assert a.in_flight.take(every).tobytes() == b.in_flight.take(every).tobytes()
                        assert [a.in_flight.item(row) for row in few.tolist()] == b.in_flight.take(few).tolist()
        assert fast > 100
        assert viewed > 20  # views with placements added since the adjustment was settled
    finally:
        harness.stop()


def test_a_view_reads_its_rows_entries_up_to_its_size_in_the_logs_order() -> None:
    """InFlightView over a log that grew after it was taken: each row adds its own entries made before the view, in
    the log's order (the additions settle() makes), and nothing after; rows without entries read the settled value."""
    rng = np.random.default_rng(9)
    base = rng.random(20)
    log = _Log()
    added = [(int(rng.integers(0, 6)), float(rng.random() * 1e-3)) for _ in range(40)]
    for row, delta in added:
        log.add(row, delta)
    for size in (0, 1, 17, 40):
        view = InFlightView(base, log, size)
        expected = base.copy()
        for row, delta in added[:size]:
            expected[row] += delta
        rows = np.array([5, 0, 19, 3, 3, 1], dtype=np.int64)
        assert view.take(rows).tobytes() == expected[rows].tobytes()
        assert [view.item(row) for row in range(20)] == expected.tolist()


class _Three(MetricScorePlugin):
    name = "Three"
    TERMS = (MetricTerm("a", better="lower", scale=Scale("range", 0.0, 1.0)),
             MetricTerm("b", better="higher", scale=Scale("range", 10.0, 90.0), weight=2.5),
             MetricTerm("c", better="lower", scale=Scale("range", -1.0, 3.0), weight=0.5))


@pytest.mark.parametrize("seed", range(8))
def test_the_terms_scored_at_once_on_a_few_rows_are_the_terms_scored_one_by_one(seed: int) -> None:
    """_fused_rows (a batched cycle's changed rows, more than _FEW of them) gives what Scale.apply per term, 0 where
    a LOWEST term has no value, and nan_weighted_mean of them give: values outside the range, NaN, ±inf, missing
    values scored lowest, and rows where no term has a value."""
    plugin = _Three(None, None)  # type: ignore[arg-type]  # no handle: only the terms are read
    rng = np.random.default_rng(seed)
    rows = 12
    values = rng.uniform(-2.0, 100.0, (3, rows))
    values[rng.random((3, rows)) < 0.2] = np.nan
    values[0, 1], values[1, 2], values[2, 2] = np.inf, -np.inf, np.inf
    values[:, 3] = np.nan  # no term has a value there
    lowest = [(1, rng.random(rows) < 0.3)] if seed % 2 else []
    parts = []
    for index, term in enumerate(plugin._terms):
        part = term.scale.apply(values[index].copy(), term.better)
        for at, missing in lowest:
            if at == index:
                part = np.where(missing, 0.0, part)
        parts.append(part)
    expected = nan_weighted_mean(parts, plugin._weights, rows)
    assert plugin._fused_rows(values, lowest).tobytes() == expected.tobytes()
    gapless = np.nan_to_num(values, nan=0.5, posinf=0.5, neginf=0.5)
    expected = nan_weighted_mean([t.scale.apply(gapless[i].copy(), t.better) for i, t in enumerate(plugin._terms)],
                                 plugin._weights, rows)
    assert plugin._fused_rows(gapless, []).tobytes() == expected.tobytes()


def test_the_scores_kept_for_a_few_rows_are_computed_again_only_where_they_may_have_moved(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Beyond _FEW rows, _score_few keeps each row's score and computes again only the rows whose pods changed since
    (a placement's row), and every row after a ledger removal or new samples; the scores stay the memo path's."""
    from metrics_sched.framework.cycle_state import CycleState

    harness = cluster(300, seed=5)
    try:
        plugin = next(p for p in harness.framework.instances.values()
                      if isinstance(p, MetricScorePlugin) and p._pointwise and p.name == "NodeLoad")
        table = harness.scheduler.state.table
        every = np.flatnonzero(table.present[: table.capacity]).astype(np.int64)
        computed: list[int] = []
        row_score, fused = plugin._row_score, plugin._fused_rows
        monkeypatch.setattr(plugin, "_row_score", lambda reads, row: computed.append(1) or row_score(reads, row))
        monkeypatch.setattr(plugin, "_fused_rows",
                            lambda values, lowest: computed.append(values.shape[1]) or fused(values, lowest))

        def scored(rows: np.ndarray) -> np.ndarray:
            computed.clear()
            small = plugin.score(CycleState(), parse_pod(make_pod(999)), table, rows).scores
            whole = plugin.score(CycleState(), parse_pod(make_pod(999)), table, every).scores
            np.testing.assert_array_equal(small, whole[np.searchsorted(every, rows)])
            return small

        results = [harness.place(parse_pod(make_pod(i))) for i in range(3)]
        rows = np.sort(np.unique(np.concatenate([every[:12], [table.index[r.node] for r in results]])))
        scored(rows)
        assert sum(computed) == rows.size  # first time: every row
        scored(rows)
        assert sum(computed) == 0  # nothing changed
        placed = harness.place(parse_pod(make_pod(3)))
        rows = np.union1d(rows, [table.index[placed.node]]).astype(np.int64)
        scored(rows)
        assert sum(computed) == 1  # the placement's row alone
        harness.ledger.remove(placed.pod.uid)  # a removal may move any row's in-flight part
        scored(rows)
        assert sum(computed) == rows.size
    finally:
        harness.stop()


def test_a_row_scored_between_its_assume_and_its_reserve_is_scored_again_after_the_reserve() -> None:
    """The ledger adds a placement at Reserve, after the assume moved its row's pods, and another thread (the
    rebalancer's what-if) may score in between: the score kept then misses the placement, and is computed again
    once the ledger has it (InFlightLedgerStore.last_adds)."""
    from metrics_sched.framework.cycle_state import CycleState

    harness = cluster(40, seed=4)
    try:
        framework, state = harness.framework, harness.scheduler.state
        table = state.table
        plugins = [p for p in framework.instances.values() if isinstance(p, MetricScorePlugin) and p._pointwise
                   and any(t.ledger for t in p._terms) and p.name in ("NodeLoad", "CustomMetric")]
        assert len(plugins) == 2
        every = np.flatnonzero(table.present[: table.capacity]).astype(np.int64)
        assert _FEW < every.size <= _FEW_SCORED  # scored through the kept rows
        harness.place(parse_pod(make_pod(0)))
        probe = parse_pod(make_pod(2))
        for plugin in plugins:
            plugin.score(CycleState(), probe, table, every)  # the memos
            plugin.score(CycleState(), probe, table, every)  # the kept rows
        info = parse_pod(make_pod(4))
        with state.lock:
            result = framework.schedule(info, table)
            assert result.node is not None
            state.assume(info, result.node)
        between = {plugin.name: plugin.score(CycleState(), probe, table, every).scores  # before the reserve
                   for plugin in plugins}
        for reserve in framework.reserves:
            reserve.reserve(result.cycle, info, result.node)
        at = int(np.searchsorted(every, table.index[result.node]))
        for plugin in plugins:
            kept = plugin.score(CycleState(), probe, table, every).scores
            plugin._rows_kept = None
            fresh = plugin.score(CycleState(), probe, table, every).scores
            assert kept.tobytes() == fresh.tobytes(), plugin.name
            assert between[plugin.name][at] != fresh[at], plugin.name  # the placement moved the row's score
    finally:
        harness.stop()
