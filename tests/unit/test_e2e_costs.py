"""The per-pod work outside the scheduling core kept cheap without changing what it produces (issue 18, item 4):
watch lines split and decoded as bytes, the audit record's numbers gathered at once, the collector tuned once
the caches are synced."""

from __future__ import annotations

import gc
import math
import threading
from collections.abc import Callable
from typing import Any

import httpx
import numpy as np
import pytest

from adapters.kubernetes.client import KubeClient
from adapters.kubernetes.config import KubeConfig
from adapters.kubernetes.known_objects import KnownObjects, tombstone
from adapters.kubernetes.tokens import StaticToken
from metrics_sched.app.cli.run_cmd import GC_THRESHOLDS, tune_gc
from metrics_sched.audit import build_record
from metrics_sched.audit.record import _finite_rows, _top_positions
from metrics_sched.model.podinfo import parse_pod
from metrics_sched.scheduler.reporting import PodReporter
from tests.unit.fakes import FakeAPI, pod
from tests.unit.test_bounded_memory import realistic_results
from tests.unit.test_telemetry_scoring import make

pytestmark = pytest.mark.unit


def watch_events(chunks: list[bytes]) -> list[dict[str, object]]:
    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.params["watch"] == "true"
        return httpx.Response(200, content=iter(chunks))

    config = KubeConfig(server="https://kube.test", token=StaticToken("t" * 16))
    with KubeClient(config, transport=httpx.MockTransport(handler)) as client, \
            client.watch("/api/v1/pods", {}) as stream:
        return list(stream.events())


def test_watch_lines_split_anywhere_across_chunks_decode_to_the_same_events() -> None:
    lines = [b'{"type":"ADDED","object":{"metadata":{"name":"a\\u00e9"}}}',
             b'{"type":"MODIFIED","object":{"metadata":{"name":"b","labels":{"x":"1"}}}}',
             b'{"type":"BOOKMARK","object":{"metadata":{"resourceVersion":"7"}}}']
    stream = b"\n".join(lines) + b"\n\n"
    expected = [{"type": "ADDED", "object": {"metadata": {"name": "a\u00e9"}}},
                {"type": "MODIFIED", "object": {"metadata": {"name": "b", "labels": {"x": "1"}}}},
                {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "7"}}}]
    for size in (1, 2, 7, 40, len(stream)):  # single bytes (a UTF-8 character split too) up to one chunk
        chunks = [stream[i:i + size] for i in range(0, len(stream), size)]
        assert watch_events(chunks) == expected, size
    # The server's last line may come without its newline.
    assert watch_events([b"\n".join(lines)]) == expected


@pytest.mark.parametrize("line", [b"{not json", b"[1, 2]"])
def test_a_malformed_watch_line_is_dropped_and_the_watch_goes_on(line: bytes) -> None:
    """Issue 44 (bad input): a line that is not a JSON object is skipped (the stream counts it, the reflector adds it
    to dropped_events) and the events after it still arrive; it used to end the watch with an ApiError."""
    assert watch_events([b'{"type":"ADDED","object":{}}\n', line + b"\n", b'{"type":"DELETED","object":{}}\n']) == [
        {"type": "ADDED", "object": {}}, {"type": "DELETED", "object": {}}]


def test_top_positions_are_what_a_stable_argsort_begins_with() -> None:
    rng = np.random.default_rng(7)
    for size in (1, 3, 5, 6, 50, 500):
        for _ in range(20):
            total = rng.integers(0, 4, size).astype(float)  # many ties
            if rng.random() < 0.3:  # a few without a total (NaN): ranked last, as the argsort ranks them
                total[rng.random(size) < 0.1] = np.nan
            for top in (1, 2, 5):
                expected = np.argsort(-total, kind="stable")[:top]
                np.testing.assert_array_equal(_top_positions(total, top)[0][:top], expected)


def test_the_margin_is_nan_when_a_total_is_whatever_the_ranking_holds() -> None:
    """The margin read off the ranking is the two largest totals' difference; with a total NaN it is NaN, as the
    partition of every total gave it (it ranks NaN highest), whether the ranking holds one candidate or more."""
    results, state = realistic_results(1)
    result = results[0]
    assert result.total.size >= 3
    plain = build_record(result, state.table, config_hash="h", top=1)
    ordered = sorted(result.total.tolist(), reverse=True)
    assert plain.margin == round(ordered[0] - ordered[1], 4)
    result.total = result.total.copy()
    result.total[1] = np.nan
    for top in (1, 2, 5):
        margin = build_record(result, state.table, config_hash="h", top=top).margin
        assert margin is not None and math.isnan(margin), (top, margin)


