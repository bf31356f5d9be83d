"""The dev cluster's fake DRA driver (devcluster.dra) without a cluster: the slices it builds keep the API's limits
(pkg/apis/resource/validation/validation.go and types.go, 1.36) and NVIDIA's naming, MIG counters model the
placements, the UUIDs are those the emulator serves DCGM series under, publishing replaces a node's pool with a new
generation; and the emulator's per-GPU override of one GPU."""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from devcluster.dra import HARDWARE, NodeGpus, node_gpus, resource_slices
from devcluster.dra.catalogue import semver
from devcluster.dra.classes import DEVICE_CLASSES, EXTENDED_RESOURCE
from devcluster.dra.driver import RESOURCE_SLICES_PATH, publish, unpublish
from devcluster.dra.slices import DRIVER, canonical_quantity, counter_name, pci_bus_id
from devcluster.emulator import EmulatorControl, EmulatorServer, serve
from devcluster.emulator.control import EmulatorError
from devcluster.emulator.state import Emulator
from devcluster.nodes import GPU_RESOURCE, MIG_NODES_MAX, NodeSpec, fleet, node_ip

pytestmark = pytest.mark.unit

SEED = 7
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
C_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# The API's semver check (validation.go semverRe) and the standard attributes' formats (deviceattribute package).
SEMVER = re.compile(r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)")
BDF = re.compile(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-9a-f]")
PCIE_ROOT = re.compile(r"pci[0-9a-f]{4}:[0-9a-f]{2}")


def spec(name: str = "gpu-node-1", gpus: int = 8, instance: str = "gpu-a100-8", **kwargs: Any) -> NodeSpec:
    return NodeSpec(name=name, internal_ip=node_ip(42), gpus=gpus,
                    labels={"node.kubernetes.io/instance-type": instance}, **kwargs)


def gpus_of(node: NodeSpec, uid: str | None = "uid-1") -> NodeGpus:
    found = node_gpus(node, SEED, uid)
    assert found is not None
    return found


def _quantity(text: str) -> int:
    match = re.fullmatch(r"(\d+)(Ki|Mi|Gi|Ti|Pi|Ei)?", text)
    assert match, text
    return int(match[1]) * 2 ** (10 * ("KMGTPE".index(match[2][0]) + 1) if match[2] else 0)


# -- what one value looks like ------------------------------------------------------------------------------------
@pytest.mark.parametrize(("nvml", "published"), [("8.0", "8.0.0"), ("9.0", "9.0.0"), ("580.95.05", "580.95.5"),
                                                  ("13.0", "13.0.0"), ("12", "12.0.0")])
def test_versions_are_published_as_strict_semver(nvml: str, published: str) -> None:
    assert semver(nvml) == published


def test_quantities_are_canonical_and_counters_dns_labels() -> None:
    assert [canonical_quantity(v) for v in (0, 14, 1024, 81920 * 2**20, 9728 * 2**20, 2**40)] == [
        "0", "14", "1Ki", "80Gi", "9728Mi", "1Ti"]
    assert [counter_name(c) for c in ("multiprocessors", "copyEngines", "jpegEngines", "memory")] == [
        "multiprocessors", "copy-engines", "jpeg-engines", "memory"]
    assert pci_bus_id("00000000:0F:00.0") == "0000:0f:00.0"


# -- slices within the API's limits -------------------------------------------------------------------------------
def _check_device(device: dict[str, Any], partitionable_slice: bool) -> None:
    assert DNS_LABEL.fullmatch(device["name"]) and len(device["name"]) <= 63
    attributes, capacity = device["attributes"], device.get("capacity", {})
    assert len(attributes) + len(capacity) <= 32  # ResourceSliceMaxAttributesAndCapacitiesPerDevice
    for name, value in attributes.items():
        domain, _, ident = name.rpartition("/")
        assert C_IDENTIFIER.fullmatch(ident) and len(ident) <= 32, name
        assert not domain or domain == "resource.kubernetes.io", name
        [(kind, raw)] = value.items()
        assert kind in ("string", "int", "bool", "version")
        if kind in ("string", "version"):
            assert len(raw) <= 64, (name, raw)
        if kind == "version":
            assert SEMVER.fullmatch(raw), raw
    assert BDF.fullmatch(attributes["resource.kubernetes.io/pciBusID"]["string"])
    assert PCIE_ROOT.fullmatch(attributes["resource.kubernetes.io/pcieRoot"]["string"])
    for name, value in capacity.items():
        assert C_IDENTIFIER.fullmatch(name) and canonical_quantity(_quantity(value["value"])) == value["value"]
    consumes = device.get("consumesCounters", [])
    assert bool(consumes) == partitionable_slice and len(consumes) <= 2
    for consumption in consumes:
        assert len(consumption["counters"]) <= 32
        assert all(DNS_LABEL.fullmatch(c) for c in consumption["counters"])


