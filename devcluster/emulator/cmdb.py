"""The NetBox-shaped CMDB: `/api/dcim/devices/` pages (DRF limit/offset pagination) and token auth."""

from __future__ import annotations

import hmac
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlencode

from devcluster.emulator.values import NodeView

DEFAULT_LIMIT = 50
MAX_LIMIT = 1000
NETBOX_VERSION = "4.1.0"
DEVICES_PATH = "/api/dcim/devices/"


def authorized(header: str | None, token: str | None) -> bool:
    """NetBox takes `Token <t>`; `Bearer <t>` is accepted too. token=None means auth is not enforced."""
    if token is None:
        return True
    scheme, _, value = (header or "").strip().partition(" ")
    if scheme.lower() not in ("token", "bearer") or not value.strip():
        return False
    return hmac.compare_digest(value.strip().encode(), token.encode())


def paging(query: Mapping[str, list[str]]) -> tuple[int, int]:
    """(limit, offset) like DRF: junk falls back to the defaults, limit=0 means the maximum page."""
    limit = _int(query, "limit", DEFAULT_LIMIT)
    limit = MAX_LIMIT if limit <= 0 else min(limit, MAX_LIMIT)
    return limit, max(0, _int(query, "offset", 0))


def _int(query: Mapping[str, list[str]], key: str, default: int) -> int:
    try:
        return int(query[key][-1])
    except (KeyError, IndexError, ValueError):
        return default


def device(view: NodeView, fixed: float | None) -> dict[str, Any]:
    record_id, reg, values = view.id, view.registration, view.values
    role = "gpu-node" if reg.gpus else "cpu-node"
    status = "offline" if values.maintenance else "active"
    return {
        "id": record_id,
        "url": f"/api/dcim/devices/{record_id}/",
        "name": reg.name,
        "display": reg.name,
        "device_type": {"model": reg.instance_type, "slug": reg.instance_type.lower(),
                        "manufacturer": {"name": "NVIDIA" if reg.gpus else "Generic"}},
        "role": {"name": role, "slug": role},
        "site": {"name": reg.zone, "slug": reg.zone},
        "rack": {"name": values.rack},
        "status": {"value": status, "label": status.capitalize()},
        "primary_ip": {"address": f"{reg.ip}/32"},
        "custom_fields": {
            "hourly_cost": values.hourly_cost if fixed is None else fixed,
            "gpu_hourly_cost": values.gpu_hourly_cost if fixed is None else fixed,
            "maintenance": values.maintenance,
            "rack": values.rack,
            "spot": values.spot,
        },
    }


def page_links(base_url: str, names: Sequence[str], count: int, limit: int,
               offset: int) -> tuple[str | None, str | None]:
    def link(new_offset: int) -> str:
        params: list[tuple[str, str | int]] = [("name", n) for n in names]
        params.append(("limit", limit))
        if new_offset > 0:
            params.append(("offset", new_offset))
        return f"{base_url}{DEVICES_PATH}?{urlencode(params)}"

    next_url = link(offset + limit) if offset + limit < count else None
    previous = link(max(0, offset - limit)) if offset > 0 else None
    return next_url, previous


def page(results: list[dict[str, Any]], *, count: int, next_url: str | None,
         previous: str | None) -> dict[str, Any]:
    return {"count": count, "next": next_url, "previous": previous, "results": results}
