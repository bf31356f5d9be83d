"""Upstream's TestPlugin harness for the DynamicResources plugin: the objects of
pkg/scheduler/framework/plugins/dynamicresources/dynamicresources_test.go (the resource.k8s.io/v1 version with
`testPluginCase`) rebuilt as JSON, and `drive`, which calls the plugin's extension points in the order its
`testPlugin` loop does (PreEnqueue, PreFilter, Filter per node, Score when several nodes fit, Reserve, Unreserve or
PreBind, PostFilter when nothing fits), recording each status and the claims stored after each stage.

The plugin runs inside a whole Scheduler (tests/unit/test_dra_plugin.py's Rig): its claims, slices and classes
arrive as watch events and its writes go through the fake claim API that plays the API server.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np

from metrics_sched.framework import Code, CycleState, Status
from metrics_sched.model.podinfo import parse_pod
from metrics_sched.plugins.dynamic_resources.index import CLAIMS, CLASSES, SLICES
from metrics_sched.ports import EventType
from tests.schedulers import make_scheduler
from tests.unit.fakes import FakeAPI
from tests.unit.fakes import node as fake_node
from tests.unit.fakes import pod as fake_pod
from tests.unit.test_dra_plugin import FakeClaimAPI, Rig

__all__ = [
    "ATTR", "CLAIM", "CLAIM2", "CLASS", "DRIVER", "DRIVER2", "EXTENDED", "EXTENDED2", "FINALIZER", "IMPLICIT", "NODE",
    "NODE2", "NODE3", "POD", "POD_UID", "Obj", "Run", "StageRig", "allocated", "allocation", "claim", "device_class",
    "drive", "node", "pod", "request", "reserved_for", "resource_slice", "stripped",
]

Obj = dict[str, Any]

NODE, NODE2, NODE3 = "worker", "worker-2", "worker-3"
DRIVER, DRIVER2 = "some-driver", "some-driver-2"
POD, POD_UID = "my-pod", "1234"
CLAIM, CLAIM2 = "my-pod-my-resource", "my-pod-my-resource-2"
CLASS = "my-resource-class"
ATTR = "healthy"  # device attribute only available on non-default nodes
EXTENDED, EXTENDED2 = "example.com/gpu", "example.com/gpu2"
IMPLICIT = f"deviceclass.resource.kubernetes.io/{CLASS}"
FINALIZER = "resource.kubernetes.io/delete-protection"


# -- objects (st.Make* of pkg/scheduler/testing) ------------------------------------------------------------------
def node(name: str = NODE, *, extended: Mapping[str, str] | None = None) -> Obj:
    """st.MakeNode().Name(name).Label("kubernetes.io/hostname", name), with Capacity(extended) if given."""
    body = fake_node(name)
    for key in ("allocatable", "capacity"):
        body["status"][key] = {**body["status"][key], **(extended or {})}
    return body


def resource_slice(node_name: str = NODE, driver: str = DRIVER, *devices: str,
                   attributes: Mapping[str, Obj] | None = None, **device_fields: Any) -> Obj:
    """st.MakeResourceSlice(node, driver).Device(name, attributes)...: one pool named after the node."""
    return {"metadata": {"name": f"{node_name}-{driver}", "resourceVersion": "1"},
            "spec": {"driver": driver, "nodeName": node_name,
                     "pool": {"name": node_name, "generation": 1, "resourceSliceCount": 1},
                     "devices": [{"name": d, **({"attributes": dict(attributes)} if attributes else {}),
                                  **copy.deepcopy(device_fields)} for d in devices or ("instance-1",)]}}


def device_class(name: str = CLASS, *, extended: str | None = None, selectors: list[Obj] | None = None,
                 created: str = "2026-12-01T00:00:00Z") -> Obj:
    spec: Obj = {}
    if extended is not None:
        spec["extendedResourceName"] = extended
    if selectors is not None:
        spec["selectors"] = selectors
    return {"metadata": {"name": name, "resourceVersion": "1", "creationTimestamp": created}, "spec": spec}


def request(name: str = "req-1", cls: str = CLASS, count: int = 1, **exactly: Any) -> Obj:
    return {"name": name, "exactly": {"deviceClassName": cls, "allocationMode": "ExactCount", "count": count,
                                      **exactly}}


def claim(name: str = CLAIM, *requests: Obj, owned: bool = True, uid: str | None = None) -> Obj:
    """st.MakeResourceClaim().Name(name).Namespace("default").Request(CLASS) (requests named req-1, req-2, ...);
    `owned`: .OwnerReference(my-pod, 1234) as pendingClaim has it."""
    meta: Obj = {"name": name, "namespace": "default", "uid": uid or f"uid-{name}", "resourceVersion": "1"}
    if owned:
        meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": POD, "uid": POD_UID,
                                    "controller": True}]
    return {"metadata": meta, "spec": {"devices": {"requests": list(requests) or [request()]}}, "status": {}}


def allocation(*results: tuple[str, str, str, str], node_name: str = NODE, **per_result: Any) -> Obj:
    """An AllocationResult: (request, driver, pool, device) per device, tied to `node_name` by matchFields."""
    return {"devices": {"results": [{"request": r, "driver": d, "pool": p, "device": dev, **per_result}
                                    for r, d, p, dev in results or (("req-1", DRIVER, NODE, "instance-1"),)]},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [node_name]}]}]}}


def allocated(body: Obj, result: Obj | None = None) -> Obj:
    """st.FromResourceClaim(c).Allocation(result): the allocation and the delete-protection finalizer."""
    out = copy.deepcopy(body)
    out["metadata"]["finalizers"] = [FINALIZER]
    out["status"]["allocation"] = copy.deepcopy(result if result is not None else allocation())
    return out


def reserved_for(body: Obj, name: str = POD, uid: str = POD_UID) -> Obj:
    out = copy.deepcopy(body)
    out["status"]["reservedFor"] = [*out["status"].get("reservedFor", ()), {"resource": "pods", "name": name,
                                                                            "uid": uid}]
    return out


def pod(*claims: str, template: str | None = None, in_status: bool = True, name: str = POD, uid: str = POD_UID,
        requests: Mapping[str, str] | None = None) -> Obj:
    """podWithClaimName (claims by name, entries named my-resource, my-resource-2), podWithClaimTemplate(InStatus),
    or a pod asking only for `requests` (st.MakePod().Req(...): no cpu or memory)."""
    body = fake_pod(name)
    body["metadata"]["uid"] = uid
    body["spec"]["containers"][0]["resources"]["requests"] = dict(requests or {})
    entries = [{"name": "my-resource" + ("" if i == 0 else f"-{i + 1}"), "resourceClaimName": c}
               for i, c in enumerate(claims)]
    if template is not None:
        entries.append({"name": "my-resource", "resourceClaimTemplateName": template})
        if in_status:
            body["status"]["resourceClaimStatuses"] = [{"name": "my-resource", "resourceClaimName": CLAIM}]
    if entries:
        body["spec"]["resourceClaims"] = entries
    return body


def stripped(body: Mapping[str, Any]) -> Obj:
    """A claim as upstream's verify compares it: without resourceVersion and allocationTimestamp."""
    out = copy.deepcopy(dict(body))
    out["metadata"].pop("resourceVersion", None)
    (out.get("status", {}).get("allocation") or {}).pop("allocationTimestamp", None)
    return out


