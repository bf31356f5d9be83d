"""The config file's shape, once: the JSON Schema published for editors and `check-config`, and the key sets
the loader accepts (`keys(...)`), so that the loader and the schema cannot drift apart.

The loader stays the authority on values (ranges, cross-field rules, plugin names and args, which it checks
against the plugin registry); the schema says which fields exist, their types, defaults and what they do.
Plugin args are open objects here: each plugin parses its own (`PluginSpec.parse_args`).
"""

from __future__ import annotations

import json
from typing import Any

from jsonschema import Draft202012Validator

from metrics_sched.config.durations import MAX_DURATION_SECONDS
from metrics_sched.config.model import DEFAULT_CPU_AFFINITY, EXTENSION_POINT_NAMES
from metrics_sched.config.upstream_fields import NO_EFFECT_POINTS

SCHEMA_ID = "https://metrics-sched.io/schemas/metrics-sched-config.schema.json"
JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
# Go durations as metav1.Duration writes them ("15s", "1m30s", "500ms"), or plain seconds.
GO_DURATION_PATTERN = r"^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$"

Schema = dict[str, Any]


def _obj(properties: dict[str, Schema], description: str = "", *, required: tuple[str, ...] = (),
         nullable: bool = True) -> Schema:
    """A mapping of known fields; `nullable`: an empty YAML section (null) reads as {} (the loader's `optional`)."""
    out: Schema = {"type": ["object", "null"] if nullable else "object", "additionalProperties": False,
                   "properties": properties}
    if required:
        out["required"] = list(required)
    if description:
        out["description"] = description
    return out


def _str(description: str, default: str | None = None, *, enum: tuple[str, ...] = ()) -> Schema:
    out: Schema = {"type": "string"}
    if description:
        out["description"] = description
    if enum:
        out["enum"] = list(enum)
    if default is not None:
        out["default"] = default
    return out


def _int(description: str, default: int | None = None, *, minimum: int | None = None,
         maximum: int | None = None) -> Schema:
    out: Schema = {"type": "integer", "description": description}
    if minimum is not None:
        out["minimum"] = minimum
    if maximum is not None:
        out["maximum"] = maximum
    if default is not None:
        out["default"] = default
    return out


def _num(description: str, default: float | None = None, *, minimum: float | None = None) -> Schema:
    out: Schema = {"type": "number", "description": description}
    if minimum is not None:
        out["minimum"] = minimum
    if default is not None:
        out["default"] = default
    return out


def _bool(description: str, default: bool) -> Schema:
    return {"type": "boolean", "description": description, "default": default}


def _duration(description: str, default: str) -> Schema:
    return {"description": f"{description} A Go duration ('15s', '1m30s') or seconds.", "default": default,
            "anyOf": [{"type": "string", "pattern": GO_DURATION_PATTERN},
                      {"type": "number", "minimum": 0, "maximum": MAX_DURATION_SECONDS}]}


def _list(items: Schema, description: str) -> Schema:
    return {"type": ["array", "null"], "description": description, "items": items}


_PLUGIN = _obj({
    "name": _str("Plugin name; '*' (in disabled) means every default plugin."),
    "weight": _int("Score plugins only: the plugin's weight (in multiPoint, 0 means the default weight).",
                   minimum=0, maximum=1000),
}, required=("name",), nullable=False)
_PLUGIN_SET = _obj({
    "enabled": _list(_PLUGIN, "Plugins added to the defaults (or a default's weight changed)."),
    "disabled": _list(_PLUGIN, "Default plugins removed; [{name: '*'}] removes them all."),
})
_PLUGINS = _obj(
    {point: _PLUGIN_SET for point in EXTENSION_POINT_NAMES}
    | {"multiPoint": {**_PLUGIN_SET, "description": "Enabled/disabled at every extension point the plugin "
                                                    "implements; a specific extension point takes precedence."}}
    | {point: {**_PLUGIN_SET, "description": "Accepted for upstream compatibility; no effect (warned)."}
       for point in NO_EFFECT_POINTS},
    "Plugin sets per extension point, as in KubeSchedulerConfiguration v1.")
