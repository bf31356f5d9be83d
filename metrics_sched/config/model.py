"""The scheduler's configuration, resolved: defaults applied, plugin sets expanded, args checked."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from metrics_sched.config.contract import FreshnessContract

DEFAULT_SCHEDULER_NAME = "metrics-sched"
EXTENSION_POINT_NAMES = (
    "preEnqueue", "queueSort", "preFilter", "filter", "postFilter", "preScore", "score", "reserve", "permit",
    "preBind", "bind", "postBind",
)


@dataclass(frozen=True)
class PluginRef:
    name: str
    weight: int = 1


@dataclass(frozen=True)
class ProfileConfig:
    scheduler_name: str
    plugins: dict[str, tuple[PluginRef, ...]]
    plugin_args: dict[str, Any] = field(default_factory=dict)  # plugin name -> its parsed (typed) Args

    def enabled(self, point: str) -> tuple[PluginRef, ...]:
        return self.plugins.get(point, ())


@dataclass(frozen=True)
class LeaderElectionConfig:
    leader_elect: bool = True
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    resource_name: str = "metrics-sched"
    resource_namespace: str = "kube-system"


@dataclass(frozen=True)
class ClientConnectionConfig:
    qps: float = 0.0  # 0 = no client-side limit (the apiserver's flow control still applies)
    burst: int = 0
    watch_read_timeout: float = 60.0


@dataclass(frozen=True)
class ServerConfig:
    bind_address: str = "0.0.0.0"
    port: int = 10260


@dataclass(frozen=True)
class AuditConfig:
    ring_size: int = 10_000
    top_candidates: int = 5
    annotate_pods: bool = True
    log_decisions: bool = True


@dataclass(frozen=True)
class SchedulerConfig:
    profiles: tuple[ProfileConfig, ...]
    leader_election: LeaderElectionConfig = LeaderElectionConfig()
    client_connection: ClientConnectionConfig = ClientConnectionConfig()
    server: ServerConfig = ServerConfig()
    bind_workers: int = 16
    pod_initial_backoff: float = 1.0
    pod_max_backoff: float = 10.0
    pod_max_in_unschedulable: float = 300.0
    cache_compare_interval: float = 300.0  # the cache comparer's period (0: only on SIGUSR2)
    audit: AuditConfig = AuditConfig()
    metrics: dict[str, FreshnessContract] = field(default_factory=dict)
    sources: tuple[dict[str, Any], ...] = ()  # validated by the source adapters at wiring time
    replaces_default_scheduler: bool = False  # a profile may be named default-scheduler (no kube-scheduler runs)
    config_hash: str = ""

    def profile(self, scheduler_name: str) -> ProfileConfig | None:
        return next((p for p in self.profiles if p.scheduler_name == scheduler_name), None)

    @property
    def scheduler_names(self) -> frozenset[str]:
        return frozenset(p.scheduler_name for p in self.profiles)