def _check_pool(node: NodeGpus, slices: list[dict[str, Any]]) -> None:
    sets: dict[str, dict[str, int]] = {}
    names: list[str] = []
    for item in slices:
        spec_ = item["spec"]
        assert (spec_["driver"], spec_["nodeName"], spec_["pool"]["name"]) == (DRIVER, node.node, node.node)
        assert spec_["pool"]["resourceSliceCount"] == len(slices)
        assert ("devices" in spec_) != ("sharedCounters" in spec_)  # only one of them is allowed
        for counter_set in spec_.get("sharedCounters", []):
            assert DNS_LABEL.fullmatch(counter_set["name"]) and 0 < len(counter_set["counters"]) <= 32
            sets[counter_set["name"]] = {k: _quantity(v["value"]) for k, v in counter_set["counters"].items()}
        assert len(spec_.get("sharedCounters", [])) <= 8  # ResourceSliceMaxCounterSets
        devices = spec_.get("devices", [])
        partitionable = any("consumesCounters" in d for d in devices)
        assert len(devices) <= (64 if partitionable else 128)
        for device in devices:
            _check_device(device, partitionable)
            names.append(device["name"])
        owner = item["metadata"].get("ownerReferences")
        assert owner is None or owner == [{"apiVersion": "v1", "kind": "Node", "name": node.node, "uid": node.uid,
                                           "controller": True}]
    assert len(names) == len(set(names))
    for device in (d for s in slices for d in s["spec"].get("devices", [])):
        for consumption in device.get("consumesCounters", []):
            available = sets[consumption["counterSet"]]
            for counter, value in consumption["counters"].items():
                assert _quantity(value["value"]) <= available[counter], (device["name"], counter)


@pytest.mark.parametrize(("instance", "gpus", "mig"), [
    *((i, g, False) for i in ("gpu-a100-8", "gpu-h100-8", "gpu-l4-8") for g in (1, 2, 8, 64)),
    *((i, g, True) for i in ("gpu-a100-8", "gpu-h100-8") for g in (1, 3, 8, 9, 17)),
])
def test_every_pool_keeps_the_api_limits(instance: str, gpus: int, mig: bool) -> None:
    node = gpus_of(spec(gpus=gpus, instance=instance, mig=mig))
    slices = resource_slices(node, generation=3)
    _check_pool(node, slices)
    assert {s["spec"]["pool"]["generation"] for s in slices} == {3}
    devices = [d for s in slices for d in s["spec"].get("devices", [])]
    whole = [d for d in devices if d["attributes"]["type"]["string"] == "gpu"]
    assert [d["name"] for d in whole] == [f"gpu-{i}" for i in range(gpus)]
    assert [d["attributes"]["uuid"]["string"] for d in whole] == list(node.uuids)
    if not mig:
        assert len(slices) == 1 and len(devices) == gpus
        assert {d["capacity"]["memory"]["value"] for d in devices} == {
            canonical_quantity(node.memory_mib * 2**20)}


def test_no_pool_for_a_node_without_gpus() -> None:
    assert node_gpus(spec(gpus=0, instance="cpu-standard-32"), SEED) is None
    assert resource_slices(NodeGpus("n", HARDWARE["NVIDIA L4"], 23034, (), ())) == []


