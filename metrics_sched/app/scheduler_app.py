"""`metrics-sched run`: the scheduler process, wired and run.

Builds the core on the Kubernetes adapter (app/core.py), the audit, the metrics, leader election and the HTTP
endpoints (their handlers are serving/'s), and runs them until SIGTERM (drain binds in flight, release the lease,
exit 0) or until leadership is lost (stop binding at once, exit 1). With `rebalance.enabled` the leader also runs
the rebalancer.

What the user can fix fails before anything starts, as a UserError (one line, exit 2): a missing or invalid
kubeconfig, and an API server that cannot be reached within the startup timeout, fails TLS verification or
refuses the credentials (app/api_probe.py).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client import CONTENT_TYPE_LATEST

from metrics_sched.app.api_probe import DEFAULT_STARTUP_TIMEOUT
from metrics_sched.app.core import build_core, build_rebalancer, start_caches
from metrics_sched.app.serving_setup import build_server
from metrics_sched.app.signals import on_compare_request, stop_on_termination
from metrics_sched.audit import DecisionRing
from metrics_sched.audit.auditor import Auditor
from metrics_sched.config import SchedulerConfig
from metrics_sched.framework.registry import Registry
from metrics_sched.leader import LeaderElector
from metrics_sched.observability import SchedulerMetrics
from metrics_sched.ports import ClusterSource
from metrics_sched.rebalance.runner import RebalanceRunner
from metrics_sched.scheduler import Scheduler
from metrics_sched.serving.debug import DebugEndpoints, debug_routes
from metrics_sched.serving.decisions import decisions
from metrics_sched.serving.http_server import HTTPServer
from metrics_sched.serving.status import SchedulerEndpoints
from metrics_sched.state.comparer import CacheComparer
from metrics_sched.supervision import Worker

log = logging.getLogger("metrics_sched.app")

EXIT_LOST_LEADERSHIP = 1
EXIT_UNHEALTHY = 1


@dataclass
class App:
    config: SchedulerConfig
    scheduler: Scheduler
    server: HTTPServer
    elector: LeaderElector | None
    source: ClusterSource
    stop: threading.Event = field(default_factory=threading.Event)
    lost: threading.Event = field(default_factory=threading.Event)  # /healthz answers 500 once it is set
    comparer: CacheComparer | None = None  # the cache against a fresh LIST: periodic and on SIGUSR2
    rebalancer: RebalanceRunner | None = None  # rebalance.enabled: ticks on the leader


def build(config: SchedulerConfig, registry: Registry, kubeconfig: Path | None, *, port: int | None = None,
          identity: str | None = None, config_dir: Path | None = None,
          startup_timeout: float = DEFAULT_STARTUP_TIMEOUT) -> App:
    core = build_core(config, registry, kubeconfig, identity=identity, config_dir=config_dir,
                      startup_timeout=startup_timeout)
    scheduler, elector = core.scheduler, core.elector
    ring = DecisionRing(config.audit.ring_size)
    auditor = Auditor(scheduler.state, ring, config_hash=config.config_hash,
                      top=config.audit.top_candidates, annotate=config.audit.annotate_pods,
                      log_decisions=config.audit.log_decisions,
                      shadow_profiles=frozenset(p.scheduler_name for p in config.profiles if p.shadow))
    scheduler.cycle_observers.append(auditor.on_cycle)
    scheduler.bind_observers.append(auditor.on_bind)
    metrics = SchedulerMetrics(scheduler, is_leader=(lambda: elector.is_leader) if elector else (lambda: True),
                               lease_name=config.leader_election.resource_name if elector else None,
                               extra=[core.rest_metrics])
    auditor.record_observers.append(metrics.on_record)
    auditor.bind_observers.append(metrics.on_bind)
    if config.audit.file is not None:
        from metrics_sched.audit.sink import JsonlFileSink

        file = config.audit.file
        auditor.record_observers.append(JsonlFileSink((config_dir or Path.cwd()) / file.path, max_bytes=file.max_bytes,
                                                      backups=file.backups).on_record)
    scheduler.node_deleted_observers.append(metrics.forget_node)
    assert core.kube is not None
    server = build_server(config.server, config.server.port if port is None else port, core.kube,
                          registry=metrics.registry, base_dir=config_dir or Path.cwd())
    comparer = CacheComparer(scheduler.state, core.lister)
    comparer.observers.append(metrics.on_compare)
    rebalancer = None
    if config.rebalance.enabled:
        rebalancer = build_rebalancer(config, core, ring, metrics.rebalance, dry_run=config.rebalance.dry_run)
    app = App(config=config, scheduler=scheduler, server=server, elector=elector, source=core.source,
              comparer=comparer, rebalancer=rebalancer)
    for path, handler in SchedulerEndpoints(config, scheduler, elector, lost=app.lost).routes().items():
        server.route(path, handler)
    server.route("/decisions", lambda query: decisions(ring, query))
    server.route("/metrics", lambda _: (200, CONTENT_TYPE_LATEST, metrics.exposition()))
    if config.enable_profiling:  # off: the /debug paths do not exist (404)
        for path, handler in debug_routes(DebugEndpoints()).items():
            server.route(path, handler)
    return app


def run(app: App, *, drain_timeout: float = 30.0) -> int:
    stop_on_termination(app.stop, logged_as="draining")
    # A worker that cannot continue (/healthz fails too): shut down now, releasing the lease, and exit non-zero.
    app.scheduler.supervisor.on_fatal(lambda _: app.stop.set())
    comparer = app.comparer
    if comparer is not None:
        # Installed first: SIGUSR2's default action ends the process. A request before the caches are synced
        # waits for them (the comparer thread starts after the sync).
        on_compare_request(comparer.request)
    app.server.start()
    log.info("serving /healthz, /readyz on port %d (%s)", app.server.port, app.server.scheme)
    start_caches(app.scheduler, app.source, app.stop)
    if comparer is not None:
        threading.Thread(target=comparer.serve, args=(app.config.cache_compare_interval,), name="cache-comparer",
                         daemon=True).start()
    # Schedule only on a full picture: a pod scheduled before all bound pods are known could overcommit.
    if app.elector is not None:
        elector = app.elector

        def on_lost() -> None:
            app.lost.set()
            app.stop.set()

        app.scheduler.supervisor.spawn(Worker.LEADER_ELECTION, lambda: elector.run(app.stop, lambda: None, on_lost),
                                       name="leader-election", stopping=app.stop.is_set)
    app.scheduler.start()
    if app.rebalancer is not None:
        # Leader only, and fenced like binds: an eviction never starts later than the renew deadline allows.
        rebalancer, interval = app.rebalancer, app.config.rebalance.interval_seconds
        is_leader = app.elector.may_bind if app.elector is not None else (lambda: True)
        app.scheduler.supervisor.spawn(
            Worker.REBALANCER,
            lambda: rebalancer.serve(app.stop, interval, is_leader=is_leader, supervisor=app.scheduler.supervisor),
            name="rebalancer", stopping=app.stop.is_set)
    app.stop.wait()
    if comparer is not None:
        comparer.close()

    if app.lost.is_set():
        log.error("leadership lost: stopped binding, exiting")
        # Every write is fenced now: queued reports would only be retried until they give up. Drop them.
        app.scheduler.reporter.shutdown(wait=False)
        app.scheduler.stop(drain_timeout=0)
        return EXIT_LOST_LEADERSHIP
    drained = app.scheduler.stop(drain_timeout=drain_timeout)
    app.scheduler.metrics.stop()
    if app.elector is not None:
        app.elector.release()
    app.source.stop()
    app.server.stop()
    log.info("stopped (binds drained: %s)", drained)
    if not app.scheduler.supervisor.healthy():
        log.error("stopped because a worker could not continue: %s", "; ".join(app.scheduler.supervisor.problems()))
        return EXIT_UNHEALTHY
    return 0


__all__ = ["DEFAULT_STARTUP_TIMEOUT", "EXIT_LOST_LEADERSHIP", "EXIT_UNHEALTHY", "App", "build", "run"]
