"""Builders of ResourceSlice / ResourceClaim / DeviceClass / Node JSON for the allocator tests: a port of the
generators in upstream's structured/internal/allocatortesting/allocator_testing.go (kubernetes/dynamic-resource-
allocation at v0.36.2, commit b0162be), same names in snake_case, producing the JSON the API server serves.

Objects are plain dicts; the `with_*` helpers of the wrappers return modified copies, as upstream's do.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "BOOL_ATTRIBUTE",
    "CAPACITY0",
    "CAPACITY1",
    "CLAIM0",
    "CLAIM1",
    "CLASS_A",
    "CLASS_B",
    "COUNTER_SET1",
    "COUNTER_SET2",
    "DEVICE0",
    "DEVICE1",
    "DEVICE2",
    "DEVICE3",
    "DEVICE4",
    "DRIVER_A",
    "DRIVER_B",
    "FIELD_NAME_KEY",
    "FIXED_SHARE_ID",
    "FOUR",
    "FROM_COUNTERS",
    "INT_ATTRIBUTE",
    "MAX_RESULTS",
    "NODE1",
    "NODE2",
    "NODE_SELECTION_ALL",
    "NODE_SELECTION_PER_DEVICE",
    "NON_EXISTENT_ATTRIBUTE",
    "ONE",
    "PLANET_KEY",
    "PLANET_VALUE_EARTH",
    "POOL1",
    "POOL2",
    "POOL3",
    "POOL4",
    "REGION1",
    "REGION2",
    "REGION_KEY",
    "REQ0",
    "REQ0_SUB0",
    "REQ0_SUB1",
    "REQ1",
    "REQ1_SUB0",
    "REQ1_SUB1",
    "REQ2",
    "REQ2_SUB0",
    "REQ2_SUB1",
    "REQ3",
    "SLICE1",
    "SLICE2",
    "SLICE3",
    "SLICE4",
    "STRING_ATTRIBUTE",
    "SUB_REQ0",
    "SUB_REQ1",
    "THREE",
    "TWO",
    "VERSION_ATTRIBUTE",
    "ZERO",
    "Claim",
    "Device",
    "Request",
    "SubRequest",
    "all_device_request",
    "allocation_result",
    "allocation_result_with_config",
    "allocation_result_with_configs",
    "capacity_memory_selector",
    "cel_selector",
    "claim",
    "claim_with_device_config",
    "claim_with_request",
    "claim_with_requests",
    "class_with_allow_multiple_allocations",
    "class_with_config",
    "counter_set",
    "device",
    "device_allocation_result",
    "device_claim_config",
    "device_class",
    "device_configuration",
    "device_counter_consumption",
    "device_request",
    "device_request_allocation_result",
    "device_request_allocation_result_with_binding_conditions",
    "local_node_selector",
    "multiple_device_allocation_results",
    "node",
    "node_label_selector",
    "normalize_share_ids",
    "request",
    "request_with_prioritized_list",
    "resource_pool",
    "slice_with_counter_sets",
    "slice_with_devices",
    "slice_with_multiple_devices",
    "slice_with_no_devices",
    "slice_with_one_device",
    "sub_request",
    "taint",
    "toleration",
]

REGION1, REGION2 = "region-1", "region-2"
NODE1, NODE2 = "node-1", "node-2"
CLASS_A, CLASS_B = "class-a", "class-b"
DRIVER_A, DRIVER_B = "driver-a", "driver-b"
POOL1, POOL2, POOL3, POOL4 = "pool-1", "pool-2", "pool-3", "pool-4"
REQ0, REQ1, REQ2, REQ3 = "req-0", "req-1", "req-2", "req-3"
SUB_REQ0, SUB_REQ1 = "subReq-0", "subReq-1"
REQ0_SUB0, REQ0_SUB1 = "req-0/subReq-0", "req-0/subReq-1"
REQ1_SUB0, REQ1_SUB1 = "req-1/subReq-0", "req-1/subReq-1"
REQ2_SUB0, REQ2_SUB1 = "req-2/subReq-0", "req-2/subReq-1"
CLAIM0, CLAIM1 = "claim-0", "claim-1"
SLICE1, SLICE2, SLICE3, SLICE4 = "slice-1", "slice-2", "slice-3", "slice-4"
DEVICE0, DEVICE1, DEVICE2, DEVICE3, DEVICE4 = "device-0", "device-1", "device-2", "device-3", "device-4"
COUNTER_SET1, COUNTER_SET2 = "counter-set-1", "counter-set-2"
CAPACITY0, CAPACITY1 = "capacity-0", "capacity-1"
FIXED_SHARE_ID = "aaaaaaaa-aaaa-aaaa-aaaa-aaaaaaaaaaaa"
# resource.NewQuantity(n, resource.BinarySI), as the API server would serve them.
ZERO, ONE, TWO, THREE, FOUR = "0", "1", "2", "3", "4"
MAX_RESULTS = 32  # resourceapi.AllocationResultsMaxSize

FIELD_NAME_KEY = "metadata.name"
REGION_KEY = "region"
PLANET_KEY = "planet"
PLANET_VALUE_EARTH = "earth"

NON_EXISTENT_ATTRIBUTE = f"{DRIVER_A}/NonExistentAttribute"
BOOL_ATTRIBUTE = f"{DRIVER_A}/boolAttribute"
STRING_ATTRIBUTE = f"{DRIVER_A}/stringAttribute"
VERSION_ATTRIBUTE = f"{DRIVER_A}/driverVersion"
INT_ATTRIBUTE = f"{DRIVER_A}/numa"

FROM_COUNTERS = "fromCounters"
NODE_SELECTION_ALL = "nodeSelectionAll"
NODE_SELECTION_PER_DEVICE = "nodeSelectionPerDevice"

JSON = dict[str, Any]


def node(name: str, region: str) -> JSON:
    return {"metadata": {"name": name, "labels": {REGION_KEY: region, PLANET_KEY: PLANET_VALUE_EARTH}}}


def cel_selector(expression: str) -> JSON:
    return {"cel": {"expression": expression}}


def capacity_memory_selector(minimum: str, driver: str = DRIVER_A) -> JSON:
    """The recurring `device.capacity["<driver>"].memory.compareTo(quantity("<min>")) >= 0` selector."""
    return cel_selector(f'device.capacity["{driver}"].memory.compareTo(quantity("{minimum}")) >= 0')


def device_class(name: str, driver: str) -> JSON:
    """upstream's class(): a DeviceClass selecting one driver."""
    return {"metadata": {"name": name}, "spec": {"selectors": [cel_selector(f'device.driver == "{driver}"')]}}


