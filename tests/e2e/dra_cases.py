"""Seeded DRA cases for tests/e2e/test_differential_dra.py: the generator, and a case rendered as one scheduler's
copy (its own drivers, DeviceClasses, ResourceSlices, claims, claim templates and pods).

A case is drawn from (seed, case number) alone. Its devices sit on a few nodes shared by every case of the run
(SHARED_NODES, referred to as "%N<i>%"); its pods may go to 1-2 of them (the case's `nodes`, by required node
affinity), so which of those a pod lands on is decided by its devices. Drivers ("%D0%", "%D1%") and classes
("%C<i>%") are placeholders each copy renders with names of its own: a copy's devices are reachable by its own
classes only, and nothing one case does (allocations, counters, consumed capacity) touches another. Pool names,
device names and node names are the same in both copies, so an allocation written for one copy equals the
other's once its drivers and classes are named alike (`DraCopy.normalized`).

What a case draws (the odds are in the code):
- 1-3 pools, of one of 1-2 drivers, each on one of the case's nodes (nodeName), on some nodes (a nodeSelector on
  hostname or a rack label), on all nodes, per device (perDeviceNodeSelection: each device its own nodeName,
  nodeSelector or allNodes), or on a node the pods cannot go to (a decoy: never feasible, but metrics-sched and
  kube-scheduler must agree on that too). A pool is 1-2 device slices (resourceSliceCount), sometimes with a
  stale slice of an older generation (never usable) and, when partitionable, a counter-set slice
  (sharedCounters) whose counters its devices consume (consumesCounters, 1-2 sets). A few cases (no `All`
  request, pods on a node of their own: BROKEN_NODE) also have a pool that must not be used: incomplete (a slice
  missing) or invalid (a device name twice).
- Devices with int/bool/string/version attributes in the driver's domain and a string attribute in a shared
  domain (diff.example.com/group), each attribute missing now and then; capacities `memory`, `cores`; device
  taints (NoSchedule, NoExecute, None); in consumable pools, devices with allowMultipleAllocations and a `bw`
  capacity with or without a requestPolicy (validRange with/without step, validValues).
- 1-3 DeviceClasses selecting the copy's driver(s), sometimes with a second selector and an opaque config.
- Claims (created by the test, or from a ResourceClaimTemplate by the resourceclaim controller) with 1-3 requests:
  `exactly` (ExactCount 1-4 or All, adminAccess) or `firstAvailable` (2-3 subrequests), CEL selectors (string,
  int, bool, semver, quantity, cel.bind, regex, the domain computed from device.driver; a few that can fail to
  evaluate: no such key), tolerations, capacity requests; matchAttribute / distinctAttribute constraints on all
  requests or some (a subrequest too); opaque configs.
- Sometimes an extended resource a class serves (its extendedResourceName, or the implicit
  deviceclass.resource.kubernetes.io/<class>), requested by p0 (which may then have no claim at all): the
  scheduler makes the claim for it (DRAExtendedResource).
- A pod p0 with 1-2 claims; sometimes a second pod p1 sharing one of p0's claims (scheduled after p0 is
  decided), and sometimes a claim allocated up front by the test (status.allocation written, as a driver's
  controller or an earlier scheduler would have), used by p0 or just holding its device.
"""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from tests.e2e import kube
from tests.e2e.pools import POOL_LABEL

__all__ = [
    "ADMIN_ACCESS_LABEL",
    "API",
    "BROKEN_NODE",
    "EXTENDED",
    "GROUP_DOMAIN",
    "HOSTNAME",
    "NODES",
    "RACK",
    "SHARED_NODES",
    "DraCopy",
    "features",
    "generate",
    "namespace_of",
    "pool_of",
    "shared_node",
]

API = "resource.k8s.io/v1"
SHARED_NODES = 16
# One more node, only for the cases with a broken pool (an incomplete or invalid one): an `All` request fails on any
# incomplete or invalid pool of the node it is tried on, so such a pool must not be where other cases' pods may go.
BROKEN_NODE = SHARED_NODES
NODES = SHARED_NODES + 1
HOSTNAME = "kubernetes.io/hostname"
RACK = "metrics-sched.test/rack"  # shared node i is in rack r<i // 2>
ADMIN_ACCESS_LABEL = "resource.kubernetes.io/admin-access"
GROUP_DOMAIN = "diff.example.com"
KINDS = ["a", "b", "c"]
FIRMWARE = ["1.2.0", "1.10.0", "2.0.0-rc.1", "2.0.0", "10.0.1"]
MEMORY = ["8Gi", "16Gi", "40Gi", "80Gi"]
CORES = ["2", "4", "8"]
TAINT_KEYS = ["maint", "flaky"]
# Requests of the `bw` capacity: some round up (1500m), some exceed every policy or the capacity (9).
BW_REQUESTS = ["1", "1", "2", "1500m", "3", "5", "7", "9"]
EXTENDED = "%X%"  # the copy's extended resource name (its DeviceClass's extendedResourceName)
IMPLICIT_PREFIX = "deviceclass.resource.kubernetes.io/"  # every DeviceClass serves this + its name