# -- what the attributes say --------------------------------------------------------------------------------------
def test_attributes_follow_the_model_and_the_board() -> None:
    node = gpus_of(spec(instance="gpu-h100-8"))
    [item] = resource_slices(node)
    devices = item["spec"]["devices"]
    first = devices[0]["attributes"]
    assert {k: next(iter(v.values())) for k, v in first.items()} == {
        "type": "gpu", "uuid": node.uuids[0], "index": 0, "productName": "NVIDIA H100 80GB HBM3", "brand": "Nvidia",
        "architecture": "Hopper", "cudaComputeCapability": "9.0.0", "driverVersion": "580.95.5",
        "cudaDriverVersion": "13.0.0", "resource.kubernetes.io/pciBusID": pci_bus_id(node.pci_bus_ids[0]),
        "resource.kubernetes.io/pcieRoot": "pci0000:00", "nvlinkDomain": "gpu-node-1-nvl0"}
    # Two GPUs a PCIe switch, four an NVLink domain.
    roots = [d["attributes"]["resource.kubernetes.io/pcieRoot"]["string"] for d in devices]
    domains = [d["attributes"]["nvlinkDomain"]["string"] for d in devices]
    assert [len(list(g)) for _, g in itertools.groupby(roots)] == [2] * 4
    assert [len(list(g)) for _, g in itertools.groupby(domains)] == [4] * 2
    # A PCIe card has no NVLink: the attribute is missing (a selector reading it fails to evaluate).
    [l4] = resource_slices(gpus_of(spec(instance="gpu-l4-8")))
    assert all("nvlinkDomain" not in d["attributes"] for d in l4["spec"]["devices"])
    long_name = gpus_of(spec(name="n" * 80 + ".example"))
    value = resource_slices(long_name)[0]["spec"]["devices"][0]["attributes"]["nvlinkDomain"]["string"]
    assert len(value) <= 64 and value.endswith("-nvl0")


def test_mig_devices_are_named_and_described_as_the_driver_does() -> None:
    node = gpus_of(spec(gpus=1, mig=True))
    devices = [d for s in resource_slices(node) for d in s["spec"].get("devices", [])]
    assert [d["name"] for d in devices] == ["gpu-0", *sorted(d["name"] for d in devices[1:])]
    names = {d["name"] for d in devices}
    assert {"gpu-0-mig-1g10gb-19-0", "gpu-0-mig-1g10gb-19-6", "gpu-0-mig-1g20gb-15-6", "gpu-0-mig-2g20gb-14-4",
            "gpu-0-mig-3g40gb-9-4", "gpu-0-mig-4g40gb-5-0", "gpu-0-mig-7g80gb-0-0"} <= names
    assert len(devices) == 1 + 7 + 4 + 3 + 2 + 1 + 1
    mig = next(d for d in devices if d["name"] == "gpu-0-mig-3g40gb-9-4")
    assert mig["attributes"]["type"] == {"string": "mig"} and mig["attributes"]["profile"] == {"string": "3g.40gb"}
    assert mig["attributes"]["parentUUID"] == {"string": node.uuids[0]} and "uuid" not in mig["attributes"]
    assert mig["capacity"]["memory"] == {"value": "40192Mi"} and mig["capacity"]["multiprocessors"] == {"value": "42"}
    [consumption] = mig["consumesCounters"]
    assert consumption["counterSet"] == "gpu-0-counter-set"
    assert sorted(c for c in consumption["counters"] if c.startswith("memory-slice")) == [
        f"memory-slice-{i}" for i in range(4, 8)]


def _fits(devices: list[dict[str, Any]], counter_set: dict[str, int]) -> bool:
    used: dict[str, int] = {}
    for device in devices:
        for name, value in device["consumesCounters"][0]["counters"].items():
            used[name] = used.get(name, 0) + _quantity(value["value"])
    return all(value <= counter_set[name] for name, value in used.items())


@pytest.mark.parametrize("instance", ["gpu-a100-8", "gpu-h100-8"])
def test_mig_counters_allow_exactly_the_layouts_the_placements_allow(instance: str) -> None:
    slices = resource_slices(gpus_of(spec(gpus=1, instance=instance, mig=True)))
    counters = {k: _quantity(v["value"]) for k, v in slices[0]["spec"]["sharedCounters"][0]["counters"].items()}
    devices = {d["name"]: d for d in slices[1]["spec"]["devices"]}
    by_profile: dict[str, list[dict[str, Any]]] = {}
    for name, device in devices.items():
        by_profile.setdefault(name.split("-")[3] if "-mig-" in name else "gpu", []).append(device)
    assert _fits(by_profile["1g10gb"], counters)  # seven 1g.10gb side by side
    assert _fits(by_profile["3g40gb"], counters)  # two 3g.40gb
    assert _fits([devices["gpu-0-mig-4g40gb-5-0"], devices["gpu-0-mig-3g40gb-9-4"]], counters)
    assert not _fits([devices["gpu-0-mig-4g40gb-5-0"], devices["gpu-0-mig-3g40gb-9-0"]], counters)  # same slices
    assert not _fits([devices["gpu-0-mig-1g20gb-15-0"], devices["gpu-0-mig-1g10gb-19-1"]], counters)
    for mig in (d for n, d in devices.items() if "-mig-" in n):
        assert _fits([mig], counters) and not _fits([devices["gpu-0"], mig], counters)  # the whole GPU or parts
    assert _fits([devices["gpu-0"]], counters)