def class_with_allow_multiple_allocations(name: str, driver: str, multi: bool) -> JSON:
    expression = f'device.driver == "{driver}" && device.allowMultipleAllocations == {str(multi).lower()}'
    return {"metadata": {"name": name}, "spec": {"selectors": [cel_selector(expression)]}}


def device_configuration(driver: str, attribute: str) -> JSON:
    return {"opaque": {"driver": driver, "parameters": {attribute: attribute + "Value"}}}


def class_with_config(name: str, driver: str, attribute: str) -> JSON:
    out = device_class(name, driver)
    out["spec"]["config"] = [device_configuration(driver, attribute)]
    return out


def taint(key: str, value: str, effect: str) -> JSON:
    return {"key": key, "value": value, "effect": effect}


def toleration(operator: str, key: str, effect: str, value: str | None = None) -> JSON:
    out = {"operator": operator, "key": key, "effect": effect}
    if value is not None:
        out["value"] = value
    return out


# -- requests ----------------------------------------------------------------------------------------------------

@dataclass
class Request:
    raw: JSON

    def obj(self) -> JSON:
        return self.raw

    def with_capacity_request(self, quantity: str | None) -> Request:
        out = copy.deepcopy(self.raw)
        out["exactly"]["capacity"] = {"requests": {CAPACITY0: quantity} if quantity is not None else {}}
        return Request(out)

    def with_selectors(self, *selectors: JSON) -> Request:
        out = copy.deepcopy(self.raw)
        out["exactly"]["selectors"] = list(selectors)
        return Request(out)

    def with_admin_access(self) -> Request:
        out = copy.deepcopy(self.raw)
        out["exactly"]["adminAccess"] = True
        return Request(out)

    def with_allocation_mode(self, mode: str, count: int | None = None) -> Request:
        out = copy.deepcopy(self.raw)
        out["exactly"]["allocationMode"] = mode
        if count is not None:
            out["exactly"]["count"] = count
        return Request(out)


