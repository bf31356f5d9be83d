"""The scheduler's configuration, resolved: defaults applied, plugin sets expanded, args checked."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Literal

from metrics_sched.config.contract import FreshnessContract
from metrics_sched.config.upstream_fields import ConfigWarning

DEFAULT_SCHEDULER_NAME = "metrics-sched"
DEFAULT_CPU_AFFINITY: Literal["one", "all"] = "one"  # SchedulerConfig.cpu_affinity (why: there)
GangMoves = Literal["never", "whole"]  # RebalanceConfig.gangs (why: there)
GANG_MOVES: tuple[GangMoves, ...] = ("never", "whole")
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
    shadow: bool = False  # score this schedulerName's pods and record the decision, never bind
    percentage_of_nodes_to_score: int = 100  # the profile's or the top-level value; see SchedulerConfig
    # Pods of one template reuse the previous such pod's cycle, re-evaluating only the nodes that changed (the
    # same decisions: metrics_sched.framework.runtime.batching); off: every pod's cycle runs over every node.
    opportunistic_batching: bool = True

    def enabled(self, point: str) -> tuple[PluginRef, ...]:
        return self.plugins.get(point, ())


LEASE_NAMESPACE_UNSET = ""


@dataclass(frozen=True)
class LeaderElectionConfig:
    leader_elect: bool = True
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    resource_name: str = "metrics-sched"
    # Upstream's default. A config file that does not set it loads as LEASE_NAMESPACE_UNSET instead: the pod's
    # own namespace in a cluster, else this, decided at wiring time (app/lease_namespace.py), since the file
    # alone cannot know where it runs.
    resource_namespace: str = "kube-system"


@dataclass(frozen=True)
class ClientConnectionConfig:
    kubeconfig: str = ""  # "" = in-cluster (or the --kubeconfig flag, which wins)
    qps: float = 0.0  # 0 = no client-side limit (the apiserver's flow control still applies)
    burst: int = 0
    watch_read_timeout: float = 60.0


@dataclass(frozen=True)
class ServerConfig:
    """The `server:` section: kube-scheduler's secure serving (its flag names, camelCased). HTTPS on 10259
    with delegated authentication and authorization; plain HTTP only with `insecure`, for local use."""

    bind_address: str = "0.0.0.0"
    port: int = 10259
    insecure: bool = False  # plain HTTP, no authentication: refused off loopback without allowInsecureNonLoopback
    allow_insecure_non_loopback: bool = False
    tls_cert_file: str = ""  # both or neither; neither: a self-signed pair in cert_dir
    tls_private_key_file: str = ""
    cert_dir: str = ""  # "": a private temporary directory
    always_allow_paths: tuple[str, ...] = ("/healthz", "/readyz", "/livez")
    token_cache_ttl: float = 10.0  # TokenReview answers, positive and negative
    authorized_cache_ttl: float = 10.0  # SubjectAccessReview answers that allow
    unauthorized_cache_ttl: float = 10.0  # ... and that deny


@dataclass(frozen=True)
class AuditFileConfig:
    """`audit.file`: every decision record as a JSON line in `path`, rotated past max_bytes into `backups` files."""

    path: str
    max_bytes: int = 100 * 2**20
    backups: int = 3


@dataclass(frozen=True)
class AuditConfig:
    ring_size: int = 10_000
    top_candidates: int = 5
    annotate_pods: bool = True
    log_decisions: bool = True
    file: AuditFileConfig | None = None


class RuleKind(enum.StrEnum):
    """What makes a node bad: a metric above a threshold (GPU temperature, load, utilisation), or the node's
    value above the cluster's quantile of it (cost)."""

    ABOVE = "above"
    QUANTILE = "quantile"


@dataclass(frozen=True)
class NodeRule:
    """A node is bad for this rule while the metric's FRESH value stays above `threshold` (ABOVE) or above the
    cluster's `quantile` of the metric's fresh values (QUANTILE) for `for_seconds` in a row. A stale or missing
    value ends the streak (never triggers)."""

    name: str  # e.g. "hot-gpu", "overloaded", "expensive": the eviction reason in records and metrics
    metric: str  # a metric of the telemetry cache (e.g. gpu_temperature_max, node_cpu_utilisation, node_hourly_cost)
    kind: RuleKind = RuleKind.ABOVE
    threshold: float = 0.0  # ABOVE
    quantile: float = 0.9  # QUANTILE
    for_seconds: float = 300.0


@dataclass(frozen=True)
class EvictionLimits:
    per_node: int = 1  # evictions per node per interval
    per_namespace: int = 2  # per namespace per interval
    cluster: int = 5  # cluster-wide per interval
    cooldown_seconds: float = 1800.0  # a pod's owner (or the pod, if it has none) is not evicted again meanwhile


