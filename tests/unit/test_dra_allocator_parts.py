"""The allocator's parts and our additions to it: consumable-capacity rules (upstream's
structured/internal/incubating/consumable_capacity_test.go, TestConsumableCapacity, ported), quantities, the
allocated state, upstream's quirks kept on purpose (docs/design/dra.md §3.4, §3.6), error texts (§7), the
telemetry rank, the selector memo and the slice cache."""

from __future__ import annotations

from typing import Any

import pytest

from metrics_sched.plugins.dynamic_resources.allocator import (
    AllocatedState,
    AllocationError,
    Allocator,
    SelectorMemo,
    SliceCache,
    gather_allocated_state,
)
from metrics_sched.plugins.dynamic_resources.allocator.capacity import (
    DeviceCapacity,
    RequestPolicy,
    consumed_capacity,
    consumed_from_request,
    violates_policy,
)
from metrics_sched.plugins.dynamic_resources.allocator.quantity import Quantity
from metrics_sched.plugins.dynamic_resources.cel import CelDevice, CompiledSelector, SelectorCache
from tests.unit.dra_allocator_builders import (
    CLAIM0,
    CLASS_A,
    COUNTER_SET1,
    DRIVER_A,
    NODE1,
    POOL1,
    REGION1,
    REQ0,
    REQ1,
    SLICE1,
    cel_selector,
    claim_with_requests,
    counter_set,
    device,
    device_class,
    device_counter_consumption,
    local_node_selector,
    node,
    request,
    resource_pool,
    slice_with_counter_sets,
    slice_with_devices,
    taint,
)

JSON = dict[str, Any]
N1 = node(NODE1, REGION1)
CLASSES = {CLASS_A: device_class(CLASS_A, DRIVER_A)}


def q(text: str) -> Quantity:
    return Quantity.parse(text)


def policy(default: str | None = None, valid_values: list[str] | None = None, minimum: str | None = None,
           maximum: str | None = None, step: str | None = None, ranged: bool = False) -> RequestPolicy:
    return RequestPolicy(
        default=None if default is None else q(default),
        valid_values=None if valid_values is None else tuple(q(v) for v in valid_values),
        has_range=ranged or minimum is not None or maximum is not None or step is not None,
        range_min=None if minimum is None else q(minimum),
        range_max=None if maximum is None else q(maximum),
        range_step=None if step is None else q(step))


# -- consumable_capacity_test.go, TestConsumableCapacity ----------------------------------------------------------

VIOLATES = {  # "violate-capacity-sharing": name -> (requested, policy, violates)
    "no constraint": ("1", None, False),
    "less than maximum": ("1", policy(default="1", minimum="1", maximum="2"), False),
    "more than maximum": ("2", policy(default="1", minimum="1", maximum="1"), True),
    "in set": ("1", policy(default="1", valid_values=["1"]), False),
    "not in set": ("2", policy(default="1", valid_values=["1"]), True),
}


@pytest.mark.parametrize("name", sorted(VIOLATES))
def test_violates_policy(name: str) -> None:
    """consumable_capacity_test.go TestConsumableCapacity/violate-capacity-sharing, case `name`."""
    requested, request_policy, expected = VIOLATES[name]
    assert violates_policy(q(requested), request_policy) is expected


CONSUMED = {  # "calculate-consumed-capacity": name -> (requested, capacity value, policy, expected)
    "empty": (None, "1", policy(), "1"),
    "min in range": (None, "2", policy(default="1", minimum="1"), "1"),
    "default in set": (None, "2", policy(default="1", valid_values=["1"]), "1"),
    "more than min in range": ("2", "2", policy(default="1", minimum="1"), "2"),
    "less than min in range": ("1", "2", policy(default="1", minimum="2"), "2"),
    "with step (round up)": ("2", "3", policy(default="1", minimum="1", step="2"), "3"),
    "with step (no remaining)": ("2", "2", policy(default="1", minimum="1", step="1"), "2"),
    "valid value in set": ("2", "3", policy(default="1", valid_values=["1", "2", "3"]), "2"),
    "set (round up)": ("2", "3", policy(default="1", valid_values=["1", "3"]), "3"),
    "larger than set": ("3", "3", policy(default="1", valid_values=["1", "2"]), "3"),
}


