"""Loads and validates the YAML config (shaped like KubeSchedulerConfiguration v1).

Every error names its field (`profiles[0].plugins.score.enabled[1].weight: ...`). Plugin sets work
as in kube-scheduler: `enabled` adds to the defaults of that extension point (or sets the weight of
a default), `disabled` removes defaults, `disabled: [{name: "*"}]` removes them all; `multiPoint`
enables or disables a plugin at every extension point it implements, a specific point taking precedence.

Every KubeSchedulerConfiguration v1 field is accepted; those without effect here are collected as
warnings (`SchedulerConfig.warnings`, one per field). The field sets come from `config.schema`.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml

from metrics_sched.config.contract import parse_contract
from metrics_sched.config.errors import ArgsError, ConfigError
from metrics_sched.config.model import (
    DEFAULT_CPU_AFFINITY,
    DEFAULT_SCHEDULER_NAME,
    EXTENSION_POINT_NAMES,
    GANG_MOVES,
    LEASE_NAMESPACE_UNSET,
    AuditConfig,
    AuditFileConfig,
    ClientConnectionConfig,
    EvictionLimits,
    LeaderElectionConfig,
    NodeRule,
    PluginRef,
    ProfileConfig,
    RebalanceConfig,
    RuleKind,
    SchedulerConfig,
    SelectorExpression,
)
from metrics_sched.config.reader import (
    check_json_shaped,
    check_keys,
    field_name,
    mapping,
    read_bool,
    read_choice,
    read_duration,
    read_float,
    read_int,
    read_str,
    sequence,
)
from metrics_sched.config.schema import keys
from metrics_sched.config.server import parse_server
from metrics_sched.config.upstream_fields import (
    ALWAYS_ON,
    JSON_CONTENT_TYPE,
    NO_EFFECT_POINTS,
    PROTOBUF_CONTENT_TYPE,
    UPSTREAM_COUNTERPARTS,
    UPSTREAM_PLUGINS,
    WarningLog,
)

API_VERSIONS = ("metrics-sched.io/v1alpha1", "kubescheduler.config.k8s.io/v1")
KINDS = ("MetricsSchedulerConfiguration", "KubeSchedulerConfiguration")
MAX_WEIGHT = 1000
# kube-scheduler's own profile name. Two schedulers serving it next to each other race for the same pods;
# metrics-sched takes it only when told it replaces kube-scheduler (`replacesDefaultScheduler: true`).
KUBE_DEFAULT_SCHEDULER = "default-scheduler"

# Ranges that keep a running scheduler safe; values outside are refused (exit 2) rather than accepted
# into a scheduler that spins on the API, watches nothing or never retries.
MIN_RETRY_PERIOD = 0.5  # leader election: a renewal this often at most, not a busy loop on the API server
MAX_LEASE_DURATION = 3600.0  # a dead leader's lease must not block scheduling for longer
WATCH_READ_TIMEOUT = (1.0, 600.0)  # > 0: a dead watch connection is noticed (0 would never notice)
MIN_POD_BACKOFF = 0.1  # a failing pod is not retried in a tight loop
MIN_UNSCHEDULABLE_FLUSH = 1.0  # parked pods are not moved back on every pass
MAX_BIND_WORKERS = 128  # threads and API connections
MAX_RING_SIZE = 50_000  # decisions kept; ~1.5 KB each
MAX_TOP_CANDIDATES = 20  # candidates per decision record; the record grows with them

# The registry answers: which plugins exist, which points each implements, and checks their args.
PluginCatalog = Mapping[str, "PluginSpec"]


class PluginSpec:
    """What the loader needs to know of a plugin class (kept abstract to avoid importing plugins)."""

    def __init__(self, points: frozenset[str], parse_args: Callable[[Mapping[str, Any]], Any]) -> None:
        self.points = points
        self.parse_args = parse_args  # the plugin's typed Args from the YAML mapping; raises ArgsError


VOLUME_PLUGINS = (PluginRef("VolumeRestrictions"), PluginRef("NodeVolumeLimits"), PluginRef("VolumeBinding"),
                  PluginRef("VolumeZone"))
DEFAULT_PLUGINS: dict[str, tuple[PluginRef, ...]] = {
    # DynamicResources keeps a pod whose claims do not exist yet out of the queue.
    "preEnqueue": (PluginRef("DynamicResources"),),
    # Coscheduling's order is PrioritySort's (priority, then creation) for pods in no group, and keeps a gang's
    # members together in the queue, so a gang's attempt is not interleaved with other pods.
    "queueSort": (PluginRef("Coscheduling"),),
    # The volume plugins in kube-scheduler's order (VolumeRestrictions, NodeVolumeLimits, VolumeBinding,
    # VolumeZone): a node's FailedScheduling reason is the first plugin's that rejects it.
    "preFilter": (PluginRef("UnsupportedFields"), PluginRef("NodePorts"), PluginRef("NodeResourcesFit"),
                  *VOLUME_PLUGINS, PluginRef("PodTopologySpread"), PluginRef("InterPodAffinity"),
                  PluginRef("DynamicResources"), PluginRef("Coscheduling")),
    "filter": (
        PluginRef("NodeUnschedulable"), PluginRef("NodeReady"), PluginRef("NodeName"), PluginRef("NodePorts"),
        PluginRef("TaintToleration"), PluginRef("NodeAffinity"), PluginRef("NodeResourcesFit"),
        # DynamicResources after the upstream filters (kube-scheduler appends it), before GPUTemperature, which
        # judges a DRA pod by the devices DynamicResources would give it on each node.
        *VOLUME_PLUGINS, PluginRef("PodTopologySpread"), PluginRef("InterPodAffinity"), PluginRef("DynamicResources"),
        PluginRef("GPUTemperature"),
        # Last: keeps a gang's members in the domain chosen for it (and chooses it, after Score).
        PluginRef("Coscheduling"),
    ),
    # kube-scheduler's preemption; clusters that forbid it disable it: postFilter.disabled: [{name: DefaultPreemption}]
    # DefaultPreemption first (kube-scheduler's defaults come before an out-of-tree plugin, as scheduler-plugins
    # configures Coscheduling): a gang member preempts for its whole gang (all or none) while the attempt still
    # stands; when it cannot, Coscheduling fails the gang's attempt, freeing its waiting siblings.
    # DynamicResources last, as upstream: it deallocates a claim whose devices are where the pod cannot go.
    "postFilter": (PluginRef("DefaultPreemption"), PluginRef("Coscheduling"), PluginRef("DynamicResources")),
    "preScore": (PluginRef("PodTopologySpread"), PluginRef("InterPodAffinity"),
                 PluginRef("NodeResourcesBalancedAllocation"), PluginRef("DynamicResources")),
    "score": (
        PluginRef("NodeResourcesFit", 1), PluginRef("NodeResourcesBalancedAllocation", 1),
        PluginRef("ImageLocality", 1), PluginRef("NodeAffinity", 2), PluginRef("TaintToleration", 3),
        PluginRef("PodTopologySpread", 2), PluginRef("InterPodAffinity", 2),
        PluginRef("GPUTemperature", 3), PluginRef("NodeLoad", 2), PluginRef("Cost", 2),
        PluginRef("DynamicResources", 1),
    ),
    "reserve": (PluginRef("VolumeBinding"), PluginRef("DynamicResources"), PluginRef("InFlightLedger"),
                PluginRef("Coscheduling")),
    # Gang members wait here for their quorum.
    "permit": (PluginRef("Coscheduling"),),
    "preBind": (PluginRef("VolumeBinding"), PluginRef("DynamicResources")),
    "bind": (PluginRef("DefaultBinder"),),
    "postBind": (),
}


def _plugin_list(value: Any, field: str, catalog: PluginCatalog, point: str, warnings: WarningLog) -> list[PluginRef]:
    """A plugin set's `enabled` or `disabled` list at `point` ("multiPoint": any point the plugin implements).

    kube-scheduler's plugins that metrics-sched lacks are dropped: enabled with a warning, disabled silently
    (not running is what was asked)."""
    refs = []
    for i, item in enumerate(sequence(value, field, optional=True)):
        where = f"{field}[{i}]"
        item = mapping(item, where)
        check_keys(item, keys("profiles", "plugins", "multiPoint", "enabled"), where)
        name = read_str(item, "name", where, non_empty=True)
        if name != "*":
            spec = catalog.get(name)
            if spec is None and name in ALWAYS_ON:
                if not field.endswith(".enabled"):
                    warnings.warn(f"{where}.name", f"kube-scheduler's plugin {name!r} cannot be disabled in "
                                                   f"metrics-sched: {ALWAYS_ON[name]}")
                continue
            if spec is None and name in UPSTREAM_PLUGINS:
                counterpart = UPSTREAM_COUNTERPARTS.get(name)
                if counterpart is not None:
                    # Its job is done by our own plugin, which this entry does not switch on or off: say so.
                    warnings.warn(f"{where}.name", f"kube-scheduler's plugin {name!r} is not implemented by "
                                                   f"metrics-sched; {counterpart} does its job: enable or disable "
                                                   f"{counterpart.split(' ')[0]} instead")
                elif field.endswith(".enabled"):
                    warnings.warn(f"{where}.name", f"kube-scheduler's plugin {name!r} is not implemented by "
                                                   "metrics-sched; ignored")
                continue
            if spec is None:
                raise ConfigError(f"{where}.name", f"unknown plugin {name!r} (known: {', '.join(sorted(catalog))})")
            if point != "multiPoint" and point not in spec.points:
                raise ConfigError(f"{where}.name", f"plugin {name!r} does not implement {point}")
        weight = 1
        if "weight" in item and point == "multiPoint":
            # kube-scheduler writes `weight: 0` for every plugin of a dumped config: 0 means "the default weight".
            weight = read_int(item, "weight", where, minimum=0, maximum=MAX_WEIGHT)
        elif "weight" in item:
            if point != "score":
                raise ConfigError(f"{where}.weight", "only score plugins have a weight")
            weight = read_int(item, "weight", where, minimum=1, maximum=MAX_WEIGHT)
        refs.append(PluginRef(name, weight))
    return refs


def _percentage(data: Mapping[str, Any], where: str, default: int, warnings: WarningLog) -> int:
    """percentageOfNodesToScore: 0 (upstream's adaptive default) reads as 100 (every feasible node scored);
    below 100 only that share of the nodes is scored (Framework._sample), with a warning: sampling costs
    telemetry-driven scores much of their value. A profile without one takes the top-level value."""
    if data.get("percentageOfNodesToScore") is None:
        return default
    percentage = read_int(data, "percentageOfNodesToScore", where, default, minimum=0, maximum=100) or 100
    if percentage < 100:
        warnings.warn(field_name(where, "percentageOfNodesToScore"),
                      f"{percentage}%: only that share of the nodes is scored, so a cooler or cheaper node "
                      "outside the sample is never seen")
    return percentage


def _plugin_set(plugins_data: Mapping[str, Any], point: str, where: str, catalog: PluginCatalog,
                warnings: WarningLog) -> tuple[list[PluginRef], set[str]]:
    field = f"{where}.plugins.{point}"
    point_data = mapping(plugins_data.get(point), field, optional=True)
    check_keys(point_data, keys("profiles", "plugins", "multiPoint"), field)
    enabled = _plugin_list(point_data.get("enabled"), f"{field}.enabled", catalog, point, warnings)
    disabled = {r.name for r in _plugin_list(point_data.get("disabled"), f"{field}.disabled", catalog, point,
                                             warnings)}
    if any(r.name == "*" for r in enabled):
        raise ConfigError(f"{field}.enabled", "'*' can only be disabled")
    if len({r.name for r in enabled}) != len(enabled):
        raise ConfigError(f"{field}.enabled", "a plugin is listed twice")
    return enabled, disabled


def _resolve_plugins(plugins_data: Mapping[str, Any], where: str, catalog: PluginCatalog,
                     warnings: WarningLog) -> dict[str, tuple[PluginRef, ...]]:
    """Per extension point, in upstream's precedence: the point's own set, then multiPoint's plugins, then the
    defaults. multiPoint's `enabled` adds a plugin (or sets a default's weight) at every point it implements
    (the weight counts at score), its `disabled` removes defaults everywhere; a point's `disabled` also removes
    multiPoint's plugins there, and its `disabled: ['*']` everything but its own `enabled`."""
    for point in NO_EFFECT_POINTS:
        ignored, _ = _plugin_set(plugins_data, point, where, catalog, warnings)
        if ignored:
            warnings.warn(f"{where}.plugins.{point}", "extension point not implemented by metrics-sched; ignored")
    multi_enabled, multi_disabled = _plugin_set(plugins_data, "multiPoint", where, catalog, warnings)
    resolved: dict[str, tuple[PluginRef, ...]] = {}
    for point in EXTENSION_POINT_NAMES:
        enabled, disabled = _plugin_set(plugins_data, point, where, catalog, warnings)
        if "*" in disabled:
            resolved[point] = tuple(enabled)
            continue
        defaults = [] if "*" in multi_disabled else [r for r in DEFAULT_PLUGINS[point] if r.name not in multi_disabled]
        multi = {r.name: r for r in multi_enabled if point in catalog[r.name].points}
        base = [_weighted(multi.pop(r.name, r), r.weight, point) for r in defaults]
        base += [_weighted(r, 1, point) for r in multi.values()]
        overrides = {r.name: r for r in enabled}
        merged = [overrides.pop(r.name, r) for r in base if r.name not in disabled]
        merged += [r for r in enabled if r.name in overrides]
        named = {r.name for r in enabled} | {r.name for r in multi_enabled}
        if point == "queueSort" and len(merged) > 1:
            # Only one queueSort may be enabled: one the config names (e.g. upstream's PrioritySort, in an
            # upstream dump's multiPoint) replaces the default rather than clashing with it.
            merged = [r for r in merged if r.name in named] or merged
        resolved[point] = tuple(merged)
    return resolved


