"""What a device-allocating plugin tells the telemetry plugins about a pod's devices on each node.

DynamicResources picks, on every node, the devices a pod's claims would get there (the coolest that fit, when the
devices have telemetry of their own). A telemetry plugin judging a GPU pod should judge those devices, not the
node's hottest GPU: a node with one hot GPU still takes a pod on its cool one. The allocating plugin writes, per
row of the table, the value of the set it would allocate (its worst device: the hottest of the chosen GPUs); the
telemetry plugin reads it under DEVICE_SETS and falls back to the node's own value where it is NaN.
"""

from __future__ import annotations

from typing import NamedTuple

from metrics_sched.framework.cycle_state import StateKey
from metrics_sched.state.node_table import FloatArray

__all__ = ["DEVICE_SETS", "DRA_EXTENDED_RESOURCES", "DeviceSets"]


class DeviceSets(NamedTuple):
    metric: str  # the per-device metric the values are of (e.g. gpu_temperature)
    values: FloatArray  # per table row: the worst value among the devices the pod would get there; NaN: none known


DEVICE_SETS = StateKey[DeviceSets]("device-sets")

# The extended resources of the pod that a DeviceClass backs (DRAExtendedResource): on a node whose allocatable has
# none of such a resource, the devices come through DRA, so NodeResourcesFit does not count it there (as
# kube-scheduler's noderesources plugin defers to dynamicresources).
DRA_EXTENDED_RESOURCES = StateKey[frozenset[str]]("dra-extended-resources")