_PLUGIN_CONFIG = _obj({
    "name": _str("The plugin these args are for."),
    "args": {"type": ["object", "null"],
             "description": "The plugin's args; upstream's apiVersion/kind wrapper is accepted and stripped. Args of "
                            "upstream plugins metrics-sched lacks are ignored with a warning."},
}, required=("name",), nullable=False)
_PERCENTAGE = _int("Share of feasible nodes to score. 0 (upstream's adaptive default) and 100 score every feasible "
                   "node; below 100 only that share (at least 100 nodes) is scored, round-robin as kube-scheduler "
                   "does, with a warning: a cooler or cheaper node outside the sample is never seen.", 0, minimum=0,
                   maximum=100)
_PROFILE = _obj({
    "schedulerName": _str("Pods with this spec.schedulerName are scheduled by this profile.", "metrics-sched"),
    "percentageOfNodesToScore": _PERCENTAGE,
    "plugins": _PLUGINS,
    "pluginConfig": _list(_PLUGIN_CONFIG, "Per-plugin args."),
    "shadow": _bool("Score pods of this schedulerName and record the decision without binding.", False),
    "opportunisticBatching": _bool("Pods of one template (owner, spec, labels) reuse the previous such pod's cycle "
                                   "and re-evaluate only the nodes that changed since: the same decisions, "
                                   "faster (kube-scheduler's OpportunisticBatching, made exact).", True),
})
_LEADER_ELECTION = _obj({
    "leaderElect": _bool("Run leader election (one active replica).", True),
    "leaseDuration": _duration("How long a lease is valid without renewal.", "15s"),
    "renewDeadline": _duration("How long the leader keeps retrying a renewal.", "10s"),
    "retryPeriod": _duration("Wait between attempts.", "2s"),
    "resourceLock": _str("Only leases.", "leases", enum=("leases",)),
    "resourceName": _str("The Lease's name.", "metrics-sched"),
    "resourceNamespace": _str("The Lease's namespace; unset: the pod's own namespace in a cluster, else kube-system."),
}, "Leader election (component-base LeaderElectionConfiguration).")
_SERVER = _obj({
    "bindAddress": _str("Listen address.", "0.0.0.0"),
    "port": _int("Listen port (kube-scheduler's secure port).", 10259, minimum=1, maximum=65535),
    "insecure": _bool("Plain HTTP without authentication, for local use: only on a loopback bindAddress.", False),
    "allowInsecureNonLoopback": _bool("With insecure: allow a non-loopback bindAddress (anyone who can connect "
                                      "reads every endpoint).", False),
    "tlsCertFile": _str("Serving certificate (PEM, with its chain); re-read when it changes. With "
                        "tlsPrivateKeyFile; neither: a self-signed pair in certDir.", ""),
    "tlsPrivateKeyFile": _str("Its private key (PEM).", ""),
    "certDir": _str("Where the self-signed pair is written (reused when there); empty: a private temporary "
                    "directory. Clients verify with its ca.crt.", ""),
    "authorizationAlwaysAllowPaths": _list(_str("A path, or a prefix ending in '*'."),
                                           "Paths served without authentication (default /healthz, /readyz, "
                                           "/livez); every other path needs a bearer token (TokenReview) allowed "
                                           "`get` on it (SubjectAccessReview)."),
    "authenticationTokenCacheTTL": _duration("How long a TokenReview answer (either) is cached.", "10s"),
    "authorizationCacheAuthorizedTTL": _duration("How long an allowing SubjectAccessReview is cached.", "10s"),
    "authorizationCacheUnauthorizedTTL": _duration("How long a denying SubjectAccessReview is cached.", "10s"),
}, "The HTTPS endpoint (/healthz /readyz /livez /metrics /decisions /sources /values /status /debug).")