def _weighted(ref: PluginRef, default: int, point: str) -> PluginRef:
    """A multiPoint plugin at `point`: its weight counts at score only, and 0 there means `default`."""
    if point != "score":
        return PluginRef(ref.name)
    return ref if ref.weight else PluginRef(ref.name, default)


def _profile(data: Any, i: int, catalog: PluginCatalog, percentage: int, warnings: WarningLog) -> ProfileConfig:
    where = f"profiles[{i}]"
    data = mapping(data, where, optional=True)
    check_keys(data, keys("profiles"), where)
    name = read_str(data, "schedulerName", where, DEFAULT_SCHEDULER_NAME, non_empty=True)
    plugins_data = mapping(data.get("plugins"), f"{where}.plugins", optional=True)
    check_keys(plugins_data, keys("profiles", "plugins"), f"{where}.plugins")
    resolved = _resolve_plugins(plugins_data, where, catalog, warnings)
    if len(resolved["queueSort"]) != 1:
        raise ConfigError(f"{where}.plugins.queueSort", "exactly one queueSort plugin must be enabled")
    if not resolved["bind"]:
        raise ConfigError(f"{where}.plugins.bind", "at least one bind plugin must be enabled")

    args: dict[str, Any] = {}  # plugin name -> its parsed Args, built once here
    for j, item in enumerate(sequence(data.get("pluginConfig"), f"{where}.pluginConfig", optional=True)):
        field = f"{where}.pluginConfig[{j}]"
        item = mapping(item, field)
        check_keys(item, keys("profiles", "pluginConfig"), field)
        plugin = read_str(item, "name", field, non_empty=True)
        spec = catalog.get(plugin)
        if spec is None and plugin in UPSTREAM_PLUGINS:
            warnings.warn(f"{field}.name", f"args of kube-scheduler's plugin {plugin!r}, which metrics-sched does "
                                           "not implement; ignored")
            continue
        if spec is None:
            raise ConfigError(f"{field}.name", f"unknown plugin {plugin!r}")
        if plugin in args:
            raise ConfigError(f"{field}.name", f"args for {plugin!r} given twice")
        plugin_args = _unwrap_args(item.get("args"), plugin, f"{field}.args")
        try:
            args[plugin] = spec.parse_args(plugin_args)
        except (ArgsError, ConfigError) as exc:
            # parse_args names fields relative to the args (ArgsError, or the config readers' ConfigError).
            raise ConfigError(f"{field}.args.{exc.field}" if exc.field else f"{field}.args", exc.message) from None
    for point, refs in resolved.items():
        for ref in refs:
            if ref.name not in args:
                try:
                    args[ref.name] = catalog[ref.name].parse_args({})
                except (ArgsError, ConfigError) as exc:
                    raise ConfigError(f"{where}.pluginConfig", f"{ref.name} ({point}) needs args: {exc}") from None
    return ProfileConfig(scheduler_name=name, plugins=resolved, plugin_args=args,
                         shadow=read_bool(data, "shadow", where, False),
                         opportunistic_batching=read_bool(data, "opportunisticBatching", where, True),
                         percentage_of_nodes_to_score=_percentage(data, where, percentage, warnings))


