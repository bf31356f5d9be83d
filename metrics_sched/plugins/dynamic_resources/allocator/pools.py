"""The resource pools a node can use: upstream's incubating/pools_incubating.go (`GatherPools`, `buildPool`).

Per node: the slices relevant for it (counter-set slices always; else by nodeName / allNodes / nodeSelector, or
with perDeviceNodeSelection if any device matches), grouped by (driver, pool) keeping the highest generation.
A pool missing slices of its generation is looked up cluster-wide: obsolete (a newer generation exists
somewhere) -> ignored, still short -> incomplete (no device usable, `All` requests fail), else built from the
relevant slices with the others kept for counter accounting only. Invalid pools (duplicate device or counter
set names, unknown counters) are kept, marked. Order: (driver, pool) bytewise, pools with binding conditions
after all others; slices by name.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import cast

from metrics_sched.plugins.dynamic_resources.allocator.devices import DeviceInfo, SliceInfo
from metrics_sched.plugins.dynamic_resources.allocator.errors import AllocationError
from metrics_sched.plugins.dynamic_resources.allocator.node_selection import NodeSelectorError, node_matches

__all__ = ["Candidate", "Pool", "gather_pools"]


class Candidate:
    """A device of a pool as the search meets it; `pos` is its place in the pool (slices by name, devices in
    list order), which with the pool's place gives upstream's order."""

    __slots__ = ("device", "pool", "pos", "slice")

    def __init__(self, device: DeviceInfo, info: SliceInfo, pool: Pool, pos: int) -> None:
        self.device = device
        self.slice = info
        self.pool = pool
        self.pos = pos


@dataclass(eq=False, slots=True)
class Pool:
    driver: str
    pool: str
    is_incomplete: bool = False
    is_invalid: bool = False
    invalid_reason: str = ""
    slices_targeting: tuple[SliceInfo, ...] = ()  # device slices of this node, sorted by name
    slices_not_targeting: tuple[SliceInfo, ...] = ()  # the pool's other slices (counters only)
    counter_sets: dict[str, dict[str, int]] = field(default_factory=dict)
    candidates: tuple[Candidate, ...] = ()  # the devices of slices_targeting, in order

    def __post_init__(self) -> None:
        self.candidates = tuple(Candidate(device, info, self, pos) for pos, (info, device) in enumerate(
            (info, device) for info in self.slices_targeting for device in info.devices))

    @property
    def pool_id(self) -> str:
        return f"{self.driver}/{self.pool}"


def _relevant(info: SliceInfo, node_name: str, labels: Mapping[str, str]) -> bool:
    if info.shared_counters:
        return True  # counter sets are needed for the pool whatever their node selection
    if info.node_name or info.all_nodes or info.node_selector is not None:
        try:
            return node_matches(node_name, labels, info.node_name or "", info.all_nodes, info.node_selector)
        except NodeSelectorError as err:
            raise AllocationError(f"failed to perform node selection for slice {info.name}: {err}") from None
    if info.per_device_node_selection:
        for device in info.devices:
            try:
                if node_matches(node_name, labels, device.node_name or "", device.all_nodes, device.node_selector):
                    return True
            except NodeSelectorError as err:
                raise AllocationError(f"failed to perform node selection for device {device.name} in slice "
                                      f"{info.name}: {err}") from None
        return False
    return False  # some future node selection field: not usable by this version


def _invalid(driver: str, pool: str, reason: str) -> Pool:
    return Pool(driver, pool, is_invalid=True, invalid_reason=reason)


def _validate_consumption(counter_sets: Mapping[str, Mapping[str, int]], slices: Sequence[SliceInfo]) -> str | None:
    for info in slices:
        for device in info.devices:
            for set_name, counters in device.consumes:
                counter_set = counter_sets.get(set_name)
                if counter_set is None:
                    return f"counter set {set_name} not found"
                for counter in counters:
                    if counter not in counter_set:
                        return f"counter {counter} not found in counter set {set_name}"
    return None


def _build_pool(driver: str, pool: str, slices: list[SliceInfo],
                all_slices_for_pool: list[SliceInfo] | None) -> Pool:
    slices.sort(key=lambda s: s.name)
    device_slices = [s for s in slices if not s.shared_counters]
    counter_slices = [s for s in slices if s.shared_counters]
    names: set[str] = set()
    for info in device_slices:
        for device in info.devices:
            if device.name in names:
                return _invalid(driver, pool, f"duplicate device name {device.name}")
            names.add(device.name)
    counter_sets: dict[str, dict[str, int]] = {}
    for info in counter_slices:
        for set_name, counters in info.shared_counters:
            if set_name in counter_sets:
                return _invalid(driver, pool, f"duplicate counter set name {set_name}")
            counter_sets[set_name] = counters
    problem = _validate_consumption(counter_sets, slices)
    if problem is not None:
        return _invalid(driver, pool, problem)
    if all_slices_for_pool is None or len(slices) == len(all_slices_for_pool):
        return Pool(driver, pool, slices_targeting=tuple(device_slices), counter_sets=counter_sets)
    targeting = {s.name for s in slices}
    others = [s for s in all_slices_for_pool if s.name not in targeting]
    # The slices of other nodes may consume this pool's counters: their consumption is validated too (their
    # device names are not, as upstream does not).
    problem = _validate_consumption(counter_sets, others)
    if problem is not None:
        return _invalid(driver, pool, problem)
    return Pool(driver, pool, slices_targeting=tuple(device_slices), slices_not_targeting=tuple(others),
                counter_sets=counter_sets)


def gather_pools(slices_for_node: Sequence[SliceInfo], node_name: str, labels: Mapping[str, str],
                 pool_slices: Callable[[str, str], Sequence[int]], resolve: Callable[[int], SliceInfo]) -> list[Pool]:
    """GatherPools. `pool_slices(driver, pool)` are the indexes of every slice of that pool in the cluster's list,
    `resolve(i)` parses the i-th slice; both are only asked for a pool that looks incomplete from this node."""
    pools: dict[tuple[str, str], list[SliceInfo]] = {}
    for info in slices_for_node:
        if not _relevant(info, node_name, labels):
            continue
        key = (info.driver, info.pool)
        group = pools.get(key)
        if group is None:
            pools[key] = [info]
        elif info.generation > group[0].generation:
            pools[key] = [info]  # a newer generation replaces the older slices
        elif info.generation == group[0].generation:
            group.append(info)

    result: list[Pool] = []
    with_binding_conditions: list[Pool] = []
    for (driver, pool_name), group in pools.items():
        first = group[0]
        if len(group) == first.slice_count:
            if len(group) == 1:
                # A pool of one slice (the common node-local case) depends on that slice alone: built once per
                # slice version and shared by every pod (the search never changes a pool).
                pool = cast(Pool | None, first.solo_pool)
                if pool is None:
                    pool = first.solo_pool = _build_pool(driver, pool_name, group, None)
            else:
                pool = _build_pool(driver, pool_name, group, None)
        else:
            obsolete, everywhere = _slices_in_pool(pool_slices(driver, pool_name), resolve, first.generation)
            if obsolete:
                continue  # the driver is replacing this generation: ignore the old devices
            if len(everywhere) != first.slice_count:
                result.append(Pool(driver, pool_name, is_incomplete=True))
                continue
            pool = _build_pool(driver, pool_name, group, everywhere)
        if any(s.has_binding_conditions for s in pool.slices_targeting):
            with_binding_conditions.append(pool)
        else:
            result.append(pool)
    result.sort(key=lambda p: (p.driver, p.pool))
    with_binding_conditions.sort(key=lambda p: (p.driver, p.pool))
    result.extend(with_binding_conditions)
    return result


def _slices_in_pool(indexes: Sequence[int], resolve: Callable[[int], SliceInfo],
                    generation: int) -> tuple[bool, list[SliceInfo]]:
    """checkSlicesInPool over the pool's slices (`indexes`): (obsolete, the pool's slices of `generation`
    cluster-wide)."""
    found: list[SliceInfo] = []
    for i in indexes:
        info = resolve(i)
        if info.generation == generation:
            found.append(info)
        elif info.generation > generation:
            return True, []
    return False, found