# -- the same GPUs as the emulator's DCGM series ------------------------------------------------------------------
def test_uuids_and_bus_ids_are_those_of_the_emulator_s_dcgm_series() -> None:
    nodes = [spec(name=f"gpu-node-{i}", gpus=g, instance=t) for i, (g, t) in
             enumerate([(8, "gpu-a100-8"), (2, "gpu-l4-2"), (4, "gpu-node-4")])]
    emulator = Emulator(SEED)  # what `devcluster.emulator --seed` serves, registered as DevCluster.add_nodes does
    emulator.register({"nodes": [node.registration() for node in nodes]})
    served: dict[tuple[str, str], tuple[str, str, str]] = {}
    for family in text_string_to_metric_families(emulator.exposition("dcgm").decode()):
        if family.name == "DCGM_FI_DEV_GPU_TEMP":
            for sample in family.samples:
                labels = sample.labels
                served[labels["hostname"], labels["gpu"]] = (labels["UUID"], labels["pci_bus_id"], labels["modelName"])
    for node in nodes:
        gpus = gpus_of(node)
        described = emulator.describe(node.name)
        assert list(gpus.uuids) == described["gpu_uuids"] and gpus.hardware.product_name == described["gpu_model"]
        assert [served[node.name, str(i)] for i in range(node.gpus)] == [
            (u, b, gpus.hardware.product_name) for u, b in zip(gpus.uuids, gpus.pci_bus_ids, strict=True)]
    all_uuids = [u for node in nodes for u in gpus_of(node).uuids]
    assert len(set(all_uuids)) == len(all_uuids) == 14
    assert gpus_of(nodes[0]).uuids == gpus_of(nodes[0]).uuids  # deterministic per (seed, node, index)
    other_seed = node_gpus(nodes[0], SEED + 1)
    assert other_seed is not None and set(other_seed.uuids).isdisjoint(gpus_of(nodes[0]).uuids)


def test_mig_needs_a_mig_capable_model() -> None:
    with pytest.raises(ValueError, match="MIG asked for"):
        node_gpus(spec(instance="gpu-l4-8", mig=True), SEED)


# -- nodes and the fleet ------------------------------------------------------------------------------------------
def test_a_dra_only_node_advertises_no_gpu_extended_resource() -> None:
    assert spec().resources()[GPU_RESOURCE] == "8"
    dra_only = spec(gpu_device_plugin=False)
    assert GPU_RESOURCE not in dra_only.resources() and dra_only.registration()["gpus"] == 8
    assert [c["spec"].get("extendedResourceName") for c in DEVICE_CLASSES] == [None, None, EXTENDED_RESOURCE]


def test_a_fleet_has_a_few_mig_nodes_and_its_other_draws_are_unchanged() -> None:
    specs = fleet(200, seed=SEED)
    migs = [s for s in specs if s.mig]
    assert 0 < len(migs) <= MIG_NODES_MAX
    assert all(s.labels["node.kubernetes.io/instance-type"].split("-")[1] in ("a100", "h100") for s in migs)
    assert fleet(200, seed=SEED) == specs
    # The MIG draws come from a stream of their own: every other field is what the fleet drew before MIG nodes
    # existed (these four, from the generator before this change).
    assert [(s.name, s.labels["node.kubernetes.io/instance-type"], s.labels["disk-type"], s.labels["role"], s.mig)
            for s in specs[:4]] == [("node-000", "gpu-h100-8", "ssd", "general", False),
                                    ("node-001", "gpu-a100-8", "ssd", "general", True),
                                    ("node-002", "gpu-a100-8", "ssd", "general", False),
                                    ("node-003", "gpu-l4-8", "ssd", "special", False)]