def _unwrap_args(value: Any, plugin: str, field: str) -> dict[str, Any]:
    """The args mapping without upstream's type wrapper (`apiVersion: kubescheduler.config.k8s.io/v1`,
    `kind: <Plugin>Args`), which must name this plugin when present."""
    plugin_args = dict(mapping(value, field, optional=True))
    if "apiVersion" in plugin_args:
        read_choice(plugin_args, "apiVersion", field, API_VERSIONS)
        del plugin_args["apiVersion"]
    if "kind" in plugin_args:
        read_choice(plugin_args, "kind", field, (f"{plugin}Args",))
        del plugin_args["kind"]
    return plugin_args


def _leader_election(data: Any) -> LeaderElectionConfig:
    where = "leaderElection"
    data = mapping(data, where, optional=True)
    check_keys(data, keys(where), where)
    defaults = LeaderElectionConfig()
    leader_elect = read_bool(data, "leaderElect", where, defaults.leader_elect)
    read_choice(data, "resourceLock", where, ("leases",), "leases")
    lease = read_duration(data, "leaseDuration", where, defaults.lease_duration, maximum=MAX_LEASE_DURATION)
    renew = read_duration(data, "renewDeadline", where, defaults.renew_deadline)
    retry = read_duration(data, "retryPeriod", where, defaults.retry_period, minimum=MIN_RETRY_PERIOD)
    if not lease > renew:
        raise ConfigError(f"{where}.renewDeadline", f"must be shorter than leaseDuration ({renew:g}s >= {lease:g}s)")
    if not renew > retry * 1.2:
        raise ConfigError(f"{where}.retryPeriod", f"must be shorter than renewDeadline/1.2 ({retry:g}s)")
    return LeaderElectionConfig(
        leader_elect=leader_elect, lease_duration=lease, renew_deadline=renew, retry_period=retry,
        resource_name=read_str(data, "resourceName", where, defaults.resource_name, non_empty=True),
        # Absent: decided at start (the pod's own namespace in a cluster); given, it must name a namespace.
        resource_namespace=(read_str(data, "resourceNamespace", where, non_empty=True) if "resourceNamespace" in data
                            else LEASE_NAMESPACE_UNSET),
    )


