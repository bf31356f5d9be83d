"""/metrics: kube-scheduler's metric names and labels (so its dashboards work) plus metrics_sched_*
for sources, decisions and the in-flight ledger. Its own registry; no pod names in any label.

Hot-path cost is a few counter/histogram updates per decision (plugin timings sampled like
kube-scheduler, 10 %); everything that describes state (queues, sources, cluster distributions)
is computed at scrape time by a collector.
"""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Callable, Iterable
from typing import Protocol, runtime_checkable

import numpy as np
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from metrics_sched.audit.record import StoredDecision
from metrics_sched.framework import PluginEvents
from metrics_sched.framework.interfaces import BindOutcomeKind
from metrics_sched.framework.runtime import CycleResult
from metrics_sched.observability.children import Children
from metrics_sched.observability.plugin_metrics import PluginMetrics
from metrics_sched.scheduler.binding import BindOutcome
from metrics_sched.scheduler.scheduler import Scheduler
from metrics_sched.state.comparer import Comparison, MismatchKind

ATTEMPT_BUCKETS = tuple(0.001 * 2**i for i in range(15))  # kube-scheduler: 1 ms doubling, 15 buckets
PLUGIN_BUCKETS = tuple(0.00001 * 1.5**i for i in range(20))
ATTEMPTS_BUCKETS = (1, 2, 4, 8, 16)
PLUGIN_SAMPLE_RATE = 0.1
CLUSTER_METRICS = ("gpu_temperature", "node_hourly_cost", "node_cpu_utilisation")
QUANTILES = ("0.1", "0.5", "0.9", "1")
# One bucket layout for every metric's unit: fine steps for ratios (0-1), $/h (0.25-64) and °C (20-100).
DECISION_VALUE_BUCKETS = tuple(sorted({
    *(i / 10 for i in range(11)), 0.25, 0.5, 1.5, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64,
    *range(20, 101, 5), 150, 250, 500, 1000, 10_000,
}))


