"""Test overrides: validation of `PATCH /control/nodes/{name}/values` bodies.

An override replaces the drifting value exactly (no drift, no noise) until a JSON null clears it; `gpu_temp_ramp`
(°C per minute) instead adds a steady climb to every GPU's temperature from the moment it is set. A per-GPU field
takes a number (every GPU), a list (one value per GPU) or an object {"<gpu index>": number or null} that sets (or
clears) those GPUs only, the others keeping their value or drift. A per-GPU override is stored as one value per
GPU, NaN where the GPU is not overridden.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from devcluster.emulator.errors import RequestError

__all__ = ["FIELDS", "PER_GPU_FIELDS", "RAMP_CEILING_C", "RAMP_FIELDS", "GpuPatch", "OverrideValue", "ParsedOverride",
           "parse_overrides"]

OverrideValue = float | tuple[float, ...] | bool | str


@dataclass(frozen=True)
class GpuPatch:
    """Some GPUs of one per-GPU field: index -> exact value, or None to let that GPU drift again."""

    values: tuple[tuple[int, float | None], ...]

    def merged(self, current: OverrideValue | None, gpus: int) -> tuple[float, ...] | None:
        """The field's override after this patch (None: no GPU overridden any more)."""
        base = list(current) if isinstance(current, tuple) else [math.nan] * gpus
        for index, value in self.values:
            base[index] = math.nan if value is None else value
        return None if all(math.isnan(v) for v in base) else tuple(base)


ParsedOverride = OverrideValue | GpuPatch

# A scalar sets every GPU of the node; a list sets them one by one; an object some of them.
PER_GPU_FIELDS = frozenset({"gpu_temp", "memory_temp", "gpu_util", "gpu_power", "fb_used_mib", "xid_errors"})
NUMBER_FIELDS = frozenset({
    "load1", "load5", "load15", "cpu_util", "memory_used_bytes",
    "hourly_cost", "gpu_hourly_cost", "cpu_hourly_cost", "ram_hourly_cost",
})
BOOL_FIELDS = frozenset({"maintenance", "spot"})
TEXT_FIELDS = frozenset({"rack"})
# A trend (°C per minute, every GPU of the node) added to gpu_temp from the moment it is set: a node heating up, for
# the forecasts of docs/forecasting.md. Stored with that moment (Scenario.apply_overrides), up to RAMP_CEILING_C.
RAMP_FIELDS = frozenset({"gpu_temp_ramp"})
RAMP_CEILING_C = 110.0
FIELDS = PER_GPU_FIELDS | NUMBER_FIELDS | BOOL_FIELDS | TEXT_FIELDS | RAMP_FIELDS


def parse_overrides(node: str, gpus: int, body: Mapping[str, Any]) -> dict[str, ParsedOverride | None]:
    """Returns field -> new override, None meaning "clear"; raises RequestError naming the bad field."""
    if not isinstance(body, Mapping):
        raise RequestError(f"node {node}: values must be a JSON object")
    unknown = sorted(set(body) - FIELDS)
    if unknown:
        raise RequestError(f"node {node}: unknown value field(s) {unknown}; known: {sorted(FIELDS)}")
    parsed: dict[str, ParsedOverride | None] = {}
    for field, value in body.items():
        parsed[field] = None if value is None else _parse_one(node, gpus, field, value)
    return parsed


def _parse_one(node: str, gpus: int, field: str, value: Any) -> ParsedOverride:
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
    if field in PER_GPU_FIELDS and isinstance(value, Mapping):
        return GpuPatch(tuple(sorted(_gpu_entry(node, gpus, field, k, v) for k, v in value.items())))
    number = _number(node, field, value)
    return (number,) * gpus if field in PER_GPU_FIELDS else number


def _gpu_entry(node: str, gpus: int, field: str, key: Any, value: Any) -> tuple[int, float | None]:
    index = int(key) if isinstance(key, str) and key.isdigit() else -1
    if not 0 <= index < gpus:
        raise RequestError(f"node {node}: {field} has GPU {key!r}, but the node's GPUs are 0..{gpus - 1}")
    return index, None if value is None else _number(node, field, value)


def _number(node: str, field: str, value: Any) -> float:
    # Non-finite values belong to the nan/inf faults, which act per endpoint.
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise RequestError(f"node {node}: {field} must be a finite number (or a per-GPU list), got {value!r}")
    return float(value)