def request(name: str, class_name: str, count: int, *selectors: JSON) -> JSON:
    exactly: JSON = {"count": count, "allocationMode": "ExactCount", "deviceClassName": class_name}
    if selectors:
        exactly["selectors"] = list(selectors)
    return {"name": name, "exactly": exactly}


def device_request(name: str, class_name: str, count: int) -> Request:
    return Request(request(name, class_name, count))


def all_device_request(name: str, class_name: str) -> Request:
    return Request({"name": name, "exactly": {"allocationMode": "All", "deviceClassName": class_name}})


@dataclass
class SubRequest:
    raw: JSON

    def obj(self) -> JSON:
        return self.raw

    def with_allocation_mode(self, mode: str) -> SubRequest:
        out = copy.deepcopy(self.raw)
        out["allocationMode"] = mode
        return SubRequest(out)

    def with_capacity_request(self, quantity: str | None) -> SubRequest:
        out = copy.deepcopy(self.raw)
        out["capacity"] = {"requests": {CAPACITY0: quantity} if quantity is not None else {}}
        return SubRequest(out)


def sub_request(name: str, class_name: str, count: int, *fields: JSON) -> SubRequest:
    """Selectors ({"cel": ...}) and tolerations in any order, as upstream's variadic `fields`."""
    raw: JSON = {"name": name, "count": count, "allocationMode": "ExactCount", "deviceClassName": class_name}
    for item in fields:
        raw.setdefault("selectors" if "cel" in item else "tolerations", []).append(item)
    return SubRequest(raw)


def request_with_prioritized_list(name: str, *subs: SubRequest) -> Request:
    return Request({"name": name, "firstAvailable": [s.obj() for s in subs]})


# -- claims --------------------------------------------------------------------------------------------------------

@dataclass
class Claim:
    raw: JSON

    def obj(self) -> JSON:
        return self.raw

    @property
    def requests(self) -> list[JSON]:
        devices: list[JSON] = self.raw["spec"]["devices"].setdefault("requests", [])
        return devices

    def with_tolerations(self, *tolerations: JSON) -> Claim:
        out = copy.deepcopy(self.raw)
        for r in out["spec"]["devices"]["requests"]:
            r["exactly"].setdefault("tolerations", []).extend(copy.deepcopy(list(tolerations)))
        return Claim(out)

    def with_requests(self, *requests: Request) -> Claim:
        out = copy.deepcopy(self.raw)
        out["spec"]["devices"]["requests"] = [copy.deepcopy(r.obj()) for r in requests]
        return Claim(out)

    def with_constraints(self, *constraints: JSON) -> Claim:
        out = copy.deepcopy(self.raw)
        out["spec"]["devices"]["constraints"] = list(constraints)
        return Claim(out)

    def with_configs(self, configs: Sequence[JSON]) -> Claim:
        out = copy.deepcopy(self.raw)
        out["spec"]["devices"]["config"] = list(configs)
        return Claim(out)


def claim(name: str) -> Claim:
    return Claim({"metadata": {"name": name}, "spec": {"devices": {"requests": []}}})


def claim_with_requests(name: str, constraints: Sequence[JSON] | None, *requests: JSON) -> Claim:
    devices: JSON = {"requests": [copy.deepcopy(r) for r in requests]}
    if constraints is not None:
        devices["constraints"] = list(constraints)
    return Claim({"metadata": {"name": name}, "spec": {"devices": devices}})


def claim_with_request(name: str, req: str, class_name: str, *constraints: JSON) -> Claim:
    return claim_with_requests(name, list(constraints) or None, request(req, class_name, 1))


def claim_with_device_config(name: str, req: str, class_name: str, driver: str, attribute: str) -> Claim:
    out = claim_with_request(name, req, class_name)
    out.raw["spec"]["devices"]["config"] = [device_configuration(driver, attribute)]
    return out


def device_claim_config(requests: Sequence[str], configuration: JSON) -> JSON:
    return {"requests": list(requests), **configuration}


# -- devices and slices --------------------------------------------------------------------------------------------