# -- generation --------------------------------------------------------------------------------------------------------
@dataclass
class _Context:
    """What the case has drawn so far that later draws depend on."""

    rng: random.Random
    drivers: int
    classes: int = 0
    taints: bool = False
    consumable: bool = False
    risky: bool = False  # a selector that may fail to evaluate (an attribute some device lacks, unguarded)
    no_all: bool = False  # no `All` request (a case with a broken pool)


def _node(i: int) -> str:
    return f"%N{i}%"


def _attributes(ctx: _Context) -> str:
    """The map of the device's own attributes: by a literal domain or computed from device.driver."""
    if ctx.drivers == 2 or ctx.rng.random() < 0.3:
        return "device.attributes[device.driver]"
    return 'device.attributes["%D0%"]'


def _capacity(ctx: _Context) -> str:
    if ctx.drivers == 2 or ctx.rng.random() < 0.3:
        return "device.capacity[device.driver]"
    return 'device.capacity["%D0%"]'


def _selector(ctx: _Context) -> str:
    rng = ctx.rng
    a, c = _attributes(ctx), _capacity(ctx)
    if rng.random() < 0.04:  # may fail at run time: a device without it is a fatal Filter error on both sides
        ctx.risky = True
        return rng.choice([f"{a}.numa >= 1", f'{a}.fw.isGreaterThan(semver("1.5.0"))',
                           f'{c}.cores.compareTo(quantity("4")) >= 0', f"{a}.healthy"])
    kind = rng.choice(KINDS)
    options = [
        f'{a}.kind == "{kind}"',
        f"{a}.kind in {json.dumps(sorted(rng.sample(KINDS, 2)))}",
        f"has({a}.numa) && {a}.numa == {rng.randint(0, 2)}",
        f"!has({a}.numa) || {a}.numa < {rng.randint(1, 2)}",
        f'has({a}.fw) && {a}.fw.isGreaterThan(semver("{rng.choice(FIRMWARE)}"))',
        f'has({a}.fw) && {a}.fw.compareTo(semver("{rng.choice(FIRMWARE)}")) <= 0',
        f"has({a}.fw) && {a}.fw.major() >= 2",
        f'has({c}.memory) && {c}.memory.compareTo(quantity("{rng.choice(MEMORY)}")) >= 0',
        f'has({c}.memory) && {c}.memory.isLessThan(quantity("{rng.choice(MEMORY)}"))',
        f'has({c}.memory) && {c}.memory.add(quantity("8Gi")).compareTo(quantity("40Gi")) > 0',
        f"has({a}.healthy) && {a}.healthy",
        f'has(device.attributes["{GROUP_DOMAIN}"].group) && device.attributes["{GROUP_DOMAIN}"].group == "g1"',
        f'!has(device.attributes["{GROUP_DOMAIN}"].group)',
        f'cel.bind(k, {a}.kind, k == "a" || k == "{kind}")',
        f'{a}.kind.matches("^[{kind}b]$")',
        "device.allowMultipleAllocations" if rng.random() < 0.5 else "!device.allowMultipleAllocations",
    ]
    if ctx.drivers == 2:
        options.append(f'device.driver == "%D{rng.randrange(2)}%"')
    return rng.choice(options)


def _bw(rng: random.Random) -> dict[str, Any]:
    """A consumable capacity: no policy (any amount up to the value), a range (with or without a step), a set."""
    policies: list[dict[str, Any] | None] = [
        None,
        {"default": "1", "validRange": {"min": "1", "max": "6", "step": "1"}},
        {"default": "2", "validRange": {"min": "2", "max": "8", "step": "2"}},
        {"default": "3", "validRange": {"min": "1", "max": "7"}},
        {"default": "2", "validValues": ["1", "2", "4"]},
    ]
    policy = rng.choice(policies)
    return {"value": "8"} if policy is None else {"value": "8", "requestPolicy": policy}


def _taints(rng: random.Random) -> list[dict[str, str]]:
    out: list[dict[str, str]] = []
    for key in rng.sample(TAINT_KEYS, rng.choice([1, 1, 2])):
        taint = {"key": key, "effect": rng.choice(["NoSchedule", "NoSchedule", "NoExecute", "None"])}
        if rng.random() < 0.5:
            taint["value"] = "x"
        out.append(taint)
    return out