def parse_config(data: Any, catalog: PluginCatalog) -> SchedulerConfig:
    data = mapping(data, "", optional=True)
    check_keys(data, keys(), "")
    check_json_shaped(data)
    warnings = WarningLog()
    if data.get("apiVersion", API_VERSIONS[0]) not in API_VERSIONS:
        raise ConfigError("apiVersion", f"must be one of {', '.join(API_VERSIONS)}, got {data.get('apiVersion')!r}")
    if data.get("kind", KINDS[0]) not in KINDS:
        raise ConfigError("kind", f"must be one of {', '.join(KINDS)}, got {data.get('kind')!r}")
    profiles_data = sequence(data.get("profiles"), "profiles", optional=True) or [{}]
    percentage = _percentage(data, "", 100, warnings)
    profiles = tuple(_profile(p, i, catalog, percentage, warnings) for i, p in enumerate(profiles_data))
    names = [p.scheduler_name for p in profiles]
    for i, name in enumerate(names):
        if name in names[:i]:
            raise ConfigError(f"profiles[{i}].schedulerName", f"duplicate scheduler name {name!r}")
    if len({p.plugins["queueSort"] for p in profiles}) > 1:
        raise ConfigError("profiles", "all profiles must use the same queueSort plugin")
    replaces_default = read_bool(data, "replacesDefaultScheduler", "", False)
    # A shadow profile only watches kube-scheduler's pods (binds nothing): no race.
    if KUBE_DEFAULT_SCHEDULER in [p.scheduler_name for p in profiles if not p.shadow] and not replaces_default:
        raise ConfigError(f"profiles[{names.index(KUBE_DEFAULT_SCHEDULER)}].schedulerName",
                          f"{KUBE_DEFAULT_SCHEDULER!r} is kube-scheduler's: next to it, both would race for the same "
                          "pods; set replacesDefaultScheduler: true only where metrics-sched replaces kube-scheduler")

    if sequence(data.get("extenders"), "extenders", optional=True):
        raise ConfigError("extenders", "scheduler extenders are not supported by metrics-sched (its plugins run "
                                       "in-process); remove them")
    client_config = _client_connection(data.get("clientConnection"), warnings)
    server_config = parse_server(data.get("server"))
    initial = read_duration(data, "podInitialBackoffSeconds", "", 1, minimum=MIN_POD_BACKOFF)
    maximum = read_duration(data, "podMaxBackoffSeconds", "", 10, minimum=MIN_POD_BACKOFF)
    if maximum < initial:
        raise ConfigError("podMaxBackoffSeconds", "must be >= podInitialBackoffSeconds")
    contracts = {
        name: parse_contract(spec, f"metrics.{name}")
        for name, spec in mapping(data.get("metrics"), "metrics", optional=True).items()
    }
    sources: list[dict[str, Any]] = []
    for i, spec in enumerate(sequence(data.get("sources"), "sources", optional=True)):
        where = f"sources[{i}]"
        spec = mapping(spec, where)
        # Only what every source has; the rest is the source type's to validate (telemetry.registry).
        name = read_str(spec, "name", where, non_empty=True)
        read_str(spec, "type", where, non_empty=True)
        if name in {s["name"] for s in sources}:
            raise ConfigError(f"{where}.name", f"duplicate source name {name!r}")
        sources.append(dict(spec, name=name))
    audit = mapping(data.get("audit"), "audit", optional=True)
    check_keys(audit, keys("audit"), "audit")
    audit_config = AuditConfig(
        ring_size=read_int(audit, "ringSize", "audit", 10_000, minimum=1, maximum=MAX_RING_SIZE),
        top_candidates=read_int(audit, "topCandidates", "audit", 5, minimum=1, maximum=MAX_TOP_CANDIDATES),
        annotate_pods=read_bool(audit, "annotatePods", "audit", True),
        log_decisions=read_bool(audit, "logDecisions", "audit", True),
        file=_audit_file(audit.get("file")),
    )
    if read_bool(data, "enableContentionProfiling", "", False):
        warnings.warn("enableContentionProfiling", "accepted but has no effect (no lock contention profile here)")
    if read_bool(data, "delayCacheUntilActive", "", False):
        warnings.warn("delayCacheUntilActive", "accepted but has no effect: every replica fills its cache at start, "
                                               "so a new leader schedules at once")
    canonical = json.dumps(data, sort_keys=True, default=str).encode()
    return SchedulerConfig(
        profiles=profiles,
        leader_election=_leader_election(data.get("leaderElection")),
        client_connection=client_config,
        server=server_config,
        bind_workers=_bind_workers(data),
        pod_initial_backoff=initial,
        pod_max_backoff=maximum,
        pod_max_in_unschedulable=read_duration(data, "podMaxInUnschedulablePodsDuration", "", 300,
                                               minimum=MIN_UNSCHEDULABLE_FLUSH),
        cache_compare_interval=_compare_interval(data),
        audit=audit_config,
        metrics=contracts,
        sources=tuple(sources),
        replaces_default_scheduler=replaces_default,
        enable_profiling=read_bool(data, "enableProfiling", "", False),
        cpu_affinity=read_choice(data, "cpuAffinity", "", ("one", "all"), DEFAULT_CPU_AFFINITY),
        rebalance=parse_rebalance(data.get("rebalance")),
        percentage_of_nodes_to_score=percentage,
        warnings=warnings.collected(),
        config_hash=hashlib.sha256(canonical).hexdigest()[:12],
    )