_CLIENT_CONNECTION = _obj({
    "kubeconfig": _str("kubeconfig file (the --kubeconfig flag wins); empty: the in-cluster service account.", ""),
    "qps": _num("Client-side request rate limit; 0: none.", 0, minimum=0),
    "burst": _int("Client-side burst; 0: none.", 0, minimum=0),
    "contentType": _str("Only application/json is spoken; protobuf is accepted with a warning and JSON used.",
                        "application/json"),
    "acceptContentTypes": _str("Accepted with a warning unless JSON; JSON is used.", ""),
    "watchReadTimeout": _duration("A watch with no data for this long is reconnected.", "60s"),
}, "The API client (component-base ClientConnectionConfiguration, plus watchReadTimeout).")
_CONTRACT = _obj({
    "ttl": _duration("A value stays usable this long after it was fetched.", "60s"),
    "maxAge": _duration("The measurement itself may be at most this old.", "120s"),
    "onMissing": _str("What a missing value means.", "neutral", enum=("neutral", "deny", "lowest")),
})
_RULE = _obj({
    "name": _str("The eviction reason (a label value)."),
    "metric": _str("A telemetry metric, e.g. gpu_temperature_max."),
    "above": _num("Bad while the fresh value is above this."),
    "aboveQuantile": _num("Bad while above the cluster's quantile (0-1) of the metric."),
    "for": _duration("For this long in a row.", "300s"),
}, required=("name", "metric"), nullable=False)
_REBALANCE = _obj({
    "enabled": _bool("Run the rebalancer in the scheduler (leader only).", False),
    "interval": _duration("Between passes.", "60s"),
    "dryRun": _bool("Record, never evict.", True),
    "rules": _list(_RULE, "What makes a node bad."),
    "margin": _num("Points (0-100) a move must gain.", 10, minimum=0),
    "limits": _obj({
        "perNode": _int("Evictions per node per interval.", 1, minimum=1),
        "perNamespace": _int("Evictions per namespace per interval.", 2, minimum=1),
        "cluster": _int("Evictions per interval.", 5, minimum=1),
        "cooldown": _duration("A pod's owner is not evicted again meanwhile.", "1800s"),
    }),
    "podSelector": _obj({
        "matchLabels": {"type": ["object", "null"], "additionalProperties": {"type": "string"}},
        "matchExpressions": _list(_obj({
            "key": _str("A label key."),
            "operator": _str("", enum=("In", "NotIn", "Exists", "DoesNotExist")),
            "values": _list(_str(""), "Some for In/NotIn, none for Exists/DoesNotExist."),
        }, required=("key", "operator"), nullable=False), "Requirements, ANDed with matchLabels."),
    }, "A LabelSelector: pods it matches are movable besides those this scheduler placed."),
    "maxPriority": {"type": ["integer", "null"], "description": "Pods above this priority are never evicted."},
    "evictLocalStoragePods": _bool("Move pods with an emptyDir that is not memory-backed (their data is lost).",
                                   False),
}, "The rebalancer.")
_UPSTREAM_ONLY = "Accepted for KubeSchedulerConfiguration compatibility."