@dataclass
class Device:
    raw: JSON
    capacity_from_counters: bool = False

    def obj(self) -> JSON:
        return self.raw

    def _copy(self) -> JSON:
        return copy.deepcopy(self.raw)

    def with_taints(self, *taints: JSON) -> Device:
        out = self._copy()
        out.setdefault("taints", []).extend(copy.deepcopy(list(taints)))
        return Device(out)

    def with_device_counter_consumption(self, *consumption: JSON) -> Device:
        out = self._copy()
        out.setdefault("consumesCounters", []).extend(copy.deepcopy(list(consumption)))
        if self.capacity_from_counters:
            out["capacity"] = {name: {"value": c["value"]}
                               for dcc in out["consumesCounters"] for name, c in dcc.get("counters", {}).items()}
        return Device(out)

    def with_node_selection(self, selection: str | JSON) -> Device:
        out = self._copy()
        if isinstance(selection, dict):
            out["nodeSelector"] = selection
        elif selection == NODE_SELECTION_ALL:
            out["allNodes"] = True
        else:
            out["nodeName"] = selection
        return Device(out)

    def with_binding_conditions(self, conditions: list[str], failure_conditions: list[str]) -> Device:
        out = self._copy()
        out["bindingConditions"] = list(conditions)
        out["bindingFailureConditions"] = list(failure_conditions)
        return Device(out)

    def with_binds_to_node(self, binds: bool) -> Device:
        out = self._copy()
        out["bindsToNode"] = binds
        return Device(out)

    def with_allow_multiple_allocations(self) -> Device:
        out = self._copy()
        out["allowMultipleAllocations"] = True
        return Device(out)

    def with_capacity_request_policy_range(self, capacity: Mapping[str, str]) -> Device:
        """Each capacity with requestPolicy default 2, validRange min 2, step 2, max 4."""
        out = self._copy()
        caps = out.setdefault("capacity", {})
        for name, value in capacity.items():
            caps[name] = {"value": value, "requestPolicy": {"default": TWO, "validRange": {"min": TWO, "step": TWO,
                                                                                          "max": FOUR}}}
        return Device(out)

    def with_capacity_request_policy_valid_values(self, default: str, capacity: Mapping[str, str],
                                                  additional: Sequence[str] | None) -> Device:
        out = self._copy()
        caps = out.setdefault("capacity", {})
        for name, value in capacity.items():
            caps[name] = {"value": value,
                          "requestPolicy": {"default": default, "validValues": [default, *(additional or [])]}}
        return Device(out)


def device(name: str, capacity: Mapping[str, str] | str | None = None,
           attributes: Mapping[str, JSON] | None = None) -> Device:
    """capacity: {name: quantity}, FROM_COUNTERS (taken from the counters consumed), or None."""
    raw: JSON = {"name": name}
    if attributes is not None:
        raw["attributes"] = dict(attributes)
    from_counters = capacity == FROM_COUNTERS
    if isinstance(capacity, Mapping):
        raw["capacity"] = {n: {"value": v} for n, v in capacity.items()}
    return Device(raw, from_counters)


def device_counter_consumption(counter_set_name: str, counters: Mapping[str, str] | None) -> JSON:
    return {"counterSet": counter_set_name, "counters": {n: {"value": v} for n, v in (counters or {}).items()}}


def counter_set(name: str, counters: Mapping[str, str] | None) -> JSON:
    return {"name": name, "counters": {n: {"value": v} for n, v in (counters or {}).items()}}


def resource_pool(name: str, count: int, generation: int = 1) -> JSON:
    return {"name": name, "resourceSliceCount": count, "generation": generation}


def _slice(name: str, node_selection: str | JSON, pool: str | JSON, driver: str) -> JSON:
    pool_spec = resource_pool(pool, 1) if isinstance(pool, str) else copy.deepcopy(pool)
    spec: JSON = {"driver": driver, "pool": pool_spec}
    if isinstance(node_selection, dict):
        spec["nodeSelector"] = copy.deepcopy(node_selection)
    elif node_selection == NODE_SELECTION_ALL:
        spec["allNodes"] = True
    elif node_selection == NODE_SELECTION_PER_DEVICE:
        spec["perDeviceNodeSelection"] = True
    else:
        spec["nodeName"] = node_selection
    return {"metadata": {"name": name}, "spec": spec}


