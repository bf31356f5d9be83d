"""ResourceSlices and their devices, parsed once per slice version.

Everything the per-node search reads of a slice is computed here, not during the search: quantities, counter
consumption, blocking taints, node selectors, the CEL view of a device (built on first use). A SliceCache keeps
the parsed form across Allocators (one per pod) keyed by the slice's uid, name and resourceVersion, so a slice
is parsed once per version, not once per pod; slices without a resourceVersion (tests, hand-made objects) are
parsed per Allocator.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from metrics_sched.plugins.dynamic_resources.allocator.capacity import DeviceCapacity, parse_capacities, request_fits
from metrics_sched.plugins.dynamic_resources.allocator.node_selection import ParsedNodeSelector, parse_node_selector
from metrics_sched.plugins.dynamic_resources.allocator.quantity import Quantity
from metrics_sched.plugins.dynamic_resources.allocator.state import DeviceID
from metrics_sched.plugins.dynamic_resources.cel import CelDevice

__all__ = ["CounterSet", "DeviceInfo", "SliceCache", "SliceInfo", "compile_slice"]

_BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")

CounterSet = tuple[str, dict[str, int]]  # (counter set name, counter name -> nano units)


@dataclass(eq=False, slots=True)
class DeviceInfo:
    id: DeviceID
    name: str
    raw: Mapping[str, Any]
    attributes: Mapping[str, Mapping[str, Any]]
    capacities: dict[str, DeviceCapacity]
    consumes: tuple[CounterSet, ...]
    blocking_taints: tuple[Mapping[str, Any], ...]
    allow_multiple: bool
    binding_conditions: list[str] | None
    binding_failure_conditions: list[str] | None
    binds_to_node: bool
    node_name: str | None  # perDeviceNodeSelection: the device's own node selection (None: unset)
    all_nodes: bool
    node_selector_raw: Mapping[str, Any] | None
    node_selector: ParsedNodeSelector | None
    fits_unrequested: bool | None  # request_fits without requests, nothing allocated: fixed per device
    _cel: CelDevice | None = field(default=None)

    def cel(self) -> CelDevice:
        device = self._cel
        if device is None:
            device = self._cel = CelDevice.from_api(self.id[0], self.raw)
        return device


@dataclass(eq=False, slots=True)
class SliceInfo:
    raw: Mapping[str, Any]
    name: str
    resource_version: str
    driver: str
    pool: str
    generation: int
    slice_count: int
    node_name: str | None  # None: unset (Go's nil pointer)
    all_nodes: bool
    node_selector_raw: Mapping[str, Any] | None
    node_selector: ParsedNodeSelector | None
    per_device_node_selection: bool
    shared_counters: tuple[CounterSet, ...]
    devices: tuple[DeviceInfo, ...]
    has_binding_conditions: bool  # some device has bindingConditions (not nil)
    # The pools.Pool this slice forms alone (resourceSliceCount 1), built on first use; typed loosely so that
    # this module does not import pools (which imports it).
    solo_pool: Any = None


def _counters(raw: Mapping[str, Any] | None) -> dict[str, int]:
    return {str(name): Quantity.parse((c or {}).get("value", "0")).nanos for name, c in (raw or {}).items()}


def _compile_device(driver: str, pool: str, raw: Mapping[str, Any]) -> DeviceInfo:
    name = str(raw.get("name", ""))
    capacities = parse_capacities(raw.get("capacity"))
    selector_raw = raw.get("nodeSelector")
    return DeviceInfo(
        id=(driver, pool, name),
        name=name,
        raw=raw,
        attributes=raw.get("attributes") or {},
        capacities=capacities,
        consumes=tuple((str(c.get("counterSet", "")), _counters(c.get("counters")))
                       for c in raw.get("consumesCounters") or []),
        blocking_taints=tuple(t for t in raw.get("taints") or [] if t.get("effect") in _BLOCKING_EFFECTS),
        allow_multiple=raw.get("allowMultipleAllocations") is True,
        binding_conditions=raw.get("bindingConditions"),
        binding_failure_conditions=raw.get("bindingFailureConditions"),
        binds_to_node=raw.get("bindsToNode") is True,
        node_name=raw.get("nodeName"),
        all_nodes=raw.get("allNodes") is True,
        node_selector_raw=selector_raw,
        node_selector=None if selector_raw is None else parse_node_selector(selector_raw),
        fits_unrequested=request_fits(None, None, capacities, None),
    )


def compile_slice(raw: Mapping[str, Any]) -> SliceInfo:
    meta = raw.get("metadata") or {}
    spec = raw.get("spec") or {}
    pool = spec.get("pool") or {}
    driver = str(spec.get("driver", ""))
    pool_name = str(pool.get("name", ""))
    devices = tuple(_compile_device(driver, pool_name, d) for d in spec.get("devices") or [])
    selector_raw = spec.get("nodeSelector")
    return SliceInfo(
        raw=raw,
        name=str(meta.get("name", "")),
        resource_version=str(meta.get("resourceVersion") or ""),
        driver=driver,
        pool=pool_name,
        generation=int(pool.get("generation") or 0),
        slice_count=int(pool.get("resourceSliceCount") or 0),
        node_name=spec.get("nodeName"),
        all_nodes=spec.get("allNodes") is True,
        node_selector_raw=selector_raw,
        node_selector=None if selector_raw is None else parse_node_selector(selector_raw),
        per_device_node_selection=spec.get("perDeviceNodeSelection") is True,
        shared_counters=tuple((str(s.get("name", "")), _counters(s.get("counters")))
                              for s in spec.get("sharedCounters") or []),
        devices=devices,
        has_binding_conditions=any(d.binding_conditions is not None for d in devices),
    )


class SliceCache:
    """Parsed slices by (uid, name, resourceVersion), least recently used dropped beyond `max_slices`.
    Thread-safe; a slice's new version gets a new entry, the old one ages out."""

    def __init__(self, max_slices: int = 50_000) -> None:
        self._max = max_slices
        self._entries: OrderedDict[tuple[str, str, str], SliceInfo] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, raw: Mapping[str, Any]) -> SliceInfo:
        meta = raw.get("metadata") or {}
        version = meta.get("resourceVersion")
        if not version:
            return compile_slice(raw)
        key = (str(meta.get("uid") or ""), str(meta.get("name") or ""), str(version))
        with self._lock:
            info = self._entries.get(key)
            if info is not None:
                self._entries.move_to_end(key)
                return info
        info = compile_slice(raw)
        with self._lock:
            self._entries[key] = info
            while len(self._entries) > self._max:
                self._entries.popitem(last=False)
        return info