def _device(ctx: _Context, name: str, consumable: bool) -> dict[str, Any]:
    rng = ctx.rng
    attributes: dict[str, Any] = {"kind": {"string": rng.choice(KINDS)}}
    if rng.random() < 0.8:
        attributes["numa"] = {"int": rng.randint(0, 2)}
    if rng.random() < 0.85:
        attributes["healthy"] = {"bool": rng.random() < 0.8}
    if rng.random() < 0.8:
        attributes["fw"] = {"version": rng.choice(FIRMWARE)}
    if rng.random() < 0.6:
        attributes[f"{GROUP_DOMAIN}/group"] = {"string": rng.choice(["g0", "g1"])}
    capacity: dict[str, Any] = {}
    if rng.random() < 0.85:
        capacity["memory"] = {"value": rng.choice(MEMORY)}
    if rng.random() < 0.5:
        capacity["cores"] = {"value": rng.choice(CORES)}
    device: dict[str, Any] = {"name": name, "attributes": attributes}
    if consumable and rng.random() < 0.75:
        device["allowMultipleAllocations"] = True
        capacity["bw"] = _bw(rng)
        ctx.consumable = True
    if capacity:
        device["capacity"] = capacity
    if rng.random() < 0.1:
        device["taints"] = _taints(rng)
        ctx.taints = True
    return device


def _node_selector(rng: random.Random, nodes: list[int]) -> dict[str, Any]:
    """One term (the allocator refuses more): the hostnames of some of `nodes`, or the rack of one of them."""
    if rng.random() < 0.6:
        chosen = sorted(rng.sample(nodes, rng.randint(1, len(nodes))))
        requirement = {"key": HOSTNAME, "operator": "In", "values": [_node(i) for i in chosen]}
    else:
        requirement = {"key": RACK, "operator": "In", "values": [f"r{rng.choice(nodes) // 2}"]}
    return {"nodeSelectorTerms": [{"matchExpressions": [requirement]}]}


def _placement(rng: random.Random, nodes: list[int], others: list[int]) -> dict[str, Any]:
    draw = rng.random()
    if draw < 0.66:
        return {"nodeName": _node(rng.choice(nodes))}
    if draw < 0.78:
        return {"nodeSelector": _node_selector(rng, nodes)}
    if draw < 0.84:
        return {"allNodes": True}
    if draw < 0.92:
        return {"perDeviceNodeSelection": True}
    return {"nodeName": _node(rng.choice(others))}  # a decoy: the pods may not go there


def _device_placement(rng: random.Random, nodes: list[int], others: list[int]) -> dict[str, Any]:
    draw = rng.random()
    if draw < 0.6:
        return {"nodeName": _node(rng.choice(nodes))}
    if draw < 0.75:
        return {"nodeSelector": _node_selector(rng, nodes)}
    if draw < 0.9:
        return {"allNodes": True}
    return {"nodeName": _node(rng.choice(others))}


def _pool(ctx: _Context, j: int, nodes: list[int], others: list[int]) -> dict[str, Any]:
    rng = ctx.rng
    placement = _placement(rng, nodes, others)
    partitionable = rng.random() < 0.15
    consumable = not partitionable and rng.random() < 0.2
    if partitionable and "perDeviceNodeSelection" in placement:
        placement = {"nodeName": _node(rng.choice(nodes))}
    devices = [_device(ctx, f"d{k}", consumable) for k in range(rng.choices([1, 2, 3, 4, 5, 6],
                                                                             weights=[1, 3, 4, 4, 3, 2])[0])]
    pool: dict[str, Any] = {"name": f"p{j}", "driver": rng.randrange(ctx.drivers), "placement": placement}
    if "perDeviceNodeSelection" in placement:
        for device in devices:
            device.update(_device_placement(rng, nodes, others))
    if partitionable:
        sets = rng.choice([1, 1, 2])
        sizes = [rng.choice([4, 8]) for _ in range(sets)]
        pool["counterSets"] = [{"name": f"cs{s}", "counters": {"mem": {"value": f"{sizes[s]}Gi"},
                                                               "slots": {"value": str(rng.choice([2, 3, 4]))}}}
                               for s in range(sets)]
        for device in devices:
            uses = [rng.randrange(sets)] if sets == 1 or rng.random() < 0.85 else [0, 1]
            device["consumesCounters"] = []
            for s in uses:
                counters = {"mem": {"value": f"{sizes[s] // rng.choice([1, 2, 2, 4])}Gi"}}
                if rng.random() < 0.5:
                    counters["slots"] = {"value": "1"}
                device["consumesCounters"].append({"counterSet": f"cs{s}", "counters": counters})
    cut = rng.randint(1, len(devices) - 1) if len(devices) > 1 and rng.random() < 0.25 else len(devices)
    pool["slices"] = [part for part in (devices[:cut], devices[cut:]) if part]
    if rng.random() < 0.06:  # a slice of the previous generation still listed: its devices are never used
        stale = copy.deepcopy(rng.choice(devices))
        stale["attributes"]["kind"] = {"string": "a"}
        pool["stale"] = [stale, {**copy.deepcopy(stale), "name": "d9"}]
    return pool