@pytest.mark.parametrize("name", sorted(CONSUMED))
def test_consumed_capacity(name: str) -> None:
    """consumable_capacity_test.go TestConsumableCapacity/calculate-consumed-capacity, case `name`."""
    requested, value, request_policy, expected = CONSUMED[name]
    got = consumed_capacity(None if requested is None else q(requested), DeviceCapacity(q(value), request_policy))
    assert got.nanos == q(expected).nanos


def test_consumed_capacity_from_request() -> None:
    """consumable_capacity_test.go TestConsumableCapacity/get-consumed-capacity-from-request: requested (with a
    default), unrequested with a default, unrequested without a policy (the whole capacity) all come to 1."""
    capacities = {
        "capacity-0": DeviceCapacity(q("2"), policy(default="2", minimum="1")),
        "capacity-1": DeviceCapacity(q("2"), policy(default="1", minimum="1")),
        "dummy": DeviceCapacity(q("1"), None),
    }
    consumed = consumed_from_request({"capacity-0": q("1"), "dummy": q("1")}, capacities)
    assert sorted(consumed) == ["capacity-0", "capacity-1", "dummy"]
    assert all(v.nanos == q("1").nanos for v in consumed.values())


def test_aggregated_capacity_insert() -> None:
    """consumable_capacity_test.go TestConsumableCapacity/insert-remove-allocating-consumed-capacity-collection,
    the insert half (ConsumedCapacityCollection.Insert adds up); removal on backtracking is exercised by the
    allocator cases consumable-capacity-with-multi-allocatable-device-backtrack and friends."""
    state = AllocatedState()
    device_id = (DRIVER_A, POOL1, "device-1")
    state.add_capacity(device_id, {"capacity-0": q("1").nanos})
    state.add_capacity(device_id, {"capacity-0": q("1").nanos})
    assert state.aggregated_capacity[device_id] == {"capacity-0": q("2").nanos}


# -- quantities ------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "canonical"), [
    ("0", "0"), ("1", "1"), ("2", "2"), ("80Gi", "80Gi"), ("1024Mi", "1Gi"), ("1.5Gi", "1536Mi"),
    ("1000Mi", "1000Mi"), ("0.5Ki", "512"), ("1536", "1536"), ("1500", "1500"), ("1500000", "1500k"),
    ("1e9", "1e9"), ("1G", "1G"), ("0.1", "100m"), ("100m", "100m"), ("1n", "1n"), ("0.0000000001", "1n"),
    ("12Mi", "12Mi"), ("+5", "5"), ("-1Gi", "-1Gi"),
])
def test_quantity_canonical(text: str, canonical: str) -> None:
    """Quantity.String() of a parsed value, as the API server stores consumedCapacity."""
    assert q(text).canonical() == canonical


def test_quantity_binary_new_quantity() -> None:
    """resource.NewQuantity(n, BinarySI) (roundUpRange's result): below 1024 written as a plain number."""
    assert Quantity.from_int(4).canonical() == "4"
    assert Quantity.from_int(10 * 2**30).canonical() == "10Gi"
    assert Quantity.from_int(1_500_000_000).canonical() == "1500000000"


def test_quantity_rejects_garbage() -> None:
    with pytest.raises(ValueError, match="quantities must match"):
        q("12 apples")


# -- the allocated state ------------------------------------------------------------------------------------------

def _allocated(*results: JSON) -> JSON:
    return {"status": {"allocation": {"devices": {"results": list(results)}}}}


def test_gather_allocated_state() -> None:
    """allocateddevices.go foreachAllocatedDevice: admin access does not count, a shareID makes a shared
    allocation whose consumedCapacity adds up per device, anything else is a dedicated device."""
    state = gather_allocated_state([
        _allocated({"driver": "d", "pool": "p", "device": "admin", "request": "r", "adminAccess": True},
                   {"driver": "d", "pool": "p", "device": "dedicated", "request": "r"}),
        _allocated({"driver": "d", "pool": "p", "device": "shared", "request": "r", "shareID": "u1",
                    "consumedCapacity": {"memory": "10Gi"}}),
        _allocated({"driver": "d", "pool": "p", "device": "shared", "request": "r", "shareID": "u2",
                    "consumedCapacity": {"memory": "6Gi"}}),
        {"status": {}},
        {},
    ])
    assert state.allocated_devices == {("d", "p", "dedicated")}
    assert state.allocated_shared_device_ids == {("d", "p", "shared", "u1"), ("d", "p", "shared", "u2")}
    assert state.aggregated_capacity == {("d", "p", "shared"): {"memory": q("16Gi").nanos}}
    assert state.devices_in_use() == {("d", "p", "dedicated"), ("d", "p", "shared")}