def _client_connection(data: Any, warnings: WarningLog) -> ClientConnectionConfig:
    where = "clientConnection"
    client = mapping(data, where, optional=True)
    check_keys(client, keys(where), where)
    content_type = read_str(client, "contentType", where, "") or JSON_CONTENT_TYPE
    if content_type == PROTOBUF_CONTENT_TYPE:
        warnings.warn(f"{where}.contentType", f"only {JSON_CONTENT_TYPE} is spoken; JSON is used")
    elif content_type != JSON_CONTENT_TYPE:
        raise ConfigError(f"{where}.contentType", f"must be {JSON_CONTENT_TYPE} (or {PROTOBUF_CONTENT_TYPE}, read as "
                                                  f"JSON), got {content_type!r}")
    accept = read_str(client, "acceptContentTypes", where, "")
    if any(t.strip() not in ("", JSON_CONTENT_TYPE) for t in accept.split(",")):
        warnings.warn(f"{where}.acceptContentTypes", f"only {JSON_CONTENT_TYPE} is spoken; JSON is used")
    return ClientConnectionConfig(
        kubeconfig=read_str(client, "kubeconfig", where, ""),
        qps=read_float(client, "qps", where, 0, minimum=0),
        burst=read_int(client, "burst", where, 0, minimum=0),
        watch_read_timeout=read_duration(client, "watchReadTimeout", where, 60,
                                         minimum=WATCH_READ_TIMEOUT[0], maximum=WATCH_READ_TIMEOUT[1]),
    )


