"""The scheduler core fed by the Kubernetes adapter: what `metrics-sched run` and `metrics-sched rebalance` share.

build_core loads the kubeconfig, probes the API server (app/api_probe.py), builds the Kubernetes adapter (watches,
writes, and with leader election the lease behind a write fence), the scheduler core, and the telemetry sources
from the `metrics_sched.sources` entry points. Nothing runs until started: start_caches starts the watches and,
once they have synced, the telemetry refreshes. build_rebalancer puts the rebalancer on that core.
"""

from __future__ import annotations

import logging
import socket
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import httpx

from metrics_sched.app.api_probe import DEFAULT_STARTUP_TIMEOUT, check_api_server
from metrics_sched.app.errors import UserError
from metrics_sched.app.lease_namespace import resolve_lease_namespace
from metrics_sched.app.sources import build_sources
from metrics_sched.audit import DecisionRing
from metrics_sched.config import SchedulerConfig
from metrics_sched.framework.registry import Registry
from metrics_sched.leader import LeaderElector, bind_timeout
from metrics_sched.observability.metrics import RebalanceMetrics
from metrics_sched.observability.rest_client import RestClientMetrics
from metrics_sched.ports import ClusterLister, ClusterSource, Evictor, PodWriter
from metrics_sched.rebalance.runner import RebalanceRunner
from metrics_sched.scheduler import Scheduler

if TYPE_CHECKING:
    from adapters.kubernetes import KubeConfig

log = logging.getLogger("metrics_sched.app")

# Seconds scheduling waits at most for the telemetry sources' first answers (a source's own timeouts end a fetch
# sooner: 5 s by default for Prometheus); past it, a source that hangs is scheduled without, and named in the log.
FIRST_ANSWER_TIMEOUT = 30.0


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
    # What the API clients report of their requests (rest_client_*): /metrics registers it.
    rest_metrics: RestClientMetrics = field(default_factory=RestClientMetrics)


def build_core(config: SchedulerConfig, registry: Registry, kubeconfig: Path | None, *, identity: str | None = None,
               config_dir: Path | None = None, leader_election: bool = True,
               startup_timeout: float = DEFAULT_STARTUP_TIMEOUT) -> Core:
    """The Kubernetes adapter (watches, writes, and with `leader_election` and leaderElect the lease) and the
    scheduler core with its telemetry sources. UserError when the kubeconfig or the API server cannot be used."""
    from adapters.kubernetes import (
        CORE_RESOURCES,
        KubeClient,
        KubeClusterLister,
        KubeClusterSource,
        KubeConfigError,
        KubeEvictor,
        KubeLeaseStore,
        KubePodGroupStatusWriter,
        KubePodWriter,
        KubePreemptor,
        KubeResourceClaimWriter,
        KubeVolumeWriter,
        ReflectorOptions,
        TokenError,
        WriteFence,
        lease_client,
        load,
        served_resources,
    )

    # --kubeconfig wins over clientConnection.kubeconfig; neither: the in-cluster service account.
    configured = config.client_connection.kubeconfig
    try:
        kube = load(kubeconfig if kubeconfig is not None else Path(configured) if configured else None)
        check_api_server(kube, startup_timeout)
    except (KubeConfigError, TokenError) as exc:  # their messages name the file and field, never a credential
        raise UserError(str(exc)) from None
    identity = identity or f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"
    rest_metrics = RestClientMetrics()
    elector = None
    fence = None
    if leader_election and config.leader_election.leader_elect:
        # Its own client: a renewal never waits behind binds and reports; GET and PUT fit in renewDeadline.
        le = resolve_lease_namespace(config.leader_election)
        margin = bind_timeout(le)
        elector = LeaderElector(KubeLeaseStore(lease_client(kube, request_timeout=le.renew_deadline / 2,
                                                            request_observer=rest_metrics)), le,
                                identity, fence_margin=margin)
        # Every write (binds and evictions first) starts only while the fence is open, and ends within its margin.
        fence = WriteFence(elector.may_bind, margin)
    client = KubeClient(kube, qps=config.client_connection.qps or None, burst=config.client_connection.burst or None,
                        max_connections=2 * config.bind_workers + 8,  # binds, reports, the rest
                        write_fence=fence, request_observer=rest_metrics)
    writer = KubePodWriter(client)
    scheduler = Scheduler(config, registry.plugins, writer, instance=identity,
                          is_leader=elector.may_bind if elector else (lambda: True),
                          volume_writer=KubeVolumeWriter(client), preemptor=KubePreemptor(client),
                          group_status_writer=KubePodGroupStatusWriter(client),
                          claim_writer=KubeResourceClaimWriter(client))

    def kube_http() -> httpx.Client:
        return httpx.Client(**kube.http_options(), timeout=5.0)

    for metric_source in build_sources(config, config_dir or Path.cwd(), kube_http):
        scheduler.metrics.add_source(metric_source)
    options = ReflectorOptions(read_timeout=config.client_connection.watch_read_timeout)
    # Nodes, pods, and exactly the kinds the enabled plugins' indexes declare; an optional one (e.g. the PodGroups of
    # a gang API: the CRD, the 1.36 Workload API) only where the cluster serves it.
    resources, unserved = served_resources(client, scheduler.handlers.kinds)
    for line in unserved:
        log.info("not watched: %s; what its objects would decide waits for them", line)
    watched_names = {resource.name for resource in resources}
    scheduler.handlers.unwatched(kind.name for kind in scheduler.handlers.kinds if kind.name not in watched_names)
    return Core(scheduler=scheduler, source=KubeClusterSource(client, resources=(*CORE_RESOURCES, *resources),
                                                              options=options), writer=writer,
                evictor=KubeEvictor(client), lister=KubeClusterLister(client), elector=elector, identity=identity,
                kube=kube, rest_metrics=rest_metrics)


def start_caches(scheduler: Scheduler, source: ClusterSource, stop: threading.Event, *,
                 first_answer_timeout: float = FIRST_ANSWER_TIMEOUT) -> bool:
    """Starts the watches, waits until every one has synced (or `stop`), then starts the telemetry refreshes and
    waits for each source's first answer (values or a failure), `first_answer_timeout` seconds at most: what is
    started after this (the scheduling loop, the rebalancer) never acts on telemetry no source has given yet.
    True when synced."""
    source.start(scheduler.handlers)
    while not stop.is_set() and not scheduler.handlers.caches_synced():
        stop.wait(0.05)
    if stop.is_set():
        return False
    # Telemetry refreshes in the background from now on; a slow or dead source never blocks a bind.
    scheduler.metrics.start(scheduler.node_directory)
    silent = scheduler.metrics.first_answers.wait(first_answer_timeout, stop.is_set)
    if stop.is_set():
        return False
    if silent:
        log.warning("telemetry source(s) %s gave no first answer within %.0fs: scheduling without them until they do",
                    ", ".join(silent), first_answer_timeout)
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
                            pods=core.writer, frameworks=frameworks, clock=scheduler.metrics.clock,
                            members=core.lister)
    return RebalanceRunner(rebalancer, core.evictor, ring, dry_run=dry_run, writer=core.writer, metrics=metrics,
                           controller=placing[0], instance=core.identity,
                           rules=tuple(r.name for r in config.rebalance.rules))


__all__ = ["FIRST_ANSWER_TIMEOUT", "Core", "build_core", "build_rebalancer", "start_caches"]