def test_allocated_claims_block_their_devices() -> None:
    slices = [slice_with_devices(SLICE1, NODE1, POOL1, DRIVER_A, device("device-1"), device("device-2"))]
    state = gather_allocated_state([_allocated({"driver": DRIVER_A, "pool": POOL1, "device": "device-1",
                                                "request": REQ0})])
    claims = [claim_with_requests(CLAIM0, None, request(REQ0, CLASS_A, 1)).obj()]
    results = Allocator(state, CLASSES, slices, SelectorCache()).allocate(N1, claims)
    assert results is not None
    assert results[0]["devices"]["results"][0]["device"] == "device-2"


# -- quirks kept on purpose ------------------------------------------------------------------------------------------

def _distinct_claim(count: int, *extra: JSON) -> JSON:
    return claim_with_requests(CLAIM0, [{"requests": [REQ0], "distinctAttribute": f"{DRIVER_A}/numa"}],
                               request(REQ0, CLASS_A, count), *extra).obj()


def _numa(name: str, value: int, special: bool = False) -> Any:
    return device(name, None, {"numa": {"int": value}, "special": {"bool": special}})


def _picked(results: list[JSON] | None) -> list[tuple[str, str]]:
    assert results is not None
    return [(r["request"], r["device"]) for a in results for r in a["devices"]["results"]]


def test_distinct_attribute_compares_with_the_latest_device_of_a_request_only() -> None:
    """dra.md §3.4, first quirk: distinctAttribute keeps one value per request name, so the third device of a
    request is compared with the second only and may repeat the first's value."""
    slices = [slice_with_devices(SLICE1, NODE1, POOL1, DRIVER_A, _numa("d1", 0), _numa("d2", 1), _numa("d3", 0))]
    results = Allocator(AllocatedState(), CLASSES, slices, SelectorCache()).allocate(N1, [_distinct_claim(3)])
    assert _picked(results) == [(REQ0, "d1"), (REQ0, "d2"), (REQ0, "d3")]


def test_distinct_attribute_forgets_a_request_on_backtracking() -> None:
    """dra.md §3.4, second quirk: removing a device on backtracking drops its request's value although the
    request's first device stays chosen, so the next candidate is compared with nothing. req-1 needs d2, so
    req-0's second device (d2) is given back and replaced by d3, whose value repeats d1's."""
    slices = [slice_with_devices(SLICE1, NODE1, POOL1, DRIVER_A, _numa("d1", 0), _numa("d2", 1, special=True),
                                 _numa("d3", 0))]
    special = request(REQ1, CLASS_A, 1, cel_selector(f'device.attributes["{DRIVER_A}"].special'))
    results = Allocator(AllocatedState(), CLASSES, slices, SelectorCache()).allocate(N1, [_distinct_claim(2, special)])
    assert _picked(results) == [(REQ0, "d1"), (REQ0, "d3"), (REQ1, "d2")]


@pytest.mark.parametrize("refusal", ["taint", "constraint"])
def test_counters_are_given_back_when_a_taint_or_constraint_refuses_the_device(refusal: str) -> None:
    """A device's counters are taken before its taints and the claim's constraints are checked; kube-scheduler 1.36.3
    gives them back when those refuse the device (kubernetes/kubernetes#140431, on release-1.36 by #140663; 1.36.2
    kept them taken, so the second device, which fits alone, was refused for want of counters). Found by the
    differential DRA test (DIFF_SEED=20261201 DIFF_CASE=296: kube-scheduler 1.36.3 allocated the later device)."""
    consume = device_counter_consumption(COUNTER_SET1, {"memory": "8Gi"})
    first = device("d1").with_device_counter_consumption(consume)
    if refusal == "taint":
        first = first.with_taints(taint("k", "v", "NoSchedule"))
    second = device("d2", None, {"numa": {"int": 1}}).with_device_counter_consumption(consume)
    slices = [
        slice_with_devices(SLICE1, NODE1, resource_pool(POOL1, 2), DRIVER_A, first, second),
        slice_with_counter_sets("slice-2", NODE1, resource_pool(POOL1, 2), DRIVER_A,
                                counter_set(COUNTER_SET1, {"memory": "8Gi"})),
    ]
    constraints = [{"matchAttribute": f"{DRIVER_A}/numa"}] if refusal == "constraint" else None
    claims = [claim_with_requests(CLAIM0, constraints, request(REQ0, CLASS_A, 1)).obj()]
    assert _picked(Allocator(AllocatedState(), CLASSES, slices, SelectorCache()).allocate(N1, claims)) == [
        (REQ0, "d2")]