@dataclass(frozen=True)
class SelectorExpression:
    """One of a label selector's matchExpressions (metav1.LabelSelectorRequirement), validated as the API server
    would (values sorted and unique; none for Exists/DoesNotExist, some for In/NotIn)."""

    key: str
    operator: str  # In | NotIn | Exists | DoesNotExist
    values: tuple[str, ...] = ()


@dataclass(frozen=True)
class RebalanceConfig:
    """The `rebalance:` section. Defined here, at the bottom layer, so the loader builds it without importing the
    rebalancer; metrics_sched.rebalance.model re-exports it with the rebalancer's answers."""

    enabled: bool = False  # in the scheduler process (leader only); the CLI runs it regardless
    interval_seconds: float = 60.0
    dry_run: bool = True
    rules: tuple[NodeRule, ...] = ()
    # Evict only if the simulated placement elsewhere scores at least this many points (0-100 scale of the
    # profile's weighted total) above the pod's current node: no ping-pong.
    margin: float = 10.0
    limits: EvictionLimits = EvictionLimits()
    # Which pods may be moved: those this scheduler placed (schedulerName of a profile), or matching this label
    # selector (matchLabels form, ANDed); never DaemonSet, mirror, standalone (no controller) or
    # `metrics-sched.io/evictable: "false"` pods.
    pod_selector: dict[str, str] = field(default_factory=dict)
    pod_selector_expressions: tuple[SelectorExpression, ...] = ()  # its matchExpressions, ANDed with the labels
    max_priority: int | None = None  # pods above this priority are never evicted (None: no cap)
    # Pods with local storage (an emptyDir that is not memory-backed: its data dies with the pod) are left alone
    # unless this is set or the pod opts in (the Descheduler's evictLocalStoragePods and annotation).
    evict_local_storage_pods: bool = False
    # A member of a gang (PodGroup or Workload scheduling group): "never" moved (the gang stays), or the "whole"
    # gang moved together: every member simulated, evicted all or none, within the limits.
    gangs: GangMoves = "never"


@dataclass(frozen=True)
class SchedulerConfig:
    profiles: tuple[ProfileConfig, ...]
    leader_election: LeaderElectionConfig = LeaderElectionConfig()
    client_connection: ClientConnectionConfig = ClientConnectionConfig()
    server: ServerConfig = ServerConfig()
    # Binds (and the Scheduled events after them) in flight at once. kube-scheduler runs each binding cycle in a
    # goroutine of its own; 16 capped metrics-sched at 16 / bind latency (~175 pods/s at 500 nodes, issue 18).
    bind_workers: int = 64
    pod_initial_backoff: float = 1.0
    pod_max_backoff: float = 10.0
    pod_max_in_unschedulable: float = 300.0
    cache_compare_interval: float = 300.0  # the cache comparer's period (0: only on SIGUSR2)
    audit: AuditConfig = AuditConfig()
    metrics: dict[str, FreshnessContract] = field(default_factory=dict)
    sources: tuple[dict[str, Any], ...] = ()  # validated by the source adapters at wiring time
    replaces_default_scheduler: bool = False  # a profile may be named default-scheduler (no kube-scheduler runs)
    rebalance: RebalanceConfig = RebalanceConfig()
    # Serves /debug/pprof/* and /debug/threads (as exposed as /metrics). Upstream's default is true; here false
    # until the HTTP endpoint is authenticated: profiles reveal code paths and cost CPU.
    enable_profiling: bool = False
    # `one` (the default): the process keeps to one of the CPUs it may use (cli.run_cmd.keep_to_one_cpu). Python runs
    # one thread at a time (the GIL); threads on two CPUs hand it over across them at nearly every release (numpy
    # releases it for each large array operation), and each thread's caches go cold on the other CPU: the core alone
    # decides ~20 % faster on one CPU, and end to end a pod cost ~20 % less scheduler CPU at 500 nodes (~7 % at
    # 5,000) for the same pods/s (bench.e2e_bench, 2026-12-05). `all`: the OS places the threads.
    cpu_affinity: Literal["one", "all"] = DEFAULT_CPU_AFFINITY
    # As given (upstream's 0, "adaptive", reads as 100). Every feasible node is scored for now whatever the value
    # (a value below 100 is warned): telemetry-driven scores lose most of their value on a sample of the nodes.
    percentage_of_nodes_to_score: int = 100
    warnings: tuple[ConfigWarning, ...] = ()  # accepted fields without effect, one per field (logged at load)
    config_hash: str = ""

    def profile(self, scheduler_name: str) -> ProfileConfig | None:
        return next((p for p in self.profiles if p.scheduler_name == scheduler_name), None)

    @property
    def scheduler_names(self) -> frozenset[str]:
        return frozenset(p.scheduler_name for p in self.profiles)
