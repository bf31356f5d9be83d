"""The app factory: the one place where the core meets the adapters.

Builds the Kubernetes adapter (watches, writes, lease), the scheduler core, leader election and the
HTTP endpoints, and runs them until SIGTERM (drain binds in flight, release the lease, exit 0) or
until leadership is lost (stop binding at once, exit 1). With `rebalance.enabled` the leader also runs
the rebalancer. `build_core`, `start_caches` and `build_rebalancer` are what `metrics-sched rebalance`
reuses: the same watches, telemetry and rebalancer, without the scheduling loop.

What the user can fix fails before anything starts, as a UserError (one line, exit 2): a missing or invalid
kubeconfig, and an API server that cannot be reached within the startup timeout, fails TLS verification or
refuses the credentials (check_api_server).
"""

from __future__ import annotations

import json
import logging
import signal
import socket
import ssl
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

import httpx
from prometheus_client import CONTENT_TYPE_LATEST

from metrics_sched.audit import DecisionRing
from metrics_sched.audit.auditor import Auditor
from metrics_sched.audit.endpoint import decisions as decisions_endpoint
from metrics_sched.cli.errors import UserError
from metrics_sched.cli.lease_namespace import resolve_lease_namespace
from metrics_sched.cli.serving_setup import build_server
from metrics_sched.cli.sources import build_sources
from metrics_sched.config import SchedulerConfig
from metrics_sched.framework.registry import Registry
from metrics_sched.http_server import BadRequest, HTTPServer, Response, check_params, text
from metrics_sched.leader import LeaderElector, bind_timeout
from metrics_sched.observability import SchedulerMetrics
from metrics_sched.observability.metrics import RebalanceMetrics
from metrics_sched.ports import ApiError, ClusterLister, ClusterSource, Evictor, PodWriter
from metrics_sched.profiling import DebugEndpoints, debug_routes
from metrics_sched.rebalance.runner import RebalanceRunner
from metrics_sched.scheduler import Scheduler
from metrics_sched.state.comparer import CacheComparer
from metrics_sched.supervision import Worker

if TYPE_CHECKING:
    from adapters.kubernetes import KubeConfig

log = logging.getLogger("metrics_sched.app")

EXIT_LOST_LEADERSHIP = 1
MAX_VALUES_NODES = 100  # /values?node=...: the answer stays small
EXIT_UNHEALTHY = 1
DEFAULT_STARTUP_TIMEOUT = 30.0  # how long an unreachable API server is retried at start before exit 2
_PROBE = "/api/v1/nodes"  # what the scheduler needs first: reachability, TLS, credentials and RBAC in one GET


@dataclass
class App:
    config: SchedulerConfig
    scheduler: Scheduler
    server: HTTPServer
    elector: LeaderElector | None
    source: ClusterSource
    ring: DecisionRing
    stop: threading.Event = field(default_factory=threading.Event)
    lost: threading.Event = field(default_factory=threading.Event)
    comparer: CacheComparer | None = None  # the cache against a fresh LIST: periodic and on SIGUSR2
    rebalancer: RebalanceRunner | None = None  # rebalance.enabled: ticks on the leader

    def synced(self) -> bool:
        # Every watch, namespaces included: a namespaceSelector must not see an empty cluster.
        return self.scheduler.handlers.caches_synced()

    def healthz(self, _: dict[str, list[str]]) -> Response:
        if self.lost.is_set():
            return text(500, "leadership lost\n")
        problems = self.scheduler.supervisor.problems()
        if problems:  # a worker thread cannot continue: restart the process rather than hold the lease idle
            return text(500, "".join(f"{problem}\n" for problem in problems))
        return text(200, "ok\n")

    def readyz(self, _: dict[str, list[str]]) -> Response:
        if not self.synced():
            return text(503, "caches not synced\n")
        return text(200, "ok\n")

    def status(self, _: dict[str, list[str]]) -> Response:
        body = {
            "leader": self.elector.is_leader if self.elector else True,
            "identity": self.elector.identity if self.elector else None,
            "synced": sorted(self.scheduler.handlers.synced),
            "queue": self.scheduler.queue.lengths(),
            "nodes": len(self.scheduler.state.table),
            "pods_placed": len(self.scheduler.state.pods),
            "assumed": self.scheduler.state.assumed_count(),
            "binds_in_flight": self.scheduler.binder.in_flight(),
            "config_hash": self.config.config_hash,
        }
        return 200, "application/json", json.dumps(body).encode()

    def decisions(self, query: dict[str, list[str]]) -> Response:
        return decisions_endpoint(self.ring, query)

    def values(self, query: dict[str, list[str]]) -> Response:
        check_params(query, ("node",), repeatable=("node",))
        nodes = query.get("node") or []
        if len(nodes) > MAX_VALUES_NODES:
            raise BadRequest(f"node: at most {MAX_VALUES_NODES} nodes per request, got {len(nodes)}")
        body = {node: self.scheduler.metrics.node_values(node) for node in nodes}
        return 200, "application/json", json.dumps(body).encode()

    def sources(self, query: dict[str, list[str]]) -> Response:
        check_params(query, ())
        # One health model for every source (breaker state included); the ages are computed now.
        now = time.time()
        body = {name: health.as_dict(now) for name, health in list(self.scheduler.metrics.health.items())}
        return 200, "application/json", json.dumps(body, default=str).encode()


