"""Loads and validates the YAML config (shaped like KubeSchedulerConfiguration v1).

Every error names its field (`profiles[0].plugins.score.enabled[1].weight: ...`). Plugin sets work
as in kube-scheduler: `enabled` adds to the defaults of that extension point (or sets the weight of
a default), `disabled` removes defaults, `disabled: [{name: "*"}]` removes them all.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml

from metrics_sched.config.durations import parse_duration
from metrics_sched.config.errors import ArgsError, ConfigError
from metrics_sched.config.model import (
    DEFAULT_SCHEDULER_NAME,
    EXTENSION_POINT_NAMES,
    AuditConfig,
    ClientConnectionConfig,
    LeaderElectionConfig,
    PluginRef,
    ProfileConfig,
    SchedulerConfig,
    ServerConfig,
)
from metrics_sched.telemetry.contract import parse_contract

API_VERSIONS = ("metrics-sched.io/v1alpha1", "kubescheduler.config.k8s.io/v1")
KINDS = ("MetricsSchedulerConfiguration", "KubeSchedulerConfiguration")
MAX_WEIGHT = 1000

# The registry answers: which plugins exist, which points each implements, and checks their args.
PluginCatalog = Mapping[str, "PluginSpec"]


class PluginSpec:
    """What the loader needs to know of a plugin class (kept abstract to avoid importing plugins)."""

    def __init__(self, points: frozenset[str], check_args: Callable[[Mapping[str, Any]], None]) -> None:
        self.points = points
        self.check_args = check_args


DEFAULT_PLUGINS: dict[str, tuple[PluginRef, ...]] = {
    "queueSort": (PluginRef("PrioritySort"),),
    "preFilter": (PluginRef("NodeResourcesFit"),),
    "filter": (
        PluginRef("NodeUnschedulable"), PluginRef("NodeReady"), PluginRef("NodeName"),
        PluginRef("TaintToleration"), PluginRef("NodeAffinity"), PluginRef("NodeResourcesFit"),
        PluginRef("GPUTemperature"),
    ),
    "preScore": (),
    "score": (
        PluginRef("NodeResourcesFit", 1), PluginRef("NodeAffinity", 2), PluginRef("TaintToleration", 3),
        PluginRef("ZoneSpread", 1), PluginRef("GPUTemperature", 3), PluginRef("NodeLoad", 2), PluginRef("Cost", 2),
    ),
    "reserve": (PluginRef("InFlightLedger"),),
    "bind": (PluginRef("DefaultBinder"),),
    "postBind": (),
}


def _mapping(value: Any, field: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(field, f"must be a mapping, got {type(value).__name__}")
    return value


def _list(value: Any, field: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ConfigError(field, f"must be a list, got {type(value).__name__}")
    return value


def _known_keys(data: Mapping[str, Any], allowed: set[str], prefix: str) -> None:
    for key in data:
        if key not in allowed:
            where = f"{prefix}.{key}" if prefix else str(key)
            raise ConfigError(where, f"unknown field (expected one of: {', '.join(sorted(allowed))})")


def _number(value: Any, field: str, *, minimum: float | None = None, integer: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or (integer and not isinstance(value, int)):
        raise ConfigError(field, f"must be {'an integer' if integer else 'a number'}, got {value!r}")
    if minimum is not None and value < minimum:
        raise ConfigError(field, f"must be >= {minimum:g}, got {value!r}")
    return float(value)


def _string(value: Any, field: str) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(field, f"must be a non-empty string, got {value!r}")
    return value


def _plugin_list(value: Any, field: str, catalog: PluginCatalog, point: str) -> list[PluginRef]:
    refs = []
    for i, item in enumerate(_list(value, field)):
        where = f"{field}[{i}]"
        item = _mapping(item, where)
        _known_keys(item, {"name", "weight"}, where)
        name = _string(item.get("name"), f"{where}.name")
        if name != "*":
            spec = catalog.get(name)
            if spec is None:
                raise ConfigError(f"{where}.name", f"unknown plugin {name!r} (known: {', '.join(sorted(catalog))})")
            if point not in spec.points:
                raise ConfigError(f"{where}.name", f"plugin {name!r} does not implement {point}")
        weight = 1
        if "weight" in item:
            if point != "score":
                raise ConfigError(f"{where}.weight", "only score plugins have a weight")
            weight = int(_number(item["weight"], f"{where}.weight", minimum=1, integer=True))
            if weight > MAX_WEIGHT:
                raise ConfigError(f"{where}.weight", f"must be <= {MAX_WEIGHT}, got {weight}")
        refs.append(PluginRef(name, weight))
    return refs


def _profile(data: Any, i: int, catalog: PluginCatalog) -> ProfileConfig:
    where = f"profiles[{i}]"
    data = _mapping(data, where)
    _known_keys(data, {"schedulerName", "plugins", "pluginConfig"}, where)
    name = _string(data.get("schedulerName", DEFAULT_SCHEDULER_NAME), f"{where}.schedulerName")
    plugins_data = _mapping(data.get("plugins"), f"{where}.plugins")
    _known_keys(plugins_data, set(EXTENSION_POINT_NAMES) | {"multiPoint"}, f"{where}.plugins")
    if "multiPoint" in plugins_data:
        raise ConfigError(f"{where}.plugins.multiPoint", "not supported; list plugins per extension point")
    resolved: dict[str, tuple[PluginRef, ...]] = {}
    for point in EXTENSION_POINT_NAMES:
        field = f"{where}.plugins.{point}"
        point_data = _mapping(plugins_data.get(point), field)
        _known_keys(point_data, {"enabled", "disabled"}, field)
        enabled = _plugin_list(point_data.get("enabled"), f"{field}.enabled", catalog, point)
        disabled = {r.name for r in _plugin_list(point_data.get("disabled"), f"{field}.disabled", catalog, point)}
        if any(r.name == "*" for r in enabled):
            raise ConfigError(f"{field}.enabled", "'*' can only be disabled")
        defaults = [] if "*" in disabled else [r for r in DEFAULT_PLUGINS[point] if r.name not in disabled]
        overrides = {r.name: r for r in enabled}
        merged = [overrides.pop(r.name, r) for r in defaults]
        merged += [r for r in enabled if r.name in overrides]
        resolved[point] = tuple(merged)
    if len(resolved["queueSort"]) != 1:
        raise ConfigError(f"{where}.plugins.queueSort", "exactly one queueSort plugin must be enabled")
    if not resolved["bind"]:
        raise ConfigError(f"{where}.plugins.bind", "at least one bind plugin must be enabled")

    args: dict[str, dict[str, Any]] = {}
    for j, item in enumerate(_list(data.get("pluginConfig"), f"{where}.pluginConfig")):
        field = f"{where}.pluginConfig[{j}]"
        item = _mapping(item, field)
        _known_keys(item, {"name", "args"}, field)
        plugin = _string(item.get("name"), f"{field}.name")
        spec = catalog.get(plugin)
        if spec is None:
            raise ConfigError(f"{field}.name", f"unknown plugin {plugin!r}")
        if plugin in args:
            raise ConfigError(f"{field}.name", f"args for {plugin!r} given twice")
        plugin_args = dict(_mapping(item.get("args"), f"{field}.args"))
        try:
            spec.check_args(plugin_args)
        except ArgsError as exc:
            raise ConfigError(f"{field}.args.{exc.field}", exc.message) from None
        args[plugin] = plugin_args
    for point, refs in resolved.items():
        for ref in refs:
            if ref.name not in args:
                try:
                    catalog[ref.name].check_args({})
                except ArgsError as exc:
                    raise ConfigError(f"{where}.pluginConfig", f"{ref.name} ({point}) needs args: {exc}") from None
    return ProfileConfig(scheduler_name=name, plugins=resolved, plugin_args=args)


def _leader_election(data: Any) -> LeaderElectionConfig:
    where = "leaderElection"
    data = _mapping(data, where)
    _known_keys(data, {"leaderElect", "leaseDuration", "renewDeadline", "retryPeriod", "resourceName",
                       "resourceNamespace", "resourceLock"}, where)
    defaults = LeaderElectionConfig()
    leader_elect = data.get("leaderElect", defaults.leader_elect)
    if not isinstance(leader_elect, bool):
        raise ConfigError(f"{where}.leaderElect", f"must be true or false, got {leader_elect!r}")
    if data.get("resourceLock", "leases") != "leases":
        raise ConfigError(f"{where}.resourceLock", "only 'leases' is supported")
    lease = parse_duration(data.get("leaseDuration", defaults.lease_duration), f"{where}.leaseDuration")
    renew = parse_duration(data.get("renewDeadline", defaults.renew_deadline), f"{where}.renewDeadline")
    retry = parse_duration(data.get("retryPeriod", defaults.retry_period), f"{where}.retryPeriod")
    if not lease > renew:
        raise ConfigError(f"{where}.renewDeadline", f"must be shorter than leaseDuration ({renew:g}s >= {lease:g}s)")
    if not renew > retry * 1.2:
        raise ConfigError(f"{where}.retryPeriod", f"must be shorter than renewDeadline/1.2 ({retry:g}s)")
    return LeaderElectionConfig(
        leader_elect=leader_elect, lease_duration=lease, renew_deadline=renew, retry_period=retry,
        resource_name=_string(data.get("resourceName", defaults.resource_name), f"{where}.resourceName"),
        resource_namespace=_string(data.get("resourceNamespace", defaults.resource_namespace),
                                   f"{where}.resourceNamespace"),
    )


def parse_config(data: Any, catalog: PluginCatalog) -> SchedulerConfig:
    data = _mapping(data, "")
    _known_keys(data, {"apiVersion", "kind", "profiles", "leaderElection", "clientConnection", "server",
                       "bindWorkers", "podInitialBackoffSeconds", "podMaxBackoffSeconds",
                       "podMaxInUnschedulablePodsDuration", "metrics", "sources", "audit"}, "")
    if data.get("apiVersion", API_VERSIONS[0]) not in API_VERSIONS:
        raise ConfigError("apiVersion", f"must be one of {', '.join(API_VERSIONS)}, got {data.get('apiVersion')!r}")
    if data.get("kind", KINDS[0]) not in KINDS:
        raise ConfigError("kind", f"must be one of {', '.join(KINDS)}, got {data.get('kind')!r}")
    profiles_data = _list(data.get("profiles"), "profiles") or [{}]
    profiles = tuple(_profile(p, i, catalog) for i, p in enumerate(profiles_data))
    names = [p.scheduler_name for p in profiles]
    for i, name in enumerate(names):
        if name in names[:i]:
            raise ConfigError(f"profiles[{i}].schedulerName", f"duplicate scheduler name {name!r}")
    if len({p.plugins["queueSort"] for p in profiles}) > 1:
        raise ConfigError("profiles", "all profiles must use the same queueSort plugin")

    client = _mapping(data.get("clientConnection"), "clientConnection")
    _known_keys(client, {"qps", "burst", "watchReadTimeout", "kubeconfig"}, "clientConnection")
    client_config = ClientConnectionConfig(
        qps=_number(client.get("qps", 0), "clientConnection.qps", minimum=0),
        burst=int(_number(client.get("burst", 0), "clientConnection.burst", minimum=0, integer=True)),
        watch_read_timeout=parse_duration(client.get("watchReadTimeout", 60), "clientConnection.watchReadTimeout"),
    )
    server = _mapping(data.get("server"), "server")
    _known_keys(server, {"bindAddress", "port"}, "server")
    server_config = ServerConfig(
        bind_address=_string(server.get("bindAddress", ServerConfig.bind_address), "server.bindAddress"),
        port=int(_number(server.get("port", ServerConfig.port), "server.port", minimum=0, integer=True)),
    )
    initial = parse_duration(data.get("podInitialBackoffSeconds", 1), "podInitialBackoffSeconds")
    maximum = parse_duration(data.get("podMaxBackoffSeconds", 10), "podMaxBackoffSeconds")
    if maximum < initial:
        raise ConfigError("podMaxBackoffSeconds", "must be >= podInitialBackoffSeconds")
    contracts = {
        str(name): parse_contract(_mapping(spec, f"metrics.{name}"), f"metrics.{name}")
        for name, spec in _mapping(data.get("metrics"), "metrics").items()
    }
    sources: list[dict[str, Any]] = []
    for i, spec in enumerate(_list(data.get("sources"), "sources")):
        spec = _mapping(spec, f"sources[{i}]")
        _string(spec.get("name"), f"sources[{i}].name")
        _string(spec.get("type"), f"sources[{i}].type")
        if spec["name"] in {s["name"] for s in sources}:
            raise ConfigError(f"sources[{i}].name", f"duplicate source name {spec['name']!r}")
        sources.append(dict(spec))
    audit = _mapping(data.get("audit"), "audit")
    _known_keys(audit, {"ringSize", "topCandidates", "annotatePods", "logDecisions"}, "audit")
    for flag in ("annotatePods", "logDecisions"):
        if not isinstance(audit.get(flag, True), bool):
            raise ConfigError(f"audit.{flag}", f"must be true or false, got {audit[flag]!r}")
    audit_config = AuditConfig(
        ring_size=int(_number(audit.get("ringSize", 10_000), "audit.ringSize", minimum=1, integer=True)),
        top_candidates=int(_number(audit.get("topCandidates", 5), "audit.topCandidates", minimum=1, integer=True)),
        annotate_pods=audit.get("annotatePods", True),
        log_decisions=audit.get("logDecisions", True),
    )
    canonical = json.dumps(data, sort_keys=True, default=str).encode()
    return SchedulerConfig(
        profiles=profiles,
        leader_election=_leader_election(data.get("leaderElection")),
        client_connection=client_config,
        server=server_config,
        bind_workers=int(_number(data.get("bindWorkers", 16), "bindWorkers", minimum=1, integer=True)),
        pod_initial_backoff=initial,
        pod_max_backoff=maximum,
        pod_max_in_unschedulable=parse_duration(data.get("podMaxInUnschedulablePodsDuration", 300),
                                                "podMaxInUnschedulablePodsDuration"),
        audit=audit_config,
        metrics=contracts,
        sources=tuple(sources),
        config_hash=hashlib.sha256(canonical).hexdigest()[:12],
    )


def load_config(path: Path, catalog: PluginCatalog) -> SchedulerConfig:
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError("", f"cannot read {path}: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError("", f"{path} is not valid YAML{where}") from None
    return parse_config(data if data is not None else {}, catalog)
