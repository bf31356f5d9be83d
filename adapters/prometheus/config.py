"""The Prometheus source's configuration, validated.

Fields (paths relative to the source spec; `name` and `type` belong to the caller and are ignored):

- `url` (required): the Prometheus base URL, e.g. `http://prometheus.monitoring:9090` (a path prefix such
  as `/prometheus` is kept). No credentials in the URL.
- `interval` (default `10s`): seconds between refreshes; a number or a duration string ("15s", "1m").
- `timeout` (default `2s`, at most 2 s): per query.
- `auth` (default none): `{bearerTokenFile: path}` or `{basicAuth: {username, passwordFile: path}}`.
  Files are read at load time (missing/empty is an error) and re-read every 60 s to follow rotation.
- `tls` (default none): `{caFile: path}`, a PEM bundle to verify an https server with; without it the
  system trust store is used. Verification cannot be turned off.
- `nodeLabels` (default `[node, hostname, Hostname, nodename, instance]`): labels tried in order to find
  a series' node. `instance` loses its `:port`; a value that is a node's InternalIP maps to that node.
- `metrics` (required, non-empty list), each:
  - `name` (required, unique): the metric name the scheduler uses.
  - `preset` or `query` (exactly one). Presets: see `presets.PRESETS` (dcgm_gpu_temp, dcgm_gpu_util,
    dcgm_gpu_power, node_load_per_cpu, node_cpu_utilisation, opencost_node_hourly_cost).
  - `timestampQuery` (custom `query` only): PromQL giving each series' sample time with the same labels
    as `query`. Default `timestamp(<query>)`, allowed only when `query` is a plain series selector;
    any other query needs it, because Prometheus stamps computed results with the evaluation time.
  - `aggregation` (default: the preset's; `max` for a custom query): how a node's several series
    (e.g. 8 GPUs) become one value: `max`, `min`, `avg`, `sum`, or `last` (the newest sample).
  - `scale` (default 1): multiplies every value (after the checks below); must be > 0.
  - `allowNegative` (default false): otherwise negative raw values are dropped and counted.
  - `sentinelAbove` (default 1e15; 1e14 for DCGM presets): raw values above it are "blank" sentinels,
    dropped and counted.
  - `nodeLabels` (default: the source's): overrides the label order for this metric.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from adapters.http_common import CALLER_KEYS, Credentials, check_keys, read_auth, read_timeout, read_tls, read_url
from adapters.prometheus.presets import AGGREGATIONS, DEFAULT_SENTINEL, PRESETS, Aggregation
from metrics_sched.config import ConfigError
from metrics_sched.config.reader import (
    field_name,
    mapping,
    read_bool,
    read_choice,
    read_duration,
    read_float,
    read_str,
    sequence,
)

DEFAULT_INTERVAL = 10.0
DEFAULT_NODE_LABELS = ("node", "hostname", "Hostname", "nodename", "instance")
_SOURCE_KEYS = {"url", "interval", "timeout", "auth", "tls", "nodeLabels", "metrics", *CALLER_KEYS}
_METRIC_KEYS = {"name", "preset", "query", "timestampQuery", "aggregation", "scale", "allowNegative",
                "sentinelAbove", "nodeLabels"}
# A metric name and/or a {...} of matchers (quoted values may hold braces), nothing else.
_SELECTOR = re.compile(r'^\s*(?=[A-Za-z_:{])(?:[A-Za-z_:][A-Za-z0-9_:]*)?\s*(?:\{(?:[^{}"]|"(?:[^"\\]|\\.)*")*\})?\s*$')


@dataclass(frozen=True)
class MetricSpec:
    name: str
    query: str
    timestamp_query: str
    aggregation: Aggregation
    node_labels: tuple[str, ...]
    scale: float = 1.0
    allow_negative: bool = False
    sentinel_above: float = DEFAULT_SENTINEL
    preset: str | None = None


@dataclass(frozen=True)
class PrometheusConfig:
    url: str
    metrics: tuple[MetricSpec, ...]
    interval: float = DEFAULT_INTERVAL
    timeout: float = 2.0
    credentials: Credentials | None = None
    ca_file: Path | None = None
    node_labels: tuple[str, ...] = DEFAULT_NODE_LABELS


def is_plain_selector(query: str) -> bool:
    return bool(_SELECTOR.match(query))


def parse_config(spec: Mapping[str, Any], *, base_dir: Path) -> PrometheusConfig:
    spec = mapping(spec, "")
    check_keys(spec, _SOURCE_KEYS, "")
    url = read_url(spec, "").rstrip("/")
    node_labels = _node_labels(spec.get("nodeLabels", list(DEFAULT_NODE_LABELS)), "nodeLabels")
    metrics: list[MetricSpec] = []
    for i, raw in enumerate(sequence(spec.get("metrics"), "metrics", non_empty=True)):
        metric = _metric(raw, field_name("metrics", i), node_labels)
        if any(m.name == metric.name for m in metrics):
            raise ConfigError(field_name(field_name("metrics", i), "name"), f"duplicate metric {metric.name!r}")
        metrics.append(metric)
    return PrometheusConfig(
        url=url,
        metrics=tuple(metrics),
        interval=read_duration(spec, "interval", "", DEFAULT_INTERVAL),
        timeout=read_timeout(spec, ""),
        credentials=read_auth(spec, "", base_dir, token_key="bearerTokenFile"),
        ca_file=read_tls(spec, "", base_dir, url),
        node_labels=node_labels,
    )


def _metric(raw: object, where: str, source_labels: tuple[str, ...]) -> MetricSpec:
    spec = mapping(raw, where)
    check_keys(spec, _METRIC_KEYS, where)
    name = read_str(spec, "name", where, non_empty=True)
    if ("preset" in spec) == ("query" in spec):
        raise ConfigError(where, "needs exactly one of preset or query")
    if "preset" in spec:
        preset_name = read_str(spec, "preset", where)
        preset = PRESETS.get(preset_name)
        if preset is None:
            raise ConfigError(field_name(where, "preset"), f"unknown preset {preset_name!r}; known: "
                                                           f"{', '.join(sorted(PRESETS))}")
        if "timestampQuery" in spec:
            raise ConfigError(field_name(where, "timestampQuery"), "only applies to a custom query")
        query, timestamp_query = preset.query, preset.timestamp_query
        aggregation, sentinel = preset.aggregation, preset.sentinel_above
    else:
        preset_name = None
        query = read_str(spec, "query", where, non_empty=True)
        if "timestampQuery" in spec:
            timestamp_query = read_str(spec, "timestampQuery", where).strip()
        elif is_plain_selector(query):
            timestamp_query = f"timestamp({query})"
        else:
            raise ConfigError(
                field_name(where, "timestampQuery"),
                "is required when query is not a plain series selector: Prometheus stamps computed results "
                "with the evaluation time, so give e.g. timestamp(<input selector>) with the same labels",
            )
        aggregation, sentinel = "max", DEFAULT_SENTINEL
    if "aggregation" in spec:
        aggregation = read_choice(spec, "aggregation", where, AGGREGATIONS)
    return MetricSpec(
        name=name,
        query=query,
        timestamp_query=timestamp_query,
        aggregation=aggregation,
        node_labels=(_node_labels(spec["nodeLabels"], field_name(where, "nodeLabels"))
                     if "nodeLabels" in spec else source_labels),
        scale=read_float(spec, "scale", where, 1.0, positive=True),
        allow_negative=read_bool(spec, "allowNegative", where, False),
        sentinel_above=read_float(spec, "sentinelAbove", where, sentinel, positive=True),
        preset=preset_name,
    )


def _node_labels(value: object, field: str) -> tuple[str, ...]:
    if (not isinstance(value, list) or not value
            or not all(isinstance(v, str) and v.strip() for v in value)):
        raise ConfigError(field, "must be a non-empty list of label names")
    return tuple(v.strip() for v in value)