def _bind_workers(data: Mapping[str, Any]) -> int:
    """bindWorkers, or upstream's `parallelism` (the same knob here: how many binds run at once)."""
    workers = read_int(data, "bindWorkers", "", SchedulerConfig.bind_workers, minimum=1, maximum=MAX_BIND_WORKERS)
    if "parallelism" not in data:
        return workers
    parallelism = read_int(data, "parallelism", "", minimum=1, maximum=MAX_BIND_WORKERS)
    if "bindWorkers" in data and workers != parallelism:
        raise ConfigError("parallelism", f"is bindWorkers by another name; give one ({parallelism} != {workers})")
    return parallelism


def load_config(path: Path, catalog: PluginCatalog) -> SchedulerConfig:
    """The config in `path`; every way it can be unusable is a ConfigError (the CLI's exit 2), never a traceback."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError("", f"cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError("", f"{path} is not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset "
                              f"{exc.start})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError("", f"{path} is not valid YAML{where}") from None
    except (ValueError, RecursionError) as exc:
        # Valid YAML that PyYAML cannot build: a date like 2024-13-45, an integer past Python's 4300 digits,
        # nesting deeper than the recursion limit.
        raise ConfigError("", f"{path} cannot be read as YAML: {type(exc).__name__}: {str(exc)[:120]}") from None
    return parse_config(data if data is not None else {}, catalog)


MIN_COMPARE_INTERVAL = 5.0  # each comparison LISTs every node and pod: never in a loop


def _audit_file(data: Any) -> AuditFileConfig | None:
    """`audit.file: {path, maxBytes, backups}`: every decision as a JSON line, rotated by size."""
    if data is None:
        return None
    data = mapping(data, "audit.file")
    check_keys(data, keys("audit", "file"), "audit.file")
    return AuditFileConfig(path=read_str(data, "path", "audit.file", non_empty=True),
                           max_bytes=read_int(data, "maxBytes", "audit.file", 100 * 2**20, minimum=4096),
                           backups=read_int(data, "backups", "audit.file", 3, minimum=0, maximum=100))


def _compare_interval(data: Mapping[str, Any]) -> float:
    """cacheCompareInterval: 0 (only on SIGUSR2) or at least MIN_COMPARE_INTERVAL seconds."""
    seconds = read_duration(data, "cacheCompareInterval", "", 300, positive=False)
    if 0 < seconds < MIN_COMPARE_INTERVAL:
        raise ConfigError("cacheCompareInterval", f"must be 0 (only on SIGUSR2) or at least {MIN_COMPARE_INTERVAL:g}s")
    return seconds


# The rebalancer (`rebalance:`). Each tick simulates a placement per candidate pod: not in a loop.
MIN_REBALANCE_INTERVAL = 5.0
MAX_EVICTIONS_PER_INTERVAL = 1000
# A rule's name is the `reason` label of metrics_sched_evictions_total and the Event's words: a label value.
_RULE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9_]{0,61}[a-z0-9])?$")
_METRIC_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_:]*$")


def parse_rebalance(data: Any) -> RebalanceConfig:
    """The `rebalance:` section; absent means disabled (the `metrics-sched rebalance` command still needs rules)."""
    where = "rebalance"
    data = mapping(data, where, optional=True)
    check_keys(data, keys(where), where)
    defaults = RebalanceConfig()
    enabled = read_bool(data, "enabled", where, defaults.enabled)
    rules: list[NodeRule] = []
    for i, item in enumerate(sequence(data.get("rules"), f"{where}.rules", optional=True)):
        rule = _rebalance_rule(item, f"{where}.rules[{i}]")
        if any(r.name == rule.name for r in rules):
            raise ConfigError(f"{where}.rules[{i}].name", f"duplicate rule name {rule.name!r}")
        rules.append(rule)
    if enabled and not rules:
        raise ConfigError(f"{where}.rules", "at least one rule is needed when enabled")
    margin = read_float(data, "margin", where, defaults.margin, minimum=0)
    if margin > 100:
        raise ConfigError(f"{where}.margin", f"is in points of the 0-100 score, must be <= 100, got {margin:g}")
    max_priority = None
    if data.get("maxPriority") is not None:
        max_priority = read_int(data, "maxPriority", where)
    return RebalanceConfig(
        enabled=enabled,
        interval_seconds=read_duration(data, "interval", where, defaults.interval_seconds,
                                       minimum=MIN_REBALANCE_INTERVAL),
        dry_run=read_bool(data, "dryRun", where, defaults.dry_run),
        rules=tuple(rules),
        margin=margin,
        limits=_eviction_limits(data.get("limits"), f"{where}.limits"),
        pod_selector=_match_labels(data.get("podSelector"), f"{where}.podSelector"),
        pod_selector_expressions=_match_expressions(data.get("podSelector"), f"{where}.podSelector"),
        max_priority=max_priority,
        evict_local_storage_pods=read_bool(data, "evictLocalStoragePods", where, defaults.evict_local_storage_pods),
        gangs=read_choice(data, "gangs", where, GANG_MOVES, defaults.gangs),
    )


def _rebalance_rule(item: Any, where: str) -> NodeRule:
    item = mapping(item, where)
    check_keys(item, keys("rebalance", "rules"), where)
    name = read_str(item, "name", where, non_empty=True)
    if not _RULE_NAME.match(name):
        raise ConfigError(f"{where}.name", f"must be lower-case letters, digits, '-' or '_' (at most 63), got {name!r}")
    metric = read_str(item, "metric", where, non_empty=True)
    if not _METRIC_NAME.match(metric):
        raise ConfigError(f"{where}.metric", f"must be a metric name like gpu_temperature, got {metric!r}")
    # 0: bad at the first tick that sees it above (for trying rules with `metrics-sched rebalance --once`).
    for_seconds = read_duration(item, "for", where, NodeRule.for_seconds, positive=False)
    if "above" in item and "aboveQuantile" in item:
        raise ConfigError(f"{where}.aboveQuantile", "give either above or aboveQuantile, not both")
    if "aboveQuantile" in item:
        quantile = read_float(item, "aboveQuantile", where)
        if not 0 < quantile < 1:
            raise ConfigError(f"{where}.aboveQuantile", f"must be between 0 and 1 (exclusive), got {quantile:g}")
        return NodeRule(name=name, metric=metric, kind=RuleKind.QUANTILE, quantile=quantile, for_seconds=for_seconds)
    if "above" not in item:
        raise ConfigError(f"{where}.above", "is required (or aboveQuantile)")
    return NodeRule(name=name, metric=metric, kind=RuleKind.ABOVE, threshold=read_float(item, "above", where),
                    for_seconds=for_seconds)


def _eviction_limits(data: Any, where: str) -> EvictionLimits:
    data = mapping(data, where, optional=True)
    check_keys(data, keys("rebalance", "limits"), where)
    defaults = EvictionLimits()
    return EvictionLimits(
        per_node=read_int(data, "perNode", where, defaults.per_node, minimum=1, maximum=MAX_EVICTIONS_PER_INTERVAL),
        per_namespace=read_int(data, "perNamespace", where, defaults.per_namespace, minimum=1,
                               maximum=MAX_EVICTIONS_PER_INTERVAL),
        cluster=read_int(data, "cluster", where, defaults.cluster, minimum=1, maximum=MAX_EVICTIONS_PER_INTERVAL),
        cooldown_seconds=read_duration(data, "cooldown", where, defaults.cooldown_seconds, positive=False),
    )


_SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


def _match_expressions(data: Any, where: str) -> tuple[SelectorExpression, ...]:
    """podSelector.matchExpressions, refused as the API server refuses a LabelSelectorRequirement."""
    data = mapping(data, where, optional=True)
    out: list[SelectorExpression] = []
    for i, item in enumerate(sequence(data.get("matchExpressions"), f"{where}.matchExpressions", optional=True)):
        at = f"{where}.matchExpressions[{i}]"
        item = mapping(item, at)
        check_keys(item, keys("rebalance", "podSelector", "matchExpressions"), at)
        key = read_str(item, "key", at, non_empty=True)
        operator = read_str(item, "operator", at, non_empty=True)
        if operator not in _SELECTOR_OPERATORS:
            raise ConfigError(f"{at}.operator", f"must be one of {', '.join(_SELECTOR_OPERATORS)}, got {operator!r}")
        values = sequence(item.get("values"), f"{at}.values", optional=True)
        if any(not isinstance(v, str) for v in values):
            raise ConfigError(f"{at}.values", f"must be strings, got {values!r}")
        if operator in ("In", "NotIn") and not values:
            raise ConfigError(f"{at}.values", f"{operator} needs at least one value")
        if operator in ("Exists", "DoesNotExist") and values:
            raise ConfigError(f"{at}.values", f"{operator} takes no values")
        out.append(SelectorExpression(key, operator, tuple(sorted(set(values)))))
    return tuple(out)


def _match_labels(data: Any, where: str) -> dict[str, str]:
    data = mapping(data, where, optional=True)
    check_keys(data, keys("rebalance", "podSelector"), where)
    labels = mapping(data.get("matchLabels"), f"{where}.matchLabels", optional=True)
    out: dict[str, str] = {}
    for key, value in labels.items():
        if not key or not isinstance(value, str):
            raise ConfigError(f"{where}.matchLabels.{key}", f"must be a string label value, got {value!r}")
        out[key] = value
    return out