def slice_with_devices(name: str, node_selection: str | JSON, pool: str | JSON, driver: str,
                       *devices: Device) -> JSON:
    out = _slice(name, node_selection, pool, driver)
    if devices:
        out["spec"]["devices"] = [copy.deepcopy(d.obj()) for d in devices]
    return out


def slice_with_counter_sets(name: str, node_selection: str | JSON, pool: str | JSON, driver: str,
                            *counter_sets: JSON) -> JSON:
    out = _slice(name, node_selection, pool, driver)
    out["spec"]["sharedCounters"] = copy.deepcopy(list(counter_sets))
    return out


def slice_with_no_devices(name: str, node_selection: str | JSON, pool: str | JSON, driver: str) -> JSON:
    return slice_with_devices(name, node_selection, pool, driver)


def slice_with_one_device(name: str, node_selection: str | JSON, pool: str | JSON, driver: str) -> JSON:
    return slice_with_devices(name, node_selection, pool, driver, device(DEVICE1))


def slice_with_multiple_devices(name: str, node_selection: str | JSON, pool: str | JSON, driver: str,
                                count: int) -> JSON:
    return slice_with_devices(name, node_selection, pool, driver, *(device(f"device-{i}") for i in range(count)))


def node_label_selector(key: str, *values: str) -> JSON:
    return {"nodeSelectorTerms": [{"matchExpressions": [{"key": key, "operator": "In", "values": list(values)}]}]}


def local_node_selector(node_name: str) -> JSON:
    return {"nodeSelectorTerms": [{"matchFields": [{"key": FIELD_NAME_KEY, "operator": "In", "values": [node_name]}]}]}


# -- expected results ------------------------------------------------------------------------------------------------

def device_allocation_result(req: str, driver: str, pool: str, device_name: str, admin_access: bool,
                             *tolerations: JSON) -> JSON:
    out: JSON = {"request": req, "driver": driver, "pool": pool, "device": device_name}
    if admin_access:
        out["adminAccess"] = True
    if tolerations:
        out["tolerations"] = list(tolerations)
    return out


@dataclass
class _SharedResult:
    raw: JSON = field(default_factory=dict)

    def with_consumed_capacity(self, share_id: str, consumed: Mapping[str, str] | None) -> JSON:
        out = dict(self.raw)
        out["shareID"] = share_id
        if consumed:
            out["consumedCapacity"] = dict(consumed)
        return out


def device_request_allocation_result(req: str, driver: str, pool: str, device_name: str) -> _SharedResult:
    return _SharedResult({"request": req, "driver": driver, "pool": pool, "device": device_name})


def device_request_allocation_result_with_binding_conditions(
        req: str, driver: str, pool: str, device_name: str, conditions: list[str] | None,
        failure_conditions: list[str] | None, *tolerations: JSON) -> JSON:
    out = device_allocation_result(req, driver, pool, device_name, False, *tolerations)
    if conditions:
        out["bindingConditions"] = list(conditions)
    if failure_conditions:
        out["bindingFailureConditions"] = list(failure_conditions)
    return out


def multiple_device_allocation_results(req: str, driver: str, pool: str, count: int, start: int) -> list[JSON]:
    return [device_allocation_result(req, driver, pool, f"device-{i}", False) for i in range(start, start + count)]


def allocation_result(selector: JSON | None, *results: JSON) -> JSON:
    out: JSON = {"devices": {"results": list(results)} if results else {}}
    if selector is not None:
        out["nodeSelector"] = selector
    return out


def allocation_result_with_configs(selector: JSON | None, results: Sequence[JSON], configs: Sequence[JSON]) -> JSON:
    out = allocation_result(selector, *results)
    out["devices"]["config"] = list(configs)
    return out


def allocation_result_with_config(selector: JSON | None, driver: str, source: str, attribute: str,
                                  *results: JSON) -> JSON:
    return allocation_result_with_configs(selector, results,
                                          [{"source": source, **device_configuration(driver, attribute)}])


def normalize_share_ids(results: list[JSON] | None) -> list[JSON] | None:
    """Every shareID replaced by FIXED_SHARE_ID (a random uuid upstream too), as upstream's test does."""
    if results is None:
        return None
    out = copy.deepcopy(results)
    for allocation in out:
        for result in allocation.get("devices", {}).get("results", []):
            if "shareID" in result:
                result["shareID"] = FIXED_SHARE_ID
    return out