def _broken_pool(ctx: _Context, how: str) -> dict[str, Any]:
    """A pool on BROKEN_NODE that must not be used: one of its slices is missing (incomplete: resourceSliceCount
    counts one more than exists), or a device name repeats in its two slices (invalid)."""
    devices = [_device(ctx, f"d{k}", False) for k in range(ctx.rng.randint(1, 3))]
    pool: dict[str, Any] = {"name": "p9", "driver": 0, "placement": {"nodeName": _node(BROKEN_NODE)},
                            "slices": [devices], "broken": how}
    if how == "incomplete":
        pool["sliceCount"] = 2
    else:
        twin = copy.deepcopy(devices[0])
        twin["attributes"]["kind"] = {"string": "a"}
        pool["slices"].append([twin])
    return pool


def _exact(ctx: _Context, *, sub: bool) -> dict[str, Any]:
    """The fields an `exactly` request and a subrequest share."""
    rng = ctx.rng
    fields: dict[str, Any] = {"deviceClassName": f"%C{rng.randrange(ctx.classes)}%"}
    selectors = [_selector(ctx) for _ in range(rng.choices([0, 1, 2], weights=[6, 3, 1])[0])]
    if selectors:
        fields["selectors"] = [{"cel": {"expression": e}} for e in selectors]
    if not ctx.no_all and rng.random() < (0.06 if sub else 0.1):
        fields["allocationMode"] = "All"
    else:
        count = rng.choices([1, 2, 3, 4], weights=[70, 21, 6, 3])[0]
        if count > 1 or rng.random() < 0.5:  # ExactCount and count 1 are the defaults
            fields["count"] = count
        if rng.random() < 0.5:
            fields["allocationMode"] = "ExactCount"
    if ctx.taints and rng.random() < 0.4:
        fields["tolerations"] = [_toleration(rng) for _ in range(rng.choice([1, 1, 2]))]
    if (ctx.consumable and rng.random() < 0.5) or rng.random() < 0.06:
        name = "bw" if ctx.consumable and rng.random() < 0.8 else "memory"
        amount = rng.choice(BW_REQUESTS) if name == "bw" else rng.choice(["10Gi", "16Gi", "50Gi"])
        fields["capacity"] = {"requests": {name: amount}}
    return fields


def _toleration(rng: random.Random) -> dict[str, str]:
    if rng.random() < 0.15:
        return {"operator": "Exists"}  # every taint
    toleration = {"key": rng.choice(TAINT_KEYS)}
    if rng.random() < 0.5:
        toleration["operator"] = "Exists"
    else:
        toleration["operator"] = "Equal"
        if rng.random() < 0.6:
            toleration["value"] = "x"
    if rng.random() < 0.6:
        toleration["effect"] = rng.choice(["NoSchedule", "NoExecute"])
    return toleration


def _request(ctx: _Context, name: str) -> dict[str, Any]:
    rng = ctx.rng
    if rng.random() < 0.25:
        return {"name": name, "firstAvailable": [{"name": f"s{k}", **_exact(ctx, sub=True)}
                                                 for k in range(rng.choice([2, 2, 3]))]}
    fields = _exact(ctx, sub=False)
    if rng.random() < 0.07:
        fields["adminAccess"] = True
    return {"name": name, "exactly": fields}


def _constraint_attribute(ctx: _Context) -> str:
    rng = ctx.rng
    driver = f"%D{rng.randrange(ctx.drivers)}%"
    return rng.choice([f"{driver}/kind", f"{driver}/numa", f"{driver}/fw", f"{driver}/healthy",
                       f"{GROUP_DOMAIN}/group", f"{GROUP_DOMAIN}/group"])


