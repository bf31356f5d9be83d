"""Auditor: builds the record of each attempt (as the ring keeps it, StoredDecision) and hands it to the sinks:
the /decisions ring, one JSON log line, the Scheduled event's message and a pod annotation, and the metric
observers.

A placement is logged twice: when decided ("binding to X", with everything the decision was made on) and when its
bind ends ("bound to X", "bind to X failed: ...", at WARNING unless bound or turned down), both with the decision's
id. The first line cannot wait for the bind: a replica that exits while its bind is on the wire (it lost the lease)
must still have logged the decision it acted on. A bind that failed is logged even with `audit.logDecisions` off:
the runbook of MetricsSchedBindErrors sends operators to that line."""

from __future__ import annotations

import logging
from collections.abc import Callable

from metrics_sched.audit.record import StoredDecision, build_stored
from metrics_sched.audit.ring import DecisionRing
from metrics_sched.framework.cycle_state import StateKey, annotate_binding
from metrics_sched.framework.runtime import CycleResult
from metrics_sched.scheduler.binding import BindOutcome
from metrics_sched.state.cluster_state import ClusterState

log = logging.getLogger("metrics_sched.decisions")

ANNOTATION = "metrics-sched.io/decision"
# The record travels with the cycle to the bind, which fills in the bind's outcome. It is the ring's own compact
# record (a DecisionRecord is built from it only when asked for: StoredDecision.to_record()).
RECORD = StateKey[StoredDecision]("audit/record")


class Auditor:
    def __init__(self, state: ClusterState, ring: DecisionRing, *, config_hash: str,
                 top: int = 5, annotate: bool = True, log_decisions: bool = True,
                 shadow_profiles: frozenset[str] = frozenset()) -> None:
        self.state = state
        self.ring = ring
        self.config_hash = config_hash
        self.top = top
        self.annotate = annotate
        self.log_decisions = log_decisions
        self.shadow_profiles = shadow_profiles  # their cycles only record where a pod would have gone
        self.record_observers: list[Callable[[StoredDecision, CycleResult], None]] = []
        self.bind_observers: list[Callable[[StoredDecision, BindOutcome], None]] = []

    def on_cycle(self, result: CycleResult) -> None:
        with self.state.lock:
            record = build_stored(result, self.state.table, config_hash=self.config_hash, top=self.top,
                                  shadow=result.profile in self.shadow_profiles)
        result.cycle.write(RECORD, record)
        result.summary = record.summary()
        if self.annotate and record.node is not None and record.result != "shadow":
            # Carried by the Binding itself: the API server copies it onto the pod, no extra write.
            annotate_binding(result.cycle, {ANNOTATION: record.annotation()})
        self.ring.keep(record)
        for observer in self.record_observers:
            observer(record, result)
        result.release_arrays()
        if self.log_decisions:
            log.info("%s %s: %s", record.pod, record.result, record.message, extra={
                "decision_id": record.id, "pod": record.pod, "result": record.result, "node": record.node,
                "score": record.winner_total, "margin": record.margin,
                "feasible": record.feasible, "nodes": record.nodes_total, "rejections": dict(record.rejections),
                "summary": result.summary, "config_hash": record.config_hash,
            })

    def on_bind(self, outcome: BindOutcome, result: CycleResult) -> None:
        record = result.cycle.get(RECORD)
        if record is None:
            return
        record.bind_ended(outcome.result, outcome.detail, outcome.seconds)
        failed = record.result == "error"
        if self.log_decisions or failed:  # the MetricsSchedBindErrors runbook sends operators to this line
            log.log(logging.WARNING if failed else logging.INFO, "%s %s: %s", record.pod,
                    record.result, record.message, extra={
                        "decision_id": record.id, "pod": record.pod, "result": record.result, "node": record.node,
                        "bind": str(outcome.result), "bind_ms": record.bind_ms, "config_hash": record.config_hash,
                    })
        for observer in self.bind_observers:
            observer(record, outcome)