def test_a_shared_device_given_back_on_backtracking_returns_its_counters() -> None:
    """The rollback of a shared (allowMultipleAllocations) device gives back the counters it took (1.36.3,
    kubernetes/kubernetes#140663): r0 first takes d1, r1 (only d2 suits it) then lacks counters; r0 moves on to d2
    (which r1 needs) and to d3, and r1 takes d2, whose counters d1 no longer holds."""
    consume = device_counter_consumption(COUNTER_SET1, {"memory": "8Gi"})
    slices = [
        slice_with_devices(SLICE1, NODE1, resource_pool(POOL1, 2), DRIVER_A,
                           device("d1").with_allow_multiple_allocations().with_device_counter_consumption(consume),
                           device("d2", None, {"x": {"int": 1}}).with_device_counter_consumption(consume),
                           device("d3")),
        slice_with_counter_sets("slice-2", NODE1, resource_pool(POOL1, 2), DRIVER_A,
                                counter_set(COUNTER_SET1, {"memory": "8Gi"})),
    ]
    only_d2 = cel_selector(f'has(device.attributes["{DRIVER_A}"].x)')
    claims = [claim_with_requests(CLAIM0, None, request(REQ0, CLASS_A, 1), request(REQ1, CLASS_A, 1, only_d2)).obj()]
    assert _picked(Allocator(AllocatedState(), CLASSES, slices, SelectorCache()).allocate(N1, claims)) == [
        (REQ0, "d3"), (REQ1, "d2")]


# -- error texts (dra.md §7) ----------------------------------------------------------------------------------------

GPU = "gpu.nvidia.com"


def _gpus(count: int = 8, version: str = "1", name: str = "node-1-gpus", node_name: str = NODE1) -> JSON:
    raw = slice_with_devices(name, node_name, resource_pool(node_name, 1), GPU, *(
        device(f"gpu-{i}", {"memory": "80Gi"}, {"productName": {"string": "H100"}, "index": {"int": i}})
        for i in range(count)))
    # Versions differ with the content: the process-wide slice cache trusts (uid, name, resourceVersion).
    raw["metadata"].update({"uid": f"uid-{name}", "resourceVersion": f"{version}.{count}"})
    return raw


GPU_CLASSES = {"gpu": device_class("gpu", GPU)}


def _gpu_claim(count: int = 1, *selectors: JSON, namespace: str = "ns") -> JSON:
    raw = claim_with_requests(CLAIM0, None, request("gpu", "gpu", count, *selectors)).obj()
    raw["metadata"]["namespace"] = namespace
    return raw


def test_cel_runtime_error_is_fatal_with_upstreams_text() -> None:
    selector = cel_selector(f'device.attributes["{GPU}"].nvlinkDomain == "a"')
    allocator = Allocator(AllocatedState(), GPU_CLASSES, [_gpus()], SelectorCache())
    with pytest.raises(AllocationError) as raised:
        allocator.allocate(N1, [_gpu_claim(1, selector)])
    assert str(raised.value) == "claim ns/claim-0: selector #0: CEL runtime error: no such key: nvlinkDomain"


def test_class_cel_errors_name_the_class() -> None:
    classes = {"gpu": {"metadata": {"name": "gpu"}, "spec": {"selectors": [
        cel_selector(f'device.driver == "{GPU}"'), cel_selector("noSuchVar")]}}}
    allocator = Allocator(AllocatedState(), classes, [_gpus()], SelectorCache())
    with pytest.raises(AllocationError, match=r"^class gpu: selector #1: CEL compile error: compilation failed: "
                                              r"ERROR: <input>:1:1: undeclared reference to 'noSuchVar'"):
        allocator.allocate(N1, [_gpu_claim()])


