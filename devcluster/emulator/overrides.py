"""Test overrides: validation of `PATCH /control/nodes/{name}/values` bodies.

An override replaces the drifting value exactly (no drift, no noise) until a JSON null clears it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from devcluster.emulator.errors import RequestError

OverrideValue = float | tuple[float, ...] | bool | str

# A scalar sets every GPU of the node; a list sets them one by one.
PER_GPU_FIELDS = frozenset({"gpu_temp", "memory_temp", "gpu_util", "gpu_power", "fb_used_mib", "xid_errors"})
NUMBER_FIELDS = frozenset({
    "load1", "load5", "load15", "cpu_util", "memory_used_bytes",
    "hourly_cost", "gpu_hourly_cost", "cpu_hourly_cost", "ram_hourly_cost",
})
BOOL_FIELDS = frozenset({"maintenance", "spot"})
TEXT_FIELDS = frozenset({"rack"})
FIELDS = PER_GPU_FIELDS | NUMBER_FIELDS | BOOL_FIELDS | TEXT_FIELDS


def parse_overrides(node: str, gpus: int, body: Mapping[str, Any]) -> dict[str, OverrideValue | None]:
    """Returns field -> new override, None meaning "clear"; raises RequestError naming the bad field."""
    if not isinstance(body, Mapping):
        raise RequestError(f"node {node}: values must be a JSON object")
    unknown = sorted(set(body) - FIELDS)
    if unknown:
        raise RequestError(f"node {node}: unknown value field(s) {unknown}; known: {sorted(FIELDS)}")
    parsed: dict[str, OverrideValue | None] = {}
    for field, value in body.items():
        parsed[field] = None if value is None else _parse_one(node, gpus, field, value)
    return parsed


def _parse_one(node: str, gpus: int, field: str, value: Any) -> OverrideValue:
    if field in BOOL_FIELDS:
        if not isinstance(value, bool):
            raise RequestError(f"node {node}: {field} must be true/false, got {value!r}")
        return value
    if field in TEXT_FIELDS:
        if not isinstance(value, str):
            raise RequestError(f"node {node}: {field} must be a string, got {value!r}")
        return value
    if field in PER_GPU_FIELDS and isinstance(value, list):
        if len(value) != gpus:
            raise RequestError(
                f"node {node}: {field} list has {len(value)} entries but the node has {gpus} GPUs")
        return tuple(_number(node, field, v) for v in value)
    number = _number(node, field, value)
    return (number,) * gpus if field in PER_GPU_FIELDS else number


def _number(node: str, field: str, value: Any) -> float:
    # Non-finite values belong to the nan/inf faults, which act per endpoint.
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise RequestError(f"node {node}: {field} must be a finite number (or a per-GPU list), got {value!r}")
    return float(value)
