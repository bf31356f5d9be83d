"""The scheduler's own endpoints: the probes (/healthz, /livez, /readyz), /status, and the telemetry cache's
/values and /sources (read by `metrics-sched sources`).

They read the running scheduler through its thread-safe views only; the app (metrics_sched/app/) builds them and
registers `routes()` on the HTTP server.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field

from metrics_sched.config import SchedulerConfig
from metrics_sched.leader import LeaderElector
from metrics_sched.scheduler import Scheduler
from metrics_sched.serving.route import BadRequest, Query, Response, Route, check_params, text

MAX_VALUES_NODES = 100  # /values?node=...: the answer stays small


@dataclass
class SchedulerEndpoints:
    config: SchedulerConfig
    scheduler: Scheduler
    elector: LeaderElector | None
    lost: threading.Event = field(default_factory=threading.Event)  # set by the app when leadership is lost

    def routes(self) -> dict[str, Route]:
        return {"/healthz": self.healthz, "/livez": self.healthz, "/readyz": self.readyz, "/status": self.status,
                "/sources": self.sources, "/values": self.values}

    def synced(self) -> bool:
        # Every watch, namespaces included: a namespaceSelector must not see an empty cluster.
        return self.scheduler.handlers.caches_synced()

    def healthz(self, _: Query) -> Response:
        if self.lost.is_set():
            return text(500, "leadership lost\n")
        problems = self.scheduler.supervisor.problems()
        if problems:  # a worker thread cannot continue: restart the process rather than hold the lease idle
            return text(500, "".join(f"{problem}\n" for problem in problems))
        return text(200, "ok\n")

    def readyz(self, _: Query) -> Response:
        if not self.synced():
            return text(503, "caches not synced\n")
        waiting = self.scheduler.metrics.first_answers.waiting_for()
        if waiting:  # scheduling has not started: it waits for these (app.core.start_caches)
            return text(503, f"waiting for the first answer of telemetry source(s): {', '.join(waiting)}\n")
        return text(200, "ok\n")

    def status(self, _: Query) -> Response:
        body = {
            "leader": self.elector.is_leader if self.elector else True,
            "identity": self.elector.identity if self.elector else None,
            "synced": sorted(self.scheduler.handlers.synced),
            "telemetry_waiting": self.scheduler.metrics.first_answers.waiting_for(),
            "queue": self.scheduler.queue.lengths(),
            "nodes": len(self.scheduler.state.table),
            "pods_placed": len(self.scheduler.state.pods),
            "assumed": self.scheduler.state.assumed_count(),
            "binds_in_flight": self.scheduler.binder.in_flight(),
            "config_hash": self.config.config_hash,
        }
        return 200, "application/json", json.dumps(body).encode()

    def values(self, query: Query) -> Response:
        check_params(query, ("node",), repeatable=("node",))
        nodes = query.get("node") or []
        if len(nodes) > MAX_VALUES_NODES:
            raise BadRequest(f"node: at most {MAX_VALUES_NODES} nodes per request, got {len(nodes)}")
        body = {node: self.scheduler.metrics.node_values(node) for node in nodes}
        return 200, "application/json", json.dumps(body).encode()

    def sources(self, query: Query) -> Response:
        check_params(query, ())
        # One health model for every source (breaker state included); the ages are computed now.
        now = time.time()
        body = {name: health.as_dict(now) for name, health in list(self.scheduler.metrics.health.items())}
        return 200, "application/json", json.dumps(body, default=str).encode()


__all__ = ["MAX_VALUES_NODES", "SchedulerEndpoints"]