class SchedulerMetrics:
    def __init__(self, scheduler: Scheduler, *, is_leader: Callable[[], bool] = lambda: True,
                 lease_name: str | None = None, extra: Iterable[Collector] = ()) -> None:
        """lease_name: the leader-election Lease's name, the `name` label of leader_election_master_status (None:
        no leader election, and no such series, as client-go's). extra: further collectors (the API client's
        rest_client_* metrics)."""
        self.scheduler = scheduler
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        # What operators look for on any process: process_* (CPU, RSS, fds, start time; Linux /proc) and
        # python_info, as kube-scheduler has process_* and go_*.
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        for collector in extra:
            r.register(collector)
        self.attempts = Counter("scheduler_schedule_attempts", "Number of attempts to schedule pods, by the result.",
                                ["result", "profile"], registry=r)
        self.attempt_duration = Histogram(
            "scheduler_scheduling_attempt_duration_seconds", "Scheduling attempt latency (algorithm + binding).",
            ["result", "profile"], buckets=ATTEMPT_BUCKETS, registry=r)
        self.algorithm_duration = Histogram(
            "scheduler_scheduling_algorithm_duration_seconds", "Scheduling algorithm latency.",
            buckets=ATTEMPT_BUCKETS, registry=r)
        self.plugin_duration = Histogram(
            "scheduler_plugin_execution_duration_seconds", "Duration of running a plugin at an extension point.",
            ["plugin", "extension_point", "status"], buckets=PLUGIN_BUCKETS, registry=r)
        self.pod_attempts = Histogram(
            "scheduler_pod_scheduling_attempts", "Number of attempts to successfully schedule a pod.",
            buckets=ATTEMPTS_BUCKETS, registry=r)
        self.sli_duration = Histogram(
            "scheduler_pod_scheduling_sli_duration_seconds", "E2e latency for a pod being scheduled, from creation.",
            ["attempts"], buckets=tuple(0.01 * 2**i for i in range(20)), registry=r)
        self.bindings = Counter("metrics_sched_bindings", "Pods bound, by node.", ["node"], registry=r)
        self.bind_results = Counter("metrics_sched_bind_results", "Bind outcomes.", ["result"], registry=r)
        self.bind_duration = Histogram("metrics_sched_bind_duration_seconds", "Bind API call latency.", ["result"],
                                       buckets=ATTEMPT_BUCKETS, registry=r)
        self.unschedulable = Counter("metrics_sched_unschedulable_reasons",
                                     "Unschedulable attempts, by a filter reason that rejected nodes.", ["reason"],
                                     registry=r)
        # Labelled by metric name, so a new telemetry plugin's metric shows here (and on the dashboards) by itself.
        self.decision_value = Histogram(
            "metrics_sched_decision_metric_value",
            "Value of each metric a score term used, on the chosen node at decision time (the metric's own unit).",
            ["metric"], buckets=DECISION_VALUE_BUCKETS, registry=r)
        self.decision_score = Histogram("metrics_sched_decision_score", "Total score (0-100) of the chosen node.",
                                        buckets=tuple(range(0, 101, 10)), registry=r)
        self.decision_margin = Histogram(
            "metrics_sched_decision_score_margin", "Score of the winner minus the runner-up.",
            buckets=(0.1, 0.5, 1, 2, 5, 10, 20, 50, 100), registry=r)
        self.fetch_duration = Histogram(
            "metrics_sched_source_fetch_duration_seconds", "Duration of one refresh of a telemetry source.",
            ["source"], buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30), registry=r)
        # The cache comparer (SIGUSR2 and periodic): every kind shown from the start, so 0 reads as "none found".
        self.cache_mismatches = Counter("metrics_sched_cache_mismatch",
                                        "Differences between the scheduler's cache and a fresh LIST, by kind.",
                                        ["kind"], registry=r)
        for kind in MismatchKind:
            self.cache_mismatches.labels(kind.value)
        self.cache_compares = Counter("metrics_sched_cache_compare_runs", "Cache comparer runs, by result.",
                                      ["result"], registry=r)
        for result in ("ok", "error"):
            self.cache_compares.labels(result)
        # What the plugins report through their Handle's events (kube-scheduler's preemption metrics from
        # DefaultPreemption, the gang metrics from Coscheduling...), each as the plugin declared it.
        self.plugin_metrics = PluginMetrics(r, _buses(scheduler))
        # Present in every scheduler (0 while the rebalancer is off), so the dashboard's panel reads "none".
        self.rebalance = RebalanceMetrics(r)
        r.register(_StateCollector(scheduler, is_leader, lease_name))
        self._random = random.Random()
        self._decisions = 0
        # The per-pod observers' children (see Children).
        self._attempts, self._attempt_duration = Children(self.attempts), Children(self.attempt_duration)
        self._plugin_duration, self._decision_value = Children(self.plugin_duration), Children(self.decision_value)
        self._bind_results, self._bind_duration = Children(self.bind_results), Children(self.bind_duration)
        self._bindings, self._sli_duration = Children(self.bindings), Children(self.sli_duration)
        scheduler.metrics.refresh_observers.append(self._refreshed)

    def _refreshed(self, source: str, seconds: float, ok: bool) -> None:
        self.fetch_duration.labels(source).observe(seconds)

    def on_compare(self, comparison: Comparison) -> None:
        self.cache_compares.labels("error" if comparison.error else "ok").inc()
        for kind in MismatchKind:
            if count := comparison.count(kind):
                self.cache_mismatches.labels(kind.value).inc(count)

    # -- observers -------------------------------------------------------------------------------
    def on_record(self, record: StoredDecision, result: CycleResult) -> None:
        algorithm = record.duration_ms / 1000
        self.algorithm_duration.observe(algorithm)
        if record.result not in ("scheduled", "waiting"):  # a placed pod's attempt ends with its bind
            self._attempts(record.result, record.profile).inc()
            self._attempt_duration(record.result, record.profile).observe(algorithm)
            for reason, _ in record.rejections:
                self.unschedulable.labels(reason).inc()
        self._decisions += 1
        # Like kube-scheduler, sample plugin timings (10 %), but keep the first ones so a new scheduler shows them.
        if self._decisions <= 100 or self._random.random() < PLUGIN_SAMPLE_RATE:
            for plugin, point, seconds, status in result.timings:
                self._plugin_duration(plugin, point, status).observe(seconds)
        # A shadow profile's pick is not a placement: the winners' score, margin and value histograms are about
        # the pods this scheduler places (its attempts are counted above, under result="shadow").
        total = record.winner_total
        if record.node and total is not None and record.result != "shadow":
            self.decision_score.observe(total)
            if record.margin is not None:
                self.decision_margin.observe(record.margin)
            for metric, value in record.winner_values():
                self._decision_value(metric).observe(value)

    def forget_node(self, name: str) -> None:
        """A deleted node's per-node series go (autoscalers replace nodes all day: series would pile up)."""
        with contextlib.suppress(KeyError):  # never bound to
            self._bindings.remove(name)

    def on_bind(self, record: StoredDecision, outcome: BindOutcome) -> None:
        self._bind_results(outcome.result).inc()
        self._bind_duration(outcome.result).observe(outcome.seconds)
        bound = outcome.result in (BindOutcomeKind.BOUND, BindOutcomeKind.ALREADY_BOUND)
        # Like kube-scheduler: a pod Permit or PreBind turned down is unschedulable, a failed bind an error.
        result = "scheduled" if bound else "unschedulable" if outcome.result == BindOutcomeKind.REJECTED else "error"
        self._attempts(result, record.profile).inc()
        self._attempt_duration(result, record.profile).observe(record.duration_ms / 1000 + outcome.seconds)
        if bound:
            self._bindings(outcome.node).inc()
            self.pod_attempts.observe(max(1, record.attempts))
            created = outcome.pod.created
            if created:
                self._sli_duration(str(min(record.attempts, 16))).observe(max(0.0, time.time() - created))

    def exposition(self) -> bytes:
        return bytes(generate_latest(self.registry))


