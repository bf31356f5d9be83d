"""Memory follows the current cluster, not its history (issue 14, item 4): taint sets of nodes long gone
or of taints long replaced are dropped, and the decision ring keeps its records compactly."""

from __future__ import annotations

import gc
import json
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np

import metrics_sched.audit as audit_package
from metrics_sched.audit import DecisionRing, build_record
from metrics_sched.audit.auditor import Auditor
from metrics_sched.framework import CycleState, tolerated_rows
from metrics_sched.framework.runtime import CycleResult
from metrics_sched.model.podinfo import parse_pod
from metrics_sched.plugins.taint_toleration.plugin import TaintToleration
from metrics_sched.state.cluster_state import ClusterState
from metrics_sched.state.node_table import NodeTable, parse_node
from tests.polling import poll
from tests.unit.fakes import node, pod
from tests.unit.test_scheduler import drain
from tests.unit.test_telemetry_scoring import feed, gpu_nodes, make


def autoscaler_taint(i: int) -> dict[str, str]:
    """A taint whose value is a timestamp: each one is a taint set never seen before."""
    return {"key": "DeletionCandidateOfClusterAutoscaler", "value": str(1_700_000_000 + i),
            "effect": "PreferNoSchedule"}


def live_sets(table: NodeTable) -> set[tuple[Any, ...]]:
    return {table.taint_sets[int(table.taint_set[row])] for row in table.rows()}


def test_taint_sets_of_removed_nodes_and_replaced_taints_are_dropped() -> None:
    table = NodeTable()
    blocked = {"key": "gpu", "value": "true", "effect": "NoSchedule"}
    for i in range(4):  # nodes that stay: two share a set, one has none
        table.upsert(parse_node(node(f"stay-{i}", taints=[blocked] if i < 2 else [autoscaler_taint(-i)] if i == 2
                                     else [])))
    for i in range(1_000):  # churn: a node comes and goes, another's timestamped taint changes every time
        table.upsert(parse_node(node(f"gone-{i}", taints=[autoscaler_taint(i)])))
        table.upsert(parse_node(node("flapping", taints=[autoscaler_taint(10_000 + i), blocked])))
        if i >= 3:
            table.remove(f"gone-{i - 3}")
    assert len(table) == 8
    distinct = live_sets(table)
    assert len(distinct) == 7  # (): stay-3; blocked: stay-0/1; one each: stay-2, flapping, 3 gone-*
    assert len(table.taint_sets) <= 2 * len(distinct) + 1
    # Every row reads its own taints back, after all the reuse and compaction.
    for row in table.rows():
        record = table.records[int(row)]
        assert record is not None and table.taint_sets[int(table.taint_set[row])] == record.taints

    plain, tolerant = parse_pod(pod("p")), parse_pod(pod("q", tolerations=[{"key": "gpu", "operator": "Exists"}]))
    feasible = {name for name in table.index if tolerated_rows(plain, table)[table.index[name]]}
    assert feasible == {"stay-2", "stay-3", "gone-997", "gone-998", "gone-999"}
    assert tolerated_rows(tolerant, table)[table.rows()].all()
    rows = table.rows()
    scores = TaintToleration({}, None).score(CycleState(), plain, table, rows)  # type: ignore[arg-type]
    untolerated = dict(zip(table.names_of(rows), scores.tolist(), strict=True))
    assert untolerated == {"stay-0": 0, "stay-1": 0, "stay-2": 1, "stay-3": 0, "flapping": 1, "gone-997": 1,
                           "gone-998": 1, "gone-999": 1}


def test_a_new_node_reuses_a_freed_taint_set_id_and_the_old_taints_do_not_leak() -> None:
    table = NodeTable()
    blocked = [{"key": "a", "effect": "NoSchedule"}]
    table.upsert(parse_node(node("x", taints=blocked)))
    table.upsert(parse_node(node("keep", taints=[{"key": "b", "effect": "NoSchedule"}])))
    table.remove("x")
    row, _ = table.upsert(parse_node(node("y")))  # takes x's row, with no taints
    assert tolerated_rows(parse_pod(pod("p")), table)[row]
    table.upsert(parse_node(node("z", taints=[{"key": "c", "effect": "NoSchedule"}])))
    assert len(table.taint_sets) == 3  # (), b's, c's in a's old place
    assert {t.key for s in table.taint_sets for t in s} == {"b", "c"}


def realistic_results(n: int) -> tuple[list[CycleResult], ClusterState]:
    """Scheduling results with telemetry terms over 20 GPU nodes, as production records look."""
    scheduler, api, cache = make()
    names = [f"gpu-node-{i:03d}" for i in range(20)]
    gpu_nodes(scheduler, names)
    feed(cache, {"gpu_temperature": {name: 40 + i for i, name in enumerate(names)},
                 "node_hourly_cost": {name: 2 + i for i, name in enumerate(names)},
                 "node_cpu_utilisation": {name: 0.1 * (i % 9) for i, name in enumerate(names)},
                 "node_load_per_cpu": {name: 0.2 * (i % 7) for i, name in enumerate(names)}})
    results = []
    for i in range(n):
        api.add_pod(pod(f"job-{i:05d}", gpus=1, namespace="team-a"))
        result = scheduler.schedule_one(timeout=1)
        assert result is not None and result.node is not None
        results.append(result)
    return results, scheduler.state