@dataclass
class Core:
    """What the scheduler and `metrics-sched rebalance` share: the scheduler core (cluster state, telemetry cache,
    frameworks) fed by the Kubernetes adapter, and the adapter's writers. Nothing runs until started."""

    scheduler: Scheduler
    source: ClusterSource
    writer: PodWriter
    evictor: Evictor
    lister: ClusterLister
    elector: LeaderElector | None
    identity: str
    kube: KubeConfig | None = None  # the API server's address and credentials (the HTTPS endpoint's reviews)


def build_core(config: SchedulerConfig, registry: Registry, kubeconfig: Path | None, *, identity: str | None = None,
               config_dir: Path | None = None, leader_election: bool = True,
               startup_timeout: float = DEFAULT_STARTUP_TIMEOUT) -> Core:
    """The Kubernetes adapter (watches, writes, and with `leader_election` and leaderElect the lease) and the
    scheduler core with its telemetry sources. UserError when the kubeconfig or the API server cannot be used."""
    from adapters.kubernetes import (
        DEFAULT_RESOURCES,
        KubeClient,
        KubeClusterLister,
        KubeClusterSource,
        KubeConfigError,
        KubeEvictor,
        KubeLeaseStore,
        KubePodGroupStatusWriter,
        KubePodWriter,
        KubePreemptor,
        KubeVolumeWriter,
        ReflectorOptions,
        TokenError,
        WriteFence,
        lease_client,
        load,
        pod_group_resources,
    )

    # --kubeconfig wins over clientConnection.kubeconfig; neither: the in-cluster service account.
    configured = config.client_connection.kubeconfig
    try:
        kube = load(kubeconfig if kubeconfig is not None else Path(configured) if configured else None)
        check_api_server(kube, startup_timeout)
    except (KubeConfigError, TokenError) as exc:  # their messages name the file and field, never a credential
        raise UserError(str(exc)) from None
    identity = identity or f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"
    elector = None
    fence = None
    if leader_election and config.leader_election.leader_elect:
        # Its own client: a renewal never waits behind binds and reports; GET and PUT fit in renewDeadline.
        le = resolve_lease_namespace(config.leader_election)
        margin = bind_timeout(le)
        elector = LeaderElector(KubeLeaseStore(lease_client(kube, request_timeout=le.renew_deadline / 2)), le,
                                identity, fence_margin=margin)
        # Every write (binds and evictions first) starts only while the fence is open, and ends within its margin.
        fence = WriteFence(elector.may_bind, margin)
    client = KubeClient(kube, qps=config.client_connection.qps or None, burst=config.client_connection.burst or None,
                        max_connections=2 * config.bind_workers + 8, write_fence=fence)  # binds, reports, the rest
    writer = KubePodWriter(client)
    scheduler = Scheduler(config, registry.plugins, writer, instance=identity,
                          is_leader=elector.may_bind if elector else (lambda: True),
                          volume_writer=KubeVolumeWriter(client), preemptor=KubePreemptor(client),
                          group_status_writer=KubePodGroupStatusWriter(client))

    def kube_http() -> httpx.Client:
        return httpx.Client(**kube.http_options(), timeout=5.0)

    for metric_source in build_sources(config, config_dir or Path.cwd(), kube_http):
        scheduler.metrics.add_source(metric_source)
    options = ReflectorOptions(read_timeout=config.client_connection.watch_read_timeout)
    # Gangs: the PodGroups of whichever gang API the cluster serves (the CRD, the 1.36 Workload API).
    try:
        gang_resources, unserved = pod_group_resources(client)
    except ApiError as exc:
        gang_resources, unserved = (), [f"pod group APIs: discovery failed ({exc})"]
    for line in unserved:
        log.info("gang scheduling: %s; members of such groups wait for their group", line)
    return Core(scheduler=scheduler, source=KubeClusterSource(client, resources=(*DEFAULT_RESOURCES, *gang_resources),
                                                              options=options), writer=writer,
                evictor=KubeEvictor(client), lister=KubeClusterLister(client), elector=elector, identity=identity,
                kube=kube)


