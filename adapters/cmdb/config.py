"""The CMDB source's configuration, validated: a declarative mapping from any JSON inventory/cost API.

Fields (paths relative to the source spec; `name` and `type` belong to the caller and are ignored):

- `preset` (default none): `netbox` or `opencost_assets` (see `adapters.cmdb.presets`); the spec is laid
  over it, with `fields`, `pagination`, `params` and `match` merged key by key.
- `url` (required): the collection's URL, e.g. `https://netbox.example/api/dcim/devices/`. No credentials
  in it. Pages are only ever requested from this URL's scheme, host and port.
- `params` (default `{}`): extra query parameters for the first request (and every page with `offset`
  pagination), e.g. `{window: 1h}` or `{role: gpu-node}`; string values.
- `interval` (default `60s`): seconds between refreshes.
- `timeout` (default `2s`, at most 2 s): per HTTP request, the whole answer (connect to last byte).
- `maxResponseBytes` (default 67108864, 64 MiB; 4096..1073741824): the largest answer (one page) read,
  counted after decompression; a larger one is cut off while it streams in and the refresh fails ("answer
  larger than maxResponseBytes"), so one bad answer cannot exhaust the scheduler's memory.
- `retries` (default 3, 0..5): extra attempts per request after a connection error, timeout or 5xx, with
  jittered exponential backoff (0.25 s doubling, at most 2 s). 4xx is never retried.
- `auth` (default none): `{tokenFile: path, scheme: Token|Bearer}` (scheme default: `Token` for netbox,
  else `Bearer`) or `{basicAuth: {username, passwordFile: path}}`. Files are re-read every 60 s.
- `tls` (default none): `{caFile: path}` to verify an https server with a private CA. Verification
  cannot be turned off.
- `itemsPath` (default `""`, the document itself): dotted path to the items, e.g. `results`, `data.0`
  (integer segments index lists; negative ones count from the end).
- `itemsMode` (default `list`): `list`, or `dictValues` when the path holds an object whose values are
  the items (OpenCost's `{<asset key>: asset}`).
- `match` (default `{}`): `{dotted.path: value}`; items whose values differ are skipped (not counted).
- `pagination` (default `{type: none}`):
  - `type`: `none`; `next` (a next-page URL in the body at `nextPath`, NetBox/DRF); `link` (RFC 8288
    `Link: <...>; rel="next"` header, ServiceNow); `offset` (`offsetParam` grows by `pageSize` until a
    page has fewer than `pageSize` items: `pageSize` must not exceed the server's own maximum).
  - `nextPath` (default `next`), `limitParam` (default `limit`; sent with `pageSize` on the first
    request of every type but none; empty string: not sent), `offsetParam` (default `offset`),
    `pageSize` (default 500, 1..10000).
- `maxPages` (default 100, 1..10000): a safety cap; a refresh that hits it keeps what it has and reports
  `truncated` in the source's health (`extra.truncated` in /sources).
- `nodeKey` (required): dotted path to the node name in an item, e.g. `name`, `properties.name`. Matched
  exactly, then lower-cased (Kubernetes node names are lower case).
- `fields` (required, non-empty): `{metric_name: spec}`, spec either a dotted path string or
  `{path, scale (default 1, > 0), divideByPath (default none), allowNegative (default false)}`.
  value = field * scale [/ divisor]. Booleans give 1.0/0.0, numeric strings are accepted; null is
  counted as `missing`, NaN/Infinity tokens as `nan`/`inf`.
- `timestampPath` (default none: the time the page was received): dotted path to the item's own time,
  RFC 3339 or unix seconds.
- `circuitBreaker` (default `{failureThreshold: 3, coolDown: 30s, maxCoolDown: 5m}`): after that many
  consecutive failed refreshes no request is made for `coolDown`, doubling after each failed probe up
  to `maxCoolDown`. Its state shows in /sources as the source's `breaker`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from adapters.bounded_answer import DEFAULT_MAX_RESPONSE_BYTES, read_max_response_bytes
from adapters.cmdb.paths import ItemsMode, split_path
from adapters.cmdb.presets import PRESETS, apply_preset
from adapters.http_common import CALLER_KEYS, Credentials, check_keys, read_auth, read_timeout, read_tls, read_url
from metrics_sched.config import ConfigError
from metrics_sched.config.numbers import finite_number
from metrics_sched.config.reader import (
    field_name,
    mapping,
    read_bool,
    read_choice,
    read_duration,
    read_float,
    read_int,
    read_str,
)

PaginationType = Literal["none", "next", "link", "offset"]
_PAGINATION_TYPES: tuple[PaginationType, ...] = ("none", "next", "link", "offset")
_ITEMS_MODES: tuple[ItemsMode, ...] = ("list", "dictValues")
_KEYS = {"preset", "url", "params", "interval", "timeout", "maxResponseBytes", "retries", "auth", "tls", "itemsPath",
         "itemsMode", "match", "pagination", "maxPages", "nodeKey", "fields", "timestampPath", "circuitBreaker",
         *CALLER_KEYS}
_SCHEMES = ("Token", "Bearer")


@dataclass(frozen=True)
class FieldSpec:
    path: tuple[str, ...]
    scale: float = 1.0
    divide_by: tuple[str, ...] | None = None
    allow_negative: bool = False


@dataclass(frozen=True)
class Pagination:
    type: PaginationType = "none"
    next_path: tuple[str, ...] = ("next",)
    limit_param: str = "limit"
    offset_param: str = "offset"
    page_size: int = 500


@dataclass(frozen=True)
class BreakerConfig:
    failure_threshold: int = 3
    cool_down: float = 30.0
    max_cool_down: float = 300.0


@dataclass(frozen=True)
class CmdbConfig:
    url: str
    node_key: tuple[str, ...]
    fields: dict[str, FieldSpec]
    params: dict[str, str] = field(default_factory=dict)
    interval: float = 60.0
    timeout: float = 2.0
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES
    retries: int = 3
    credentials: Credentials | None = None
    ca_file: Path | None = None
    items_path: tuple[str, ...] = ()
    items_mode: ItemsMode = "list"
    match: dict[tuple[str, ...], object] = field(default_factory=dict)
    pagination: Pagination = Pagination()
    max_pages: int = 100
    timestamp_path: tuple[str, ...] | None = None
    breaker: BreakerConfig = BreakerConfig()
    preset: str | None = None


def parse_config(spec: Mapping[str, Any], *, base_dir: Path) -> CmdbConfig:
    spec = dict(mapping(spec, ""))
    check_keys(spec, _KEYS, "")
    preset_name = spec.get("preset")
    token_scheme = "Bearer"
    if preset_name is not None:
        preset = PRESETS.get(preset_name) if isinstance(preset_name, str) else None
        if preset is None:
            raise ConfigError("preset", f"unknown preset {preset_name!r}; known: {', '.join(sorted(PRESETS))}")
        for key in preset.merged_keys:
            if key in spec and spec[key] is not None:
                mapping(spec[key], key)  # a non-mapping override is reported as the user wrote it
        spec = apply_preset(preset, spec)
        token_scheme = preset.token_scheme
    url = read_url(spec, "")
    node_key = read_str(spec, "nodeKey", "", non_empty=True)
    timestamp_path = read_str(spec, "timestampPath", "").strip() if spec.get("timestampPath") is not None else None
    return CmdbConfig(
        url=url,
        node_key=split_path(node_key),
        fields=_fields(spec.get("fields")),
        params=_params(spec.get("params") or {}),
        interval=read_duration(spec, "interval", "", 60.0),
        timeout=read_timeout(spec, ""),
        max_response_bytes=read_max_response_bytes(spec),
        retries=read_int(spec, "retries", "", 3, minimum=0, maximum=5),
        credentials=read_auth(spec, "", base_dir, token_key="tokenFile", schemes=_SCHEMES,
                              default_scheme=token_scheme),
        ca_file=read_tls(spec, "", base_dir, url),
        items_path=split_path(read_str(spec, "itemsPath", "", "")),
        items_mode=read_choice(spec, "itemsMode", "", _ITEMS_MODES, "list"),
        match=_match(spec.get("match") or {}),
        pagination=_pagination(spec.get("pagination") or {}),
        max_pages=read_int(spec, "maxPages", "", 100, minimum=1, maximum=10_000),
        timestamp_path=split_path(timestamp_path) if timestamp_path else None,
        breaker=_breaker(spec.get("circuitBreaker") or {}),
        preset=preset_name,
    )


def _fields(raw: object) -> dict[str, FieldSpec]:
    if raw is None:
        raise ConfigError("fields", "is required")
    fields = mapping(raw, "fields")
    if not fields:
        raise ConfigError("fields", "must name at least one metric")
    out: dict[str, FieldSpec] = {}
    for metric, value in fields.items():
        where = field_name("fields", metric)
        if not metric.strip():
            raise ConfigError(where, "metric name must not be empty")
        if isinstance(value, str):
            value = {"path": value}
        spec = mapping(value, where)
        check_keys(spec, {"path", "scale", "divideByPath", "allowNegative"}, where)
        path = read_str(spec, "path", where, non_empty=True)
        divide_by = spec.get("divideByPath")
        if divide_by is not None and (not isinstance(divide_by, str) or not divide_by.strip()):
            raise ConfigError(field_name(where, "divideByPath"), "must be a non-empty dotted path")
        out[metric.strip()] = FieldSpec(
            path=split_path(path),
            scale=read_float(spec, "scale", where, 1.0, positive=True),
            divide_by=split_path(divide_by) if divide_by else None,
            allow_negative=read_bool(spec, "allowNegative", where, False),
        )
    return out


def _params(raw: object) -> dict[str, str]:
    params = mapping(raw, "params")
    out: dict[str, str] = {}
    for key, value in params.items():
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise ConfigError(field_name("params", key), "must be a string or number")
        if not isinstance(value, str):
            finite_number(value, field_name("params", key))  # `.nan` would be sent as "nan"
        out[key] = str(value)
    return out


def _match(raw: object) -> dict[tuple[str, ...], object]:
    match = mapping(raw, "match")
    for key, value in match.items():
        if not key.strip():
            raise ConfigError("match", "paths must not be empty")
        if isinstance(value, Mapping | list):
            raise ConfigError(field_name("match", key), "must be a scalar (string, number, boolean or null)")
        if isinstance(value, int | float) and not isinstance(value, bool):
            finite_number(value, field_name("match", key))  # NaN equals nothing: every item would be skipped
    return {split_path(key): value for key, value in match.items()}


def _pagination(raw: object) -> Pagination:
    spec = mapping(raw, "pagination")
    where = "pagination"
    check_keys(spec, {"type", "nextPath", "limitParam", "offsetParam", "pageSize"}, where)
    defaults = Pagination()
    next_path = read_str(spec, "nextPath", where, "next", non_empty=True)
    limit_param = spec.get("limitParam", defaults.limit_param)
    if limit_param is None:
        limit_param = ""
    if not isinstance(limit_param, str):
        raise ConfigError(field_name(where, "limitParam"), "must be a string (empty: do not send a limit)")
    pagination = Pagination(
        type=read_choice(spec, "type", where, _PAGINATION_TYPES, "none"),
        next_path=split_path(next_path),
        limit_param=limit_param.strip(),
        offset_param=read_str(spec, "offsetParam", where, defaults.offset_param).strip(),
        page_size=read_int(spec, "pageSize", where, defaults.page_size, minimum=1, maximum=10_000),
    )
    if pagination.type == "offset" and not (pagination.offset_param and pagination.limit_param):
        raise ConfigError(where, "offset pagination needs offsetParam and limitParam")
    return pagination


def _breaker(raw: object) -> BreakerConfig:
    spec = mapping(raw, "circuitBreaker")
    where = "circuitBreaker"
    check_keys(spec, {"failureThreshold", "coolDown", "maxCoolDown"}, where)
    defaults = BreakerConfig()
    cool_down = read_duration(spec, "coolDown", where, defaults.cool_down)
    max_cool_down = read_duration(spec, "maxCoolDown", where, max(defaults.max_cool_down, cool_down))
    if max_cool_down < cool_down:
        raise ConfigError(field_name(where, "maxCoolDown"), "must be at least coolDown")
    return BreakerConfig(
        failure_threshold=read_int(spec, "failureThreshold", where, defaults.failure_threshold, minimum=1,
                                   maximum=100),
        cool_down=cool_down,
        max_cool_down=max_cool_down,
    )