def _buses(scheduler: Scheduler) -> list[PluginEvents]:
    """The events of the scheduler's Handles: one bus, shared by every profile (listed once each in any case)."""
    found: dict[int, PluginEvents] = {}
    for framework in scheduler.frameworks.values():
        found.setdefault(id(framework.handle.events), framework.handle.events)
    return list(found.values())


class RebalanceMetrics:
    """The rebalancer's verdicts by rule (`reason`, the rule's name) and outcome (evicted, planned, blocked,
    skipped, gone, error), and how many pods it considered in its last tick. No pod names in labels."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.evictions = Counter("metrics_sched_evictions",
                                 "Rebalancer verdicts on pods of bad nodes, by rule (reason) and outcome.",
                                 ["reason", "outcome"], registry=registry)
        self.candidates = Gauge("metrics_sched_rebalance_candidates",
                                "Pods on bad nodes the rebalancer considered in its last tick.", registry=registry)

    def declare(self, rules: Iterable[str], outcomes: Iterable[str]) -> None:
        """Every rule and outcome from the start, so 0 reads as "none" on the dashboards."""
        outcomes = list(outcomes)
        for rule in rules:
            for outcome in outcomes:
                self.evictions.labels(rule, outcome)

    def on_verdict(self, rule: str, outcome: str) -> None:
        self.evictions.labels(rule, outcome).inc()

    def on_candidates(self, count: int) -> None:
        self.candidates.set(count)


# What the gauges below read of the plugins' cluster indexes, by what an index offers rather than by its class
# (this layer knows no concrete plugin): Coscheduling's PodGroup store, the volume plugins' storage store.
@runtime_checkable
class _PendingGangs(Protocol):
    def pending_gangs(self) -> int: ...


@runtime_checkable
class _StorageCounts(Protocol):
    def counts(self) -> dict[str, int]: ...


class _StateCollector(Collector):
    """Gauges and cumulative counters read from the scheduler's state at scrape time."""

    def __init__(self, scheduler: Scheduler, is_leader: Callable[[], bool], lease_name: str | None) -> None:
        self.scheduler = scheduler
        self.is_leader = is_leader
        self.lease_name = lease_name

    def describe(self) -> Iterable[Metric]:
        return []

    def collect(self) -> Iterable[Metric]:
        s = self.scheduler
        pending = GaugeMetricFamily("scheduler_pending_pods", "Pending pods, by the queue.", labels=["queue"])
        for queue, count in s.queue.lengths().items():
            pending.add_metric([queue], count)
        yield pending
        # kube-scheduler's: a parked pod counts once under each plugin that turned it down in its last attempt.
        unschedulable = GaugeMetricFamily(
            "scheduler_unschedulable_pods", "The number of unschedulable pods broken down by plugin name. A pod will "
            "increment the gauge for all plugins that caused it to not schedule and so this metric have meaning only "
            "when broken down by plugin.", labels=["plugin", "profile"])
        for (plugin, profile), count in sorted(s.queue.unschedulable_by_plugin().items()):
            unschedulable.add_metric([plugin, profile], count)
        yield unschedulable
        yield GaugeMetricFamily("metrics_sched_gang_groups_pending",
                                "Gangs with members to place and fewer than minMember bound.",
                                value=sum(i.pending_gangs() for i in s.indexes.instances
                                          if isinstance(i, _PendingGangs)))

        up = GaugeMetricFamily("metrics_sched_source_up", "1 when the source's last refresh succeeded.",
                               labels=["source"])
        last = GaugeMetricFamily("metrics_sched_source_last_success_timestamp_seconds",
                                 "Unix time of the source's last successful refresh.", labels=["source"])
        errors = CounterMetricFamily("metrics_sched_source_errors", "Failed refreshes or metrics, by reason.",
                                     labels=["source", "reason"])
        dropped = CounterMetricFamily("metrics_sched_source_dropped_samples",
                                      "Samples refused (NaN, Inf, negative, sentinel, unknown node...), by reason.",
                                      labels=["source", "reason"])
        clamped = CounterMetricFamily("metrics_sched_samples_clamped",
                                      "Samples stamped later than they were fetched (the source's clock is ahead); "
                                      "the cache used the fetch time.", labels=["source"])
        coverage = GaugeMetricFamily("metrics_sched_metric_coverage_ratio",
                                     "Share of nodes with a fresh value of the metric.", labels=["source", "metric"])
        for name, health in list(s.metrics.health.items()):
            up.add_metric([name], 1.0 if health.up else 0.0)
            if health.last_success is not None:
                last.add_metric([name], health.last_success)
            for reason, count in list(health.errors_by_reason.items()):
                errors.add_metric([name, reason], count)
            for reason, count in list(health.dropped.items()):
                dropped.add_metric([name, reason], count)
            clamped.add_metric([name], health.clamped)
            for metric, ratio in list(health.coverage.items()):
                coverage.add_metric([name, metric], ratio)
            if not health.errors_by_reason:
                errors.add_metric([name, "none"], 0)
            if not health.dropped:
                dropped.add_metric([name, "none"], 0)
        yield from (up, last, errors, dropped, clamped, coverage)

        age = GaugeMetricFamily("metrics_sched_metric_sample_age_seconds",
                                "Median age of the fresh samples of a metric (from their own timestamps).",
                                labels=["source", "metric"])
        cluster = GaugeMetricFamily("metrics_sched_cluster_metric_quantile",
                                    "The cluster's distribution of a metric over nodes with fresh values.",
                                    labels=["metric", "quantile"])
        for (metric, source), (values, ages) in s.metrics.fresh_values().items():
            age.add_metric([source, metric], float(np.median(ages)))
            if metric in CLUSTER_METRICS and values:
                array = np.array(values)
                for q in QUANTILES:
                    cluster.add_metric([metric, q], float(np.quantile(array, float(q))))
        yield age
        yield cluster

        ledger = GaugeMetricFamily("metrics_sched_inflight_ledger_entries",
                                   "Placements whose load the telemetry does not show yet.")
        ledger.add_metric([], len(s.ledger))
        yield ledger
        ledger_nodes = GaugeMetricFamily("metrics_sched_inflight_ledger_nodes",
                                         "Nodes with at least one uncovered placement.")
        ledger_nodes.add_metric([], len(s.ledger.by_node()))
        yield ledger_nodes
        leading = 1.0 if self.is_leader() else 0.0
        leader = GaugeMetricFamily("metrics_sched_leader", "1 on the replica that holds the lease.")
        leader.add_metric([], leading)
        yield leader
        if self.lease_name is not None:  # client-go's name and label, for the dashboards written for it
            master = GaugeMetricFamily(
                "leader_election_master_status", "Gauge of if the reporting system is master of the relevant lease, 0 "
                "indicates backup, 1 indicates master. 'name' is the string used to identify the lease. Please make "
                "sure to group by name.", labels=["name"])
            master.add_metric([self.lease_name], leading)
            yield master
        in_flight = GaugeMetricFamily("metrics_sched_binds_in_flight", "Bind calls under way.")
        in_flight.add_metric([], s.binder.in_flight())
        yield in_flight
        assumed = GaugeMetricFamily("metrics_sched_assumed_pods",
                                    "Pods placed by this scheduler whose binding the watch has not shown yet.")
        assumed.add_metric([], s.state.assumed_count())
        yield assumed
        # Without a volume plugin enabled no storage is watched: nothing assumed, nothing cached.
        storage = next((i.counts() for i in s.indexes.instances if isinstance(i, _StorageCounts)), {"assumed": 0})
        assumed_volumes = GaugeMetricFamily(
            "metrics_sched_assumed_volume_bindings",
            "PV-to-claim bindings and selected nodes assumed by VolumeBinding's Reserve and not yet seen written.")
        assumed_volumes.add_metric([], storage.pop("assumed"))
        yield assumed_volumes
        objects = GaugeMetricFamily("metrics_sched_storage_objects", "Storage objects in the cache, by resource.",
                                    labels=["resource"])
        for resource, count in storage.items():
            objects.add_metric([resource], count)
        yield objects
        # Opportunistic batching, per profile with batching on: how many cycles reused a batch, and why the others
        # did not (a "cluster changed" refusal after every telemetry refresh is expected; one per pod is not).
        cycles = CounterMetricFamily("metrics_sched_scheduling_cycles",
                                     "Scheduling cycles by how they ran: batched (a batch of the pod's template "
                                     "reused) or full.", labels=["profile", "kind"])
        refusals = CounterMetricFamily("metrics_sched_batch_refusals",
                                       "Why a pod's cycle did not reuse or store a batch, by plugin (empty: none's) "
                                       "and reason.", labels=["profile", "plugin", "reason"])
        for framework in list(s.frameworks.values()):
            batcher = framework.batcher
            if batcher is None:
                continue
            stats = batcher.stats
            cycles.add_metric([framework.name, "batched"], stats.batched)
            cycles.add_metric([framework.name, "full"], stats.full)
            for (plugin, reason), count in list(stats.refusals.items()):
                refusals.add_metric([framework.name, plugin, reason], count)
        yield cycles
        yield refusals
        # Every worker from the start, so 0 reads as "none"; a fatal one also fails /healthz.
        failures = CounterMetricFamily("metrics_sched_worker_failures",
                                       "Unexpected exceptions a worker thread survived (its pod requeued), by worker.",
                                       labels=["worker"])
        for worker, count in s.supervisor.failure_counts().items():
            failures.add_metric([worker.value], count)
        yield failures