def _reference(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else round(float(value), 4)


def test_numbers_are_rounded_exactly_as_round_does_ties_and_extremes_included() -> None:
    rng = np.random.default_rng(3)
    values = np.concatenate([rng.normal(0, 100, 2000), rng.integers(-10**6, 10**6, 2000) / 10**5 + 5e-6,
                             [0.00625, -0.00625, 2.50005, 1e300, -1e308, 1.5e12 + 0.00005, 0.0, -0.0,
                              math.nan, math.inf, -math.inf]])
    matrix = values.reshape(-1, 3) if values.size % 3 == 0 else values[: values.size // 3 * 3].reshape(-1, 3)
    rows = _finite_rows(matrix)
    for got, original in zip(np.array(rows, dtype=object).ravel().tolist(), matrix.ravel().tolist(), strict=True):
        assert got == _reference(original), original


def test_the_record_holds_each_candidates_numbers_as_read_one_by_one() -> None:
    results, state = realistic_results(12)
    now = 1_800_000_000.0
    for result in results:
        record = build_record(result, state.table, config_hash="h", now=now)
        totals = result.total
        assert record.candidates[0].node == result.node
        ordered = sorted(totals.tolist(), reverse=True)
        assert record.margin == pytest.approx(round(ordered[0] - ordered[1], 4), abs=1e-9)
        for candidate in record.candidates:
            pos = int(np.flatnonzero(result.feasible_rows == state.table.index[candidate.node])[0])
            row = int(result.feasible_rows[pos])
            assert candidate.total == round(float(totals[pos]), 4)
            assert len(candidate.terms) == len(result.terms)
            for detail, term in zip(candidate.terms, result.terms, strict=True):
                assert (detail.plugin, detail.weight) == (term.plugin, term.weight)
                assert detail.normalized == pytest.approx(_reference(term.normalized[pos]), abs=1e-9)
                assert detail.raw == pytest.approx(_reference(term.raw[pos]), abs=1e-9)
                for raw, evidence in zip(detail.metrics, term.evidence, strict=True):
                    assert raw.metric == evidence.metric and raw.sources == list(evidence.sources)
                    assert raw.value == pytest.approx(_reference(evidence.values[row]), abs=1e-9)
                    assert raw.age_seconds == pytest.approx(_reference(now - evidence.observed_at[row]), abs=1e-9)
                    in_flight = None if evidence.in_flight is None else _reference(evidence.in_flight.item(int(row)))
                    assert raw.in_flight == pytest.approx(in_flight, abs=1e-9)
    assert any(m.value is not None for c in record.candidates for t in c.terms for m in t.metrics)


def test_the_sync_callbacks_run_once_when_the_last_cache_syncs_whichever_thread_does_it() -> None:
    scheduler, _, _ = make()
    handlers = scheduler.handlers
    handlers.synced.clear()
    calls: list[str] = []
    handlers.on_all_synced.append(lambda: calls.append(threading.current_thread().name))
    threads = [threading.Thread(target=handlers.on_synced, args=(resource,), name=resource)
               for resource in sorted(handlers.awaited)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(calls) == 1 and handlers.caches_synced()
    handlers.on_synced("pods")  # a relist reports again: no second freeze
    assert len(calls) == 1


def _collectable(obj: object) -> bool:
    """Whether the cyclic collector still looks at `obj` (gc.get_objects leaves the frozen ones out)."""
    return any(o is obj for o in gc.get_objects())


def test_tune_gc_raises_the_thresholds_and_freezes_what_the_sync_left() -> None:
    thresholds = gc.get_threshold()
    callbacks: list[Callable[[], None]] = []
    try:
        tune_gc(callbacks)
        assert gc.get_threshold() == GC_THRESHOLDS
        assert gc.get_freeze_count() > 0
        listed = [{"metadata": {"name": f"pod-{i}"}} for i in range(1000)]  # what an initial LIST leaves
        assert _collectable(listed[-1])
        [freeze] = callbacks
        freeze()
        # Out of the collector's sight (a count would not do: frozen objects that die since leave the count).
        assert not _collectable(listed[-1])
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)


def test_a_written_scheduled_event_is_not_kept_for_a_series_but_failures_still_are() -> None:
    api = FakeAPI()
    reporter = PodReporter(api, "metrics-sched", instance="metrics-sched-0", workers=1)
    try:
        bound, failing = (parse_pod(api.add_pod(pod(name))) for name in ("bound", "failing"))
        reporter.failed(bound, "no fit", reason="Unschedulable")
        reporter.failed(failing, "no fit", reason="Unschedulable")
        reporter.scheduled(bound, "n1", "score 70")
        assert reporter.wait_idle(5)
        assert [e.reason for e in api.events if e.pod_name == "bound"] == ["FailedScheduling", "Scheduled"]
        # Each pod's FailedScheduling series stays open (a repeat joins it); the Scheduled event does not.
        assert reporter.open_series() == 2
        assert api.series_for("default/bound", "Scheduled") == [None]
    finally:
        reporter.shutdown(wait=False)


def test_what_the_reflector_remembers_of_an_object_is_its_identity_not_its_body() -> None:
    known = KnownObjects()
    obj: dict[str, Any] = {"apiVersion": "v1", "kind": "Pod",
                           "metadata": {"name": "p", "namespace": "ns", "uid": "u1", "resourceVersion": "7",
                                        "labels": {"a": "b"}, "annotations": {"big": "x" * 10_000}},
                           "spec": {"nodeName": "n1", "containers": [{"name": "c"}]}, "status": {"phase": "Running"}}
    assert known.upsert(obj) == [("ADDED", obj)]  # the sink gets the object itself
    [(kind, gone)] = known.replace([])  # a relist that no longer finds it
    assert kind == "DELETED"
    assert gone == {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "p", "namespace": "ns", "uid": "u1", "resourceVersion": "7", "labels": {"a": "b"}}}
    assert tombstone(obj)["metadata"]["labels"] is obj["metadata"]["labels"]  # shared, not copied


def test_the_packed_numbers_are_the_ones_the_ring_would_read_from_the_record() -> None:
    from metrics_sched.audit.record import StoredDecision, _read, build_stored, layout_of

    results, state = realistic_results(12)
    for result in results:
        stored = build_stored(result, state.table, config_hash="h", now=1_800_000_000.0)
        record, packed = stored.to_record(), stored.values
        read = StoredDecision(record, layout_of(record)).values
        assert len(packed) == len(read) > 0
        # The ring keeps the numbers as computed and rounds them when read; the record shows them rounded.
        stride = len(packed) // len(record.candidates)
        for i, (a, b) in enumerate(zip(_read(packed), read, strict=True)):
            # NaN is None; an infinite total is kept, any other infinite number shows as None
            assert a == b or (math.isnan(a) and math.isnan(b)) or (i % stride and math.isinf(a) and math.isnan(b))
        assert [packed[i] for i in range(0, len(packed), stride)] == pytest.approx([c.total for c in record.candidates])
        assert StoredDecision(record, layout_of(record), packed).as_dict() == \
            StoredDecision(record, layout_of(record)).as_dict()


def test_the_stored_record_summarises_and_observes_as_the_full_record_would() -> None:
    """The auditor reads the packed record (no per-candidate objects): its summary, winner's total and metric
    values are those of the DecisionRecord built from it."""
    from metrics_sched.audit.record import build_stored

    results, state = realistic_results(12)
    for result in results:
        stored = build_stored(result, state.table, config_hash="h", now=1_800_000_000.0)
        record = stored.to_record()
        assert stored.summary() == record.summary()
        assert "nodes feasible" in stored.summary()
        assert stored.winner_total == record.candidates[0].total
        assert list(stored.winner_values()) == [(m.metric, m.value) for t in record.candidates[0].terms
                                                for m in t.metrics if m.value is not None]
        assert stored.as_dict() == record.as_dict()
    assert any(True for _ in stored.winner_values())


def test_malloc_arenas_are_capped_unless_the_environment_says(monkeypatch: pytest.MonkeyPatch) -> None:
    """`metrics-sched run` caps glibc's per-thread malloc arenas before any thread allocates (what the threads free
    stays reusable by the others), and leaves MALLOC_ARENA_MAX to whoever sets it."""
    import subprocess
    import sys

    from metrics_sched.app.cli.run_cmd import limit_malloc_arenas

    monkeypatch.setenv("MALLOC_ARENA_MAX", "4")
    assert limit_malloc_arenas() is False
    monkeypatch.delenv("MALLOC_ARENA_MAX")
    # In a fresh interpreter (this one's arenas are the test run's): glibc accepts the cap.
    code = "from metrics_sched.app.cli.run_cmd import limit_malloc_arenas; print(limit_malloc_arenas())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"


def test_one_cpu_for_the_process_and_the_threads_it_starts() -> None:
    """cpuAffinity: one: `metrics-sched run` keeps its main thread to one allowed CPU before any thread starts, so
    every thread runs there (the default); `all` leaves the OS to place them. In a fresh interpreter (not this one)."""
    import subprocess
    import sys

    from metrics_sched.config import parse_config
    from metrics_sched.plugins import in_tree_registry

    catalog = in_tree_registry(third_party=False).catalog()
    assert parse_config({}, catalog).cpu_affinity == "one"
    assert parse_config({"cpuAffinity": "all"}, catalog).cpu_affinity == "all"
    assert parse_config({"cpuAffinity": "one"}, catalog).cpu_affinity == "one"
    code = (
        "import os, threading\n"
        "from metrics_sched.app.cli.run_cmd import keep_to_one_cpu\n"
        "allowed = os.sched_getaffinity(0)\n"
        "cpu = keep_to_one_cpu()\n"
        "seen = []\n"
        "thread = threading.Thread(target=lambda: seen.append(os.sched_getaffinity(0)))\n"
        "thread.start(); thread.join()\n"
        "print(cpu in allowed, os.sched_getaffinity(0) == {cpu} == seen[0])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "True"]
