"""Metric names and label sets, the decision ring's bound, and the explain rendering."""

from __future__ import annotations

import copy
import dataclasses
import tracemalloc

from prometheus_client.parser import text_string_to_metric_families

from metrics_sched.app.cli.explain_cmd import render_decision
from metrics_sched.audit import DecisionRing, build_record
from metrics_sched.audit.auditor import Auditor
from metrics_sched.observability import SchedulerMetrics
from metrics_sched.scheduler import Scheduler
from tests.unit.fakes import node, pod
from tests.unit.test_scheduler import drain
from tests.unit.test_telemetry_scoring import feed, make

EXPECTED = {
    "scheduler_schedule_attempts": {"result", "profile"},
    "scheduler_scheduling_attempt_duration_seconds": {"result", "profile"},
    "scheduler_scheduling_algorithm_duration_seconds": set(),
    "scheduler_pending_pods": {"queue"},
    "scheduler_unschedulable_pods": {"plugin", "profile"},
    "scheduler_plugin_execution_duration_seconds": {"plugin", "extension_point", "status"},
    "scheduler_pod_scheduling_attempts": set(),
    "scheduler_pod_scheduling_sli_duration_seconds": {"attempts"},
    "metrics_sched_bindings": {"node"},
    "metrics_sched_bind_results": {"result"},
    "metrics_sched_bind_duration_seconds": {"result"},
    "metrics_sched_unschedulable_reasons": {"reason"},
    "metrics_sched_decision_metric_value": {"metric"},
    "metrics_sched_decision_score": set(),
    "metrics_sched_decision_score_margin": set(),
    "metrics_sched_source_up": {"source"},
    "metrics_sched_metric_coverage_ratio": {"source", "metric"},
    "metrics_sched_metric_sample_age_seconds": {"source", "metric"},
    "metrics_sched_cluster_metric_quantile": {"metric", "quantile"},
    "metrics_sched_inflight_ledger_entries": set(),
    "metrics_sched_leader": set(),
    "metrics_sched_scheduling_cycles": {"profile", "kind"},
    "metrics_sched_batch_refusals": {"profile", "plugin", "reason"},
}


def audited(scheduler: Scheduler) -> tuple[DecisionRing, SchedulerMetrics]:
    """The audit sinks wired as the app wires them: the ring (/decisions) and the metrics (/metrics)."""
    ring = DecisionRing(100)
    auditor = Auditor(scheduler.state, ring, config_hash="abc")
    metrics = SchedulerMetrics(scheduler)
    scheduler.cycle_observers.append(auditor.on_cycle)
    scheduler.bind_observers.append(auditor.on_bind)
    auditor.record_observers.append(metrics.on_record)
    auditor.bind_observers.append(metrics.on_bind)
    return ring, metrics


def test_metric_names_and_labels_and_no_pod_names() -> None:
    scheduler, api, cache = make()
    ring, metrics = audited(scheduler)
    scheduler.handlers.on_node_event("ADDED", node("g1", gpus=1))
    scheduler.handlers.on_node_event("ADDED", node("g2", gpus=1))
    feed(cache, {"gpu_temperature": {"g1": 50, "g2": 60}, "node_hourly_cost": {"g1": 3, "g2": 4}})
    cache.health["test"].metrics = ["gpu_temperature", "node_hourly_cost"]
    cache.update_coverage(scheduler.node_directory())
    api.add_pod(pod("fits", gpus=1))
    api.add_pod(pod("too-big", gpus=4))
    drain(scheduler, api)
    text = metrics.exposition().decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    for name, labels in EXPECTED.items():
        assert name in families, name
        samples = [s for s in families[name].samples if s.name in (name, f"{name}_total", f"{name}_bucket")]
        assert samples, name
        seen = set().union(*(set(s.labels) - {"le"} for s in samples))
        assert seen == labels, (name, seen)
    assert "fits" not in text and "too-big" not in text  # no pod names in labels
    assert 'metrics_sched_bindings_total{node="g1"} 1.0' in text
    [record] = ring.query(pod="default/fits")
    assert record.node == "g1" and record.bind == "bound"
    # Compact (the pod carries it through every later write): id, total, margin, feasible, the metric values.
    annotation = api.annotations["default/fits"]["metrics-sched.io/decision"]
    assert annotation == (f"#{record.id} score {record.candidates[0].total:.1f}, margin {record.margin:.1f}, "
                          "2/2 feasible; "
                          "gpu_temperature=50 node_hourly_cost=3"), annotation
    assert "GPUTemperature" in record.summary() and "GPUTemperature" not in annotation  # per plugin: the event