def _claim_spec(ctx: _Context, name: str) -> dict[str, Any]:
    rng = ctx.rng
    requests = [_request(ctx, f"r{i}") for i in range(rng.choices([1, 2, 3], weights=[6, 3, 1])[0])]
    devices: dict[str, Any] = {"requests": requests}
    names = [r["name"] for r in requests]
    refs = names + [f"{r['name']}/{s['name']}" for r in requests for s in r.get("firstAvailable", [])]
    constraints = []
    for _ in range(rng.choices([0, 1, 2], weights=[6, 4, 1])[0]):
        constraint: dict[str, Any] = {rng.choice(["matchAttribute", "distinctAttribute"]): _constraint_attribute(ctx)}
        if rng.random() < 0.4:
            constraint["requests"] = sorted(rng.sample(refs, rng.randint(1, min(2, len(refs)))))
        constraints.append(constraint)
    if constraints:
        devices["constraints"] = constraints
    if rng.random() < 0.15:
        config: dict[str, Any] = {"opaque": {"driver": "%D0%", "parameters": {"claim": name}}}
        if rng.random() < 0.5:
            config["requests"] = sorted(rng.sample(refs, rng.randint(1, min(2, len(refs)))))
        devices["config"] = [config]
    return {"devices": devices}


def _device_class(ctx: _Context, i: int) -> dict[str, Any]:
    rng = ctx.rng
    drivers = [0] if ctx.drivers == 1 else rng.choice([[0], [1], [0, 1]])
    selectors = [" || ".join(f'device.driver == "%D{d}%"' for d in drivers)]
    if rng.random() < 0.3:
        a = "device.attributes[device.driver]"
        selectors.append(rng.choice([f'{a}.kind != "c"', f"has({a}.numa)", f"!has({a}.healthy) || {a}.healthy"]))
    spec: dict[str, Any] = {"selectors": [{"cel": {"expression": e}} for e in selectors]}
    if rng.random() < 0.2:
        spec["config"] = [{"opaque": {"driver": f"%D{drivers[0]}%", "parameters": {"class": i}}}]
    return {"drivers": drivers, "spec": spec}


