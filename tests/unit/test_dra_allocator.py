"""Upstream's allocator test table, ported: `TestAllocator`'s `testcases` map in
staging/src/k8s.io/dynamic-resource-allocation/structured/internal/allocatortesting/allocator_testing.go and
`TestLexicographicalAllocator` in lexicographical_testing.go (kubernetes/dynamic-resource-allocation v0.36.2,
commit b0162be), run upstream against the incubating allocator by internal/incubating/allocator_test.go.

Each test id is upstream's case name. Upstream compares results as sets (gomega.ConsistOf); these compare the exact
JSON in order, which is upstream's order (requests in spec order, devices in the order found): the same results,
held to a stricter standard. Share IDs are random (upstream's too) and replaced by a fixed one before comparing.

Not ported, on purpose (our allocator is always 1.36 with default gates, every feature below on):
- the cases that turn a feature off: admin-access-disabled, prioritized-list-disabled,
  partitionable-devices-disabled-device-consumes-counters, partitionable-devices-disabled-other-device-do-not-
  consume-counters, partitionable-devices-disabled-per-device-node-selection, tainted-disabled,
  tainted-prioritized-list-disabled, tainted-admin-access-disabled, tainted-all-devices-single-disabled,
  binding-conditions-without-feature-gate, consumable-capacity-disabled-feature,
  consumable-capacity-disabled-feature-with-prioritized-list;
- the 22 list-attributes-* cases: DRAListTypeAttributes is alpha and off by default in 1.36 (1.36 with default
  gates runs the incubating allocator, which has no list attributes at all).
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from typing import Any

import pytest

from metrics_sched.plugins.dynamic_resources.allocator import (
    AllocatedState,
    AllocationError,
    AllocationTimeout,
    Allocator,
    DeviceID,
    NodeAllocationError,
    SharedDeviceID,
)
from metrics_sched.plugins.dynamic_resources.allocator.quantity import Quantity
from metrics_sched.plugins.dynamic_resources.cel import SelectorCache
from tests.unit.dra_allocator_builders import (
    BOOL_ATTRIBUTE,
    CAPACITY0,
    CAPACITY1,
    CLAIM0,
    CLAIM1,
    CLASS_A,
    CLASS_B,
    COUNTER_SET1,
    COUNTER_SET2,
    DEVICE0,
    DEVICE1,
    DEVICE2,
    DEVICE3,
    DEVICE4,
    DRIVER_A,
    DRIVER_B,
    FIELD_NAME_KEY,
    FIXED_SHARE_ID,
    FOUR,
    FROM_COUNTERS,
    INT_ATTRIBUTE,
    MAX_RESULTS,
    NODE1,
    NODE2,
    NODE_SELECTION_ALL,
    NODE_SELECTION_PER_DEVICE,
    NON_EXISTENT_ATTRIBUTE,
    ONE,
    PLANET_KEY,
    PLANET_VALUE_EARTH,
    POOL1,
    POOL2,
    POOL3,
    POOL4,
    REGION1,
    REGION2,
    REGION_KEY,
    REQ0,
    REQ0_SUB0,
    REQ0_SUB1,
    REQ1,
    REQ1_SUB1,
    REQ2,
    REQ2_SUB0,
    REQ2_SUB1,
    REQ3,
    SLICE1,
    SLICE2,
    SLICE3,
    SLICE4,
    STRING_ATTRIBUTE,
    SUB_REQ0,
    SUB_REQ1,
    THREE,
    TWO,
    VERSION_ATTRIBUTE,
    ZERO,
    Claim,
    all_device_request,
    allocation_result,
    allocation_result_with_config,
    allocation_result_with_configs,
    capacity_memory_selector,
    cel_selector,
    claim,
    claim_with_device_config,
    claim_with_request,
    claim_with_requests,
    class_with_allow_multiple_allocations,
    class_with_config,
    counter_set,
    device,
    device_allocation_result,
    device_claim_config,
    device_class,
    device_configuration,
    device_counter_consumption,
    device_request,
    device_request_allocation_result,
    device_request_allocation_result_with_binding_conditions,
    local_node_selector,
    multiple_device_allocation_results,
    node,
    node_label_selector,
    normalize_share_ids,
    request,
    request_with_prioritized_list,
    resource_pool,
    slice_with_counter_sets,
    slice_with_devices,
    slice_with_multiple_devices,
    slice_with_no_devices,
    slice_with_one_device,
    sub_request,
    taint,
    toleration,
)

JSON = dict[str, Any]

TAINT_KEY = "taint-key"
TAINT_NONE = taint(TAINT_KEY, "taint-value", "None")
TAINT_NO_SCHEDULE = taint(TAINT_KEY, "taint-value", "NoSchedule")
TAINT_NO_EXECUTE = taint(TAINT_KEY, "taint-value-2", "NoExecute")
TOLERATION_NO_SCHEDULE = toleration("Exists", TAINT_KEY, "NoSchedule")
TOLERATION_NO_EXECUTE = toleration("Equal", TAINT_KEY, "NoExecute", "taint-value-2")
TOLERATION_NO_SCHEDULE_KEY1 = toleration("Exists", "key1", "NoSchedule")

NO_FIT = None  # upstream: nil results, no error


@dataclass
class Case:
    claims: list[Claim] = field(default_factory=list)
    classes: list[JSON] = field(default_factory=list)
    slices: list[JSON] = field(default_factory=list)
    node: JSON | None = None
    allocated_devices: list[DeviceID] = field(default_factory=list)
    allocated_shared: list[SharedDeviceID] = field(default_factory=list)
    allocated_capacity: dict[DeviceID, dict[str, str]] = field(default_factory=dict)
    expect: list[JSON] | None = NO_FIT
    error: str | None = None  # a substring of the error, as upstream's ContainSubstring
    node_error: bool = False  # the error is ErrFailedAllocationOnNode
    invocations: int | None = None  # expectNumAllocateOneInvocations (incubating's value)


def attrs(**values: Any) -> JSON:
    """Device attributes: {"name": {"string"|"int"|"bool"|"version": value}}; a version is passed as V("1.0.0")."""
    out: JSON = {}
    for name, value in values.items():
        if isinstance(value, V):
            out[name] = {"version": value.text}
        elif isinstance(value, bool):
            out[name] = {"bool": value}
        elif isinstance(value, int):
            out[name] = {"int": value}
        else:
            out[name] = {"string": value}
    return out


@dataclass(frozen=True)
class V:
    text: str


def mem(value: str) -> dict[str, str]:
    return {"memory": value}


def with_pool(raw: JSON, generation: int | None = None, count: int | None = None) -> JSON:
    out = copy.deepcopy(raw)
    if generation is not None:
        out["spec"]["pool"]["generation"] = generation
    if count is not None:
        out["spec"]["pool"]["resourceSliceCount"] = count
    return out


def with_request_fields(c: Claim, index: int = 0, **fields: Any) -> Claim:
    out = copy.deepcopy(c.raw)
    out["spec"]["devices"]["requests"][index]["exactly"].update(fields)
    return Claim(out)


def counters_device(name: str, counter_set_name: str, memory: str) -> Any:
    return device(name, FROM_COUNTERS).with_device_counter_consumption(
        device_counter_consumption(counter_set_name, {"memory": memory}))


N1 = node(NODE1, REGION1)
A = device_class(CLASS_A, DRIVER_A)
B = device_class(CLASS_B, DRIVER_B)
LOCAL1 = local_node_selector(NODE1)


def _all_devices_claim(name: str, cls: str) -> Claim:
    return claim_with_requests(name, None, all_device_request(REQ0, cls).obj())


def _exact_claim(name: str, cls: str) -> Claim:
    return claim_with_requests(name, None, request(REQ0, cls, 1))


def _prioritized_all_first(sub1_class: str) -> Claim:
    return claim(CLAIM0).with_requests(request_with_prioritized_list(
        REQ0, sub_request(SUB_REQ0, CLASS_A, 0).with_allocation_mode("All"), sub_request(SUB_REQ1, sub1_class, 1)))


_FULL_ATTRS = attrs(driverVersion=V("1.0.0"), numa=1, stringAttribute="stringAttributeValue", boolAttribute=True)

CASES: dict[str, Case] = {
    "empty": Case(expect=[]),
    "simple": Case(
        claims=[claim_with_request(CLAIM0, REQ0, CLASS_A)], classes=[A],
        slices=[slice_with_one_device(SLICE1, NODE1, POOL1, DRIVER_A)], node=N1,
        expect=[allocation_result(LOCAL1, device_allocation_result(REQ0, DRIVER_A, POOL1, DEVICE1, False))]),
    "other-node": Case(
        claims=[claim_with_request(CLAIM0, REQ0, CLASS_A)], classes=[A],
        slices=[slice_with_one_device(SLICE1, NODE1, POOL1, DRIVER_B),
                slice_with_one_device(SLICE2, NODE2, POOL2, DRIVER_A)],
        node=node(NODE2, REGION2),
        expect=[allocation_result(local_node_selector(NODE2),
                                  device_allocation_result(REQ0, DRIVER_A, POOL2, DEVICE1, False))]),
    "small-and-large": Case(
        claims=[claim_with_requests(CLAIM0, None, request(REQ0, CLASS_A, 1, capacity_memory_selector("1Gi")),
                                    request(REQ1, CLASS_A, 1, capacity_memory_selector("2Gi")))],
        classes=[A],
        slices=[slice_with_devices(SLICE1, NODE1, POOL1, DRIVER_A, device(DEVICE1, mem("1Gi")),
                                   device(DEVICE2, mem("2Gi")))],
        node=N1,
        expect=[allocation_result(LOCAL1, device_allocation_result(REQ0, DRIVER_A, POOL1, DEVICE1, False),
                                  device_allocation_result(REQ1, DRIVER_A, POOL1, DEVICE2, False))]),
    "small-and-large-backtrack-requests": Case(
        claims=[claim_with_requests(CLAIM0, None, request(REQ0, CLASS_A, 1, capacity_memory_selector("1Gi")),
                                    request(REQ1, CLASS_A, 1, capacity_memory_selector("2Gi")))],
        classes=[A],
        slices=[slice_with_devices(SLICE1, NODE1, POOL1, DRIVER_A, device(DEVICE2, mem("2Gi")),
                                   device(DEVICE1, mem("1Gi")))],
        node=N1,
        expect=[allocation_result(LOCAL1, device_allocation_result(REQ0, DRIVER_A, POOL1, DEVICE1, False),
                                  device_allocation_result(REQ1, DRIVER_A, POOL1, DEVICE2, False))]),
    "small-and-large-backtrack-claims": Case(
        claims=[claim_with_requests(CLAIM0, None, request(REQ0, CLASS_A, 1, capacity_memory_selector("1Gi"))),
                claim_with_requests(CLAIM1, None, request(REQ1, CLASS_A, 1, capacity_memory_selector("2Gi")))],
        classes=[A],
        slices=[slice_with_devices(SLICE1, NODE1, POOL1, DRIVER_A, device(DEVICE2, mem("2Gi")),
                                   device(DEVICE1, mem("1Gi")))],
        node=N1,
        expect=[allocation_result(LOCAL1, device_allocation_result(REQ0, DRIVER_A, POOL1, DEVICE1, False)),
                allocation_result(LOCAL1, device_allocation_result(REQ1, DRIVER_A, POOL1, DEVICE2, False))]),
    "devices-split-across-different-slices": Case(
        claims=[claim_with_requests(CLAIM0, None, request(REQ0, CLASS_A, 2))], classes=[A],
        slices=[slice_with_one_device(SLICE1, NODE1, POOL1, DRIVER_A),
                slice_with_one_device(SLICE2, NODE1, POOL2, DRIVER_A)],
        node=N1,
        expect=[allocation_result(LOCAL1, device_allocation_result(REQ0, DRIVER_A, POOL1, DEVICE1, False),
                                  device_allocation_result(REQ0, DRIVER_A, POOL2, DEVICE1, False))]),
    "obsolete-slice": Case(
        claims=[claim_with_request(CLAIM0, REQ0, CLASS_A)], classes=[A],
        slices=[slice_with_devices("slice-1-obsolete", NODE1, resource_pool(POOL1, 2), DRIVER_A, device(DEVICE1)),
                # This makes the other slice obsolete.
                slice_with_devices("slice-1-obsolete", NODE1, resource_pool(POOL1, 2, generation=2), DRIVER_A,
                                   device(DEVICE2))],
        node=N1, expect=NO_FIT),
    "duplicate-slice": Case(
        claims=[claim_with_request(CLAIM0, REQ0, CLASS_A)], classes=[A],
        # Two identical slices under different names, as an out-dated slice controller might publish.
        slices=[with_pool(slice_with_one_device(SLICE1, NODE1, POOL1, DRIVER_A), count=2),
                with_pool(slice_with_one_device(SLICE1 + "-2", NODE1, POOL1, DRIVER_A), count=2)],
        node=N1, error="invalid resource pools were encountered", node_error=True),
    "no-slices": Case(claims=[claim_with_request(CLAIM0, REQ0, CLASS_A)], classes=[A], node=N1),
    "not-enough-suitable-devices": Case(
        claims=[claim_with_request(CLAIM0, REQ0, CLASS_A), claim_with_request(CLAIM0, REQ1, CLASS_A)], classes=[A],
        slices=[slice_with_one_device(SLICE1, NODE1, POOL1, DRIVER_A)], node=N1),
    "no-classes": Case(
        claims=[claim_with_request(CLAIM0, REQ0, CLASS_A)],
        slices=[slice_with_one_device(SLICE1, NODE1, POOL1, DRIVER_A)], node=N1,
        error="could not retrieve device class class-a"),
    "unknown-class": Case(
        claims=[claim_with_request(CLAIM0, REQ0, "unknown-class")], classes=[A],
        slices=[slice_with_one_device(SLICE1, NODE1, POOL1, DRIVER_A)], node=N1,
        error="could not retrieve device class unknown-class"),
    "empty-class": Case(
        claims=[claim_with_request(CLAIM0, REQ0, "")], classes=[A],
        slices=[slice_with_one_device(SLICE1, NODE1, POOL1, DRIVER_A)], node=N1,
        error="claim claim-0, request req-0: missing device class name (unsupported request type?)"),
    "no-claims-to-allocate": Case(
        classes=[A], slices=[slice_with_one_device(SLICE1, NODE1, POOL1, DRIVER_A)], node=N1, expect=[]),
    "all-devices-single": Case(
        claims=[_all_devices_claim(CLAIM0, CLASS_A)], classes=[A],
        slices=[slice_with_one_device(SLICE1, NODE1, POOL1, DRIVER_A)], node=N1,
        expect=[allocation_result(LOCAL1, device_allocation_result(REQ0, DRIVER_A, POOL1, DEVICE1, False))]),
    "all-devices-with-consumed-counters": Case(
        claims=[_all_devices_claim(CLAIM0, CLASS_A)], classes=[A],
        slices=[slice_with_devices(SLICE1, NODE1, resource_pool(POOL1, 2), DRIVER_A,
                                   device(DEVICE1).with_device_counter_consumption(
                                       device_counter_consumption(COUNTER_SET1, {"memory": "4Gi"}))),
                slice_with_counter_sets(SLICE2, NODE1, resource_pool(POOL1, 2), DRIVER_A,
                                        counter_set(COUNTER_SET1, {"memory": "8Gi"}))],
        node=N1,
        expect=[allocation_result(LOCAL1, device_allocation_result(REQ0, DRIVER_A, POOL1, DEVICE1, False))]),
    "all-devices-many": Case(
        claims=[_all_devices_claim(CLAIM0, CLASS_A)], classes=[A],
        slices=[slice_with_one_device(SLICE1, NODE1, POOL1, DRIVER_A),
                slice_with_one_device(SLICE1, NODE1, POOL2, DRIVER_A)],
        node=N1,
        expect=[allocation_result(LOCAL1, device_allocation_result(REQ0, DRIVER_A, POOL1, DEVICE1, False),
                                  device_allocation_result(REQ0, DRIVER_A, POOL2, DEVICE1, False))]),
    "all-devices-of-the-incomplete-pool": Case(
        claims=[claim_with_requests(CLAIM0, None, all_device_request(REQ0, CLASS_A).with_allocation_mode(
            "All", count=1).obj())],
        classes=[A],
        # One other slice of the pool is missing.
        slices=[with_pool(slice_with_one_device(SLICE1, NODE1, POOL1, DRIVER_A), count=2)],
        node=N1,
        error="claim claim-0, request req-0: asks for all devices, but resource pool driver-a/pool-1 is currently "
              "being updated"),
    "all-devices-plus-another": Case(
        claims=[_all_devices_claim(CLAIM0, CLASS_A), _exact_claim(CLAIM1, CLASS_B)], classes=[A, B],
        slices=[slice_with_one_device(SLICE1, NODE1, POOL1, DRIVER_A),
                slice_with_one_device(SLICE1, NODE1, POOL1, DRIVER_B)],
        node=N1,
        expect=[allocation_result(LOCAL1, device_allocation_result(REQ0, DRIVER_A, POOL1, DEVICE1, False)),
                allocation_result(LOCAL1, device_allocation_result(REQ0, DRIVER_B, POOL1, DEVICE1, False))]),
    "all-devices-plus-another-reversed": Case(
        claims=[_exact_claim(CLAIM1, CLASS_B), _all_devices_claim(CLAIM0, CLASS_A)], classes=[A, B],
        slices=[slice_with_one_device(SLICE1, NODE1, POOL1, DRIVER_A),
                slice_with_one_device(SLICE1, NODE1, POOL1, DRIVER_B)],
        node=N1,
        expect=[allocation_result(LOCAL1, device_allocation_result(REQ0, DRIVER_B, POOL1, DEVICE1, False)),
                allocation_result(LOCAL1, device_allocation_result(REQ0, DRIVER_A, POOL1, DEVICE1, False))]),
    "all-devices-many-plus-another": Case(
        claims=[_all_devices_claim(CLAIM0, CLASS_A), _exact_claim(CLAIM1, CLASS_B)], classes=[A, B],
        slices=[slice_with_devices(SLICE1, NODE1, POOL1, DRIVER_A, device(DEVICE1), device(DEVICE2)),
                slice_with_one_device(SLICE1, NODE1, POOL1, DRIVER_B)],
        node=N1,
        expect=[allocation_result(LOCAL1, device_allocation_result(REQ0, DRIVER_A, POOL1, DEVICE1, False),
                                  device_allocation_result(REQ0, DRIVER_A, POOL1, DEVICE2, False)),
                allocation_result(LOCAL1, device_allocation_result(REQ0, DRIVER_B, POOL1, DEVICE1, False))]),
    "all-devices-many-plus-another-reversed": Case(
        claims=[_exact_claim(CLAIM1, CLASS_B), _all_devices_claim(CLAIM0, CLASS_A)], classes=[A, B],
        slices=[slice_with_devices(SLICE1, NODE1, POOL1, DRIVER_A, device(DEVICE1), device(DEVICE2)),
                slice_with_one_device(SLICE1, NODE1, POOL1, DRIVER_B)],
        node=N1,
        expect=[allocation_result(LOCAL1, device_allocation_result(REQ0, DRIVER_B, POOL1, DEVICE1, False)),
                allocation_result(LOCAL1, device_allocation_result(REQ0, DRIVER_A, POOL1, DEVICE1, False),
                                  device_allocation_result(REQ0, DRIVER_A, POOL1, DEVICE2, False))]),
    # One device, two claims both trying to allocate it.
    "all-devices-no-solution": Case(
        claims=[_exact_claim(CLAIM1, CLASS_A), _all_devices_claim(CLAIM0, CLASS_A)], classes=[A],
        slices=[slice_with_one_device(SLICE1, NODE1, POOL1, DRIVER_A)], node=N1),
    "all-devices-no-solution-reversed": Case(
        claims=[_all_devices_claim(CLAIM0, CLASS_A), _exact_claim(CLAIM1, CLASS_A)], classes=[A],
        slices=[slice_with_one_device(SLICE1, NODE1, POOL1, DRIVER_A)], node=N1),
    "all-devices-slice-without-devices": Case(
        claims=[_all_devices_claim(CLAIM0, CLASS_A)], classes=[A],
        slices=[slice_with_no_devices(SLICE1, NODE1, POOL1, DRIVER_A)], node=N1),
    "all-devices-no-slices": Case(claims=[_all_devices_claim(CLAIM0, CLASS_A)], classes=[A], node=N1),
    "all-devices-some-allocated": Case(
        claims=[_all_devices_claim(CLAIM0, CLASS_A)], classes=[A],
        allocated_devices=[(DRIVER_A, POOL1, DEVICE1)],
        slices=[slice_with_devices(SLICE1, NODE1, POOL1, DRIVER_A, device(DEVICE1), device(DEVICE2))], node=N1),
    "all-devices-some-allocated-admin-access": Case(
        claims=[with_request_fields(claim_with_request(CLAIM0, REQ0, CLASS_A), adminAccess=True,
                                    allocationMode="All")],
        classes=[A], allocated_devices=[(DRIVER_A, POOL1, DEVICE1)],
        slices=[slice_with_devices(SLICE1, NODE1, POOL1, DRIVER_A, device(DEVICE1), device(DEVICE2))], node=N1,
        expect=[allocation_result(LOCAL1, device_allocation_result(REQ0, DRIVER_A, POOL1, DEVICE1, True),
                                  device_allocation_result(REQ0, DRIVER_A, POOL1, DEVICE2, True))]),
    # The second request for `All` cannot be fulfilled because the first request claims a device.
    "all-devices-some-allocating-admin-access": Case(
        claims=[with_request_fields(with_request_fields(
            claim_with_requests(CLAIM0, None, request(REQ0, CLASS_A, 1), request(REQ1, CLASS_A, 1)),
            adminAccess=True), 1, adminAccess=True, allocationMode="All")],
        classes=[A],
        slices=[slice_with_devices(SLICE1, NODE1, POOL1, DRIVER_A, device(DEVICE1), device(DEVICE2))], node=N1),
    "count-devices-some-allocated-admin-access": Case(
        claims=[with_request_fields(claim_with_request(CLAIM0, REQ0, CLASS_A), adminAccess=True,
                                    allocationMode="ExactCount", count=2)],
        classes=[A], allocated_devices=[(DRIVER_A, POOL1, DEVICE1)],
        slices=[slice_with_devices(SLICE1, NODE1, POOL1, DRIVER_A, device(DEVICE1), device(DEVICE2))], node=N1,
        expect=[allocation_result(LOCAL1, device_allocation_result(REQ0, DRIVER_A, POOL1, DEVICE1, True),
                                  device_allocation_result(REQ0, DRIVER_A, POOL1, DEVICE2, True))]),
    "separate-claims-share-device-admin-access": Case(
        claims=[with_request_fields(claim_with_request(CLAIM0, REQ0, CLASS_A), adminAccess=True),
                with_request_fields(claim_with_request(CLAIM1, REQ0, CLASS_A), adminAccess=True)],
        classes=[A],
        slices=[slice_with_devices(SLICE1, NODE1, POOL1, DRIVER_A, device(DEVICE1), device(DEVICE2))], node=N1,
        expect=[allocation_result(LOCAL1, device_allocation_result(REQ0, DRIVER_A, POOL1, DEVICE1, True)),
                allocation_result(LOCAL1, device_allocation_result(REQ0, DRIVER_A, POOL1, DEVICE1, True))]),
    "admin-access-claims-device-allocating-for-non-admin-access": Case(
        claims=[claim_with_request(CLAIM0, REQ0, CLASS_A),
                with_request_fields(claim_with_request(CLAIM1, REQ0, CLASS_A), adminAccess=True)],
        classes=[A],
        slices=[slice_with_devices(SLICE1, NODE1, POOL1, DRIVER_A, device(DEVICE1), device(DEVICE2))], node=N1,
        expect=[allocation_result(LOCAL1, device_allocation_result(REQ0, DRIVER_A, POOL1, DEVICE1, False)),
                allocation_result(LOCAL1, device_allocation_result(REQ0, DRIVER_A, POOL1, DEVICE1, True))]),
    "all-devices-slice-without-devices-prioritized-list": Case(
        claims=[_prioritized_all_first(CLASS_B)], classes=[A, B],
        slices=[slice_with_no_devices(SLICE1, NODE1, POOL1, DRIVER_A),
                slice_with_one_device(SLICE2, NODE1, POOL2, DRIVER_B)],
        node=N1,
        expect=[allocation_result(LOCAL1, device_allocation_result(REQ0_SUB1, DRIVER_B, POOL2, DEVICE1, False))]),
    "all-devices-no-slices-prioritized-list": Case(
        claims=[_prioritized_all_first(CLASS_B)], classes=[A, B],
        slices=[slice_with_one_device(SLICE2, NODE1, POOL2, DRIVER_B)], node=N1,
        expect=[allocation_result(LOCAL1, device_allocation_result(REQ0_SUB1, DRIVER_B, POOL2, DEVICE1, False))]),
    "all-devices-some-allocated-prioritized-list": Case(
        claims=[_prioritized_all_first(CLASS_B)], classes=[A, B],
        allocated_devices=[(DRIVER_A, POOL1, DEVICE1)],
        slices=[slice_with_devices(SLICE1, NODE1, POOL1, DRIVER_A, device(DEVICE1), device(DEVICE2)),
                slice_with_one_device(SLICE2, NODE1, POOL2, DRIVER_B)],
        node=N1,
        expect=[allocation_result(LOCAL1, device_allocation_result(REQ0_SUB1, DRIVER_B, POOL2, DEVICE1, False))]),
    "network-attached-device": Case(
        claims=[claim_with_request(CLAIM0, REQ0, CLASS_A)], classes=[A],
        slices=[slice_with_one_device(SLICE1, node_label_selector(REGION_KEY, REGION1), POOL1, DRIVER_A)],
        node=N1,
        expect=[allocation_result(node_label_selector(REGION_KEY, REGION1),
                                  device_allocation_result(REQ0, DRIVER_A, POOL1, DEVICE1, False))]),
    "unsuccessful-allocation-network-attached-device": Case(
        claims=[claim_with_request(CLAIM0, REQ0, CLASS_A)], classes=[A],
        slices=[slice_with_one_device(SLICE1, node_label_selector(REGION_KEY, REGION1), POOL1, DRIVER_A)],
        node=node(NODE2, REGION2)),  # wrong region, no devices available
    "many-network-attached-devices": Case(
        claims=[claim_with_requests(CLAIM0, None, request(REQ0, CLASS_A, 4))], classes=[A],
        slices=[slice_with_one_device(SLICE1, node_label_selector(REGION_KEY, REGION1), POOL1, DRIVER_A),
                slice_with_one_device(SLICE1, NODE_SELECTION_ALL, POOL2, DRIVER_A),
                slice_with_one_device(SLICE1, node_label_selector(PLANET_KEY, PLANET_VALUE_EARTH), POOL3, DRIVER_A),
                slice_with_one_device(SLICE1, local_node_selector(NODE1), POOL4, DRIVER_A)],
        node=N1,
        # A union of the individual selectors.
        expect=[allocation_result(
            {"nodeSelectorTerms": [{
                "matchExpressions": [{"key": REGION_KEY, "operator": "In", "values": [REGION1]},
                                     {"key": PLANET_KEY, "operator": "In", "values": [PLANET_VALUE_EARTH]}],
                "matchFields": [{"key": FIELD_NAME_KEY, "operator": "In", "values": [NODE1]}]}]},
            device_allocation_result(REQ0, DRIVER_A, POOL1, DEVICE1, False),
            device_allocation_result(REQ0, DRIVER_A, POOL2, DEVICE1, False),
            device_allocation_result(REQ0, DRIVER_A, POOL3, DEVICE1, False),
            device_allocation_result(REQ0, DRIVER_A, POOL4, DEVICE1, False))]),
    "local-and-network-attached-devices": Case(
        claims=[claim_with_requests(CLAIM0, None, request(REQ0, CLASS_A, 2))], classes=[A],
        slices=[slice_with_one_device(SLICE1, node_label_selector(REGION_KEY, REGION1), POOL1, DRIVER_A),
                slice_with_one_device(SLICE1, NODE1, POOL2, DRIVER_A)],
        node=N1,
        # Once there is any node-local device, the selector is for that node.
        expect=[allocation_result(LOCAL1, device_allocation_result(REQ0, DRIVER_A, POOL1, DEVICE1, False),
                                  device_allocation_result(REQ0, DRIVER_A, POOL2, DEVICE1, False))]),
    "several-different-drivers": Case(
        claims=[claim_with_request(CLAIM0, REQ0, CLASS_A), claim_with_request(CLAIM0, REQ0, CLASS_B)],
        classes=[A, B],
        slices=[slice_with_devices(SLICE1, NODE1, POOL1, DRIVER_A, device(DEVICE1), device(DEVICE2)),
                slice_with_one_device(SLICE1, NODE1, POOL1, DRIVER_B)],
        node=N1,
        expect=[allocation_result(LOCAL1, device_allocation_result(REQ0, DRIVER_A, POOL1, DEVICE1, False)),
                allocation_result(LOCAL1, device_allocation_result(REQ0, DRIVER_B, POOL1, DEVICE1, False))]),
    "already-allocated-devices": Case(
        claims=[claim_with_request(CLAIM0, REQ0, CLASS_A)], classes=[A],
        allocated_devices=[(DRIVER_A, POOL1, DEVICE1), (DRIVER_A, POOL1, DEVICE2)],
        slices=[slice_with_one_device(SLICE1, NODE1, POOL1, DRIVER_A)], node=N1),
    "admin-access-enabled": Case(
        claims=[with_request_fields(claim_with_request(CLAIM0, REQ0, CLASS_A), adminAccess=True)], classes=[A],
        allocated_devices=[(DRIVER_A, POOL1, DEVICE1), (DRIVER_A, POOL1, DEVICE2)],
        slices=[slice_with_one_device(SLICE1, NODE1, POOL1, DRIVER_A)], node=N1,
        expect=[allocation_result(LOCAL1, device_allocation_result(REQ0, DRIVER_A, POOL1, DEVICE1, True))]),
    "with-constraint": Case(
        claims=[claim_with_requests(CLAIM0, [{"matchAttribute": INT_ATTRIBUTE}, {"matchAttribute": VERSION_ATTRIBUTE},
                                             {"matchAttribute": STRING_ATTRIBUTE}, {"matchAttribute": BOOL_ATTRIBUTE}],
                                    request(REQ0, CLASS_A, 1), request(REQ1, CLASS_A, 1))],
        classes=[A],
        slices=[slice_with_devices(SLICE1, NODE1, POOL1, DRIVER_A, device(DEVICE1, None, _FULL_ATTRS),
                                   device(DEVICE2, None, _FULL_ATTRS))],
        node=N1,
        expect=[allocation_result(LOCAL1, device_allocation_result(REQ0, DRIVER_A, POOL1, DEVICE1, False),
                                  device_allocation_result(REQ1, DRIVER_A, POOL1, DEVICE2, False))]),
    "with-constraint-non-existent-attribute": Case(
        claims=[claim_with_request(CLAIM0, REQ0, CLASS_A, {"matchAttribute": NON_EXISTENT_ATTRIBUTE})], classes=[A],
        slices=[slice_with_one_device(SLICE1, NODE1, POOL1, DRIVER_A)], node=N1),
    "with-constraint-not-matching-int-attribute": Case(
        claims=[claim_with_requests(CLAIM0, [{"matchAttribute": INT_ATTRIBUTE}], request(REQ0, CLASS_A, 2))],
        classes=[A, B],
        slices=[slice_with_devices(SLICE1, NODE1, POOL1, DRIVER_A, device(DEVICE1, None, attrs(numa=1)),
                                   device(DEVICE2, None, attrs(numa=2)))],
        node=N1),
    "with-constraint-not-matching-int-attribute-all-devices": Case(
        claims=[with_request_fields(claim_with_requests(CLAIM0, [{"matchAttribute": INT_ATTRIBUTE}],
                                                        request(REQ0, CLASS_A, 0)), allocationMode="All")],
        classes=[A, B],
        slices=[slice_with_devices(SLICE1, NODE1, POOL1, DRIVER_A, device(DEVICE1, None, attrs(numa=1)),
                                   device(DEVICE2, None, attrs(numa=2)))],
        node=N1,
        error="claim claim-0, request req-0: cannot add device driver-a/pool-1/device-2 because a claim constraint "
              "would not be satisfied"),
    "with-constraint-not-matching-string-attribute": Case(
        claims=[claim_with_requests(CLAIM0, [{"matchAttribute": STRING_ATTRIBUTE}], request(REQ0, CLASS_A, 2))],
        classes=[A, B],
        slices=[slice_with_devices(SLICE1, NODE1, POOL1, DRIVER_A,
                                   device(DEVICE1, None, attrs(stringAttribute="stringAttributeValue")),
                                   device(DEVICE2, None, attrs(stringAttribute="stringAttributeValue2")))],
        node=N1),
    "with-constraint-not-matching-bool-attribute": Case(
        claims=[claim_with_requests(CLAIM0, [{"matchAttribute": BOOL_ATTRIBUTE}], request(REQ0, CLASS_A, 2))],
        classes=[A, B],
        slices=[slice_with_devices(SLICE1, NODE1, POOL1, DRIVER_A, device(DEVICE1, None, attrs(boolAttribute=True)),
                                   device(DEVICE2, None, attrs(boolAttribute=False)))],
        node=N1),
    "with-constraint-not-matching-version-attribute": Case(
        claims=[claim_with_requests(CLAIM0, [{"matchAttribute": VERSION_ATTRIBUTE}], request(REQ0, CLASS_A, 2))],
        classes=[A, B],
        slices=[slice_with_devices(SLICE1, NODE1, POOL1, DRIVER_A,
                                   device(DEVICE1, None, attrs(driverVersion=V("1.0.0"))),
                                   device(DEVICE2, None, attrs(driverVersion=V("2.0.0"))))],
        node=N1),
    "with-constraint-for-request": Case(
        claims=[claim_with_requests(CLAIM0, [{"requests": [REQ0], "matchAttribute": VERSION_ATTRIBUTE}],
                                    request(REQ0, CLASS_A, 1), request(REQ1, CLASS_A, 1))],
        classes=[A, B],
        slices=[slice_with_devices(SLICE1, NODE1, POOL1, DRIVER_A,
                                   device(DEVICE1, None, attrs(driverVersion=V("1.0.0"))),
                                   device(DEVICE2, None, attrs(driverVersion=V("2.0.0"))))],
        node=N1,
        expect=[allocation_result(LOCAL1, device_allocation_result(REQ0, DRIVER_A, POOL1, DEVICE1, False),
                                  device_allocation_result(REQ1, DRIVER_A, POOL1, DEVICE2, False))]),
    "with-constraint-for-request-retry": Case(
        claims=[claim_with_requests(CLAIM0, [{"requests": [REQ0], "matchAttribute": VERSION_ATTRIBUTE},
                                             {"matchAttribute": STRING_ATTRIBUTE}],
                                    request(REQ0, CLASS_A, 1), request(REQ1, CLASS_A, 1))],
        classes=[A, B],
        slices=[slice_with_devices(
            SLICE1, NODE1, POOL1, DRIVER_A,
            # This device does not satisfy the second match attribute, so the allocator must backtrack.
            device(DEVICE1, None, attrs(driverVersion=V("1.0.0"), stringAttribute="a")),
            device(DEVICE2, None, attrs(driverVersion=V("2.0.0"), stringAttribute="b")),
            device(DEVICE3, None, attrs(driverVersion=V("3.0.0"), stringAttribute="b")))],
        node=N1,
        expect=[allocation_result(LOCAL1, device_allocation_result(REQ0, DRIVER_A, POOL1, DEVICE2, False),
                                  device_allocation_result(REQ1, DRIVER_A, POOL1, DEVICE3, False))]),
    "with-class-device-config": Case(
        claims=[claim_with_request(CLAIM0, REQ0, CLASS_A)],
        classes=[class_with_config(CLASS_A, DRIVER_A, "classAttribute")],
        slices=[slice_with_one_device(SLICE1, NODE1, POOL1, DRIVER_A)], node=N1,
        expect=[allocation_result_with_configs(
            LOCAL1, [device_allocation_result(REQ0, DRIVER_A, POOL1, DEVICE1, False)],
            [{"source": "FromClass", "requests": [REQ0], **device_configuration(DRIVER_A, "classAttribute")}])]),
    "with-class-device-config-with-multiple-request-and-configs": Case(
        claims=[claim_with_requests(CLAIM0, [], request(REQ0, CLASS_A, 1), request(REQ1, CLASS_A, 1),
                                    request(REQ2, CLASS_B, 1))],
        classes=[class_with_config(CLASS_A, DRIVER_A, "classAttribute-A"),
                 class_with_config(CLASS_B, DRIVER_B, "classAttribute-B")],
        slices=[slice_with_multiple_devices(SLICE1, NODE1, POOL1, DRIVER_A, 2),
                slice_with_one_device(SLICE2, NODE1, POOL1, DRIVER_B)],
        node=N1,
        expect=[allocation_result_with_configs(
            LOCAL1,
            [device_allocation_result(REQ0, DRIVER_A, POOL1, DEVICE0, False),
             device_allocation_result(REQ1, DRIVER_A, POOL1, DEVICE1, False),
             device_allocation_result(REQ2, DRIVER_B, POOL1, DEVICE1, False)],
            [{"source": "FromClass", "requests": [REQ0, REQ1], **device_configuration(DRIVER_A, "classAttribute-A")},
             {"source": "FromClass", "requests": [REQ2], **device_configuration(DRIVER_B, "classAttribute-B")}])]),
    "claim-with-device-config": Case(
        claims=[claim_with_device_config(CLAIM0, REQ0, CLASS_A, DRIVER_A, "deviceAttribute")], classes=[A],
        slices=[slice_with_one_device(SLICE1, NODE1, POOL1, DRIVER_A)], node=N1,
        expect=[allocation_result_with_config(LOCAL1, DRIVER_A, "FromClaim", "deviceAttribute",
                                              device_allocation_result(REQ0, DRIVER_A, POOL1, DEVICE1, False))]),
    "unknown-selector": Case(
        claims=[with_request_fields(claim_with_request(CLAIM0, REQ0, CLASS_A), selectors=[{}])],  # a future kind
        classes=[A], slices=[slice_with_one_device(SLICE1, NODE1, POOL1, DRIVER_A)], node=N1,
        error="CEL expression empty (unsupported selector type?)"),
    "unknown-allocation-mode": Case(
        claims=[with_request_fields(claim_with_request(CLAIM0, REQ0, CLASS_A), allocationMode="future-mode")],
        classes=[A], slices=[slice_with_one_device(SLICE1, NODE1, POOL1, DRIVER_A)], node=N1,
        error="unsupported count mode future-mode"),
    "unknown-constraint": Case(
        claims=[claim_with_request(CLAIM0, REQ0, CLASS_A, {})],  # empty = unknown
        classes=[A], slices=[slice_with_one_device(SLICE1, NODE1, POOL1, DRIVER_A)], node=N1,
        error="empty constraint (unsupported constraint type?)"),
    "invalid-CEL-one-device": Case(
        claims=[with_request_fields(claim_with_request(CLAIM0, REQ0, CLASS_A), selectors=[cel_selector("noSuchVar")])],
        classes=[A], slices=[slice_with_one_device(SLICE1, NODE1, POOL1, DRIVER_A)], node=N1,
        error="undeclared reference"),
    "invalid-CEL-one-device-class": Case(
        claims=[claim_with_request(CLAIM0, REQ0, CLASS_A)],
        classes=[{"metadata": {"name": CLASS_A}, "spec": {"selectors": [cel_selector("noSuchVar")]}}],
        slices=[slice_with_one_device(SLICE1, NODE1, POOL1, DRIVER_A)], node=N1,
        error="undeclared reference"),
    "invalid-CEL-all-devices": Case(
        claims=[with_request_fields(claim_with_request(CLAIM0, REQ0, CLASS_A), selectors=[cel_selector("noSuchVar")],
                                    allocationMode="All")],
        classes=[A], slices=[slice_with_one_device(SLICE1, NODE1, POOL1, DRIVER_A)], node=N1,
        error="undeclared reference"),
    "too-many-devices-single-request": Case(
        claims=[claim_with_requests(CLAIM0, None, request(REQ0, CLASS_A, 500))], classes=[A],
        error="exceeds the claim limit"),
    "many-devices-okay": Case(
        claims=[claim_with_requests(CLAIM0, None, request(REQ0, CLASS_A, MAX_RESULTS))], classes=[A]),
    "too-many-devices-total": Case(
        claims=[claim_with_requests(CLAIM0, None, request(REQ0, CLASS_A, MAX_RESULTS), request(REQ1, CLASS_A, 1))],
        classes=[A], slices=[slice_with_multiple_devices(SLICE1, NODE1, POOL1, DRIVER_A, MAX_RESULTS + 1)], node=N1,
        error="exceeds the claim limit"),
    "all-devices-invalid-CEL": Case(
        claims=[claim_with_requests(CLAIM0, None, request(REQ0, CLASS_A, 500))], classes=[A],
        error="exceeds the claim limit"),
    "prioritized-list-first-unavailable": Case(
        claims=[claim(CLAIM0).with_requests(request_with_prioritized_list(
            REQ0, sub_request(SUB_REQ0, CLASS_B, 1), sub_request(SUB_REQ1, CLASS_A, 1)))],
        classes=[A, B], slices=[slice_with_one_device(SLICE1, NODE1, POOL1, DRIVER_A)], node=N1,
        expect=[allocation_result(LOCAL1, device_allocation_result(REQ0_SUB1, DRIVER_A, POOL1, DEVICE1, False))]),
    "prioritized-list-non-available": Case(
        claims=[claim(CLAIM0).with_requests(request_with_prioritized_list(
            REQ0, sub_request(SUB_REQ0, CLASS_B, 2), sub_request(SUB_REQ1, CLASS_A, 2)))],
        classes=[A, B],
        slices=[slice_with_one_device(SLICE1, NODE1, POOL1, DRIVER_A),
                slice_with_one_device(SLICE2, NODE1, POOL2, DRIVER_B)],
        node=N1),
    "prioritized-list-device-config": Case(
        claims=[claim(CLAIM0).with_requests(request_with_prioritized_list(
            REQ0, sub_request(SUB_REQ0, CLASS_A, 1), sub_request(SUB_REQ1, CLASS_B, 2))).with_configs([
                device_claim_config([REQ0_SUB0], device_configuration(DRIVER_A, "foo")),
                device_claim_config([REQ0_SUB1], device_configuration(DRIVER_B, "bar"))])],
        classes=[A, B],
        slices=[slice_with_devices(SLICE1, NODE1, POOL1, DRIVER_B, device(DEVICE1, None, {}),
                                   device(DEVICE2, None, {}))],
        node=N1,
        expect=[allocation_result_with_configs(
            LOCAL1,
            [device_allocation_result(REQ0_SUB1, DRIVER_B, POOL1, DEVICE1, False),
             device_allocation_result(REQ0_SUB1, DRIVER_B, POOL1, DEVICE2, False)],
            [{"source": "FromClaim", "requests": [REQ0_SUB1], **device_configuration(DRIVER_B, "bar")}])]),
    "prioritized-list-class-config": Case(
        claims=[claim(CLAIM0).with_requests(request_with_prioritized_list(
            REQ0, sub_request(SUB_REQ0, CLASS_A, 2), sub_request(SUB_REQ1, CLASS_B, 2)))],
        classes=[class_with_config(CLASS_A, DRIVER_A, "foo"), class_with_config(CLASS_B, DRIVER_B, "bar")],
        slices=[slice_with_devices(SLICE1, NODE1, POOL1, DRIVER_B, device(DEVICE1), device(DEVICE2)),
                slice_with_devices(SLICE2, NODE1, POOL2, DRIVER_A, device(DEVICE3))],
        node=N1,
        expect=[allocation_result_with_configs(
            LOCAL1,
            [device_allocation_result(REQ0_SUB1, DRIVER_B, POOL1, DEVICE1, False),
             device_allocation_result(REQ0_SUB1, DRIVER_B, POOL1, DEVICE2, False)],
            [{"source": "FromClass", "requests": [REQ0_SUB1], **device_configuration(DRIVER_B, "bar")}])]),
    "prioritized-list-subrequests-with-expressions": Case(
        claims=[claim(CLAIM0).with_requests(
            device_request(REQ0, CLASS_A, 1).with_selectors(capacity_memory_selector("1Gi")),
            request_with_prioritized_list(REQ1, sub_request(SUB_REQ0, CLASS_A, 1, capacity_memory_selector("4Gi")),
                                          sub_request(SUB_REQ1, CLASS_A, 2, capacity_memory_selector("2Gi"))))],
        classes=[A],
        slices=[slice_with_devices(SLICE1, NODE1, POOL1, DRIVER_A, device(DEVICE1, mem("2Gi")),
                                   device(DEVICE2, mem("2Gi")), device(DEVICE3, mem("1Gi")))],
        node=N1,
        expect=[allocation_result(LOCAL1, device_allocation_result(REQ0, DRIVER_A, POOL1, DEVICE3, False),
                                  device_allocation_result(REQ1_SUB1, DRIVER_A, POOL1, DEVICE1, False),
                                  device_allocation_result(REQ1_SUB1, DRIVER_A, POOL1, DEVICE2, False))]),
    "prioritized-list-subrequests-with-constraints-ref-parent-request": Case(
        claims=[claim(CLAIM0).with_constraints({"requests": [REQ0, REQ1], "matchAttribute": VERSION_ATTRIBUTE})
                .with_requests(
                    device_request(REQ0, CLASS_A, 1).with_selectors(capacity_memory_selector("8Gi")),
                    request_with_prioritized_list(
                        REQ1, sub_request(SUB_REQ0, CLASS_A, 1, capacity_memory_selector("2Gi")),
                        sub_request(SUB_REQ1, CLASS_A, 1, capacity_memory_selector("1Gi"))))],
        classes=[A],
        slices=[slice_with_devices(SLICE1, NODE1, POOL1, DRIVER_A,
                                   device(DEVICE1, mem("8Gi"), attrs(driverVersion=V("1.0.0")))),
                slice_with_devices(SLICE2, NODE1, POOL2, DRIVER_A,
                                   device(DEVICE2, mem("2Gi"), attrs(driverVersion=V("2.0.0"))),
                                   device(DEVICE3, mem("1Gi"), attrs(driverVersion=V("1.0.0"))))],
        node=N1,
        expect=[allocation_result(LOCAL1, device_allocation_result(REQ0, DRIVER_A, POOL1, DEVICE1, False),
                                  device_allocation_result(REQ1_SUB1, DRIVER_A, POOL2, DEVICE3, False))]),
    "prioritized-list-subrequests-with-constraints-ref-sub-request": Case(
        claims=[claim(CLAIM0).with_constraints({"requests": [REQ0, "req-1/subReq-0"],
                                                "matchAttribute": VERSION_ATTRIBUTE})
                .with_requests(
                    device_request(REQ0, CLASS_A, 1).with_selectors(capacity_memory_selector("8Gi")),
                    request_with_prioritized_list(
                        REQ1, sub_request(SUB_REQ0, CLASS_A, 1, capacity_memory_selector("2Gi")),
                        sub_request(SUB_REQ1, CLASS_A, 1, capacity_memory_selector("1Gi"))))],
        classes=[A],
        slices=[slice_with_devices(SLICE1, NODE1, POOL1, DRIVER_A,
                                   device(DEVICE1, mem("8Gi"), attrs(driverVersion=V("1.0.0")))),
                slice_with_devices(SLICE2, NODE1, POOL2, DRIVER_A,
                                   device(DEVICE2, mem("2Gi"), attrs(driverVersion=V("2.0.0"))))],
        node=N1,
        expect=[allocation_result(LOCAL1, device_allocation_result(REQ0, DRIVER_A, POOL1, DEVICE1, False),
                                  device_allocation_result(REQ1_SUB1, DRIVER_A, POOL2, DEVICE2, False))]),
    "prioritized-list-subrequests-with-allocation-mode-all": Case(
        claims=[claim(CLAIM0).with_requests(request_with_prioritized_list(
            REQ0, sub_request(SUB_REQ0, CLASS_A, 0).with_allocation_mode("All"), sub_request(SUB_REQ1, CLASS_A, 1)))],
        classes=[A], allocated_devices=[(DRIVER_A, POOL1, DEVICE1)],
        slices=[slice_with_devices(SLICE1, NODE1, POOL1, DRIVER_A, device(DEVICE1), device(DEVICE2))], node=N1,
        expect=[allocation_result(LOCAL1, device_allocation_result(REQ0_SUB1, DRIVER_A, POOL1, DEVICE2, False))]),
    "prioritized-list-allocation-mode-all-multiple-requests": Case(
        claims=[claim(CLAIM0).with_requests(
            device_request(REQ0, CLASS_A, 1),
            request_with_prioritized_list(REQ1, sub_request(SUB_REQ0, CLASS_A, 0).with_allocation_mode("All"),
                                          sub_request(SUB_REQ1, CLASS_A, 1)))],
        classes=[A],
        slices=[slice_with_devices(SLICE1, NODE1, POOL1, DRIVER_A, device(DEVICE1), device(DEVICE2))], node=N1,
        expect=[allocation_result(LOCAL1, device_allocation_result(REQ0, DRIVER_A, POOL1, DEVICE1, False),
                                  device_allocation_result(REQ1_SUB1, DRIVER_A, POOL1, DEVICE2, False))]),
    "prioritized-list-multi-request": Case(
        claims=[claim(CLAIM0).with_requests(
            device_request(REQ1, CLASS_A, 1).with_selectors(capacity_memory_selector("8Gi")),
            request_with_prioritized_list(REQ0, sub_request(SUB_REQ0, CLASS_A, 1, capacity_memory_selector("8Gi")),
                                          sub_request(SUB_REQ1, CLASS_A, 1, capacity_memory_selector("4Gi"))))],
        classes=[A],
        slices=[slice_with_devices(SLICE1, NODE1, POOL1, DRIVER_A, device(DEVICE1, mem("8Gi"), {})),
                slice_with_devices(SLICE2, NODE1, POOL2, DRIVER_A, device(DEVICE2, mem("4Gi"), {}))],
        node=N1,
        expect=[allocation_result(LOCAL1, device_allocation_result(REQ1, DRIVER_A, POOL1, DEVICE1, False),
                                  device_allocation_result(REQ0_SUB1, DRIVER_A, POOL2, DEVICE2, False))]),
    "prioritized-list-with-backtracking": Case(
        claims=[claim(CLAIM0).with_requests(
            request_with_prioritized_list(REQ0, sub_request(SUB_REQ0, CLASS_A, 1, capacity_memory_selector("8Gi")),
                                          sub_request(SUB_REQ1, CLASS_A, 1, capacity_memory_selector("4Gi"))),
            device_request(REQ1, CLASS_A, 1).with_selectors(capacity_memory_selector("8Gi")))],
        classes=[A],
        slices=[slice_with_devices(SLICE1, NODE1, POOL1, DRIVER_A, device(DEVICE1, mem("8Gi"), {})),
                slice_with_devices(SLICE2, NODE1, POOL2, DRIVER_A, device(DEVICE2, mem("4Gi"), {}))],
        node=N1,
        expect=[allocation_result(LOCAL1, device_allocation_result(REQ0_SUB1, DRIVER_A, POOL2, DEVICE2, False),
                                  device_allocation_result(REQ1, DRIVER_A, POOL1, DEVICE1, False))]),
    "prioritized-list-too-many-in-first-subrequest": Case(
        claims=[claim(CLAIM0).with_requests(request_with_prioritized_list(
            REQ0, sub_request(SUB_REQ0, CLASS_B, 500), sub_request(SUB_REQ1, CLASS_A, 1)))],
        classes=[A, B], slices=[slice_with_one_device(SLICE1, NODE1, POOL1, DRIVER_A)], node=N1,
        expect=[allocation_result(LOCAL1, device_allocation_result(REQ0_SUB1, DRIVER_A, POOL1, DEVICE1, False))]),
}


def _counter_slice(name: str, pool: Any, counter_sets: dict[str, dict[str, str]], driver: str = DRIVER_A,
                   node_selection: Any = NODE1) -> JSON:
    """A slice with counter sets {set name: {counter: quantity}}."""
    return slice_with_counter_sets(name, node_selection, pool, driver,
                                   *(counter_set(n, c) for n, c in counter_sets.items()))


def _consume(name: str, sets: dict[str, dict[str, str]], capacity: Any = None, attributes: JSON | None = None) -> Any:
    """A device consuming counters {set name: {counter: quantity}}."""
    return device(name, capacity, attributes).with_device_counter_consumption(
        *(device_counter_consumption(n, c) for n, c in sets.items()))


CS1 = COUNTER_SET1
CS2 = COUNTER_SET2


def _three_partitions(memories: tuple[str, str, str] = ("4Gi", "6Gi", "4Gi")) -> list[Any]:
    return [_consume(d, {CS1: mem(m)}, FROM_COUNTERS) for d, m in zip((DEVICE1, DEVICE2, DEVICE3), memories,
                                                                        strict=True)]


CASES.update({
    "partitionable-devices-single-device": Case(
        claims=[claim_with_requests(CLAIM0, None, request(REQ0, CLASS_A, 1))], classes=[A],
        slices=[slice_with_devices(SLICE1, NODE1, resource_pool(POOL1, 2), DRIVER_A,
                                   _consume(DEVICE1, {CS1: mem("4Gi")})),
                _counter_slice(SLICE2, resource_pool(POOL1, 2), {CS1: mem("8Gi")})],
        node=N1,
        expect=[allocation_result(LOCAL1, device_allocation_result(REQ0, DRIVER_A, POOL1, DEVICE1, False))]),
    "partitionable-devices-prioritized-list": Case(
        claims=[claim(CLAIM0).with_requests(
            device_request(REQ0, CLASS_A, 1),
            request_with_prioritized_list(REQ1, sub_request(SUB_REQ0, CLASS_A, 1, capacity_memory_selector("6Gi")),
                                          sub_request(SUB_REQ1, CLASS_A, 1, capacity_memory_selector("4Gi"))))],
        classes=[A],
        slices=[slice_with_devices(SLICE1, NODE1, resource_pool(POOL1, 2), DRIVER_A, *_three_partitions()),
                _counter_slice(SLICE2, resource_pool(POOL1, 2), {CS1: mem("8Gi")})],
        node=N1,
        expect=[allocation_result(LOCAL1, device_allocation_result(REQ0, DRIVER_A, POOL1, DEVICE1, False),
                                  device_allocation_result(REQ1_SUB1, DRIVER_A, POOL1, DEVICE3, False))]),
    "partitionable-devices-multiple-devices": Case(
        claims=[claim_with_requests(CLAIM0, None, request(REQ0, CLASS_A, 1), request(REQ1, CLASS_A, 1))],
        classes=[A],
        slices=[slice_with_devices(SLICE1, NODE1, resource_pool(POOL1, 2), DRIVER_A, *_three_partitions()),
                _counter_slice(SLICE2, resource_pool(POOL1, 2), {CS1: mem("8Gi")})],
        node=N1,
        expect=[allocation_result(LOCAL1, device_allocation_result(REQ0, DRIVER_A, POOL1, DEVICE1, False),
                                  device_allocation_result(REQ1, DRIVER_A, POOL1, DEVICE3, False))]),
    "partitionable-devices-multiple-capacity-pools": Case(
        claims=[claim(CLAIM0).with_requests(
            device_request(REQ0, CLASS_A, 1),
            request_with_prioritized_list(REQ1, sub_request(SUB_REQ0, CLASS_A, 1, capacity_memory_selector("6Gi")),
                                          sub_request(SUB_REQ1, CLASS_A, 1, capacity_memory_selector("4Gi"))))],
        classes=[A],
        slices=[slice_with_devices(SLICE1, NODE1, resource_pool(POOL1, 2), DRIVER_A,
                                   _consume(DEVICE1, {CS1: mem("4Gi"), CS2: {"cpus": "4"}}, FROM_COUNTERS),
                                   _consume(DEVICE2, {CS1: mem("6Gi"), CS2: {"cpus": "6"}}, FROM_COUNTERS),
                                   _consume(DEVICE3, {CS1: mem("4Gi"), CS2: {"cpus": "4"}}, FROM_COUNTERS)),
                _counter_slice(SLICE2, resource_pool(POOL1, 2), {CS1: mem("18Gi"), CS2: {"cpus": "8"}})],
        node=N1,
        expect=[allocation_result(LOCAL1, device_allocation_result(REQ0, DRIVER_A, POOL1, DEVICE1, False),
                                  device_allocation_result(REQ1_SUB1, DRIVER_A, POOL1, DEVICE3, False))]),
    "partitionable-devices-multiple-counters": Case(
        claims=[claim_with_requests(CLAIM0, None, request(REQ0, CLASS_A, 1), request(REQ1, CLASS_A, 1))],
        classes=[A],
        slices=[slice_with_devices(
            SLICE1, NODE1, resource_pool(POOL1, 2), DRIVER_A,
            _consume(DEVICE1, {CS1: {"memory": "4Gi", "cpus": "6"}, CS2: {"cpus": "4", "memory": "2Gi"}},
                     FROM_COUNTERS),
            _consume(DEVICE2, {CS1: {"memory": "6Gi", "cpus": "4"}, CS2: {"cpus": "6", "memory": "6Gi"}},
                     FROM_COUNTERS),
            _consume(DEVICE3, {CS1: {"memory": "4Gi", "cpus": "4"}, CS2: {"cpus": "4", "memory": "4Gi"}},
                     FROM_COUNTERS)),
            _counter_slice(SLICE2, resource_pool(POOL1, 2), {CS1: {"cpus": "8", "memory": "18Gi"},
                                                             CS2: {"cpus": "12", "memory": "18Gi"}})],
        node=N1,
        expect=[allocation_result(LOCAL1, device_allocation_result(REQ0, DRIVER_A, POOL1, DEVICE2, False),
                                  device_allocation_result(REQ1, DRIVER_A, POOL1, DEVICE3, False))]),
    "partitionable-devices-multiple-pools": Case(
        claims=[claim_with_requests(CLAIM0, None, request(REQ0, CLASS_A, 1), request(REQ1, CLASS_A, 1))],
        classes=[A],
        slices=[slice_with_devices(SLICE1, NODE1, resource_pool(POOL1, 2), DRIVER_A,
                                   _consume(DEVICE1, {CS1: {"cpus": "6", "memory": "4Gi"}}, FROM_COUNTERS),
                                   _consume(DEVICE2, {CS1: {"cpus": "4", "memory": "6Gi"}}, FROM_COUNTERS),
                                   _consume(DEVICE3, {CS1: {"cpus": "4", "memory": "4Gi"}}, FROM_COUNTERS)),
                _counter_slice(SLICE2, resource_pool(POOL1, 2), {CS1: {"cpus": "8", "memory": "18Gi"}}),
                slice_with_devices(SLICE3, NODE1, resource_pool(POOL2, 2), DRIVER_A,
                                   _consume(DEVICE1, {CS1: {"cpus": "6", "memory": "4Gi"}}, FROM_COUNTERS),
                                   _consume(DEVICE2, {CS1: {"cpus": "1", "memory": "7Gi"}}, FROM_COUNTERS),
                                   _consume(DEVICE3, {CS1: {"cpus": "1", "memory": "7Gi"}}, FROM_COUNTERS)),
                _counter_slice(SLICE4, resource_pool(POOL2, 2), {CS1: {"cpus": "8", "memory": "18Gi"}})],
        allocated_devices=[(DRIVER_A, POOL1, DEVICE2), (DRIVER_A, POOL1, DEVICE3), (DRIVER_A, POOL2, DEVICE1)],
        node=N1,
        expect=[allocation_result(LOCAL1, device_allocation_result(REQ0, DRIVER_A, POOL2, DEVICE2, False),
                                  device_allocation_result(REQ1, DRIVER_A, POOL2, DEVICE3, False))]),
    "partitionable-devices-unused-counters-in-counter-set": Case(
        claims=[claim_with_requests(CLAIM0, None, request(REQ0, CLASS_A, 2))], classes=[A],
        slices=[slice_with_devices(SLICE1, NODE1, resource_pool(POOL1, 2), DRIVER_A,
                                   _consume(DEVICE1, {CS1: mem("5Gi")}), _consume(DEVICE2, {CS1: mem("4Gi")}),
                                   _consume(DEVICE3, {CS1: mem("4Gi")})),
                _counter_slice(SLICE2, resource_pool(POOL1, 2), {CS1: {"memory": "8Gi", "unused": "1Gi"}})],
        node=N1,
        expect=[allocation_result(LOCAL1, device_allocation_result(REQ0, DRIVER_A, POOL1, DEVICE2, False),
                                  device_allocation_result(REQ0, DRIVER_A, POOL1, DEVICE3, False))]),
    "partitionable-devices-no-capacity-available": Case(
        claims=[claim_with_requests(CLAIM0, None, request(REQ0, CLASS_A, 1))], classes=[A],
        slices=[slice_with_devices(SLICE1, NODE1, POOL1, DRIVER_A,
                                   _consume(DEVICE1, {CS1: mem("4Gi")}, FROM_COUNTERS),
                                   _consume(DEVICE2, {CS1: mem("16Gi")}, FROM_COUNTERS)),
                _counter_slice(SLICE2, POOL1, {CS1: mem("18Gi")})],
        allocated_devices=[(DRIVER_A, POOL1, DEVICE2)], node=N1),
    "partitionable-devices-overallocated-capacity-pool": Case(
        claims=[claim_with_requests(CLAIM0, None, request(REQ0, CLASS_A, 1))], classes=[A],
        slices=[slice_with_devices(SLICE1, NODE1, POOL1, DRIVER_A,
                                   _consume(DEVICE1, {CS1: mem("4Gi")}, FROM_COUNTERS),
                                   _consume(DEVICE2, {CS1: mem("20Gi")}, FROM_COUNTERS)),
                _counter_slice(SLICE2, POOL1, {CS1: mem("18Gi")})],
        allocated_devices=[(DRIVER_A, POOL1, DEVICE2)], node=N1),
    "partitionable-devices-per-device-node-selection-nodename": Case(
        claims=[claim(CLAIM0).with_requests(request_with_prioritized_list(
            REQ0, sub_request(SUB_REQ0, CLASS_A, 1, capacity_memory_selector("6Gi")),
            sub_request(SUB_REQ1, CLASS_A, 1, capacity_memory_selector("4Gi"))))],
        classes=[A],
        slices=[slice_with_devices(SLICE1, NODE_SELECTION_PER_DEVICE, resource_pool(POOL1, 2), DRIVER_A,
                                   _consume(DEVICE1, {CS1: mem("4Gi")}, FROM_COUNTERS).with_node_selection(NODE1),
                                   _consume(DEVICE2, {CS1: mem("6Gi")}, FROM_COUNTERS).with_node_selection(NODE2)),
                _counter_slice(SLICE2, resource_pool(POOL1, 2), {CS1: mem("18Gi")},
                               node_selection=NODE_SELECTION_PER_DEVICE)],
        node=N1,
        expect=[allocation_result(LOCAL1, device_allocation_result(REQ0_SUB1, DRIVER_A, POOL1, DEVICE1, False))]),
    "partitionable-devices-per-device-node-selection-node-selector": Case(
        claims=[claim_with_requests(CLAIM0, None, request(REQ0, CLASS_A, 1))], classes=[A],
        slices=[slice_with_devices(SLICE1, NODE_SELECTION_PER_DEVICE, resource_pool(POOL1, 2), DRIVER_A,
                                   _consume(DEVICE1, {CS1: mem("4Gi")}, FROM_COUNTERS).with_node_selection(
                                       node_label_selector(REGION_KEY, REGION1))),
                _counter_slice(SLICE2, resource_pool(POOL1, 2), {CS1: mem("18Gi")},
                               node_selection=NODE_SELECTION_PER_DEVICE)],
        node=N1,
        expect=[allocation_result(node_label_selector(REGION_KEY, REGION1),
                                  device_allocation_result(REQ0, DRIVER_A, POOL1, DEVICE1, False))]),
    "partitionable-devices-per-device-node-selection-node-selector-multiple-devices": Case(
        claims=[claim_with_requests(CLAIM0, None, request(REQ0, CLASS_A, 3), request(REQ1, CLASS_B, 3))],
        classes=[A, B],
        slices=[slice_with_devices(SLICE1, NODE_SELECTION_PER_DEVICE, resource_pool(POOL1, 2), DRIVER_A,
                                   _consume(DEVICE1, {CS1: mem("4Gi")}, FROM_COUNTERS).with_node_selection(
                                       node_label_selector(REGION_KEY, REGION1)),
                                   _consume(DEVICE2, {CS1: mem("4Gi")}, FROM_COUNTERS).with_node_selection(NODE1),
                                   _consume(DEVICE3, {CS1: mem("4Gi")}, FROM_COUNTERS).with_node_selection(
                                       NODE_SELECTION_ALL)),
                _counter_slice(SLICE2, resource_pool(POOL1, 2), {CS1: mem("18Gi")},
                               node_selection=NODE_SELECTION_PER_DEVICE),
                slice_with_devices(SLICE3, NODE1, resource_pool(POOL2, 2), DRIVER_B,
                                   *(_consume(d, {CS2: mem("4Gi")}, FROM_COUNTERS)
                                     for d in (DEVICE1, DEVICE2, DEVICE3))),
                _counter_slice(SLICE4, resource_pool(POOL2, 2), {CS2: mem("12Gi")}, driver=DRIVER_B)],
        node=N1,
        expect=[allocation_result(LOCAL1, *(device_allocation_result(REQ0, DRIVER_A, POOL1, d, False)
                                            for d in (DEVICE1, DEVICE2, DEVICE3)),
                                  *(device_allocation_result(REQ1, DRIVER_B, POOL2, d, False)
                                    for d in (DEVICE1, DEVICE2, DEVICE3)))]),
    "tainted-two-devices": Case(
        claims=[claim_with_request(CLAIM0, REQ0, CLASS_A)], classes=[A],
        slices=[slice_with_devices(SLICE1, NODE1, POOL1, DRIVER_A, device(DEVICE1).with_taints(TAINT_NO_SCHEDULE),
                                   device(DEVICE2).with_taints(TAINT_NO_EXECUTE))],
        node=N1),
    "tainted-one-device-two-taints": Case(
        claims=[claim_with_request(CLAIM0, REQ0, CLASS_A)], classes=[A],
        slices=[slice_with_devices(SLICE1, NODE1, POOL1, DRIVER_A,
                                   device(DEVICE1).with_taints(TAINT_NO_SCHEDULE, TAINT_NO_EXECUTE))],
        node=N1),
    "tainted-two-devices-tolerated": Case(
        claims=[claim_with_request(CLAIM0, REQ0, CLASS_A).with_tolerations(TOLERATION_NO_EXECUTE)], classes=[A],
        slices=[slice_with_devices(SLICE1, NODE1, POOL1, DRIVER_A, device(DEVICE1).with_taints(TAINT_NO_SCHEDULE),
                                   device(DEVICE2).with_taints(TAINT_NO_EXECUTE))],
        node=N1,
        # Only the second device's taints are tolerated.
        expect=[allocation_result(LOCAL1, device_allocation_result(REQ0, DRIVER_A, POOL1, DEVICE2, False,
                                                                   TOLERATION_NO_EXECUTE))]),
    "tainted-two-devices-prioritized-list-tolerated": Case(
        claims=[claim(CLAIM0).with_requests(request_with_prioritized_list(
            REQ0, sub_request(SUB_REQ0, CLASS_A, 1), sub_request(SUB_REQ1, CLASS_A, 1, TOLERATION_NO_EXECUTE)))],
        classes=[A],
        slices=[slice_with_devices(SLICE1, NODE1, POOL1, DRIVER_A, device(DEVICE1).with_taints(TAINT_NO_SCHEDULE),
                                   device(DEVICE2).with_taints(TAINT_NO_EXECUTE))],
        node=N1,
        expect=[allocation_result(LOCAL1, device_allocation_result(REQ0_SUB1, DRIVER_A, POOL1, DEVICE2, False,
                                                                   TOLERATION_NO_EXECUTE))]),
    "tainted-no-effect": Case(
        claims=[claim_with_request(CLAIM0, REQ0, CLASS_A)], classes=[A],
        slices=[slice_with_devices(SLICE1, NODE1, POOL1, DRIVER_A, device(DEVICE1).with_taints(TAINT_NONE))],
        node=N1,
        expect=[allocation_result(LOCAL1, device_allocation_result(REQ0, DRIVER_A, POOL1, DEVICE1, False))]),
    "tainted-one-device-two-taints-both-tolerated": Case(
        claims=[claim_with_request(CLAIM0, REQ0, CLASS_A).with_tolerations(TOLERATION_NO_SCHEDULE,
                                                                           TOLERATION_NO_EXECUTE)],
        classes=[A],
        slices=[slice_with_devices(SLICE1, NODE1, POOL1, DRIVER_A,
                                   device(DEVICE1).with_taints(TAINT_NO_SCHEDULE, TAINT_NO_EXECUTE))],
        node=N1,
        expect=[allocation_result(LOCAL1, device_allocation_result(REQ0, DRIVER_A, POOL1, DEVICE1, False,
                                                                   TOLERATION_NO_SCHEDULE, TOLERATION_NO_EXECUTE))]),
    "tainted-prioritized-list": Case(
        claims=[claim(CLAIM0).with_requests(request_with_prioritized_list(
            REQ0, sub_request(SUB_REQ0, CLASS_B, 1), sub_request(SUB_REQ1, CLASS_A, 1)))],
        classes=[A, B],
        slices=[slice_with_devices(SLICE1, NODE1, POOL1, DRIVER_A, device(DEVICE1).with_taints(TAINT_NO_SCHEDULE))],
        node=N1),
    "tainted-admin-access": Case(
        claims=[with_request_fields(claim_with_request(CLAIM0, REQ0, CLASS_A), adminAccess=True)], classes=[A],
        allocated_devices=[(DRIVER_A, POOL1, DEVICE1), (DRIVER_A, POOL1, DEVICE2)],
        slices=[slice_with_devices(SLICE1, NODE1, POOL1, DRIVER_A, device(DEVICE1).with_taints(TAINT_NO_SCHEDULE))],
        node=N1),
    "tainted-all-devices-single": Case(
        claims=[_all_devices_claim(CLAIM0, CLASS_A)], classes=[A],
        slices=[slice_with_devices(SLICE1, NODE1, POOL1, DRIVER_A, device(DEVICE1).with_taints(TAINT_NO_SCHEDULE))],
        node=N1),
    "prioritized-list-allocation-mode-all": Case(
        claims=[claim(CLAIM0).with_requests(request_with_prioritized_list(
            REQ0, sub_request(SUB_REQ0, CLASS_A, 0).with_allocation_mode("All"), sub_request(SUB_REQ1, CLASS_A, 1)))],
        classes=[A], allocated_devices=[(DRIVER_A, POOL1, DEVICE2)],
        slices=[slice_with_devices(SLICE1, NODE1, POOL1, DRIVER_A, device(DEVICE1), device(DEVICE2))], node=N1,
        expect=[allocation_result(LOCAL1, device_allocation_result(REQ0_SUB1, DRIVER_A, POOL1, DEVICE1, False))]),
})


def _generation_claim() -> Claim:
    """Two `All` subrequests, v6 devices preferred over v5 ones."""
    return claim(CLAIM0).with_requests(request_with_prioritized_list(
        REQ0,
        sub_request(SUB_REQ0, CLASS_A, 0, cel_selector(f'device.attributes["{DRIVER_A}"].generation == "v6"'))
        .with_allocation_mode("All"),
        sub_request(SUB_REQ1, CLASS_A, 0, cel_selector(f'device.attributes["{DRIVER_A}"].generation == "v5"'))
        .with_allocation_mode("All")))


def _binding(name: str, conditions: list[str], failures: list[str], sets: dict[str, dict[str, str]]) -> Any:
    return _consume(name, sets, FROM_COUNTERS).with_binding_conditions(conditions, failures)


def _with_bc(req: str, pool: str, dev: str, conditions: list[str] | None, failures: list[str] | None,
             *tolerations: JSON) -> JSON:
    return device_request_allocation_result_with_binding_conditions(req, DRIVER_A, pool, dev, conditions, failures,
                                                                    *tolerations)


CASES.update({
    # With `All`, at least one device must be allocated, else the next subrequest is tried.
    "prioritized-list-allocation-mode-all-with-selectors": Case(
        claims=[_generation_claim()], classes=[A],
        slices=[slice_with_devices(SLICE1, NODE1, POOL1, DRIVER_A, device(DEVICE1, None, attrs(generation="v5")))],
        node=N1,
        expect=[allocation_result(LOCAL1, device_allocation_result(REQ0_SUB1, DRIVER_A, POOL1, DEVICE1, False))]),
    # All devices the class selects are allocated, across pools.
    "prioritized-list-allocation-mode-all-with-selectors-multiple-pools": Case(
        claims=[_generation_claim()], classes=[A],
        slices=[slice_with_devices(SLICE1, NODE1, POOL1, DRIVER_A, device(DEVICE1, None, attrs(generation="v5"))),
                slice_with_devices(SLICE2, NODE1, POOL2, DRIVER_A, device(DEVICE1, None, attrs(generation="v5")))],
        node=N1,
        expect=[allocation_result(LOCAL1, device_allocation_result(REQ0_SUB1, DRIVER_A, POOL1, DEVICE1, False),
                                  device_allocation_result(REQ0_SUB1, DRIVER_A, POOL2, DEVICE1, False))]),
    # ... as long as they are available on the node.
    "prioritized-list-allocation-mode-all-with-selectors-multiple-pools-across-nodes": Case(
        claims=[_generation_claim()], classes=[A],
        slices=[slice_with_devices(SLICE1, NODE1, POOL1, DRIVER_A, device(DEVICE1, None, attrs(generation="v5"))),
                slice_with_devices(SLICE2, NODE2, POOL2, DRIVER_A, device(DEVICE1, None, attrs(generation="v5")),
                                   device(DEVICE2, None, attrs(generation="v6")))],
        node=N1,
        expect=[allocation_result(LOCAL1, device_allocation_result(REQ0_SUB1, DRIVER_A, POOL1, DEVICE1, False))]),
    # Only devices the device class selects are considered.
    "prioritized-list-allocation-mode-all-with-selectors-deviceclass-subset": Case(
        claims=[_generation_claim()],
        classes=[{"metadata": {"name": CLASS_A}, "spec": {"selectors": [cel_selector(
            f'device.driver == "{DRIVER_A}" && device.attributes["{DRIVER_A}"].selected')]}}],
        slices=[slice_with_devices(SLICE1, NODE1, POOL1, DRIVER_A,
                                   device(DEVICE1, None, attrs(generation="v6", selected=False)),
                                   device(DEVICE2, None, attrs(generation="v5", selected=False)),
                                   device(DEVICE3, None, attrs(generation="v5", selected=True)))],
        node=N1,
        expect=[allocation_result(LOCAL1, device_allocation_result(REQ0_SUB1, DRIVER_A, POOL1, DEVICE3, False))]),
    "max-number-devices": Case(
        claims=[claim_with_requests(CLAIM0, None, request(REQ0, CLASS_A, MAX_RESULTS))], classes=[A],
        slices=[slice_with_multiple_devices(SLICE1, NODE1, POOL1, DRIVER_A, MAX_RESULTS)], node=N1,
        expect=[allocation_result(LOCAL1, *multiple_device_allocation_results(REQ0, DRIVER_A, POOL1, MAX_RESULTS,
                                                                              0))]),
    "partitionable-devices-with-attribute-selector": Case(
        claims=[claim_with_requests(CLAIM0, None, request(REQ0, CLASS_A, 2), request(
            REQ1, CLASS_A, 1, cel_selector(f'device.attributes["{DRIVER_A}"].special')))],
        classes=[A],
        slices=[slice_with_devices(SLICE1, NODE1, resource_pool(POOL1, 2), DRIVER_A,
                                   _consume(DEVICE1, {CS1: {"cpu1": "1"}, CS2: {"mem": "10Gi"}}, None,
                                            attrs(special=True)),
                                   _consume(DEVICE2, {CS1: {"cpu2": "1"}, CS2: {"mem": "10Gi"}}, None,
                                            attrs(special=False)),
                                   _consume(DEVICE3, {CS1: {"cpu3": "1"}, CS2: {"mem": "10Gi"}}, None,
                                            attrs(special=False))),
                _counter_slice(SLICE2, resource_pool(POOL1, 2), {CS1: {"cpu1": "1", "cpu2": "1", "cpu3": "1"},
                                                                   CS2: {"mem": "30Gi"}})],
        node=N1,
        expect=[allocation_result(LOCAL1, device_allocation_result(REQ0, DRIVER_A, POOL1, DEVICE2, False),
                                  device_allocation_result(REQ0, DRIVER_A, POOL1, DEVICE3, False),
                                  device_allocation_result(REQ1, DRIVER_A, POOL1, DEVICE1, False))]),
    "prioritized-list-max-allocation-limit-request": Case(
        claims=[claim(CLAIM0).with_requests(
            request_with_prioritized_list(REQ0, sub_request(SUB_REQ0, CLASS_A, MAX_RESULTS),
                                          sub_request(SUB_REQ1, CLASS_A, MAX_RESULTS // 2)),
            request_with_prioritized_list(REQ1, sub_request(SUB_REQ0, CLASS_A, MAX_RESULTS),
                                          sub_request(SUB_REQ1, CLASS_A, MAX_RESULTS // 2)))],
        classes=[A], slices=[slice_with_multiple_devices(SLICE1, NODE1, POOL1, DRIVER_A, MAX_RESULTS * 2)], node=N1,
        expect=[allocation_result(LOCAL1, *multiple_device_allocation_results(REQ0_SUB1, DRIVER_A, POOL1,
                                                                              MAX_RESULTS // 2, 0),
                                  *multiple_device_allocation_results(REQ1_SUB1, DRIVER_A, POOL1, MAX_RESULTS // 2,
                                                                      MAX_RESULTS // 2))],
        invocations=75),
    "prioritized-list-max-allocation-allocation-mode-all": Case(
        claims=[claim(CLAIM0).with_requests(
            request_with_prioritized_list(REQ0, sub_request(SUB_REQ0, CLASS_A, 0).with_allocation_mode("All"),
                                          sub_request(SUB_REQ1, CLASS_A, 2)),
            device_request(REQ1, CLASS_B, 2))],
        classes=[A, B],
        slices=[slice_with_multiple_devices(SLICE1, NODE1, POOL1, DRIVER_A, MAX_RESULTS - 1),
                slice_with_multiple_devices(SLICE2, NODE1, POOL2, DRIVER_B, 2)],
        node=N1,
        expect=[allocation_result(LOCAL1, device_allocation_result(REQ0_SUB1, DRIVER_A, POOL1, "device-0", False),
                                  device_allocation_result(REQ0_SUB1, DRIVER_A, POOL1, "device-1", False),
                                  device_allocation_result(REQ1, DRIVER_B, POOL2, "device-0", False),
                                  device_allocation_result(REQ1, DRIVER_B, POOL2, "device-1", False))],
        invocations=42),
    "device-binding-conditions": Case(
        claims=[claim_with_requests(CLAIM0, None, request(REQ0, CLASS_A, 1))], classes=[A],
        slices=[slice_with_devices(SLICE1, NODE1, POOL1, DRIVER_A,
                                   device(DEVICE1).with_binding_conditions(["IsPrepare"], ["BindingFailed"]))],
        node=N1,
        expect=[allocation_result(LOCAL1, _with_bc(REQ0, POOL1, DEVICE1, ["IsPrepare"], ["BindingFailed"]))]),
    "binding-conditions-multiple-devices": Case(
        claims=[claim_with_requests(CLAIM0, None, request(REQ0, CLASS_A, 2), request(REQ1, CLASS_A, 1))],
        classes=[A],
        slices=[slice_with_devices(SLICE1, NODE1, POOL1, DRIVER_A,
                                   device(DEVICE1).with_binding_conditions(["IsPrepare"], ["BindingFailed"]),
                                   device(DEVICE2).with_binding_conditions(["IsPrepare2"], ["BindingFailed2"]),
                                   device(DEVICE3).with_binding_conditions(["IsPrepare3"], ["BindingFailed3"]))],
        node=N1,
        expect=[allocation_result(LOCAL1, _with_bc(REQ0, POOL1, DEVICE1, ["IsPrepare"], ["BindingFailed"]),
                                  _with_bc(REQ0, POOL1, DEVICE2, ["IsPrepare2"], ["BindingFailed2"]),
                                  _with_bc(REQ1, POOL1, DEVICE3, ["IsPrepare3"], ["BindingFailed3"]))]),
    "binding-conditions-with-and-without": Case(
        claims=[claim_with_requests(CLAIM0, None, request(REQ0, CLASS_A, 1), request(REQ1, CLASS_A, 1))],
        classes=[A],
        slices=[slice_with_devices(SLICE1, NODE1, POOL1, DRIVER_A, device(DEVICE1),
                                   device(DEVICE2).with_binding_conditions(["IsPrepare"], ["BindingFailed"]))],
        node=N1,
        expect=[allocation_result(LOCAL1, device_allocation_result(REQ0, DRIVER_A, POOL1, DEVICE1, False),
                                  _with_bc(REQ1, POOL1, DEVICE2, ["IsPrepare"], ["BindingFailed"]))]),
    "node-restriction": Case(
        claims=[claim_with_request(CLAIM0, REQ0, CLASS_A)], classes=[A],
        slices=[slice_with_devices(SLICE1, node_label_selector(PLANET_KEY, PLANET_VALUE_EARTH), POOL1, DRIVER_A,
                                   device(DEVICE1).with_binds_to_node(True))],
        node=N1,
        expect=[allocation_result(LOCAL1, device_allocation_result(REQ0, DRIVER_A, POOL1, DEVICE1, False))]),
    "partitionable-devices-with-binding-conditions": Case(
        claims=[claim_with_requests(CLAIM0, None, request(REQ0, CLASS_A, 1))], classes=[A],
        slices=[slice_with_devices(SLICE1, NODE1, resource_pool(POOL1, 2), DRIVER_A,
                                   _binding(DEVICE1, ["IsPrepare"], ["BindingFailed"], {CS1: mem("4Gi")})),
                _counter_slice(SLICE2, resource_pool(POOL1, 2), {CS1: mem("8Gi")})],
        node=N1,
        expect=[allocation_result(LOCAL1, _with_bc(REQ0, POOL1, DEVICE1, ["IsPrepare"], ["BindingFailed"]))]),
    "partitionable-devices-with-binding-conditions-multiple": Case(
        claims=[claim_with_requests(CLAIM0, None, request(REQ0, CLASS_A, 2))], classes=[A],
        slices=[slice_with_devices(SLICE1, NODE1, resource_pool(POOL1, 2), DRIVER_A,
                                   _binding(DEVICE1, ["IsPrepare"], ["BindingFailed"], {CS1: mem("4Gi")}),
                                   _binding(DEVICE2, ["IsPrepare2"], ["BindingFailed2"], {CS1: mem("4Gi")})),
                _counter_slice(SLICE2, resource_pool(POOL1, 2), {CS1: mem("8Gi")})],
        node=N1,
        expect=[allocation_result(LOCAL1, _with_bc(REQ0, POOL1, DEVICE1, ["IsPrepare"], ["BindingFailed"]),
                                  _with_bc(REQ0, POOL1, DEVICE2, ["IsPrepare2"], ["BindingFailed2"]))]),
    "partitionable-devices-with-binding-conditions-some-devices-no-conditions": Case(
        claims=[claim_with_requests(CLAIM0, None, request(REQ0, CLASS_A, 3))], classes=[A],
        slices=[slice_with_devices(SLICE1, NODE1, resource_pool(POOL1, 2), DRIVER_A,
                                   _binding(DEVICE1, ["IsPrepare"], ["BindingFailed"], {CS1: mem("2Gi")}),
                                   _consume(DEVICE2, {CS1: mem("2Gi")}, FROM_COUNTERS),
                                   _binding(DEVICE3, ["IsReady"], ["BindingTimeout"], {CS1: mem("4Gi")})),
                _counter_slice(SLICE2, resource_pool(POOL1, 2), {CS1: mem("8Gi")})],
        node=N1,
        expect=[allocation_result(LOCAL1, _with_bc(REQ0, POOL1, DEVICE1, ["IsPrepare"], ["BindingFailed"]),
                                  _with_bc(REQ0, POOL1, DEVICE2, None, None),
                                  _with_bc(REQ0, POOL1, DEVICE3, ["IsReady"], ["BindingTimeout"]))]),
    "partitionable-devices-with-binding-conditions-multi-slices": Case(
        claims=[claim_with_requests(CLAIM0, None, request(REQ0, CLASS_A, 2))], classes=[A],
        slices=[slice_with_devices(SLICE4, NODE1, resource_pool(POOL1, 4), DRIVER_A,
                                   _binding(DEVICE1, ["IsPrepare"], ["BindingFailed"], {CS1: mem("4Gi")})),
                _counter_slice(SLICE3, resource_pool(POOL1, 4), {CS1: mem("8Gi")}),
                slice_with_devices(SLICE2, NODE1, resource_pool(POOL1, 4), DRIVER_A,
                                   _consume(DEVICE2, {CS2: mem("4Gi")}, FROM_COUNTERS)),
                _counter_slice(SLICE1, resource_pool(POOL1, 4), {CS2: mem("8Gi")})],
        node=N1,
        expect=[allocation_result(LOCAL1, _with_bc(REQ0, POOL1, DEVICE2, None, None),
                                  _with_bc(REQ0, POOL1, DEVICE1, ["IsPrepare"], ["BindingFailed"]))]),
    "partitionable-devices-with-binding-conditions-and-taints": Case(
        claims=[claim_with_requests(CLAIM0, None, request(REQ0, CLASS_A, 2))], classes=[A],
        slices=[slice_with_devices(SLICE1, NODE1, POOL1, DRIVER_A,
                                   _binding(DEVICE1, ["IsPrepare"], ["BindingFailed"], {CS1: mem("4Gi")})
                                   .with_taints(taint("key1", "value1", "NoSchedule")),
                                   _consume(DEVICE2, {CS1: mem("4Gi")}, FROM_COUNTERS)),
                _counter_slice(SLICE2, POOL1, {CS1: mem("8Gi")})],
        node=N1),
    "partitionable-devices-with-binding-conditions-and-taints-tolerated": Case(
        claims=[claim_with_requests(CLAIM0, None, request(REQ0, CLASS_A, 2)).with_tolerations(
            TOLERATION_NO_SCHEDULE_KEY1)],
        classes=[A],
        slices=[slice_with_devices(SLICE1, NODE1, resource_pool(POOL1, 2), DRIVER_A,
                                   _binding(DEVICE1, ["IsPrepare"], ["BindingFailed"], {CS1: mem("4Gi")})
                                   .with_taints(taint("key1", "value1", "NoSchedule")),
                                   _consume(DEVICE2, {CS1: mem("4Gi")}, FROM_COUNTERS)),
                _counter_slice(SLICE2, resource_pool(POOL1, 2), {CS1: mem("8Gi")})],
        node=N1,
        expect=[allocation_result(LOCAL1, _with_bc(REQ0, POOL1, DEVICE1, ["IsPrepare"], ["BindingFailed"],
                                                   TOLERATION_NO_SCHEDULE_KEY1),
                                  _with_bc(REQ0, POOL1, DEVICE2, None, None, TOLERATION_NO_SCHEDULE_KEY1))]),
})


def _shared(req: str, dev: str, consumed: dict[str, str] | None, pool: str = POOL1) -> JSON:
    return device_request_allocation_result(req, DRIVER_A, pool, dev).with_consumed_capacity(FIXED_SHARE_ID, consumed)


def _cap_claim(name: str, quantity: str | None, req: str = REQ0) -> Claim:
    return claim(name).with_requests(device_request(req, CLASS_A, 1).with_capacity_request(quantity))


def _all_cap_claim(quantity: str) -> Claim:
    return claim(CLAIM0).with_requests(all_device_request(REQ0, CLASS_A).with_capacity_request(quantity))


_BOOL_SELECTOR = cel_selector(f'device.attributes["{DRIVER_A}"].boolAttribute')
MULTI_A = class_with_allow_multiple_allocations(CLASS_A, DRIVER_A, True)
DEDICATED_A = class_with_allow_multiple_allocations(CLASS_A, DRIVER_A, False)


def _multi(name: str, capacity: dict[str, str] | None = None, attributes: JSON | None = None) -> Any:
    return device(name, capacity, attributes).with_allow_multiple_allocations()


def _ranged(name: str, value: str, attributes: JSON | None = None) -> Any:
    return _multi(name, None, attributes).with_capacity_request_policy_range({CAPACITY0: value})


def _one_slice(*devices: Any) -> list[JSON]:
    return [slice_with_devices(SLICE1, NODE1, POOL1, DRIVER_A, *devices)]


CASES.update({
    "consumable-capacity-multi-allocatable-device-with-missing-capacity-request": Case(
        claims=[_cap_claim(CLAIM0, ONE)], classes=[A], slices=_one_slice(_multi(DEVICE1, {CAPACITY1: ONE})),
        node=N1),
    "consumable-capacity-multi-allocatable-device-allocation-mode-all-with-missing-capacity-request": Case(
        claims=[_all_cap_claim(ONE)], classes=[MULTI_A], slices=_one_slice(_multi(DEVICE1, {CAPACITY1: ONE})),
        node=N1),
    # Both share the same device; no capacity is consumed since none is defined.
    "consumable-capacity-multi-allocatable-device-without-capacity-without-capacity-request": Case(
        claims=[_cap_claim(CLAIM0, None), _cap_claim(CLAIM1, None)], classes=[MULTI_A],
        slices=_one_slice(_multi(DEVICE1)), node=N1,
        expect=[allocation_result(LOCAL1, _shared(REQ0, DEVICE1, None)),
                allocation_result(LOCAL1, _shared(REQ0, DEVICE1, None))]),
    # Both get the full capacity, of different devices.
    "consumable-capacity-multi-allocatable-device-without-policy-without-capacity-request": Case(
        claims=[claim(CLAIM0).with_requests(device_request(REQ0, CLASS_A, 1)),
                claim(CLAIM1).with_requests(device_request(REQ0, CLASS_A, 1))],
        classes=[MULTI_A], slices=_one_slice(_multi(DEVICE1, {CAPACITY0: ONE}), _multi(DEVICE2, {CAPACITY0: ONE})),
        node=N1,
        expect=[allocation_result(LOCAL1, _shared(REQ0, DEVICE1, {CAPACITY0: ONE})),
                allocation_result(LOCAL1, _shared(REQ0, DEVICE2, {CAPACITY0: ONE}))]),
    # Not both.
    "consumable-capacity-multi-allocatable-device-without-policy-without-capacity-request-block": Case(
        claims=[claim(CLAIM0).with_requests(device_request(REQ0, CLASS_A, 1)),
                claim(CLAIM1).with_requests(device_request(REQ0, CLASS_A, 1))],
        classes=[MULTI_A], slices=_one_slice(_multi(DEVICE1, {CAPACITY0: TWO})), node=N1),
    "consumable-capacity-multi-allocatable-device-without-policy-with-capacity-request": Case(
        claims=[_cap_claim(CLAIM0, ONE), _cap_claim(CLAIM1, ONE)], classes=[MULTI_A],
        slices=_one_slice(_multi(DEVICE1, {CAPACITY0: TWO})), node=N1,
        expect=[allocation_result(LOCAL1, _shared(REQ0, DEVICE1, {CAPACITY0: ONE})),
                allocation_result(LOCAL1, _shared(REQ0, DEVICE1, {CAPACITY0: ONE}))]),
    # Both requests get the default (two).
    "consumable-capacity-multi-allocatable-device-with-policy-without-capacity-request": Case(
        claims=[claim_with_requests(CLAIM0, None, request(REQ0, CLASS_A, 1)),
                claim_with_requests(CLAIM1, None, request(REQ0, CLASS_A, 1))],
        classes=[MULTI_A], slices=_one_slice(_ranged(DEVICE1, FOUR)), node=N1,
        expect=[allocation_result(LOCAL1, _shared(REQ0, DEVICE1, {CAPACITY0: TWO})),
                allocation_result(LOCAL1, _shared(REQ0, DEVICE1, {CAPACITY0: TWO}))]),
    "consumable-capacity-multi-allocatable-device-with-zero-request-policy": Case(
        claims=[claim_with_requests(CLAIM0, None, request(REQ0, CLASS_A, 1)),
                claim_with_requests(CLAIM1, None, request(REQ0, CLASS_A, 1))],
        classes=[MULTI_A],
        slices=_one_slice(_multi(DEVICE1).with_capacity_request_policy_valid_values(ZERO, {CAPACITY0: ONE}, None)),
        node=N1,
        expect=[allocation_result(LOCAL1, _shared(REQ0, DEVICE1, {CAPACITY0: ZERO})),
                allocation_result(LOCAL1, _shared(REQ0, DEVICE1, {CAPACITY0: ZERO}))]),
    "consumable-capacity-multi-allocatable-device-violates-zero-request-policy": Case(
        claims=[_cap_claim(CLAIM0, ONE)], classes=[MULTI_A],
        slices=_one_slice(_multi(DEVICE1).with_capacity_request_policy_valid_values(ZERO, {CAPACITY0: ONE}, None)),
        node=N1),
    # The request is rounded up to the minimum (two); both fit the same device.
    "consumable-capacity-multi-allocatable-device-with-range-policy-with-capacity-request": Case(
        claims=[_cap_claim(CLAIM0, ONE), _cap_claim(CLAIM1, ONE)], classes=[MULTI_A],
        slices=_one_slice(_ranged(DEVICE1, FOUR)), node=N1,
        expect=[allocation_result(LOCAL1, _shared(REQ0, DEVICE1, {CAPACITY0: TWO})),
                allocation_result(LOCAL1, _shared(REQ0, DEVICE1, {CAPACITY0: TWO}))]),
    # Rounded up by the step: 3 -> 2+2.
    "consumable-capacity-multi-allocatable-device-with-range-policy-step": Case(
        claims=[_cap_claim(CLAIM0, THREE)], classes=[MULTI_A], slices=_one_slice(_ranged(DEVICE1, FOUR)), node=N1,
        expect=[allocation_result(LOCAL1, _shared(REQ0, DEVICE1, {CAPACITY0: FOUR}))]),
    "consumable-capacity-multi-allocatable-device-with-valid-values-policy": Case(
        claims=[_cap_claim(CLAIM0, TWO)], classes=[MULTI_A],
        slices=_one_slice(_multi(DEVICE1).with_capacity_request_policy_valid_values(ONE, {CAPACITY0: FOUR}, [TWO])),
        node=N1,
        expect=[allocation_result(LOCAL1, _shared(REQ0, DEVICE1, {CAPACITY0: TWO}))]),
    "consumable-capacity-multi-allocatable-device-with-valid-values-policy-round-up": Case(
        claims=[_cap_claim(CLAIM0, TWO)], classes=[MULTI_A],
        slices=_one_slice(_multi(DEVICE1).with_capacity_request_policy_valid_values(ONE, {CAPACITY0: THREE},
                                                                                      [THREE])),
        node=N1,
        expect=[allocation_result(LOCAL1, _shared(REQ0, DEVICE1, {CAPACITY0: THREE}))]),
    "consumable-capacity-multi-allocatable-device-with-exceeded-consumable-capacity-request": Case(
        claims=[_cap_claim(CLAIM0, ONE), _cap_claim(CLAIM1, TWO)], classes=[MULTI_A],
        slices=_one_slice(_ranged(DEVICE1, TWO)), node=N1),
    # The policy's maximum is 4: 6 does not fit although the device has 10.
    "consumable-capacity-multi-allocatable-device-with-request-over-max-sharing-policy": Case(
        claims=[_cap_claim(CLAIM0, "6")], classes=[MULTI_A], slices=_one_slice(_ranged(DEVICE1, "10")), node=N1),
    "consumable-capacity-multi-allocatable-device-with-allocated-capacity-use-remaining": Case(
        claims=[_cap_claim(CLAIM0, TWO)], classes=[MULTI_A],
        allocated_capacity={(DRIVER_A, POOL1, DEVICE1): {CAPACITY0: TWO}},
        slices=_one_slice(_ranged(DEVICE1, FOUR)), node=N1,
        expect=[allocation_result(LOCAL1, _shared(REQ0, DEVICE1, {CAPACITY0: TWO}))]),
    "consumable-capacity-multi-allocatable-device-with-allocated-capacity-next-device": Case(
        claims=[_cap_claim(CLAIM0, TWO)], classes=[MULTI_A],
        allocated_capacity={(DRIVER_A, POOL1, DEVICE1): {CAPACITY0: TWO}},
        slices=_one_slice(_ranged(DEVICE1, TWO), _ranged(DEVICE2, TWO)), node=N1,
        expect=[allocation_result(LOCAL1, _shared(REQ0, DEVICE2, {CAPACITY0: TWO}))]),
    "consumable-capacity-with-multi-allocatable-device-backtrack": Case(
        claims=[claim(CLAIM0).with_constraints({"matchAttribute": STRING_ATTRIBUTE}).with_requests(
                    device_request(REQ0, CLASS_A, 1).with_capacity_request(TWO),
                    device_request(REQ1, CLASS_A, 1).with_capacity_request(TWO)),
                _cap_claim(CLAIM1, TWO)],
        classes=[A],
        slices=_one_slice(_ranged(DEVICE2, TWO, attrs(stringAttribute="stringAttributeValue1")),
                          _ranged(DEVICE1, FOUR, attrs(stringAttribute="stringAttributeValue2"))),
        node=N1,
        expect=[allocation_result(LOCAL1, _shared(REQ0, DEVICE1, {CAPACITY0: TWO}),
                                  _shared(REQ1, DEVICE1, {CAPACITY0: TWO})),
                allocation_result(LOCAL1, _shared(REQ0, DEVICE2, {CAPACITY0: TWO}))]),
    "consumable-capacity-multi-allocatable-device-with-subrequest": Case(
        claims=[claim(CLAIM0).with_requests(request_with_prioritized_list(
            REQ0, sub_request(SUB_REQ0, CLASS_A, 1).with_capacity_request(FOUR),
            sub_request(SUB_REQ1, CLASS_A, 1).with_capacity_request(TWO), sub_request(SUB_REQ1, CLASS_A, 1)))],
        classes=[MULTI_A], slices=_one_slice(_ranged(DEVICE1, TWO)), node=N1,
        expect=[allocation_result(LOCAL1, _shared(REQ0_SUB1, DEVICE1, {CAPACITY0: TWO}))]),
    "consumable-capacity-multi-allocatable-device-with-no-available-consumable-capacity": Case(
        claims=[_cap_claim(CLAIM0, TWO)], classes=[MULTI_A],
        allocated_capacity={(DRIVER_A, POOL1, DEVICE1): {CAPACITY0: TWO}},
        slices=_one_slice(_ranged(DEVICE1, TWO)), node=N1),
    # Only the matching device is allocated.
    "consumable-capacity-multi-allocatable-device-allocation-mode-all-filter-out-no-capacity": Case(
        claims=[_all_cap_claim(TWO)], classes=[MULTI_A],
        slices=_one_slice(_multi(DEVICE1, {CAPACITY0: TWO}), _multi(DEVICE2)), node=N1,
        expect=[allocation_result(LOCAL1, _shared(REQ0, DEVICE1, {CAPACITY0: TWO}))]),
    "consumable-capacity-multi-allocatable-device-allocation-mode-all-filter-out-insufficient-capacity": Case(
        claims=[_all_cap_claim(TWO)], classes=[MULTI_A],
        slices=_one_slice(_multi(DEVICE1, {CAPACITY0: TWO}), _multi(DEVICE2, {CAPACITY0: ONE})), node=N1,
        expect=[allocation_result(LOCAL1, _shared(REQ0, DEVICE1, {CAPACITY0: TWO}))]),
    "consumable-capacity-multi-allocatable-device-allocation-mode-all-allocating-sufficient": Case(
        claims=[claim(CLAIM0).with_requests(device_request(REQ0, CLASS_A, 1).with_capacity_request(ONE),
                                            all_device_request(REQ1, CLASS_A).with_capacity_request(ONE))],
        classes=[A], slices=_one_slice(_multi(DEVICE1, {CAPACITY0: TWO}), _multi(DEVICE2, {CAPACITY0: ONE})),
        node=N1,
        expect=[allocation_result(LOCAL1, _shared(REQ0, DEVICE1, {CAPACITY0: ONE}),
                                  _shared(REQ1, DEVICE1, {CAPACITY0: ONE}), _shared(REQ1, DEVICE2, {CAPACITY0: ONE}))]),
    "consumable-capacity-multi-allocatable-device-allocation-mode-all-in-use-sufficient": Case(
        claims=[_all_cap_claim(ONE)], classes=[A],
        allocated_capacity={(DRIVER_A, POOL1, DEVICE1): {CAPACITY0: ONE}},
        slices=_one_slice(_multi(DEVICE1, {CAPACITY0: TWO}), _multi(DEVICE2, {CAPACITY0: ONE})), node=N1,
        expect=[allocation_result(LOCAL1, _shared(REQ0, DEVICE1, {CAPACITY0: ONE}),
                                  _shared(REQ0, DEVICE2, {CAPACITY0: ONE}))]),
    "consumable-capacity-multi-allocatable-device-allocation-mode-all-allocating-insufficient": Case(
        claims=[claim(CLAIM0).with_requests(device_request(REQ0, CLASS_A, 1).with_capacity_request(ONE),
                                            all_device_request(REQ1, CLASS_A).with_capacity_request(ONE))],
        classes=[A], slices=_one_slice(_multi(DEVICE1, {CAPACITY0: ONE}), _multi(DEVICE2, {CAPACITY0: ONE})),
        node=N1),
    "consumable-capacity-multi-allocatable-device-allocation-mode-all-in-use-insufficient": Case(
        claims=[_all_cap_claim(ONE)], classes=[A],
        allocated_capacity={(DRIVER_A, POOL1, DEVICE1): {CAPACITY0: ONE}},
        slices=_one_slice(_multi(DEVICE1, {CAPACITY0: ONE}), _multi(DEVICE2, {CAPACITY0: ONE})), node=N1,
        expect=[allocation_result(LOCAL1, _shared(REQ0, DEVICE2, {CAPACITY0: ONE}))]),
    "consumable-capacity-dedicated-device-with-consumable-capacity-request": Case(
        claims=[_cap_claim(CLAIM0, ONE)], classes=[DEDICATED_A], slices=_one_slice(device(DEVICE1, {CAPACITY0: ONE})),
        node=N1,
        expect=[allocation_result(LOCAL1, device_allocation_result(REQ0, DRIVER_A, POOL1, DEVICE1, False))]),
    "consumable-capacity-dedicated-device-with-multiple-consumable-capacity-request": Case(
        claims=[_cap_claim(CLAIM0, ONE), _cap_claim(CLAIM1, ONE)], classes=[DEDICATED_A],
        slices=_one_slice(device(DEVICE1).with_capacity_request_policy_range({CAPACITY0: TWO})), node=N1),
    "allow-multiple-allocations-exclude-multi-allocatable-device-by-class-selector": Case(
        claims=[_cap_claim(CLAIM0, ONE)], classes=[DEDICATED_A], slices=_one_slice(_multi(DEVICE1, {CAPACITY0: ONE})),
        node=N1),
    "allow-multiple-allocations-not-allocate-multi-allocatable-device-which-already-dedicated": Case(
        claims=[_cap_claim(CLAIM0, ONE)], classes=[MULTI_A], allocated_devices=[(DRIVER_A, POOL1, DEVICE1)],
        slices=_one_slice(_ranged(DEVICE1, TWO)), node=N1),
    "allow-multiple-allocations-not-allocate-dedicated-device-which-change-from-multi-allocatable": Case(
        claims=[_cap_claim(CLAIM0, ONE)], classes=[MULTI_A],
        allocated_capacity={(DRIVER_A, POOL1, DEVICE1): {CAPACITY0: ONE}},
        slices=_one_slice(device(DEVICE1).with_capacity_request_policy_range({CAPACITY0: TWO})), node=N1),
    "allow-multiple-allocations-with-partitionable-device": Case(
        claims=[claim(CLAIM0).with_requests(
            device_request(REQ0, CLASS_A, 1),
            request_with_prioritized_list(REQ1, sub_request(SUB_REQ0, CLASS_A, 1, capacity_memory_selector("6Gi")),
                                          sub_request(SUB_REQ1, CLASS_A, 1, capacity_memory_selector("4Gi"))))],
        classes=[MULTI_A],
        slices=[slice_with_devices(SLICE1, NODE1, resource_pool(POOL1, 2), DRIVER_A,
                                   *(d.with_allow_multiple_allocations() for d in _three_partitions())),
                _counter_slice(SLICE2, resource_pool(POOL1, 2), {CS1: mem("8Gi")})],
        node=N1,
        expect=[allocation_result(LOCAL1, _shared(REQ0, DEVICE1, {"memory": "4Gi"}),
                                  _shared(REQ1_SUB1, DEVICE3, {"memory": "4Gi"}))]),
    "allow-multiple-allocations-with-shared-device-counter-cross-cycle": Case(
        claims=[claim(CLAIM0).with_requests(device_request(REQ0, CLASS_A, 1).with_capacity_request(ONE).with_selectors(
            cel_selector(f'device.attributes["{DRIVER_A}"].mode == "b"')))],
        classes=[MULTI_A],
        allocated_shared=[(DRIVER_A, POOL1, DEVICE1, FIXED_SHARE_ID)],
        allocated_capacity={(DRIVER_A, POOL1, DEVICE1): {CAPACITY0: ONE}},
        slices=[slice_with_devices(SLICE1, NODE1, resource_pool(POOL1, 2), DRIVER_A,
                                   _consume(DEVICE1, {CS1: {CAPACITY0: ONE}}, FROM_COUNTERS, attrs(mode="a"))
                                   .with_allow_multiple_allocations(),
                                   _consume(DEVICE2, {CS1: {CAPACITY0: ONE}}, FROM_COUNTERS, attrs(mode="b"))
                                   .with_allow_multiple_allocations()),
                _counter_slice(SLICE2, resource_pool(POOL1, 2), {CS1: {CAPACITY0: ONE}})],
        node=N1),
    # PrioritizedList, PartitionableDevices and ConsumableCapacity together: the counter sets (4, 8) allow either
    # [device1, device3] or [device2]; capacity-1 is consumed by the range policy (2, 2, 4). req0 gets device1,
    # req2 cannot have device1 (1 unit of capacity-0 left) nor device2 (counters): device3; req1's first
    # subrequest finds nothing, its second takes the last unit of capacity-0 on device1.
    "consumable-capacity-with-partitionable-device-multiple-capacity-pools": Case(
        claims=[claim(CLAIM0).with_requests(
            device_request(REQ0, CLASS_A, 1).with_capacity_request(ONE),
            device_request(REQ2, CLASS_A, 1).with_capacity_request(TWO),
            request_with_prioritized_list(
                REQ1,
                sub_request(SUB_REQ0, CLASS_A, 1, cel_selector(
                    f'device.capacity["{DRIVER_A}"]["{CAPACITY0}"].compareTo(quantity("4")) >= 0'))
                .with_capacity_request(ONE),
                sub_request(SUB_REQ1, CLASS_A, 1, cel_selector(
                    f'device.capacity["{DRIVER_A}"]["{CAPACITY0}"].compareTo(quantity("2")) >= 0'))
                .with_capacity_request(ONE)))],
        classes=[A],
        slices=[slice_with_devices(
            SLICE1, NODE1, resource_pool(POOL1, 2), DRIVER_A,
            *(_consume(d, {CS1: {CAPACITY0: c0}, CS2: {CAPACITY1: FOUR}}, FROM_COUNTERS)
              .with_allow_multiple_allocations().with_capacity_request_policy_range({CAPACITY1: FOUR})
              for d, c0 in ((DEVICE1, TWO), (DEVICE2, FOUR), (DEVICE3, TWO)))),
            _counter_slice(SLICE2, resource_pool(POOL1, 2), {CS1: {CAPACITY0: FOUR}, CS2: {CAPACITY1: "8"}})],
        node=N1,
        expect=[allocation_result(LOCAL1, _shared(REQ0, DEVICE1, {CAPACITY0: ONE, CAPACITY1: TWO}),
                                  _shared(REQ2, DEVICE3, {CAPACITY0: TWO, CAPACITY1: TWO}),
                                  _shared(REQ1_SUB1, DEVICE1, {CAPACITY0: ONE, CAPACITY1: TWO}))]),
    "with-distinct-constraints": Case(
        claims=[claim(CLAIM0).with_constraints(
            {"distinctAttribute": BOOL_ATTRIBUTE, "requests": [REQ0, REQ1]},
            {"distinctAttribute": VERSION_ATTRIBUTE, "requests": [REQ0, REQ1, REQ2]},
            {"distinctAttribute": INT_ATTRIBUTE, "requests": [REQ0, REQ1, REQ2, REQ3]},
        ).with_requests(*(device_request(r, CLASS_A, 1) for r in (REQ0, REQ1, REQ2, REQ3)))],
        classes=[A],
        slices=_one_slice(_multi(DEVICE1, None, attrs(driverVersion=V("1.0.0"), numa=0, boolAttribute=True)),
                          _multi(DEVICE2, None, attrs(driverVersion=V("1.0.1"), numa=1, boolAttribute=False)),
                          _multi(DEVICE3, None, attrs(driverVersion=V("1.0.2"), numa=2, boolAttribute=True)),
                          _multi(DEVICE4, None, attrs(driverVersion=V("1.0.0"), numa=3, boolAttribute=True))),
        node=N1,
        expect=[allocation_result(LOCAL1, _shared(REQ0, DEVICE1, None), _shared(REQ1, DEVICE2, None),
                                  _shared(REQ2, DEVICE3, None), _shared(REQ3, DEVICE4, None))]),
    "with-distinct-constraints-attribute-not-set": Case(
        claims=[claim(CLAIM0).with_constraints({"distinctAttribute": BOOL_ATTRIBUTE, "requests": [REQ0]})
                .with_requests(device_request(REQ0, CLASS_A, 1))],
        classes=[A], slices=_one_slice(_multi(DEVICE1)), node=N1),
    "with-distinct-constraints-unknown-type-attribute": Case(
        claims=[claim(CLAIM0).with_constraints({"distinctAttribute": BOOL_ATTRIBUTE, "requests": [REQ0]})
                .with_requests(device_request(REQ0, CLASS_A, 1))],
        classes=[A], slices=_one_slice(_multi(DEVICE1, None, {"boolAttribute": {}})), node=N1,
        error="unsupported attribute value"),
    # The constraint covers req0 and req1 only: req1 falls back to its second subrequest (device2), req2 may use
    # device1 again.
    "with-distinct-constraints-with-subrequests": Case(
        claims=[claim(CLAIM0).with_constraints({"distinctAttribute": BOOL_ATTRIBUTE, "requests": [REQ0, REQ1]})
                .with_requests(*(request_with_prioritized_list(
                    r, sub_request(SUB_REQ0, CLASS_A, 1, _BOOL_SELECTOR), sub_request(SUB_REQ1, CLASS_A, 1))
                    for r in (REQ0, REQ1, REQ2)))],
        classes=[A],
        slices=_one_slice(_multi(DEVICE1, None, attrs(boolAttribute=True)),
                          _multi(DEVICE2, None, attrs(boolAttribute=False))),
        node=N1,
        expect=[allocation_result(LOCAL1, _shared(REQ0_SUB0, DEVICE1, None), _shared(REQ1_SUB1, DEVICE2, None),
                                  _shared(REQ2_SUB0, DEVICE1, None))]),
    "distinct-constraint-one-multi-allocatable-device-with-distinct-constraint": Case(
        claims=[claim(CLAIM0).with_constraints({"distinctAttribute": STRING_ATTRIBUTE}).with_requests(
            device_request(REQ0, CLASS_A, 1).with_capacity_request(ONE),
            device_request(REQ1, CLASS_A, 1).with_capacity_request(ONE))],
        classes=[MULTI_A],
        slices=_one_slice(_ranged(DEVICE1, TWO, attrs(stringAttribute="stringAttributeValue"))), node=N1),
    "distinct-constraint-two-multi-allocatable-devices-with-distinct-constraint": Case(
        claims=[claim(CLAIM0).with_constraints({"distinctAttribute": STRING_ATTRIBUTE}).with_requests(
            device_request(REQ0, CLASS_A, 1).with_capacity_request(TWO),
            device_request(REQ1, CLASS_A, 1).with_capacity_request(TWO))],
        classes=[MULTI_A],
        slices=[slice_with_devices(SLICE1, NODE1, resource_pool(POOL1, 2), DRIVER_A,
                                   _ranged(DEVICE1, FOUR, attrs(stringAttribute="stringAttributeValue1"))),
                slice_with_devices(SLICE1, NODE1, resource_pool(POOL1, 2), DRIVER_A,
                                   _ranged(DEVICE2, FOUR, attrs(stringAttribute="stringAttributeValue2")))],
        node=N1,
        expect=[allocation_result(LOCAL1, _shared(REQ0, DEVICE1, {CAPACITY0: TWO}),
                                  _shared(REQ1, DEVICE2, {CAPACITY0: TWO}))]),
})


def _gen(name: str, node_name: str, dev: str, generation: int) -> JSON:
    return with_pool(slice_with_devices(name, node_name, POOL1, DRIVER_A, device(dev)), generation=generation,
                     count=2)


def _combination_slices(*layout: tuple[str, Any, tuple[str, ...]]) -> list[JSON]:
    return [slice_with_devices(name, NODE1, pool, DRIVER_A, *(device(d) for d in devices))
            for name, pool, devices in layout]


def _typed(name: str, kind: str) -> Any:
    return device(name, None, attrs(type=kind))


_TYPE_X = cel_selector(f'device.attributes["{DRIVER_A}"].type == "X"')
_TYPE_Y = cel_selector(f'device.attributes["{DRIVER_A}"].type == "Y"')

CASES.update({
    "allocation-mode-all-with-multi-host-resource-pool": Case(
        claims=[_all_devices_claim(CLAIM0, CLASS_A)], classes=[A],
        slices=[slice_with_devices(SLICE1, NODE1, resource_pool(POOL1, 2), DRIVER_A, device(DEVICE1)),
                slice_with_devices(SLICE2, NODE2, resource_pool(POOL1, 2), DRIVER_A, device(DEVICE2))],
        node=N1,
        expect=[allocation_result(LOCAL1, device_allocation_result(REQ0, DRIVER_A, POOL1, DEVICE1, False))]),
    "multi-host-resource-pool-with-stale-slice-for-current-node": Case(
        claims=[claim_with_request(CLAIM0, REQ0, CLASS_A)], classes=[A],
        slices=[_gen(SLICE1, NODE1, DEVICE1, 1), _gen(SLICE2, NODE2, DEVICE2, 2)], node=N1),
    # Moving a pool between nodes is something drivers should not do (upstream's comment): the allocator may use
    # the old generation while it sees a complete pool of it.
    "multi-host-resource-pool-complete-update-from-node-1-to-node-2": Case(
        claims=[claim_with_request(CLAIM0, REQ0, CLASS_A)], classes=[A],
        slices=[_gen(SLICE1, NODE1, DEVICE1, 1), _gen(SLICE1, NODE1, DEVICE2, 1),
                _gen(SLICE2, NODE2, DEVICE1, 2), _gen(SLICE2, NODE2, DEVICE2, 2)],
        node=N1,
        expect=[allocation_result(LOCAL1, device_allocation_result(REQ0, DRIVER_A, POOL1, DEVICE1, False))]),
    "multi-host-resource-pool-complete-update-from-node-2-to-node-1": Case(
        claims=[claim_with_request(CLAIM0, REQ0, CLASS_A)], classes=[A],
        slices=[_gen(SLICE1, NODE2, DEVICE1, 1), _gen(SLICE1, NODE2, DEVICE2, 1),
                _gen(SLICE2, NODE1, DEVICE1, 2), _gen(SLICE2, NODE1, DEVICE2, 2)],
        node=N1,
        expect=[allocation_result(LOCAL1, device_allocation_result(REQ0, DRIVER_A, POOL1, DEVICE1, False))]),
    "multi-host-resource-pool-incomplete-update-from-node-1-to-node-2": Case(
        claims=[claim_with_request(CLAIM0, REQ0, CLASS_A)], classes=[A],
        slices=[_gen(SLICE1, NODE1, DEVICE1, 1), _gen(SLICE1, NODE1, DEVICE2, 1), _gen(SLICE2, NODE2, DEVICE1, 2)],
        node=N1,
        expect=[allocation_result(LOCAL1, device_allocation_result(REQ0, DRIVER_A, POOL1, DEVICE1, False))]),
    # Not allocated: slice-2 is incomplete.
    "multi-host-resource-pool-incomplete-update-from-node-2-to-node-1": Case(
        claims=[claim_with_request(CLAIM0, REQ0, CLASS_A)], classes=[A],
        slices=[_gen(SLICE1, NODE2, DEVICE1, 1), _gen(SLICE1, NODE2, DEVICE2, 1), _gen(SLICE2, NODE1, DEVICE1, 2)],
        node=N1),
    "partitionable-devices-same-counter-set-name-in-different-resource-slices": Case(
        claims=[claim(CLAIM0).with_requests(device_request(REQ0, CLASS_A, 1))], classes=[A],
        slices=[slice_with_devices(SLICE1, NODE1, resource_pool(POOL1, 4), DRIVER_A, device(DEVICE1)),
                _counter_slice(SLICE2, resource_pool(POOL1, 4), {CS1: {}}),
                slice_with_devices(SLICE3, NODE1, resource_pool(POOL1, 4), DRIVER_A, device(DEVICE2)),
                _counter_slice(SLICE4, resource_pool(POOL1, 4), {CS1: {}})],
        node=N1, error="invalid resource pools were encountered", node_error=True),
    "partitionable-devices-device-counter-consumption-references-unknown-counter-set": Case(
        claims=[claim(CLAIM0).with_requests(device_request(REQ0, CLASS_A, 1))], classes=[A],
        slices=[slice_with_devices(SLICE1, NODE1, resource_pool(POOL1, 2), DRIVER_A, _consume(DEVICE1, {CS2: {}})),
                _counter_slice(SLICE2, resource_pool(POOL1, 2), {CS1: {}})],
        node=N1, error="invalid resource pools were encountered", node_error=True),
    "partitionable-devices-device-counter-consumption-references-unknown-counter-in-counter-set": Case(
        claims=[claim(CLAIM0).with_requests(device_request(REQ0, CLASS_A, 1))], classes=[A],
        slices=[slice_with_devices(SLICE1, NODE1, resource_pool(POOL1, 2), DRIVER_A,
                                   _consume(DEVICE1, {CS1: mem("8Gi")})),
                _counter_slice(SLICE2, resource_pool(POOL1, 2), {CS1: {"other-memory": "8Gi"}})],
        node=N1, error="invalid resource pools were encountered", node_error=True),
    "partitionable-devices-device-counter-consumption-references-counter-set-in-other-pool": Case(
        claims=[claim(CLAIM0).with_requests(device_request(REQ0, CLASS_A, 1))], classes=[A],
        slices=[slice_with_devices(SLICE1, NODE1, POOL1, DRIVER_A, _consume(DEVICE1, {CS1: mem("8Gi")})),
                _counter_slice(SLICE2, POOL2, {CS1: mem("8Gi")})],
        node=N1, error="invalid resource pools were encountered", node_error=True),
    "partitionable-devices-devices-on-different-nodes-consume-same-counter-set": Case(
        claims=[claim(CLAIM0).with_requests(request_with_prioritized_list(
            REQ0, sub_request(SUB_REQ0, CLASS_A, 1, capacity_memory_selector("6Gi")),
            sub_request(SUB_REQ1, CLASS_A, 1, capacity_memory_selector("2Gi"))))],
        classes=[A],
        slices=[_counter_slice(SLICE1, resource_pool(POOL1, 3), {CS1: mem("8Gi")}),
                slice_with_devices(SLICE2, NODE1, resource_pool(POOL1, 3), DRIVER_A,
                                   _consume(DEVICE1, {CS1: mem("6Gi")}, FROM_COUNTERS),
                                   _consume(DEVICE2, {CS1: mem("2Gi")}, FROM_COUNTERS)),
                slice_with_devices(SLICE3, NODE2, resource_pool(POOL1, 3), DRIVER_A,
                                   _consume(DEVICE3, {CS1: mem("6Gi")}))],
        allocated_devices=[(DRIVER_A, POOL1, DEVICE3)], node=N1,
        expect=[allocation_result(LOCAL1, device_allocation_result(REQ0_SUB1, DRIVER_A, POOL1, DEVICE2, False))]),
    "partitionable-devices-validation-error-on-non-targeting-slice": Case(
        claims=[claim_with_requests(CLAIM0, None, request(REQ0, CLASS_A, 1))], classes=[A],
        slices=[_counter_slice(SLICE1, resource_pool(POOL1, 3), {CS1: mem("8Gi")}),
                slice_with_devices(SLICE2, NODE1, resource_pool(POOL1, 3), DRIVER_A,
                                   _consume(DEVICE1, {CS1: mem("6Gi")}, FROM_COUNTERS)),
                slice_with_devices(SLICE3, NODE2, resource_pool(POOL1, 3), DRIVER_A,
                                   _consume(DEVICE3, {CS2: mem("6Gi")}))],
        node=N1, error="invalid resource pools were encountered", node_error=True),
    "different-resourceslices-in-pool-can-target-different-nodes": Case(
        claims=[claim_with_requests(CLAIM0, None, request(REQ0, CLASS_A, 1))], classes=[A],
        slices=[slice_with_devices(SLICE1, NODE2, resource_pool(POOL1, 2), DRIVER_A, device(DEVICE1)),
                slice_with_devices(SLICE2, NODE1, resource_pool(POOL1, 2), DRIVER_A, device(DEVICE2))],
        node=N1,
        expect=[allocation_result(LOCAL1, device_allocation_result(REQ0, DRIVER_A, POOL1, DEVICE2, False))]),
    "invalid-pool-is-ok-if-devices-can-be-allocated-from-other": Case(
        claims=[claim_with_requests(CLAIM0, None, request(REQ0, CLASS_A, 1))], classes=[A],
        slices=_combination_slices((SLICE1, resource_pool(POOL1, 2), (DEVICE1,)),
                                   (SLICE2, resource_pool(POOL1, 2), (DEVICE1,)),
                                   (SLICE3, resource_pool(POOL2, 1), (DEVICE2,))),
        node=N1,
        expect=[allocation_result(LOCAL1, device_allocation_result(REQ0, DRIVER_A, POOL2, DEVICE2, False))]),
    "invalid-pool-is-error-if-no-other-device-can-be-allocated": Case(
        claims=[claim_with_requests(CLAIM0, None, request(REQ0, CLASS_A, 1))], classes=[A],
        slices=_combination_slices((SLICE1, resource_pool(POOL1, 2), (DEVICE1,)),
                                   (SLICE2, resource_pool(POOL1, 2), (DEVICE1,)),
                                   (SLICE3, resource_pool(POOL2, 1), (DEVICE2,))),
        allocated_devices=[(DRIVER_A, POOL2, DEVICE2)], node=N1,
        error="invalid resource pools were encountered", node_error=True),
    "no-allocation-from-incomplete-pools": Case(
        claims=[claim_with_requests(CLAIM0, None, request(REQ0, CLASS_A, 1))], classes=[A],
        slices=_combination_slices((SLICE1, resource_pool(POOL1, 2), (DEVICE1,))), node=N1),
    # Four devices, five wanted: every combination is tried once, never a permutation.
    "check-combinations-within-single-request-single-pool-single-slice": Case(
        claims=[claim_with_requests(CLAIM0, None, request(REQ0, CLASS_A, 5))], classes=[A],
        slices=_combination_slices((SLICE1, POOL1, (DEVICE1, DEVICE2, DEVICE3, DEVICE4))), node=N1,
        invocations=16),
    "check-combinations-within-single-request-single-pool-multiple-slices": Case(
        claims=[claim_with_requests(CLAIM0, None, request(REQ0, CLASS_A, 5))], classes=[A],
        slices=_combination_slices((SLICE1, resource_pool(POOL1, 2), (DEVICE1, DEVICE2)),
                                   (SLICE2, resource_pool(POOL1, 2), (DEVICE3, DEVICE4))),
        node=N1, invocations=16),
    "check-combinations-within-single-request-multiple-pools-multiple-slices": Case(
        claims=[claim_with_requests(CLAIM0, None, request(REQ0, CLASS_A, 5))], classes=[A],
        slices=_combination_slices((SLICE1, resource_pool(POOL1, 2), (DEVICE1,)),
                                   (SLICE2, resource_pool(POOL1, 2), (DEVICE2,)),
                                   (SLICE3, POOL2, (DEVICE3, DEVICE4))),
        node=N1, invocations=16),
    "check-combinations-within-single-request-many-pools": Case(
        claims=[claim_with_requests(CLAIM0, None, request(REQ0, CLASS_A, 5))], classes=[A],
        slices=_combination_slices((SLICE1, POOL1, (DEVICE1,)), (SLICE2, POOL2, (DEVICE2,)),
                                   (SLICE3, POOL3, (DEVICE3,)), (SLICE4, POOL4, (DEVICE4,))),
        node=N1, invocations=16),
    # req-1 first takes {device1, device2}, req-2 then needs device1: the search must backtrack, and skips
    # {device2, device1} (a permutation).
    "check-combinations-with-backtracking": Case(
        claims=[claim_with_requests(CLAIM0, None, request(REQ1, CLASS_A, 2), request(REQ2, CLASS_A, 1, _TYPE_X))],
        classes=[A],
        slices=[slice_with_devices(SLICE1, NODE1, POOL1, DRIVER_A, _typed(DEVICE1, "X"), _typed(DEVICE2, "Y"),
                                   _typed(DEVICE3, "Y"))],
        node=N1,
        expect=[allocation_result(LOCAL1, device_allocation_result(REQ1, DRIVER_A, POOL1, DEVICE2, False),
                                  device_allocation_result(REQ1, DRIVER_A, POOL1, DEVICE3, False),
                                  device_allocation_result(REQ2, DRIVER_A, POOL1, DEVICE1, False))],
        invocations=12),
    # The binding condition puts pool-2 after pool-1.
    "check-combinations-with-backtracking-across-slices-and-pools": Case(
        claims=[claim_with_requests(CLAIM0, None, request(REQ1, CLASS_A, 2), request(REQ2, CLASS_A, 1, _TYPE_X))],
        classes=[A],
        slices=[slice_with_devices(SLICE1, NODE1, resource_pool(POOL1, 2), DRIVER_A, _typed(DEVICE1, "X")),
                slice_with_devices(SLICE2, NODE1, resource_pool(POOL1, 2), DRIVER_A, _typed(DEVICE2, "Y")),
                slice_with_devices(SLICE3, NODE1, POOL2, DRIVER_A,
                                   _typed(DEVICE3, "Y").with_binding_conditions(["IsPrepare"], []))],
        node=N1,
        expect=[allocation_result(LOCAL1, device_allocation_result(REQ1, DRIVER_A, POOL1, DEVICE2, False),
                                  _with_bc(REQ1, POOL2, DEVICE3, ["IsPrepare"], []),
                                  device_allocation_result(REQ2, DRIVER_A, POOL1, DEVICE1, False))],
        invocations=12),
    # req-1's first subrequest cannot be met (too few Y devices), req-2's first asks for too many.
    "check-combinations-with-prioritized-list": Case(
        claims=[claim(CLAIM0).with_requests(
            request_with_prioritized_list(REQ1, sub_request(SUB_REQ0, CLASS_A, 3, _TYPE_Y),
                                          sub_request(SUB_REQ1, CLASS_A, 2)),
            request_with_prioritized_list(REQ2, sub_request(SUB_REQ0, CLASS_A, 2),
                                          sub_request(SUB_REQ1, CLASS_A, 1, _TYPE_X)))],
        classes=[A],
        slices=[slice_with_devices(SLICE1, NODE1, POOL1, DRIVER_A, _typed(DEVICE1, "X"), _typed(DEVICE2, "Y"),
                                   _typed(DEVICE3, "Y"))],
        node=N1,
        expect=[allocation_result(LOCAL1, device_allocation_result(REQ1_SUB1, DRIVER_A, POOL1, DEVICE2, False),
                                  device_allocation_result(REQ1_SUB1, DRIVER_A, POOL1, DEVICE3, False),
                                  device_allocation_result(REQ2_SUB1, DRIVER_A, POOL1, DEVICE1, False))],
        invocations=26),
})

# lexicographical_testing.go: TestLexicographicalAllocator.
LEXICOGRAPHICAL_CASES: dict[str, Case] = {
    # pool-3 before pool-2 before pool-1 in the input.
    "lexicographical-sorting-pools": Case(
        claims=[claim_with_requests(CLAIM0, None, request(REQ0, CLASS_A, 2))], classes=[A],
        slices=[slice_with_one_device(SLICE1, NODE1, resource_pool(POOL3, 1), DRIVER_A),
                slice_with_one_device(SLICE2, NODE1, resource_pool(POOL2, 1), DRIVER_A),
                slice_with_one_device(SLICE3, NODE1, resource_pool(POOL1, 1), DRIVER_A)],
        node=N1,
        expect=[allocation_result(LOCAL1, device_allocation_result(REQ0, DRIVER_A, POOL1, DEVICE1, False),
                                  device_allocation_result(REQ0, DRIVER_A, POOL2, DEVICE1, False))]),
    # Pools with binding conditions come after the others.
    "lexicographical-sorting-pools-with-binding-conditions": Case(
        claims=[claim_with_requests(CLAIM0, None, request(REQ0, CLASS_A, 2))], classes=[A],
        slices=[slice_with_devices(SLICE1, NODE1, resource_pool(POOL1, 1), DRIVER_A,
                                   device(DEVICE1).with_binding_conditions(["IsPrepare"], ["BindingFailed"])),
                slice_with_devices(SLICE3, NODE1, resource_pool(POOL3, 1), DRIVER_A, device(DEVICE3)),
                slice_with_devices(SLICE2, NODE1, resource_pool(POOL2, 1), DRIVER_A, device(DEVICE2))],
        node=N1,
        expect=[allocation_result(LOCAL1, device_allocation_result(REQ0, DRIVER_A, POOL2, DEVICE2, False),
                                  device_allocation_result(REQ0, DRIVER_A, POOL3, DEVICE3, False))]),
    # slice-3 before slice-2 before slice-1 in the input.
    "lexicographical-sorting-slices": Case(
        claims=[claim_with_requests(CLAIM0, None, request(REQ0, CLASS_A, 2))], classes=[A],
        slices=[slice_with_devices(SLICE3, NODE1, resource_pool(POOL1, 3), DRIVER_A, device(DEVICE3)),
                slice_with_devices(SLICE2, NODE1, resource_pool(POOL1, 3), DRIVER_A, device(DEVICE2)),
                slice_with_devices(SLICE1, NODE1, resource_pool(POOL1, 3), DRIVER_A, device(DEVICE1))],
        node=N1,
        expect=[allocation_result(LOCAL1, device_allocation_result(REQ0, DRIVER_A, POOL1, DEVICE1, False),
                                  device_allocation_result(REQ0, DRIVER_A, POOL1, DEVICE2, False))]),
    # Within one pool, binding conditions do not reorder slices.
    "lexicographical-sorting-slices-with-binding-conditions": Case(
        claims=[claim_with_requests(CLAIM0, None, request(REQ0, CLASS_A, 2))], classes=[A],
        slices=[slice_with_devices(SLICE1, NODE1, resource_pool(POOL1, 3), DRIVER_A,
                                   device(DEVICE1).with_binding_conditions(["IsPrepare"], ["BindingFailed"])),
                slice_with_devices(SLICE3, NODE1, resource_pool(POOL1, 3), DRIVER_A, device(DEVICE3)),
                slice_with_devices(SLICE2, NODE1, resource_pool(POOL1, 3), DRIVER_A, device(DEVICE2))],
        node=N1,
        expect=[allocation_result(LOCAL1, _with_bc(REQ0, POOL1, DEVICE1, ["IsPrepare"], ["BindingFailed"]),
                                  device_allocation_result(REQ0, DRIVER_A, POOL1, DEVICE2, False))]),
}


def _state(case: Case) -> AllocatedState:
    state = AllocatedState(allocated_devices=set(case.allocated_devices),
                           allocated_shared_device_ids=set(case.allocated_shared))
    for device_id, consumed in case.allocated_capacity.items():
        state.add_capacity(device_id, {name: Quantity.parse(q).nanos for name, q in consumed.items()})
    return state


def run_case(case: Case) -> None:
    claims = [c.obj() for c in case.claims]
    classes = {c["metadata"]["name"]: c for c in case.classes}
    before = copy.deepcopy((claims, case.classes, case.slices))
    allocator = Allocator(_state(case), classes, case.slices, SelectorCache())
    target = case.node if case.node is not None else N1
    if case.error is not None:
        expected_type = NodeAllocationError if case.node_error else AllocationError
        with pytest.raises(expected_type) as raised:
            allocator.allocate(target, claims)
        assert case.error in str(raised.value)
        assert isinstance(raised.value, NodeAllocationError) == case.node_error
    else:
        assert normalize_share_ids(allocator.allocate(target, claims)) == case.expect
    # Objects the allocator had access to are not modified.
    assert (claims, case.classes, case.slices) == before
    if case.invocations is not None:
        assert allocator.num_allocate_one_invocations == case.invocations


@pytest.mark.parametrize("name", sorted(CASES))
def test_allocator(name: str) -> None:
    """allocator_testing.go TestAllocator, case `name`."""
    run_case(CASES[name])


@pytest.mark.parametrize("name", sorted(LEXICOGRAPHICAL_CASES))
def test_lexicographical_allocator(name: str) -> None:
    """lexicographical_testing.go TestLexicographicalAllocator, case `name`."""
    run_case(LEXICOGRAPHICAL_CASES[name])


def _interrupt_case() -> tuple[Allocator, list[JSON]]:
    """TestAllocator's "interrupt": six devices wanted of five, a search long enough to interrupt."""
    slices = [slice_with_devices(SLICE1, NODE1, POOL1, DRIVER_A, *(device(d) for d in (
        DEVICE1, DEVICE2, DEVICE3, DEVICE4, "device-5")))]
    allocator = Allocator(AllocatedState(), {CLASS_A: A}, slices, SelectorCache())
    return allocator, [claim_with_requests(CLAIM0, None, request(REQ0, CLASS_A, 6)).obj()]


def test_allocator_interrupt_off() -> None:
    """allocator_testing.go TestAllocator "interrupt"/off: no deadline, the search runs to its end."""
    allocator, claims = _interrupt_case()
    assert allocator.allocate(N1, claims) is None


def test_allocator_interrupt_deadline() -> None:
    """allocator_testing.go TestAllocator "interrupt"/deadline (and /timeout): a deadline already passed stops
    the search with upstream's text; the plugin maps it to "timed out trying to allocate devices"."""
    allocator, claims = _interrupt_case()
    with pytest.raises(AllocationTimeout, match=r"^filter operation aborted: context deadline exceeded$"):
        allocator.allocate(N1, claims, deadline=time.monotonic() - 1)