def test_too_many_devices_text() -> None:
    allocator = Allocator(AllocatedState(), GPU_CLASSES, [_gpus()], SelectorCache())
    with pytest.raises(AllocationError) as raised:
        allocator.allocate(N1, [_gpu_claim(33)])
    assert str(raised.value) == "claim ns/claim-0: number of requested devices 33 exceeds the claim limit of 32"


def test_unparsable_slice_node_selector_is_fatal() -> None:
    raw = slice_with_devices(SLICE1, {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "region", "operator": "Near", "values": ["x"]}]}]}, POOL1, DRIVER_A, device("device-1"))
    allocator = Allocator(AllocatedState(), CLASSES, [raw], SelectorCache())
    claims = [claim_with_requests(CLAIM0, None, request(REQ0, CLASS_A, 1)).obj()]
    with pytest.raises(AllocationError, match=r"^gather pool information: failed to perform node selection for "
                                              r"slice slice-1: failed to parse node selector: .*Unsupported value: "
                                              r'"Near"'):
        allocator.allocate(N1, claims)


def test_multi_term_node_selector_cannot_be_written() -> None:
    """createNodeSelector: a slice selector with two terms cannot be merged into the allocation's one term."""
    two_terms = {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "region", "operator": "In", "values": [REGION1]}]},
        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z"]}]}]}
    raw = slice_with_devices(SLICE1, two_terms, POOL1, DRIVER_A, device("device-1"))
    allocator = Allocator(AllocatedState(), CLASSES, [raw], SelectorCache())
    claims = [claim_with_requests(CLAIM0, None, request(REQ0, CLASS_A, 1)).obj()]
    with pytest.raises(AllocationError) as raised:
        allocator.allocate(N1, claims)
    assert str(raised.value) == ("create NodeSelector for claim claim-0: unsupported ResourceSlice.NodeSelector "
                                 "with 2 terms")


# -- rank (telemetry preference) ----------------------------------------------------------------------------------

TEMPERATURES = {f"gpu-{i}": t for i, t in enumerate([71.0, 64.0, 80.0, 55.0, 90.0, 42.0, 66.0, 58.0])}


def _by_temperature(node_name: str, driver: str, pool: str, device_name: str) -> float:
    assert (node_name, driver, pool) == (NODE1, GPU, NODE1)
    return TEMPERATURES[device_name]


def _allocate(claim: JSON, rank: Any = None, state: AllocatedState | None = None,
              slices: list[JSON] | None = None) -> list[JSON] | None:
    allocator = Allocator(state or AllocatedState(), GPU_CLASSES, slices or [_gpus()], SelectorCache(), rank=rank)
    return allocator.allocate(N1, [claim])


def test_without_rank_upstreams_first_fit() -> None:
    assert _picked(_allocate(_gpu_claim())) == [("gpu", "gpu-0")]


def test_rank_prefers_the_coolest_device() -> None:
    assert _picked(_allocate(_gpu_claim(), _by_temperature)) == [("gpu", "gpu-5")]


def test_rank_results_in_upstream_order_within_a_request() -> None:
    """The two coolest (gpu-5 at 42, gpu-3 at 55) are chosen, written in upstream's order (gpu-3 first)."""
    assert _picked(_allocate(_gpu_claim(2), _by_temperature)) == [("gpu", "gpu-3"), ("gpu", "gpu-5")]


def test_rank_ties_keep_upstreams_order() -> None:
    assert _picked(_allocate(_gpu_claim(2), lambda *_: 1.0)) == [("gpu", "gpu-0"), ("gpu", "gpu-1")]


def test_rank_changes_nothing_where_exactly_one_allocation_fits() -> None:
    """Seven GPUs allocated: the one left is the only solution, and the JSON is identical with and without rank."""
    state = AllocatedState(allocated_devices={(GPU, NODE1, f"gpu-{i}") for i in range(8) if i != 4})
    plain = _allocate(_gpu_claim(), state=state)
    ranked = _allocate(_gpu_claim(), _by_temperature, state=state)
    assert plain == ranked
    assert _picked(plain) == [("gpu", "gpu-4")]
    assert plain == [{"devices": {"results": [{"request": "gpu", "driver": GPU, "pool": NODE1, "device": "gpu-4"}]},
                      "nodeSelector": local_node_selector(NODE1)}]


