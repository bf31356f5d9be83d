"""The Prometheus source's configuration, validated.

Fields (paths relative to the source spec; `name` and `type` belong to the caller and are ignored):

- `url` (required): the Prometheus base URL, e.g. `http://prometheus.monitoring:9090` (a path prefix such
  as `/prometheus` is kept). No credentials in the URL.
- `interval` (default `10s`): seconds between refreshes; a number or a duration string ("15s", "1m").
- `timeout` (default `5s`, or `interval` when shorter; at most `30s`): per query, for the whole answer
  (connect to last byte: a server that drips its answer is cut off then, and the query fails). The refresh
  runs beside scheduling, never in it: a slow Prometheus delays fresh values
  (they age, and past their ttl the scores go without them) but never holds a pod. A timeout cuts an
  answer Prometheus has mostly computed, so it is generous: the raw GPU presets at 5,000 nodes x 8 GPUs
  took 1-6 s on a busy 2-core Prometheus (read them through `recordingRules` instead). A query front end
  such as Mimir or Thanos may need more than a plain Prometheus.
- `maxResponseBytes` (default 67108864, 64 MiB; 4096..1073741824): the largest answer read per query,
  counted after decompression; a larger one is cut off while it streams in and that query fails ("answer
  larger than maxResponseBytes"), so one bad answer cannot exhaust the scheduler's memory.
- `auth` (default none): `{bearerTokenFile: path}` or `{basicAuth: {username, passwordFile: path}}`.
  Files are read at load time (missing/empty is an error), re-read as soon as the file changes (checked
  before every query) and at least every 60 s to follow rotation.
- `headers` (default none): a mapping of extra request headers, each value a string or
  `{valueFile: path}` (a secret: read like a token file, never logged). E.g. `X-Scope-OrgID: team-a` for
  Mimir/Cortex tenancy, `THANOS-TENANT` for Thanos. Names are HTTP tokens, unique ignoring case; values
  one line of visible characters. `Authorization` (use `auth`), `Host`, `Content-Length`, `Content-Type`,
  `Transfer-Encoding`, `Connection` and `Proxy-Authorization` are refused.
- `tls` (default none, https only): `{caFile, certFile, keyFile}`: `caFile` a PEM bundle to verify the
  server with (without it the system trust store is used); `certFile` and `keyFile` (both or neither) a
  PEM client certificate and its unencrypted key for mutual TLS, checked to match at load time and read
  again for every new connection (a rotated certificate is used from the next connection on).
  Verification cannot be turned off.
- `proxyUrl` (default none): an `http://` or `https://` forward proxy for every query (an https
  Prometheus is reached through a CONNECT tunnel, still verified end to end). No credentials in it.
  Proxy environment variables (`HTTPS_PROXY`, `NO_PROXY`, ...) and `.netrc` are never read.
- `nodeLabels` (default none): labels tried first, in order, to find a series' node (by name, InternalIP,
  `kubernetes.io/hostname` label, short name/FQDN); then the built-in order of `node_names.py` (`node`,
  `kubernetes_node`, `nodename`, `hostname`, `Hostname`, `instance`, `exported_node`, `exported_instance`).
- `recordingRules` (default false): the presets read the per-node series of the recording rules in
  `deploy/recording-rules/prometheusrule.yaml` (adapters.prometheus.recording_rules) instead of aggregating
  the raw per-GPU/per-CPU series at every refresh: a query then touches one sample per node (8x fewer at
  8 GPUs a node; for node_load_per_cpu instead of a 5m rate over every CPU and mode). Install the rules
  first (a recorded series that does not exist covers no node); false queries the raw series. Custom
  queries are not affected. A recorded metric is read by one plain selector on its two record names.
- `metrics` (required, non-empty list), each:
  - `name` (required, unique): the metric name the scheduler uses.
  - `preset` or `query` (exactly one). Presets: see `presets.PRESETS` (dcgm_gpu_temp, dcgm_gpu_util,
    dcgm_gpu_engine_active, dcgm_gpu_power, node_load_per_cpu, node_cpu_utilisation, opencost_node_hourly_cost; and
    the windowed ones of docs/forecasting.md: dcgm_gpu_temp_forecast, node_cpu_utilisation_mean,
    node_cpu_utilisation_stddev, node_cpu_utilisation_peak).
  - `timestampQuery` (custom `query` only): PromQL giving each series' sample time with the same labels
    as `query`. Default `timestamp(<query>)`, allowed only when `query` is a plain series selector;
    any other query needs it, because Prometheus stamps computed results with the evaluation time.
  - `aggregation` (default: the preset's; `max` for a custom query): how a node's several series
    (e.g. 8 GPUs) become one value: `max`, `min`, `avg`, `sum`, or `last` (the newest sample).
  - `scale` (default 1): multiplies every value (after the checks below); must be > 0.
  - `allowNegative` (default false): otherwise negative raw values are dropped and counted.
  - `sentinelAbove` (default 1e15; 1e14 for DCGM presets): raw values above it are "blank" sentinels,
    dropped and counted.
  - `nodeLabels` (default: the source's): the labels tried first for this metric, instead of the source's.
  - `window` (default none): a history-aware metric (windows.py, docs/forecasting.md): `{function, range, horizon,
    quantile, step}` with `function` one of avg_over_time, max_over_time, min_over_time, stddev_over_time,
    quantile_over_time (needs `quantile`, 0-1), predict_linear (needs `horizon`), deriv; `range` the window (e.g. 15m),
    `step` a subquery's resolution. The value is the function of the query over the window; the sample time stays
    the query's. Presets that are windowed already (dcgm_gpu_temp_forecast, node_cpu_utilisation_mean/_stddev/_peak)
    refuse it. With `recordingRules`, a recorded preset is windowed over its recorded series.
  - `deviceLabels` (default none): keep the metric per device too, the device named by the first of these
    labels a series carries (e.g. `[UUID, gpu]` for DCGM: the GPU's UUID, else its index). The node value stays
    what it is (the `aggregation` over the node's devices); each device's own value is kept beside it, for
    plugins choosing one device (DRA). Label names as Prometheus spells them, at least one. Only for a DCGM
    preset (one series per GPU) or a custom query whose series carry the labels; a DCGM preset then reads the
    raw per-GPU series even with `recordingRules` (the recorded series are per node). See devices.py.
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from adapters.bounded_answer import DEFAULT_MAX_RESPONSE_BYTES, read_max_response_bytes
from adapters.http_common import (
    CALLER_KEYS,
    Credentials,
    SecretFile,
    SecretFileError,
    check_keys,
    read_auth,
    read_timeout,
    read_url,
    resolve_path,
)
from adapters.prometheus.presets import AGGREGATIONS, DEFAULT_SENTINEL, PRESETS, Aggregation
from adapters.prometheus.recording_rules import recorded_series, timestamp_record, value_record
from adapters.prometheus.windows import Window, read_window
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
DEFAULT_NODE_LABELS: tuple[str, ...] = ()  # the built-in order (node_names.BUILT_IN_LABELS) follows anyway
DEFAULT_TIMEOUT = 5.0
MAX_TIMEOUT = 30.0
_SOURCE_KEYS = {"url", "interval", "timeout", "maxResponseBytes", "auth", "headers", "tls", "proxyUrl", "nodeLabels",
                "recordingRules", "metrics", *CALLER_KEYS}
_TLS_KEYS = {"caFile", "certFile", "keyFile"}
# RFC 9110 field-name: a token.
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
# Visible ASCII, spaces and tabs inside; no CR/LF (header injection) nor other control characters.
_HEADER_VALUE = re.compile(r"^[\x21-\x7e]([\x20-\x7e\t]*[\x21-\x7e])?$")
# Set by the client itself (auth, framing) or by the connection: a configured value would fight them.
_RESERVED_HEADERS = frozenset({"authorization", "proxy-authorization", "host", "content-length", "content-type",
                               "transfer-encoding", "connection"})
_METRIC_KEYS = {"name", "preset", "query", "timestampQuery", "aggregation", "scale", "allowNegative",
                "sentinelAbove", "nodeLabels", "deviceLabels", "window"}
# A Prometheus label name: device labels are written into the presets' `by (...)` lists.
_LABEL_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
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
    # (value record, timestamp record) when the preset is read through recording rules: `query` and
    # `timestamp_query` are then those names, read together by one selector on __name__.
    recorded: tuple[str, str] | None = None
    # Labels naming a series' device, first present wins; empty: the metric is kept per node only.
    device_labels: tuple[str, ...] = ()
    # A history-aware metric (windows.py): the window its value is evaluated over (a windowed preset's or `window`).
    window: Window | None = None


@dataclass(frozen=True)
class SecretHeader:
    """A request header whose value is a secret in a file (re-read on rotation, never logged)."""

    name: str
    file: SecretFile


@dataclass(frozen=True)
class ClientCertificate:
    """Mutual TLS: a PEM certificate (chain) and its unencrypted private key."""

    cert_file: Path
    key_file: Path


@dataclass(frozen=True)
class PrometheusConfig:
    url: str
    metrics: tuple[MetricSpec, ...]
    interval: float = DEFAULT_INTERVAL
    timeout: float = DEFAULT_TIMEOUT
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES
    credentials: Credentials | None = None
    ca_file: Path | None = None
    node_labels: tuple[str, ...] = DEFAULT_NODE_LABELS
    # Extra request headers: plain (name, value) pairs, and those whose value comes from a file.
    headers: tuple[tuple[str, str], ...] = ()
    secret_headers: tuple[SecretHeader, ...] = ()
    client_certificate: ClientCertificate | None = None
    proxy_url: str | None = None
    recording_rules: bool = False


def is_plain_selector(query: str) -> bool:
    return bool(_SELECTOR.match(query))


def parse_config(spec: Mapping[str, Any], *, base_dir: Path) -> PrometheusConfig:
    spec = mapping(spec, "")
    check_keys(spec, _SOURCE_KEYS, "")
    url = read_url(spec, "").rstrip("/")
    node_labels = _node_labels(spec["nodeLabels"], "nodeLabels") if "nodeLabels" in spec else DEFAULT_NODE_LABELS
    recording_rules = read_bool(spec, "recordingRules", "", False)
    metrics: list[MetricSpec] = []
    for i, raw in enumerate(sequence(spec.get("metrics"), "metrics", non_empty=True)):
        metric = _metric(raw, field_name("metrics", i), node_labels, recording_rules)
        if any(m.name == metric.name for m in metrics):
            raise ConfigError(field_name(field_name("metrics", i), "name"), f"duplicate metric {metric.name!r}")
        metrics.append(metric)
    headers, secret_headers = _headers(spec.get("headers"), base_dir)
    ca_file, client_certificate = _tls(spec.get("tls"), base_dir, url)
    interval = read_duration(spec, "interval", "", DEFAULT_INTERVAL)
    return PrometheusConfig(
        url=url,
        metrics=tuple(metrics),
        interval=interval,
        # By default no query outlives the refresh interval it belongs to.
        timeout=read_timeout(spec, "", min(DEFAULT_TIMEOUT, interval), maximum=MAX_TIMEOUT),
        max_response_bytes=read_max_response_bytes(spec),
        credentials=read_auth(spec, "", base_dir, token_key="bearerTokenFile"),
        ca_file=ca_file,
        node_labels=node_labels,
        headers=headers,
        secret_headers=secret_headers,
        client_certificate=client_certificate,
        proxy_url=read_url(spec, "", "proxyUrl") if spec.get("proxyUrl") is not None else None,
        recording_rules=recording_rules,
    )


def _headers(raw: object, base_dir: Path) -> tuple[tuple[tuple[str, str], ...], tuple[SecretHeader, ...]]:
    plain: list[tuple[str, str]] = []
    secret: list[SecretHeader] = []
    seen: set[str] = set()
    for name, value in mapping(raw, "headers", optional=True).items():
        field = field_name("headers", name)
        if not _HEADER_NAME.match(name):
            raise ConfigError(field, "is not a valid HTTP header name")
        if name.lower() in _RESERVED_HEADERS:
            hint = "; use auth" if name.lower() == "authorization" else ""
            raise ConfigError(field, f"is set by the client and cannot be configured{hint}")
        if name.lower() in seen:
            raise ConfigError(field, "is given twice (header names ignore case)")
        seen.add(name.lower())
        if isinstance(value, str):
            if not _HEADER_VALUE.match(value):
                raise ConfigError(field, "must be one non-empty line of visible ASCII characters")
            plain.append((name, value))
            continue
        if not isinstance(value, Mapping):
            raise ConfigError(field, f"must be a string (quote a number) or {{valueFile: path}}, "
                                     f"got {type(value).__name__}")
        spec = mapping(value, field)
        check_keys(spec, {"valueFile"}, field)
        path = resolve_path(base_dir, read_str(spec, "valueFile", field, non_empty=True))
        try:
            file = SecretFile(path, kind=f"header {name} value")
        except SecretFileError as exc:
            raise ConfigError(field_name(field, "valueFile"), str(exc)) from None
        # The value itself is never shown: say what is wrong with it, not what it is.
        if not _HEADER_VALUE.match(file.value()):
            raise ConfigError(field_name(field, "valueFile"),
                              f"{path} must hold one line of visible ASCII characters")
        secret.append(SecretHeader(name, file))
    return tuple(plain), tuple(secret)


def _tls(raw: object, base_dir: Path, url: str) -> tuple[Path | None, ClientCertificate | None]:
    tls = mapping(raw, "tls", optional=True)
    check_keys(tls, _TLS_KEYS, "tls")
    if not tls:
        return None, None
    if not url.startswith("https://"):
        raise ConfigError(field_name("tls", next(iter(tls))), "is only used with an https:// url")
    files = {key: _pem_file(tls, key, base_dir) for key in _TLS_KEYS if tls.get(key) is not None}
    ca = files.get("caFile")
    if ca is not None:
        try:
            ssl.create_default_context(cafile=str(ca))
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError("tls.caFile", f"{ca} holds no usable PEM certificates: {exc}") from None
    if ("certFile" in files) != ("keyFile" in files):
        missing = "keyFile" if "certFile" in files else "certFile"
        raise ConfigError(field_name("tls", missing), "is required with tls.certFile/tls.keyFile (both or neither)")
    if "certFile" not in files:
        return ca, None
    cert = ClientCertificate(files["certFile"], files["keyFile"])
    try:
        # What the TLS stack will do at every new connection; a mismatch or an encrypted key fails here,
        # not at the first refresh. The error text names the files only (OpenSSL does not echo key bytes).
        ssl.create_default_context().load_cert_chain(str(cert.cert_file), str(cert.key_file), password=_no_password)
    except (OSError, ssl.SSLError, TypeError) as exc:
        raise ConfigError("tls.certFile", f"{cert.cert_file} with key {cert.key_file} cannot be used as a client "
                                          f"certificate (PEM, matching, key unencrypted): {exc}") from None
    return ca, cert


def _no_password() -> str:
    # Called by OpenSSL only for an encrypted key: refused, since requests has no way to pass its password.
    raise TypeError("the key is encrypted")


def _pem_file(tls: Mapping[str, Any], key: str, base_dir: Path) -> Path:
    path = resolve_path(base_dir, read_str(tls, key, "tls", non_empty=True))
    if not path.is_file():
        raise ConfigError(field_name("tls", key), f"{path} is not a readable file")
    return path


def _metric(raw: object, where: str, source_labels: tuple[str, ...], recording_rules: bool = False) -> MetricSpec:
    spec = mapping(raw, where)
    check_keys(spec, _METRIC_KEYS, where)
    name = read_str(spec, "name", where, non_empty=True)
    if ("preset" in spec) == ("query" in spec):
        raise ConfigError(where, "needs exactly one of preset or query")
    device_labels = _device_labels(spec["deviceLabels"], field_name(where, "deviceLabels")) \
        if "deviceLabels" in spec else ()
    if "preset" in spec:
        preset_name = read_str(spec, "preset", where)
        preset = PRESETS.get(preset_name)
        if preset is None:
            raise ConfigError(field_name(where, "preset"), f"unknown preset {preset_name!r}; known: "
                                                           f"{', '.join(sorted(PRESETS))}")
        if "timestampQuery" in spec:
            raise ConfigError(field_name(where, "timestampQuery"), "only applies to a custom query")
        node_labels = (_node_labels(spec["nodeLabels"], field_name(where, "nodeLabels"))
                       if "nodeLabels" in spec else source_labels)
        if device_labels and not preset.per_device:
            raise ConfigError(field_name(where, "deviceLabels"),
                              f"preset {preset_name!r} gives one series per node, none per device: per-device values "
                              f"need a DCGM preset ({', '.join(n for n, p in sorted(PRESETS.items()) if p.per_device)})"
                              f" or a custom query")
        # The rules aggregate by the built-in labels; configured nodeLabels are for the rules' owner to add. They
        # are per node: a per-device metric reads the raw series.
        recorded = recorded_series(preset_name) if recording_rules and not device_labels else None
        query, timestamp_query = recorded or preset.render(node_labels, device_labels)
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
        recorded = None
    window = PRESETS[preset_name].window if preset_name is not None else None
    if "window" in spec:
        if window is not None:
            raise ConfigError(field_name(where, "window"), f"preset {preset_name!r} is windowed already "
                                                           f"({window.describe()})")
        window = read_window(spec["window"], field_name(where, "window"))
        if recorded is not None and preset_name is not None:
            # Over the preset's recorded series: a range vector, no subquery; its recorded sample time.
            query, timestamp_query = window.apply(value_record(preset_name)), timestamp_record(preset_name)
            recorded = None
        else:
            query = window.apply(query)
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
        recorded=recorded,
        device_labels=device_labels,
        window=window,
    )


def _device_labels(value: object, field: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not value:
        raise ConfigError(field, "must be a non-empty list of label names, e.g. [UUID, gpu]")
    for i, label in enumerate(value):
        if not isinstance(label, str) or not _LABEL_NAME.match(label):
            raise ConfigError(field_name(field, i), f"must be a Prometheus label name, got {label!r}")
    if len(set(value)) != len(value):
        raise ConfigError(field, "names a label twice")
    return tuple(value)


def _node_labels(value: object, field: str) -> tuple[str, ...]:
    if (not isinstance(value, list) or not value
            or not all(isinstance(v, str) and v.strip() for v in value)):
        raise ConfigError(field, "must be a non-empty list of label names")
    return tuple(v.strip() for v in value)
