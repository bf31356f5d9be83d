"""Ready-made mappings for inventories the scheduler usually meets. A user's spec is laid over a preset:
its top-level keys win, and `fields`, `pagination`, `params` and `match` are merged key by key."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class CmdbPreset:
    spec: dict[str, Any]
    token_scheme: str = "Bearer"  # the Authorization scheme when auth.scheme is not given
    merged_keys: tuple[str, ...] = field(default=("fields", "pagination", "params", "match"))


PRESETS: dict[str, CmdbPreset] = {
    # GET /api/dcim/devices/ -> {count, next, previous, results: [{name, custom_fields: {...}}]}.
    # NetBox caps a page at MAX_PAGE_SIZE (1000 by default) and answers `next` as an absolute URL. Pages of
    # that size: a refresh at 5,000 nodes is 5 requests; a NetBox with a lower cap answers smaller pages and
    # `next` links, which are followed the same way.
    "netbox": CmdbPreset(
        spec={
            "itemsPath": "results",
            "itemsMode": "list",
            "pagination": {"type": "next", "nextPath": "next", "limitParam": "limit", "pageSize": 1000},
            "nodeKey": "name",
            "fields": {
                "hourly_cost": {"path": "custom_fields.hourly_cost"},
                "maintenance": {"path": "custom_fields.maintenance"},
            },
        },
        token_scheme="Token",  # NetBox v1 tokens; 4.5+ `nbt_` tokens take auth.scheme: Bearer
    ),
    # GET /model/assets?window=1h -> {code, data: [{<asset key>: {type, properties: {name}, minutes,
    # totalCost, ...}}]}. Assets other than nodes (disks, load balancers) are skipped by `match`.
    # totalCost covers the asset's `minutes` inside the window, so $/h = totalCost * 60 / minutes.
    "opencost_assets": CmdbPreset(
        spec={
            "itemsPath": "data.0",
            "itemsMode": "dictValues",
            "params": {"window": "1h"},
            "match": {"type": "Node"},
            "pagination": {"type": "none"},
            "nodeKey": "properties.name",
            "fields": {
                "node_hourly_cost": {"path": "totalCost", "divideByPath": "minutes", "scale": 60},
            },
        },
    ),
}


def apply_preset(preset: CmdbPreset, spec: dict[str, Any]) -> dict[str, Any]:
    merged = {**preset.spec, **spec}
    for key in preset.merged_keys:
        base, override = preset.spec.get(key), spec.get(key)
        if isinstance(base, dict) and isinstance(override, dict):
            merged[key] = {**base, **override}
    return merged