class StageRig(Rig):
    """The Rig with upstream's nodes (or `nodes`), the plugin's args (as pluginConfig spells them), and the
    claims, classes and slices of a case."""

    def __init__(self, *nodes: Obj, args: Mapping[str, Any] | None = None, claims: tuple[Obj, ...] = (),
                 classes: tuple[Obj, ...] = (), slices: tuple[Obj, ...] = (), config: Mapping[str, Any] | None = None
                 ) -> None:
        self.api = FakeAPI()
        self.claims = FakeClaimAPI()
        if config is None and args:
            config = {"profiles": [{"schedulerName": "metrics-sched",
                                    "pluginConfig": [{"name": "DynamicResources", "args": dict(args)}]}]}
        self.scheduler = make_scheduler(config, api=self.api, claim_writer=self.claims)
        handlers = self.scheduler.handlers

        def deliver(event: str, obj: Obj) -> None:
            handlers.on_object_event(CLAIMS, cast(EventType, event), obj)

        self.claims.deliver = deliver
        for body in nodes or (node(),):
            handlers.on_node_event("ADDED", body)
        for kind in (SLICES, CLASSES, CLAIMS):
            handlers.on_synced(kind.name)
        for body in classes:
            self.add(CLASSES, body)
        for body in slices:
            self.add(SLICES, body)
        for body in claims:
            self.claims.put(body)


