"""The structured device allocator of Dynamic Resource Allocation: a port of upstream's incubating allocator
(k8s.io/dynamic-resource-allocation/structured/internal/incubating, kube-scheduler 1.36 with default gates).
See docs/design/dra.md §3 for the rules it follows and allocator.py for the entry point."""

from metrics_sched.plugins.dynamic_resources.allocator.allocator import Allocator, SliceSet
from metrics_sched.plugins.dynamic_resources.allocator.devices import SliceCache
from metrics_sched.plugins.dynamic_resources.allocator.errors import (
    AllocationError,
    AllocationTimeout,
    NodeAllocationError,
)
from metrics_sched.plugins.dynamic_resources.allocator.memo import SelectorMemo
from metrics_sched.plugins.dynamic_resources.allocator.search import Rank
from metrics_sched.plugins.dynamic_resources.allocator.state import (
    AllocatedState,
    DeviceID,
    SharedDeviceID,
    gather_allocated_state,
)

__all__ = [
    "AllocatedState",
    "AllocationError",
    "AllocationTimeout",
    "Allocator",
    "DeviceID",
    "NodeAllocationError",
    "Rank",
    "SelectorMemo",
    "SharedDeviceID",
    "SliceCache",
    "SliceSet",
    "gather_allocated_state",
]