def check_api_server(kube: KubeConfig, timeout: float, *, retry_interval: float = 1.0,
                     transport: httpx.BaseTransport | None = None) -> None:
    """Returns once the API server answers the scheduler's first request; UserError when it cannot be used.

    Connection failures and 5xx/429 are retried until `timeout` (an API server restarting with the pod); a TLS
    failure (an unknown CA, a name mismatch, not TLS at all), 401 and 403 are not (they do not heal by waiting).
    """
    deadline = time.monotonic() + timeout
    where = f"API server {kube.server} ({kube.origin})"
    last, warned = "", False
    options = kube.http_options()
    if transport is not None:
        options.pop("proxy", None)  # a test transport replaces the network, proxy included
    with httpx.Client(**options, timeout=5.0, transport=transport) as http:
        while True:
            try:
                resp = http.get(_PROBE, params={"limit": "1"})
            except httpx.TransportError as exc:
                if _tls_failure(exc):
                    raise UserError(f"{where}: TLS failed: {exc}") from None
                last = f"{type(exc).__name__}: {exc}"
            else:
                if resp.status_code == 401:
                    raise UserError(f"{where}: the credentials were rejected (401 Unauthorized)")
                if resp.status_code == 403:
                    raise UserError(f"{where}: forbidden to list nodes (403): {_status_message(resp)}")
                if resp.status_code < 500 and resp.status_code != 429:
                    return
                last = f"HTTP {resp.status_code}: {_status_message(resp)}"
            if time.monotonic() >= deadline:
                raise UserError(f"{where}: not reachable within {timeout:g}s ({last})")
            if not warned:
                log.warning("%s: not reachable yet (%s); retrying for up to %gs", where, last, timeout)
                warned = True
            time.sleep(min(retry_interval, max(0.0, deadline - time.monotonic())))


def _tls_failure(exc: BaseException) -> bool:
    # httpx wraps the ssl error (as __context__/__cause__) or only quotes it.
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ssl.SSLError):
            return True
        seen = seen.__cause__ or seen.__context__
    return "CERTIFICATE_VERIFY_FAILED" in str(exc)


def _status_message(resp: httpx.Response) -> str:
    try:
        message = resp.json().get("message")
    except (ValueError, AttributeError):
        message = None
    return str(message) if message else resp.text[:200] or resp.reason_phrase


def start_caches(scheduler: Scheduler, source: ClusterSource, stop: threading.Event) -> bool:
    """Starts the watches, waits until every one has synced (or `stop`), then starts the telemetry refreshes.
    True when synced."""
    source.start(scheduler.handlers)
    while not stop.is_set() and not scheduler.handlers.caches_synced():
        stop.wait(0.05)
    if stop.is_set():
        return False
    # Telemetry refreshes in the background from now on; a slow or dead source never blocks a bind.
    scheduler.metrics.start(scheduler.node_directory)
    return True


def build_rebalancer(config: SchedulerConfig, core: Core, ring: DecisionRing, metrics: RebalanceMetrics | None, *,
                     dry_run: bool) -> RebalanceRunner:
    """The rebalancer on the scheduler core, carried out through the Eviction API. It simulates a pod with the
    framework of the profile that placed it (the first profile's for pods of other schedulers)."""
    from metrics_sched.rebalance.rebalancer import Rebalancer

    scheduler = core.scheduler
    # A shadow profile places nothing: its pods (another scheduler's) are never ours to move, nor is it the
    # profile to simulate with.
    placing = [p.scheduler_name for p in config.profiles if not p.shadow] or [config.profiles[0].scheduler_name]
    frameworks = {name: scheduler.frameworks[name] for name in placing}
    names = frozenset(p.scheduler_name for p in config.profiles if not p.shadow)
    rebalancer = Rebalancer(config.rebalance, frameworks[placing[0]], scheduler.state, scheduler.metrics, names,
                            pods=core.writer, frameworks=frameworks, clock=scheduler.metrics.clock)
    return RebalanceRunner(rebalancer, core.evictor, ring, dry_run=dry_run, writer=core.writer, metrics=metrics,
                           controller=placing[0], instance=core.identity,
                           rules=tuple(r.name for r in config.rebalance.rules))


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
    metrics = SchedulerMetrics(scheduler, is_leader=(lambda: elector.is_leader) if elector else (lambda: True))
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
    app = App(config=config, scheduler=scheduler, server=server, elector=elector, source=core.source, ring=ring,
              comparer=comparer, rebalancer=rebalancer)
    server.route("/healthz", app.healthz)
    server.route("/livez", app.healthz)
    server.route("/readyz", app.readyz)
    server.route("/status", app.status)
    server.route("/decisions", app.decisions)
    server.route("/sources", app.sources)
    server.route("/values", app.values)
    server.route("/metrics", lambda _: (200, CONTENT_TYPE_LATEST, metrics.exposition()))
    if config.enable_profiling:  # off: the /debug paths do not exist (404)
        for path, handler in debug_routes(DebugEndpoints()).items():
            server.route(path, handler)
    return app


def run(app: App, *, drain_timeout: float = 30.0) -> int:
    def on_signal(signum: int, _: FrameType | None) -> None:
        log.info("signal %s: draining", signal.Signals(signum).name)
        app.stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    # A worker that cannot continue (/healthz fails too): shut down now, releasing the lease, and exit non-zero.
    app.scheduler.supervisor.on_fatal(lambda _: app.stop.set())
    comparer = app.comparer
    if comparer is not None:
        # Installed first: SIGUSR2's default action ends the process. A request before the caches are synced
        # waits for them (the comparer thread starts after the sync).
        signal.signal(signal.SIGUSR2, lambda _signum, _frame: comparer.request())
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