def test_ring_respects_its_size_and_keeps_memory_bounded() -> None:
    scheduler, api, _ = make()
    scheduler.handlers.on_node_event("ADDED", node("n"))
    api.add_pod(pod("p"))
    result = scheduler.schedule_one(timeout=1)
    assert result is not None
    ring = DecisionRing(10_000)
    tracemalloc.start()
    template = build_record(result, scheduler.state.table, config_hash="x")
    for i in range(10_000):
        ring.add(copy.deepcopy(template) if i % 100 == 0 else dataclasses.replace(template, id=i))
    before = tracemalloc.take_snapshot()
    for i in range(15_000):
        ring.add(copy.deepcopy(template) if i % 100 == 0 else dataclasses.replace(template, id=10_000 + i))
    growth = sum(s.size_diff for s in tracemalloc.take_snapshot().compare_to(before, "filename"))
    tracemalloc.stop()
    assert len(ring) == 10_000
    assert len(ring.query(limit=20_000)) == 10_000
    assert growth < 2_000_000, f"the ring grew by {growth} bytes after it was full"


def test_explain_renders_the_winner_and_why_others_lost() -> None:
    scheduler, api, cache = make()
    scheduler.handlers.on_node_event("ADDED", node("cool", gpus=1))
    scheduler.handlers.on_node_event("ADDED", node("warm", gpus=1))
    feed(cache, {"gpu_temperature": {"cool": 41, "warm": 77}})
    api.add_pod(pod("p", gpus=1))
    result = scheduler.schedule_one(timeout=1)
    assert result is not None
    text = render_decision(build_record(result, scheduler.state.table, config_hash="h").as_dict())
    winner_line = next(line for line in text.splitlines() if line.startswith("winner"))
    assert "cool" in winner_line and "gpu_temperature=41.00" in winner_line
    assert "cool beat warm by" in text and "GPUTemperature +" in text


def test_batching_shows_how_many_cycles_reused_a_batch_and_why_the_others_did_not() -> None:
    scheduler, api, cache = make()
    _, metrics = audited(scheduler)
    for i in range(4):
        scheduler.handlers.on_node_event("ADDED", node(f"n{i}", gpus=1))
    feed(cache, {"gpu_temperature": {f"n{i}": 40 + i for i in range(4)}})
    for i in range(4):
        api.add_pod(pod(f"web-{i}"))  # one template: the first two run in full (the second stores the batch)
    drain(scheduler, api)
    families = {f.name: f for f in text_string_to_metric_families(metrics.exposition().decode())}
    cycles = {s.labels["kind"]: s.value for s in families["metrics_sched_scheduling_cycles"].samples
              if s.name.endswith("_total")}
    assert cycles == {"batched": 2.0, "full": 2.0}
    refusals = {s.labels["reason"]: s.value for s in families["metrics_sched_batch_refusals"].samples
                if s.name.endswith("_total")}
    assert refusals == {"template not seen recently": 1.0}
    assert {s.labels["profile"] for s in families["metrics_sched_scheduling_cycles"].samples} == {"metrics-sched"}


def test_operators_metrics_process_leader_election_rest_client_and_unschedulable_by_plugin() -> None:
    """The series operators look for on any Kubernetes component: process_*, leader_election_master_status{name},
    rest_client_* (from the API client, through ports.RequestObserver), scheduler_unschedulable_pods by plugin."""
    from metrics_sched.observability.rest_client import RestClientMetrics

    scheduler, api, _cache = make()
    rest = RestClientMetrics()
    leading = [False]
    metrics = SchedulerMetrics(scheduler, is_leader=lambda: leading[0], lease_name="metrics-sched", extra=[rest])
    scheduler.handlers.on_node_event("ADDED", node("g1", gpus=1))
    api.add_pod(pod("too-big", gpus=4))
    drain(scheduler, api)
    rest.observe_request("POST", "10.0.0.1:6443", "201", 0.004)

    def samples() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        text = metrics.exposition().decode()
        return {(s.name, tuple(sorted(s.labels.items()))): s.value
                for f in text_string_to_metric_families(text) for s in f.samples}

    got = samples()
    for name in ("process_cpu_seconds_total", "process_resident_memory_bytes", "process_open_fds",
                 "process_start_time_seconds"):
        assert (name, ()) in got, name
    assert got[("leader_election_master_status", (("name", "metrics-sched"),))] == 0
    leading[0] = True
    assert samples()[("leader_election_master_status", (("name", "metrics-sched"),))] == 1
    assert got[("rest_client_requests_total", (("code", "201"), ("host", "10.0.0.1:6443"), ("method", "POST")))] == 1
    assert got[("rest_client_request_duration_seconds_count", (("host", "10.0.0.1:6443"), ("verb", "POST")))] == 1
    parked = {labels: value for (name, labels), value in got.items() if name == "scheduler_unschedulable_pods"}
    assert parked == {(("plugin", "NodeResourcesFit"), ("profile", "metrics-sched")): 1}, parked
    # Without leader election, no leader_election_master_status (as client-go registers it only with an elector).
    assert "leader_election_master_status" not in SchedulerMetrics(scheduler).exposition().decode()