def test_the_ring_keeps_a_decision_in_under_2_kb_and_serves_it_unchanged() -> None:
    results, state = realistic_results(20)
    # Each record with its own strings (pod, uid, message), as records of distinct pods have.
    records = [build_record(results[i % len(results)], state.table, config_hash="abc123def456") for i in range(100)]
    ring = DecisionRing(len(records))
    tracemalloc.start()
    try:
        for record in records:
            ring.add(record)
        snapshot = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    # What the audit's own code allocated and still holds: the stored records. The scheduler's threads (the
    # reporter writing events, the binder) allocate in the same window, and counting them (get_traced_memory)
    # put a fresh run 15 bytes over the bound while the records took ~1,830 bytes each.
    audit = snapshot.filter_traces([tracemalloc.Filter(True, str(Path(audit_package.__file__).parent / "*"))])
    growth = sum(stat.size for stat in audit.statistics("filename"))
    # The dataclass records took ~11.9 KB each with these 8 terms (113 MiB for the default 10,000).
    assert growth / len(ring) < 2_000, f"{growth / len(ring):.0f} bytes per stored decision"

    newest = ring.select(limit=5)
    for record, stored in zip(records[::-1][:5], newest, strict=True):
        assert json.dumps(stored.as_dict()) == json.dumps(record.as_dict())
        assert stored.to_record() == record


def test_the_bind_outcome_reaches_the_stored_decision() -> None:
    scheduler, api, _ = make()
    ring = DecisionRing(10)
    auditor = Auditor(scheduler.state, ring, config_hash="h")
    scheduler.cycle_observers.append(auditor.on_cycle)
    scheduler.bind_observers.append(auditor.on_bind)
    scheduler.handlers.on_node_event("ADDED", node("n"))
    api.add_pod(pod("p"))
    drain(scheduler, api)
    [stored] = ring.select(pod="default/p")
    assert stored.bind == "bound" and stored.bind_ms is not None
    assert stored.as_dict()["bind"] == "bound" and ring.query(pod="default/p")[0].bind == "bound"


def test_select_pages_newest_first_by_id() -> None:
    results, state = realistic_results(1)
    ring = DecisionRing(50)
    for _ in range(30):
        ring.add(build_record(results[0], state.table, config_hash="h"))
    ids = [s.id for s in ring.select(limit=100)]
    assert ids == sorted(ids, reverse=True) and len(ids) == 30
    page = ring.select(before=ids[9], limit=10)
    assert [s.id for s in page] == ids[10:20]
    assert ring.select(limit=0) == []
    assert np.all(np.diff(ids) < 0)


def test_telemetry_of_deleted_nodes_is_forgotten() -> None:
    """Found by the soak bench: values of replaced nodes stayed in the cache forever (5 per node after a week
    of autoscaler churn); a refresh drops the values of nodes no longer in the cluster."""
    from metrics_sched.ports import FetchResult, NodeDirectory, Sample
    from metrics_sched.telemetry.cache import MetricCache

    cache = MetricCache()
    samples = [Sample("gpu_temperature", f"n{i}", 50.0, 100.0) for i in range(3)]
    every = NodeDirectory(frozenset({"n0", "n1", "n2"}), {}, {}, {})
    cache.ingest("prom", FetchResult(samples, {}, {}), fetched_at=101.0, directory=every)
    assert sorted(cache._store["gpu_temperature"]) == ["n0", "n1", "n2"]
    one = NodeDirectory(frozenset({"n1"}), {}, {}, {})
    cache.ingest("prom", FetchResult([], {}, {}), fetched_at=102.0, directory=one)
    assert sorted(cache._store["gpu_temperature"]) == ["n1"]


def test_a_deleted_nodes_bindings_series_goes() -> None:
    from metrics_sched.observability import SchedulerMetrics

    scheduler, _, _ = make()
    metrics = SchedulerMetrics(scheduler)
    scheduler.node_deleted_observers.append(metrics.forget_node)
    metrics.bindings.labels("gone").inc()
    metrics.bindings.labels("kept").inc()
    scheduler.handlers.on_node_event("ADDED", node("gone"))
    scheduler.handlers.on_node_event("DELETED", node("gone"))
    names = {s.labels["node"] for m in metrics.registry.collect() if m.name == "metrics_sched_bindings"
             for s in m.samples}
    assert names == {"kept"}


def test_idle_bind_workers_hold_no_cycle_result() -> None:
    """A bind worker lets go of its last call before it waits for the next: idle, each one held its pod's
    CycleResult (whole-table score and evidence arrays, ~0.5 MB at 5,000 nodes, with 64 workers by default)."""
    scheduler, api, _ = make()
    gpu_nodes(scheduler, [f"gpu-node-{i}" for i in range(4)])

    def ours() -> list[CycleResult]:
        gc.collect()
        return [o for o in gc.get_objects() if isinstance(o, CycleResult) and o.pod.name.startswith("idle-worker-")]

    for i in range(8):
        api.add_pod(pod(f"idle-worker-{i}", gpus=1))
        placed = scheduler.schedule_one(timeout=1)
        assert placed is not None and placed.node is not None
        del placed
    assert scheduler.binder.drain(10)
    assert len(api.binds) == 8
    poll(lambda: not ours(), 10, "no CycleResult of ours alive once every bind is done")
