"""OpenCost's `/model/assets` shape: `data` is a list holding one dict keyed by asset key."""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from typing import Any

from devcluster.emulator.errors import RequestError
from devcluster.emulator.profiles import GIB
from devcluster.emulator.values import NodeView

_WINDOW = re.compile(r"^(\d+)([mhd])$")
_MINUTES = {"m": 1, "h": 60, "d": 1440}


def window_minutes(window: str) -> int:
    match = _WINDOW.match(window.strip())
    if not match or int(match.group(1)) == 0:
        raise RequestError(f"invalid window {window!r}: use a duration such as 30m, 1h or 2d")
    return int(match.group(1)) * _MINUTES[match.group(2)]


def asset_key(view: NodeView) -> str:
    return (f"local/__undefined__/__undefined__/Compute/local/Node/Kubernetes/"
            f"{view.profile.provider_id}/{view.registration.name}")


def _rfc3339(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def node_asset(view: NodeView, minutes: int, end: float, fixed: float | None) -> dict[str, Any]:
    reg, values = view.registration, view.values
    hours = minutes / 60

    def cost(hourly: float) -> float:
        return round(hourly * hours, 6) if fixed is None else fixed

    return {
        "type": "Node",
        "properties": {
            "category": "Compute", "provider": "local", "account": "__undefined__",
            "project": "__undefined__", "service": "Kubernetes", "cluster": "local", "name": reg.name,
            "providerID": view.profile.provider_id,
        },
        "labels": {"node_kubernetes_io_instance_type": reg.instance_type,
                   "topology_kubernetes_io_zone": reg.zone},
        "window": {"start": _rfc3339(end - minutes * 60), "end": _rfc3339(end)},
        "start": _rfc3339(end - minutes * 60),
        "end": _rfc3339(end),
        "minutes": minutes,
        "nodeType": reg.instance_type,
        "cpuCores": reg.cpu,
        "ramBytes": float(reg.memory_bytes),
        "gpuCount": reg.gpus,
        "cpuCost": cost(values.cpu_hourly_cost * reg.cpu),
        "gpuCost": cost(values.gpu_hourly_cost * reg.gpus),
        "ramCost": cost(values.ram_hourly_cost * reg.memory_bytes / GIB),
        "totalCost": cost(values.hourly_cost),
        "preemptible": 1 if values.spot else 0,
        "adjustment": 0,
    }


def assets(views: Sequence[NodeView], minutes: int, end: float, fixed: float | None) -> dict[str, Any]:
    return {"code": 200, "data": [{asset_key(view): node_asset(view, minutes, end, fixed) for view in views}]}