_TOP: Schema = _obj({
    "apiVersion": _str("", "metrics-sched.io/v1alpha1",
                       enum=("metrics-sched.io/v1alpha1", "kubescheduler.config.k8s.io/v1")),
    "kind": _str("", "MetricsSchedulerConfiguration", enum=("MetricsSchedulerConfiguration",
                                                            "KubeSchedulerConfiguration")),
    "parallelism": _int("Bind workers (upstream: parallelism of the scheduling algorithm). Same as bindWorkers.",
                        64, minimum=1, maximum=128),
    "bindWorkers": _int("Concurrent binds.", 64, minimum=1, maximum=128),
    "leaderElection": _LEADER_ELECTION,
    "clientConnection": _CLIENT_CONNECTION,
    "enableProfiling": _bool("Serve /debug/pprof and /debug/threads. Off by default here (upstream: on) until the "
                             "metrics endpoint is authenticated.", False),
    "enableContentionProfiling": _bool(f"{_UPSTREAM_ONLY} No effect (warned when true).", False),
    "cpuAffinity": _str("one: the process keeps to one of the CPUs it may use (Python runs one thread at a time; "
                        "without the GIL changing CPU the core decides ~20% faster and a pod costs less CPU end "
                        "to end). all: the OS places its threads.", DEFAULT_CPU_AFFINITY, enum=("one", "all")),
    "percentageOfNodesToScore": _PERCENTAGE,
    "podInitialBackoffSeconds": _duration("First retry delay of an unschedulable pod (upstream: integer seconds).",
                                          "1s"),
    "podMaxBackoffSeconds": _duration("Longest retry delay (upstream: integer seconds).", "10s"),
    "podMaxInUnschedulablePodsDuration": _duration("Parked pods are retried after this long.", "300s"),
    "profiles": _list(_PROFILE, "Scheduling profiles; none: one default profile."),
    "extenders": {"type": ["array", "null"], "maxItems": 0,
                  "description": "Scheduler extenders are not supported; only an empty list is accepted."},
    "delayCacheUntilActive": _bool(f"{_UPSTREAM_ONLY} No effect (warned when true): the cache fills at start.",
                                   False),
    "replacesDefaultScheduler": _bool("Allow a profile named default-scheduler (no kube-scheduler runs).", False),
    "server": _SERVER,
    "audit": _obj({
        "ringSize": _int("Decisions kept.", 10_000, minimum=1, maximum=50_000),
        "topCandidates": _int("Candidates per decision record.", 5, minimum=1, maximum=20),
        "annotatePods": _bool("Annotate placed pods with their decision.", True),
        "logDecisions": _bool("Log each decision.", True),
        "file": _obj({
            "path": _str("Every decision record as a JSON line in this file."),
            "maxBytes": _int("Rotated past this size.", 100 * 2**20, minimum=4096),
            "backups": _int("Rotated files kept.", 3, minimum=0, maximum=100),
        }, "A rotating JSONL sink of decisions (for `metrics-sched replay`).", required=("path",)),
    }, "The decision audit."),
    "cacheCompareInterval": _duration("The cache comparer's period; 0: only on SIGUSR2.", "300s"),
    "metrics": {"type": ["object", "null"], "additionalProperties": _CONTRACT,
                "description": "Freshness contract per telemetry metric."},
    "sources": _list({"type": "object", "required": ["name", "type"],
                      "properties": {"name": {"type": "string"}, "type": {"type": "string"}},
                      "description": "A telemetry source; its other fields are its type's."},
                     "Telemetry sources."),
    "rebalance": _REBALANCE,
}, "metrics-sched configuration: KubeSchedulerConfiguration v1 plus metrics-sched's sections.", nullable=False)


def json_schema() -> Schema:
    """The JSON Schema (2020-12) of the config file."""
    return {"$schema": JSON_SCHEMA_DIALECT, "$id": SCHEMA_ID, "title": "metrics-sched configuration", **_TOP}


def render() -> str:
    """The schema as shipped (deploy/metrics-sched-config.schema.json) and printed by `config schema`."""
    return json.dumps(json_schema(), indent=2, ensure_ascii=False) + "\n"


def keys(*path: str) -> frozenset[str]:
    """The fields of the object at `path` ("profiles" and "pluginConfig" step into their items, "plugins" into
    a plugin set by point name): the loader's `check_keys` sets."""
    node = _TOP
    for step in path:
        node = node["properties"][step]
        while "items" in node:
            node = node["items"]
    return frozenset(node["properties"])


def schema_errors(data: object) -> list[str]:
    """What the schema refuses in a parsed config file, each as `field: message` (fields as the loader names
    them: `profiles[0].plugins.score`), in document order."""
    validator = Draft202012Validator(json_schema())
    out = []
    for error in sorted(validator.iter_errors(data), key=lambda e: [str(p) for p in e.absolute_path]):
        path, message = list(error.absolute_path), error.message
        if error.validator == "additionalProperties" and isinstance(error.instance, dict):
            # Name the unknown key itself, as the loader does, rather than the mapping holding it.
            known = error.schema.get("properties", {}) if isinstance(error.schema, dict) else {}
            path.append(next(str(k) for k in error.instance if k not in known))
            message = "unknown field"
        out.append(f"{_field(path)}: {message}" if path else message)
    return out


def _field(path: list[str | int]) -> str:
    out = ""
    for step in path:
        out = f"{out}[{step}]" if isinstance(step, int) else (f"{out}.{step}" if out else step)
    return out