# -- publishing ---------------------------------------------------------------------------------------------------
class FakeAPI:
    """Records the driver's calls; serves a list of slices."""

    def __init__(self, items: list[dict[str, Any]]) -> None:
        self.items = items
        self.calls: list[tuple[str, str, Any]] = []

    def get(self, path: str, **params: str) -> Any:
        self.calls.append(("GET", path, params))
        return {"items": self.items}

    def post(self, path: str, body: Any, *, ok: tuple[int, ...] = ()) -> Any:
        self.calls.append(("POST", path, body))
        return body

    def delete(self, path: str, *, ok: tuple[int, ...] = (404,)) -> Any:
        self.calls.append(("DELETE", path, None))

    def request(self, method: str, path: str, body: Any = None, **kwargs: Any) -> Any:
        self.calls.append((method, path, kwargs.get("params")))


def test_publishing_again_replaces_the_pool_with_a_new_generation() -> None:
    node = gpus_of(spec(gpus=2))
    old = {"metadata": {"name": "gpu-node-1-gpu.nvidia.com-abcde"},
           "spec": {"nodeName": "gpu-node-1", "pool": {"name": "gpu-node-1", "generation": 4}}}
    other = {"metadata": {"name": "x"}, "spec": {"nodeName": "other", "pool": {"name": "other", "generation": 9}}}
    api = FakeAPI([old, other])
    publish(api, [node])  # type: ignore[arg-type]
    assert api.calls[0] == ("GET", RESOURCE_SLICES_PATH, {"fieldSelector": f"spec.driver={DRIVER}"})
    assert api.calls[1] == ("DELETE", f"{RESOURCE_SLICES_PATH}/gpu-node-1-gpu.nvidia.com-abcde", None)
    [(method, path, body)] = api.calls[2:]
    assert (method, path, body) == ("POST", RESOURCE_SLICES_PATH, resource_slices(node, 5)[0])
    fresh = FakeAPI([other])
    publish(fresh, [node])  # type: ignore[arg-type]
    assert [c[2]["spec"]["pool"]["generation"] for c in fresh.calls if c[0] == "POST"] == [1]
    unpublish(fresh, ["gpu-node-1"])  # type: ignore[arg-type]
    assert fresh.calls[-1] == ("DELETE", RESOURCE_SLICES_PATH,
                               {"fieldSelector": f"spec.nodeName=gpu-node-1,spec.driver={DRIVER}"})


# -- the emulator's per-GPU override ------------------------------------------------------------------------------
class Clock:
    def __init__(self) -> None:
        self.t = 1_764_500_000.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def ctl() -> Iterator[EmulatorControl]:
    server: EmulatorServer = serve("127.0.0.1", 0, seed=SEED, clock=Clock()).start()
    try:
        with EmulatorControl(server.url) as control:
            control.register_nodes([{"name": "gpu-1", "ip": "10.240.0.5", "gpus": 4, "instance_type": "gpu-a100-4"}])
            yield control
    finally:
        server.close()


def test_one_gpu_can_be_set_while_the_others_keep_their_values(ctl: EmulatorControl) -> None:
    drifting = ctl.values("gpu-1")["gpu_temp"]
    after = ctl.set_gpu_values("gpu-1", 2, gpu_temp=93)
    assert after["gpu_temp"] == [drifting[0], drifting[1], 93, drifting[3]]
    assert after["memory_temp"][2] > 93  # derived values follow the overridden GPU
    assert after["overrides"] == ["gpu_temp"]
    after = ctl.set_gpu_values("gpu-1", 0, gpu_temp=41.5)
    assert after["gpu_temp"] == [41.5, drifting[1], 93, drifting[3]]
    # A whole-node override replaces the per-GPU one; a GPU of it can then be changed alone.
    assert ctl.set_values("gpu-1", gpu_temp=60)["gpu_temp"] == [60] * 4
    assert ctl.set_gpu_values("gpu-1", 3, gpu_temp=None)["gpu_temp"] == [60, 60, 60, drifting[3]]
    ctl.set_values("gpu-1", gpu_temp={"0": None, "1": None, "2": None})
    cleared = ctl.values("gpu-1")
    assert cleared["gpu_temp"] == drifting and cleared["overrides"] == []
    assert not any(math.isnan(v) for v in cleared["gpu_temp"])
    for bad in ({"4": 1}, {"-1": 1}, {"x": 1}, {"0": "hot"}):
        with pytest.raises(EmulatorError) as err:
            ctl.set_values("gpu-1", gpu_temp=bad)
        assert err.value.status == 400