def _allocated(case: dict[str, Any], rng: random.Random) -> dict[str, Any] | None:
    """A claim allocated up front: one device of the first class's driver(s), as status.allocation would name it
    (with the node selector its slice or the device itself gives), or None if the case has no such device."""
    drivers = case["classes"][0]["drivers"]
    candidates = [(pool, device) for pool in case["pools"] if pool["driver"] in drivers
                  for part in pool["slices"] for device in part if not device.get("allowMultipleAllocations")]
    if not candidates:
        return None
    pool, device = rng.choice(candidates)
    where = device if "perDeviceNodeSelection" in pool["placement"] else pool["placement"]
    allocation: dict[str, Any] = {"devices": {"results": [
        {"request": "r0", "driver": f"%D{pool['driver']}%", "pool": pool["name"], "device": device["name"]}]}}
    if "nodeName" in where:
        allocation["nodeSelector"] = {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": [where["nodeName"]]}]}]}
    elif "nodeSelector" in where:
        allocation["nodeSelector"] = copy.deepcopy(where["nodeSelector"])
    return allocation


def generate(seed: int, number: int) -> dict[str, Any]:
    rng = random.Random(f"{seed}:{number}:dra")
    # Broken pools come from a stream of their own: the other cases are what they were before they existed.
    side = random.Random(f"{seed}:{number}:dra-broken")
    broken = side.choice(["incomplete", "invalid"]) if side.random() < 0.08 else None
    nodes = sorted(rng.sample(range(SHARED_NODES), 1 if rng.random() < 0.7 else 2))
    others = [i for i in range(SHARED_NODES) if i not in nodes]
    if broken:
        nodes, others = [BROKEN_NODE], list(range(SHARED_NODES))
    ctx = _Context(rng, drivers=2 if rng.random() < 0.2 else 1, no_all=broken is not None)
    pools = [_pool(ctx, j, nodes, others) for j in range(rng.choices([1, 2, 3], weights=[3, 4, 3])[0])]
    if broken:
        pools.append(_broken_pool(_Context(side, drivers=1), broken))
    ctx.classes = rng.choices([1, 2, 3], weights=[3, 4, 2])[0]
    classes = [_device_class(ctx, i) for i in range(ctx.classes)]
    claims: dict[str, dict[str, Any]] = {}
    templates: dict[str, dict[str, Any]] = {}
    extended = None
    if rng.random() < 0.12:  # an extended resource a class serves: by its extendedResourceName or implicitly
        k = rng.randrange(ctx.classes)
        if rng.random() < 0.7:
            classes[k]["spec"]["extendedResourceName"] = EXTENDED
            extended = {"resource": EXTENDED, "count": rng.choice([1, 1, 2])}
        else:
            extended = {"resource": f"{IMPLICIT_PREFIX}%C{k}%", "count": rng.choice([1, 1, 2])}
        # An init container asking for it too (its request reused from the main container's, or its own), or a
        # sidecar (restartPolicy Always: long-lived, its own request): upstream's createRequestsAndMappings. From a
        # stream of its own, so the other draws of a case are what they were before it existed.
        init = random.Random(f"{seed}:{number}:dra-init")
        if init.random() < 0.5:
            extended["init"] = {"count": init.choice([1, 2, 3]), "sidecar": init.random() < 0.4}
    p0: list[dict[str, str]] = []
    for i in range(rng.choices([0, 1, 2], weights=[3, 4, 3])[0] if extended else
                   rng.choices([1, 2], weights=[7, 3])[0]):
        if rng.random() < 0.35:
            templates[f"t{i}"] = _claim_spec(ctx, f"t{i}")
            p0.append({"name": f"c{i}", "template": f"t{i}"})
        else:
            claims[f"x{i}"] = _claim_spec(ctx, f"x{i}")
            p0.append({"name": f"c{i}", "claim": f"x{i}"})
    case: dict[str, Any] = {"seed": seed, "case": number, "nodes": nodes, "drivers": ctx.drivers, "pools": pools,
                            "classes": classes, "claims": claims, "templates": templates, "allocated": {},
                            "extended": extended}
    pods = [p0]
    if rng.random() < 0.15:
        allocation = _allocated(case, rng)
        if allocation is not None:
            case["allocated"]["pre"] = {"spec": {"devices": {"requests": [
                {"name": "r0", "exactly": {"deviceClassName": "%C0%", "allocationMode": "ExactCount", "count": 1}}]}},
                "allocation": allocation}
            if rng.random() < 0.5:
                p0.append({"name": "pre", "claim": "pre"})
    direct = [c for c in p0 if "claim" in c and c["claim"] != "pre"]
    if direct and rng.random() < 0.18:  # a second pod sharing one of p0's claims, maybe with one of its own
        p1 = [{"name": "shared", "claim": rng.choice(direct)["claim"]}]
        if rng.random() < 0.4:
            claims["y0"] = _claim_spec(ctx, "y0")
            p1.append({"name": "own", "claim": "y0"})
        pods.append(p1)
    case["pods"] = pods
    case["risky"] = ctx.risky
    return case


# -- what a case exercises --------------------------------------------------------------------------------------------
def _requests(case: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every request and subrequest of the case's claims (the pre-allocated one's too)."""
    specs = [*case["claims"].values(), *case["templates"].values(), *(a["spec"] for a in case["allocated"].values())]
    for spec in specs:
        for request in spec["devices"]["requests"]:
            if "exactly" in request:
                yield request["exactly"]
            yield from request.get("firstAvailable", [])


def features(case: dict[str, Any]) -> set[str]:
    """The DRA features the case uses, by the names the test's report gives them."""
    out: set[str] = set()
    devices = [d for p in case["pools"] for part in p["slices"] for d in part]
    specs = [*case["claims"].values(), *case["templates"].values()]
    requests = list(_requests(case))
    placements = {next(iter(p["placement"])) for p in case["pools"]}
    nodes = {f"%N{i}%" for i in case["nodes"]}
    checks = {
        "exactly ExactCount > 1": any(r.get("count", 1) > 1 for r in requests),
        "allocationMode All": any(r.get("allocationMode") == "All" for r in requests),
        "firstAvailable": any("firstAvailable" in r for s in specs for r in s["devices"]["requests"]),
        "CEL selectors in requests": any(r.get("selectors") for r in requests),
        "CEL selectors that may fail": case["risky"],
        "a class with two selectors": any(len(c["spec"]["selectors"]) > 1 for c in case["classes"]),
        "matchAttribute": any("matchAttribute" in c for s in specs for c in s["devices"].get("constraints", [])),
        "distinctAttribute": any("distinctAttribute" in c for s in specs
                                 for c in s["devices"].get("constraints", [])),
        "constraint on some requests": any("requests" in c for s in specs for c in s["devices"].get("constraints", [])),
        "claim config": any("config" in s["devices"] for s in specs),
        "class config": any("config" in c["spec"] for c in case["classes"]),
        "adminAccess": any(r.get("adminAccess") for r in requests),
        "tolerations": any(r.get("tolerations") for r in requests),
        "capacity requests": any("capacity" in r for r in requests),
        "device taints": any("taints" in d for d in devices),
        "partitionable devices (counters)": any("counterSets" in p for p in case["pools"]),
        "consumable capacity (allowMultipleAllocations)": any(d.get("allowMultipleAllocations") for d in devices),
        "two drivers": case["drivers"] == 2,
        "pool of several slices": any(len(p["slices"]) > 1 for p in case["pools"]),
        "stale slice (older generation)": any("stale" in p for p in case["pools"]),
        "slice nodeSelector": "nodeSelector" in placements,
        "slice allNodes": "allNodes" in placements,
        "perDeviceNodeSelection": "perDeviceNodeSelection" in placements,
        "devices on a node the pods cannot use": any(p["placement"].get("nodeName") not in (None, *nodes)
                                                     for p in case["pools"]),
        "claim from a template": bool(case["templates"]),
        "shared claim (second pod)": len(case["pods"]) > 1,
        "pre-allocated claim used by the pod": any(c["claim"] == "pre" for c in case["pods"][0] if "claim" in c),
        "pre-allocated claim holding a device": bool(case["allocated"]) and not any(
            c.get("claim") == "pre" for c in case["pods"][0]),
        "pods may go to two nodes": len(case["nodes"]) == 2,
        "incomplete pool (a slice missing)": any(p.get("broken") == "incomplete" for p in case["pools"]),
        "invalid pool (a device name twice)": any(p.get("broken") == "invalid" for p in case["pools"]),
        "extended resource (extendedResourceName)": (case["extended"] or {}).get("resource") == EXTENDED,
        "extended resource (implicit class name)": (case["extended"] or {}).get("resource", EXTENDED) != EXTENDED,
        "pod with an extended resource and no claim": bool(case["extended"]) and not case["pods"][0],
        "extended resource in an init container too": bool((case["extended"] or {}).get("init")),
        "extended resource in a sidecar too": bool(((case["extended"] or {}).get("init") or {}).get("sidecar")),
    }
    out.update(name for name, used in checks.items() if used)
    return out


# -- a case as one scheduler's copy -----------------------------------------------------------------------------------
@dataclass
class DraCopy:
    """One case's copy for one scheduler ("kube" | "ms"): drivers, classes and slices named after the copy, claims
    and pods in that scheduler's namespace of the run, named after the case."""

    case: dict[str, Any]
    scheduler: str
    run: str

    @property
    def number(self) -> int:
        return int(self.case["case"])

    @property
    def tag(self) -> str:
        return f"c{self.number:04d}-{self.scheduler[0]}"

    @property
    def namespace(self) -> str:
        return namespace_of(self.run, self.scheduler)

    @property
    def drivers(self) -> list[str]:
        return [f"{self.tag}-{'ab'[i]}.dra{self.run}.{GROUP_DOMAIN}" for i in range(self.case["drivers"])]

    @property
    def extended_resource(self) -> str:
        return f"x.{self.tag}.dra{self.run}.example.com/dev"

    def class_name(self, i: int) -> str:
        return f"dra{self.run}-{self.tag}-{i}"

    def pod_name(self, k: int) -> str:
        return f"c{self.number:04d}-p{k}"

    def claim_name(self, key: str) -> str:
        return f"c{self.number:04d}-{key}"

    def render(self, value: Any) -> Any:
        text = json.dumps(value).replace(EXTENDED, self.extended_resource)
        for i, driver in enumerate(self.drivers):
            text = text.replace(f"%D{i}%", driver)
        for i in range(len(self.case["classes"])):
            text = text.replace(f"%C{i}%", self.class_name(i))
        for i in range(NODES):
            text = text.replace(f"%N{i}%", shared_node(self.run, i))
        return json.loads(text)

    def normalized(self, value: Any) -> Any:
        """`value` (an allocation, a claim spec) with the copy's own names (drivers, classes, extended resource)
        back to placeholders, the random shareID and the allocationTimestamp dropped: what two copies' must
        agree on."""
        text = json.dumps(value, sort_keys=True).replace(self.extended_resource, EXTENDED)
        for i, driver in enumerate(self.drivers):
            text = text.replace(driver, f"%D{i}%")
        for i in range(len(self.case["classes"])):
            text = text.replace(self.class_name(i), f"%C{i}%")
        out = json.loads(text)
        if isinstance(out, dict):
            out.pop("allocationTimestamp", None)
            for result in (out.get("devices") or {}).get("results") or ():
                result.pop("shareID", None)
        return out

    def _meta(self, name: str) -> dict[str, Any]:
        return {"name": name, "labels": {"diff-run": self.run}}

    def device_classes(self) -> list[dict[str, Any]]:
        return [{"apiVersion": API, "kind": "DeviceClass", "metadata": self._meta(self.class_name(i)),
                 "spec": self.render(c["spec"])} for i, c in enumerate(self.case["classes"])]

    def slices(self) -> list[dict[str, Any]]:
        out = []
        for pool in self.case["pools"]:
            bodies: list[dict[str, Any]] = [{"devices": part} for part in pool["slices"]]
            if "counterSets" in pool:
                bodies.append({"sharedCounters": pool["counterSets"]})
            generation = 2 if "stale" in pool else 1
            driver = f"%D{pool['driver']}%"
            count = int(pool.get("sliceCount", len(bodies)))
            for i, body in enumerate(bodies):
                out.append(self._slice(f"{pool['name']}-s{i}", driver, pool, generation, count, body))
            if "stale" in pool:
                out.append(self._slice(f"{pool['name']}-old", driver, pool, 1, 1, {"devices": pool["stale"]}))
        return out

    def _slice(self, suffix: str, driver: str, pool: dict[str, Any], generation: int, count: int,
               body: dict[str, Any]) -> dict[str, Any]:
        spec = {"driver": driver, "pool": {"name": pool["name"], "generation": generation, "resourceSliceCount": count},
                **pool["placement"], **body}
        return {"apiVersion": API, "kind": "ResourceSlice",
                "metadata": self._meta(f"dra{self.run}-{self.tag}-{suffix}"), "spec": self.render(spec)}

    def claims(self) -> list[dict[str, Any]]:
        """The claims the test creates (the pre-allocated one without its status: that is written after)."""
        specs = {**self.case["claims"], **{k: a["spec"] for k, a in self.case["allocated"].items()}}
        return [{"apiVersion": API, "kind": "ResourceClaim",
                 "metadata": {"name": self.claim_name(key), "namespace": self.namespace},
                 "spec": self.render(spec)} for key, spec in specs.items()]

    def allocations(self) -> dict[str, dict[str, Any]]:
        """The status.allocation of each claim allocated up front, by claim name."""
        return {self.claim_name(k): self.render(a["allocation"]) for k, a in self.case["allocated"].items()}

    def templates(self) -> list[dict[str, Any]]:
        return [{"apiVersion": API, "kind": "ResourceClaimTemplate",
                 "metadata": {"name": self.claim_name(key), "namespace": self.namespace},
                 "spec": {"spec": self.render(spec)}} for key, spec in self.case["templates"].items()]

    def pods(self, scheduler_name: str, gate: str) -> list[dict[str, Any]]:
        """The case's pods, each behind `gate`, allowed on the case's nodes only."""
        out = []
        hosts = [shared_node(self.run, i) for i in self.case["nodes"]]
        for k, entries in enumerate(self.case["pods"]):
            claims = [{"name": e["name"], **({"resourceClaimName": self.claim_name(e["claim"])} if "claim" in e
                                             else {"resourceClaimTemplateName": self.claim_name(e["template"])})}
                      for e in entries]
            body = kube.pod_manifest(self.pod_name(k), scheduler=scheduler_name, cpu="10m", memory="16Mi",
                                     resourceClaims=claims, schedulingGates=[{"name": gate}],
                                     nodeSelector={POOL_LABEL: pool_of(self.run)},
                                     tolerations=[{"key": POOL_LABEL, "operator": "Exists", "effect": "NoSchedule"}],
                                     affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                                         "nodeSelectorTerms": [{"matchExpressions": [
                                             {"key": HOSTNAME, "operator": "In", "values": hosts}]}]}}})
            resources = body["spec"]["containers"][0]["resources"]
            if entries:
                resources["claims"] = [{"name": e["name"]} for e in entries]
            else:
                del body["spec"]["resourceClaims"]
            if k == 0 and self.case["extended"]:
                name, count = self.render(self.case["extended"]["resource"]), str(self.case["extended"]["count"])
                resources["requests"][name] = resources["limits"][name] = count
                init = self.case["extended"].get("init")
                if init:
                    container: dict[str, Any] = {
                        "name": "init", "image": body["spec"]["containers"][0]["image"],
                        "resources": {"requests": {name: str(init["count"])}, "limits": {name: str(init["count"])}}}
                    if init["sidecar"]:
                        container["restartPolicy"] = "Always"
                    body["spec"]["initContainers"] = [container]
            body["metadata"].update(namespace=self.namespace,
                                    labels={"diff": "probe", "diff-run": self.run, "diff-pod": f"p{k}"})
            out.append(body)
        return out

    @staticmethod
    def pod_claims(pod: dict[str, Any]) -> dict[str, str | None]:
        """The pod's claims as (its entry name -> claim name), template claims by the pod's status (None until
        the resourceclaim controller has recorded them)."""
        statuses = {s["name"]: s.get("resourceClaimName")
                    for s in (pod.get("status") or {}).get("resourceClaimStatuses") or ()}
        return {e["name"]: e.get("resourceClaimName") or statuses.get(e["name"])
                for e in pod["spec"].get("resourceClaims") or ()}


def pool_of(run: str) -> str:
    return f"dra{run}"


def shared_node(run: str, i: int) -> str:
    return f"dra{run}-n{i}"


def namespace_of(run: str, scheduler: str) -> str:
    return f"dra{run}-{scheduler}"