def test_rank_identical_for_a_unique_solution_with_a_selector() -> None:
    selector = cel_selector(f'device.attributes["{GPU}"].index == 6')
    assert _allocate(_gpu_claim(1, selector)) == _allocate(_gpu_claim(1, selector), _by_temperature)


def test_rank_does_not_reorder_all_mode() -> None:
    claim = _gpu_claim()
    claim["spec"]["devices"]["requests"][0]["exactly"] = {"deviceClassName": "gpu", "allocationMode": "All"}
    assert _picked(_allocate(claim, _by_temperature)) == [("gpu", f"gpu-{i}") for i in range(8)]


# -- memo and caches -------------------------------------------------------------------------------------------------

class CountingSelectorCache(SelectorCache):
    """Counts CEL evaluations (compile is the cache's own business)."""

    def __init__(self) -> None:
        super().__init__()
        self.evaluations = 0

    def compile(self, expression: str) -> CompiledSelector:
        compiled = super().compile(expression)
        outer = self

        class Counting(CompiledSelector):
            def __init__(self) -> None:  # the wrapped selector does the work
                pass

            def matches(self, cel_device: CelDevice) -> bool:
                outer.evaluations += 1
                return compiled.matches(cel_device)

        return Counting()


def test_selector_memo_spares_cel_across_pods_until_the_slice_changes() -> None:
    cel = CountingSelectorCache()
    memo = SelectorMemo()
    claims = [_gpu_claim(2)]
    first = Allocator(AllocatedState(), GPU_CLASSES, [_gpus()], cel, memo).allocate(N1, claims)
    assert cel.evaluations == 2  # the class selector on gpu-0 and gpu-1
    assert len(memo) == 2
    second = Allocator(AllocatedState(), GPU_CLASSES, [_gpus()], cel, memo).allocate(N1, claims)
    assert second == first
    assert cel.evaluations == 2
    Allocator(AllocatedState(), GPU_CLASSES, [_gpus(version="2")], cel, memo).allocate(N1, claims)
    assert cel.evaluations == 4


def test_selector_results_memoised_per_allocation_without_a_memo() -> None:
    """Without a cross-pod memo, upstream's per-attempt cache still evaluates a device once per request: req-1
    must backtrack over req-0's choices without evaluating again."""
    cel = CountingSelectorCache()
    slices = [_gpus(3)]
    claim = claim_with_requests(CLAIM0, None, request("a", "gpu", 2), request(
        "b", "gpu", 1, cel_selector(f'device.attributes["{GPU}"].index == 0'))).obj()
    results = Allocator(AllocatedState(), GPU_CLASSES, slices, cel).allocate(N1, [claim])
    assert _picked(results) == [("a", "gpu-1"), ("a", "gpu-2"), ("b", "gpu-0")]
    assert cel.evaluations == 3 + 3 * 2  # class selector on 3 devices; request "b": class + own on 3 devices


def test_slice_cache_parses_a_version_once() -> None:
    cache = SliceCache()
    claims = [_gpu_claim()]
    for _ in range(3):
        Allocator(AllocatedState(), GPU_CLASSES, [_gpus()], SelectorCache(), slice_cache=cache).allocate(N1, claims)
    assert len(cache) == 1
    Allocator(AllocatedState(), GPU_CLASSES, [_gpus(version="2")], SelectorCache(),
              slice_cache=cache).allocate(N1, claims)
    assert len(cache) == 2


def test_nodes_only_see_their_slices() -> None:
    slices = [_gpus(2, name="a-gpus", node_name="node-a"), _gpus(2, name="b-gpus", node_name="node-b")]
    allocator = Allocator(AllocatedState(), GPU_CLASSES, slices, SelectorCache())
    for name in ("node-a", "node-b"):
        results = allocator.allocate(node(name, REGION1), [_gpu_claim()])
        assert results is not None
        assert results[0]["devices"]["results"][0]["pool"] == name
        assert results[0]["nodeSelector"] == local_node_selector(name)
    assert allocator.allocate(node("node-c", REGION1), [_gpu_claim()]) is None