# -- the stages ---------------------------------------------------------------------------------------------------
@dataclass
class Run:
    """What each stage answered, and the claims stored (by name, stripped) after it."""

    pre_enqueue: Status
    pre_filter: Status | None = None
    filter_error: str | None = None
    rejected: dict[str, str] = field(default_factory=dict)  # node -> the reason it failed
    scores: dict[str, float] = field(default_factory=dict)
    normalized: dict[str, float] = field(default_factory=dict)
    node: str | None = None
    reserve: Status | None = None
    pending: list[Obj] = field(default_factory=list)  # the in-flight (Reserve'd) claims after Reserve, stripped
    pre_bind: Status | None = None
    unreserved: bool = False
    post_filter: Status | None = None
    stored: dict[str, dict[str, Obj]] = field(default_factory=dict)  # stage -> claim name -> claim


def drive(rig: Rig, body: Obj, *, nodes: tuple[str, ...] = (NODE,), before_pre_bind: Callable[[], None] | None = None,
          unreserve_before_pre_bind: bool = False, unreserve_after_pre_bind: bool = False) -> Run:
    """upstream's testPlugin loop over one pod; `before_pre_bind`: prepare.prebind (a concurrent change)."""
    plugin = rig.plugin()
    table = rig.scheduler.state.table
    info = parse_pod(body)
    run = Run(plugin.pre_enqueue(info))
    if not run.pre_enqueue.ok:
        return run
    cycle = CycleState()
    run.pre_filter = plugin.pre_filter(cycle, info)
    _snapshot(rig, run, "prefilter")
    feasible: list[str] = []
    if run.pre_filter.code not in (Code.UNSCHEDULABLE, Code.UNRESOLVABLE, Code.ERROR):
        verdict = plugin.filter(cycle, info, table)
        if verdict.error is not None:
            run.filter_error = verdict.error  # an Error aborts the attempt: no PostFilter
            return run
        for name in nodes:
            row = table.index[name]
            if verdict.feasible[row]:
                feasible.append(name)
            else:
                run.rejected[name] = next(r for r, mask in verdict.reasons.items() if mask[row])
        _snapshot(rig, run, "filter")
    if feasible:
        run.node = feasible[0]
        rows = np.array([table.index[n] for n in feasible], dtype=np.int64)
        if len(feasible) > 1 and plugin.pre_score(cycle, info, table, rows).code != Code.SKIP:
            raw = plugin.score(cycle, info, table, rows)
            normalized = plugin.normalize(np.asarray(raw, dtype=np.float64))
            run.scores = dict(zip(feasible, raw.tolist(), strict=True))
            run.normalized = dict(zip(feasible, normalized.tolist(), strict=True))
            run.node = max(feasible, key=lambda n: run.normalized[n])  # the first of the best, as upstream
        run.reserve = plugin.reserve(cycle, info, run.node)
        in_flight = [rig.index.pending(str(c["metadata"]["uid"])) for c in rig.claims.claims.values()]
        in_flight.append(rig.index.pending(f"{POD_UID}/extended-resources"))
        run.pending = [stripped(c) for c in in_flight if c is not None]
        _snapshot(rig, run, "reserve")
        if not run.reserve.ok or unreserve_before_pre_bind:
            plugin.unreserve(cycle, info, run.node)
            run.unreserved = True
            _snapshot(rig, run, "unreserve")
            return run
        if before_pre_bind is not None:
            before_pre_bind()
        run.pre_bind = plugin.pre_bind(cycle, info, run.node)
        _snapshot(rig, run, "prebind")
        if unreserve_after_pre_bind:
            plugin.unreserve(cycle, info, run.node)
            run.unreserved = True
            _snapshot(rig, run, "unreserve")
        return run
    _, run.post_filter = plugin.post_filter(cycle, info, table, {})
    _snapshot(rig, run, "postfilter")
    return run


def _snapshot(rig: Rig, run: Run, stage: str) -> None:
    run.stored[stage] = {name: stripped(body) for (_, name), body in sorted(rig.claims.claims.items())}
