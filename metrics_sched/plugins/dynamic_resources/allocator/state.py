"""What is already allocated: upstream's `AllocatedState` (structured/schedulerapi/types.go) and how the
scheduler gathers it from allocated claims (`foreachAllocatedDevice` in the plugin's allocateddevices.go).

Results with `adminAccess: true` do not count; results with a `shareID` (consumable capacity) are shared
allocations whose `consumedCapacity` is summed per device; every other result makes its device allocated.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from metrics_sched.plugins.dynamic_resources.allocator.quantity import Quantity

__all__ = ["AllocatedState", "DeviceID", "SharedDeviceID", "gather_allocated_state"]

DeviceID = tuple[str, str, str]  # (driver, pool, device)
SharedDeviceID = tuple[str, str, str, str]  # (driver, pool, device, shareID)


@dataclass
class AllocatedState:
    """Devices in use before this pod's claims: dedicated ones, shared ones, and the capacity (nano units per
    capacity name) shared devices already give out."""

    allocated_devices: set[DeviceID] = field(default_factory=set)
    allocated_shared_device_ids: set[SharedDeviceID] = field(default_factory=set)
    aggregated_capacity: dict[DeviceID, dict[str, int]] = field(default_factory=dict)

    def devices_in_use(self) -> set[DeviceID]:
        """Every device internal.IsDeviceAllocated calls allocated (dedicated, shared, or with capacity
        consumed): the ones whose counters are taken."""
        return (self.allocated_devices | {s[:3] for s in self.allocated_shared_device_ids}
                | set(self.aggregated_capacity))

    def add_capacity(self, device_id: DeviceID, consumed: Mapping[str, int]) -> None:
        """ConsumedCapacityCollection.Insert."""
        current = self.aggregated_capacity.setdefault(device_id, {})
        for name, nanos in consumed.items():
            current[name] = current.get(name, 0) + nanos


def gather_allocated_state(claims: Iterable[Mapping[str, Any]]) -> AllocatedState:
    """AllocatedState from ResourceClaim JSON objects; claims without `status.allocation` add nothing."""
    state = AllocatedState()
    for claim in claims:
        allocation = (claim.get("status") or {}).get("allocation")
        if not allocation:
            continue
        for result in (allocation.get("devices") or {}).get("results") or []:
            if result.get("adminAccess") is True:
                continue
            device_id: DeviceID = (str(result.get("driver", "")), str(result.get("pool", "")),
                                   str(result.get("device", "")))
            share_id = result.get("shareID")
            if share_id is not None:
                state.allocated_shared_device_ids.add((*device_id, str(share_id)))
                consumed = result.get("consumedCapacity")
                if consumed is not None:
                    state.add_capacity(device_id, {name: Quantity.parse(q).nanos for name, q in consumed.items()})
                continue
            state.allocated_devices.add(device_id)
    return state
