"""DynamicResources through the whole Scheduler: claims, slices and classes arrive as watch events, PreBind writes
through a fake claim API that plays the API server (resourceVersion preconditions, 409 on a stale one, the write
coming back as a watch event).

Cases after kube-scheduler 1.36's pkg/scheduler/framework/plugins/dynamicresources/dynamicresources_test.go
(TestPlugin: "claim-reference", "claim-template", "missing-claim", "deleted-claim", "wrong-claim" (not owner),
"missing-class", "structured-no-resources", "structured-allocation", "allocated-elsewhere" / "unavailable",
"bad-CEL"; Test_isSchedulableAfterClaimChange) and its reason strings (docs/design/dra.md §7).
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable
from typing import Any

import pytest

from metrics_sched.framework import ClusterEvent, Code, QueueingHint
from metrics_sched.model.podinfo import parse_pod
from metrics_sched.plugins.dynamic_resources import DynamicResources
from metrics_sched.plugins.dynamic_resources.index import CLAIMS, CLASSES, SLICES, ClaimChange, DraIndex
from metrics_sched.ports import ApiError, KubeObject
from metrics_sched.scheduler import Scheduler
from tests.schedulers import make_scheduler
from tests.unit.fakes import FakeAPI
from tests.unit.fakes import node as fake_node
from tests.unit.fakes import pod as fake_pod
from tests.unit.test_scheduler import drain

pytestmark = pytest.mark.unit

Obj = dict[str, Any]
DRIVER = "gpu.example.com"


# -- builders ---------------------------------------------------------------------------------------------------------
def device_class(name: str = "gpu", expression: str | None = None) -> Obj:
    spec: Obj = {"selectors": [{"cel": {"expression": expression or f'device.driver == "{DRIVER}"'}}]}
    return {"metadata": {"name": name, "resourceVersion": "1"}, "spec": spec}


def gpu_slice(node: str, count: int, *, generation: int = 1, attrs: Callable[[int], Obj] | None = None) -> Obj:
    devices = [{"name": f"gpu-{i}", "attributes": {"index": {"int": i}, **(attrs(i) if attrs else {})},
                "capacity": {"memory": {"value": "80Gi"}}} for i in range(count)]
    return {"metadata": {"name": f"{node}-{DRIVER}", "resourceVersion": "1"},
            "spec": {"driver": DRIVER, "nodeName": node, "pool": {"name": node, "generation": generation,
                                                                  "resourceSliceCount": 1},
                     "devices": devices}}


_uids = itertools.count(1)


def claim(name: str, *, count: int = 1, cls: str = "gpu", selector: str | None = None, owner: str | None = None,
          namespace: str = "default", allocation: Obj | None = None, reserved_for: list[Obj] | None = None,
          deleting: bool = False) -> Obj:
    request: Obj = {"name": "req-1", "exactly": {"deviceClassName": cls, "allocationMode": "ExactCount",
                                                 "count": count}}
    if selector is not None:
        request["exactly"]["selectors"] = [{"cel": {"expression": selector}}]
    meta: Obj = {"name": name, "namespace": namespace, "uid": f"claim-uid-{next(_uids)}", "resourceVersion": "1"}
    if owner is not None:
        meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": owner,
                                    "controller": True}]
    if deleting:
        meta["deletionTimestamp"] = "2026-12-07T00:00:00Z"
    body: Obj = {"metadata": meta, "spec": {"devices": {"requests": [request]}}, "status": {}}
    if allocation is not None:
        body["status"]["allocation"] = allocation
    if reserved_for is not None:
        body["status"]["reservedFor"] = reserved_for
    return body


def claim_pod(name: str, *claims: str, template: str | None = None, status_name: str | None = None,
              uid: str | None = None) -> Obj:
    entries: list[Obj] = [{"name": f"c{i}", "resourceClaimName": c} for i, c in enumerate(claims)]
    body = fake_pod(name)
    if uid is not None:
        body["metadata"]["uid"] = uid
    if template is not None:
        entries.append({"name": "tpl", "resourceClaimTemplateName": template})
        if status_name is not None:
            body["status"]["resourceClaimStatuses"] = [{"name": "tpl", "resourceClaimName": status_name}]
    body["spec"]["resourceClaims"] = entries
    return body


def on_node(node: str, *devices: str) -> Obj:
    return {"devices": {"results": [{"request": "req-1", "driver": DRIVER, "pool": node, "device": d}
                                    for d in devices]},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [node]}]}]}}


class FakeClaimAPI:
    """The API server for ResourceClaims: conditional writes (409 on a stale resourceVersion), each write delivered
    back as a watch event; `fail_next` makes the next status write answer with that error."""

    def __init__(self) -> None:
        self.claims: dict[tuple[str, str], Obj] = {}
        self.deliver: Callable[[str, Obj], None] = lambda event, obj: None
        self.writes: list[tuple[str, Obj]] = []
        self.fail_next: ApiError | None = None
        self.pod_statuses: dict[tuple[str, str], Obj] = {}
        self._rv = itertools.count(100)

    def put(self, obj: Obj) -> Obj:
        key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
        event = "MODIFIED" if key in self.claims else "ADDED"
        stored = copy.deepcopy(obj)
        stored["metadata"]["resourceVersion"] = str(next(self._rv))
        self.claims[key] = stored
        self.deliver(event, copy.deepcopy(stored))
        return copy.deepcopy(stored)

    def _check(self, obj: KubeObject) -> tuple[str, str]:
        key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
        current = self.claims.get(key)
        if current is None:
            raise ApiError(404, "not found")
        if obj["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
            raise ApiError(409, "the object has been modified")
        return key

    def get_claim(self, namespace: str, name: str) -> KubeObject | None:
        found = self.claims.get((namespace, name))
        return copy.deepcopy(found) if found is not None else None

    def update_claim(self, obj: KubeObject) -> KubeObject:
        key = self._check(obj)
        body = {**copy.deepcopy(self.claims[key]), "metadata": copy.deepcopy(obj["metadata"])}
        self.writes.append(("update", body))
        return self.put(body)

    def update_claim_status(self, obj: KubeObject) -> KubeObject:
        if self.fail_next is not None:
            error, self.fail_next = self.fail_next, None
            raise error
        key = self._check(obj)
        body = {**copy.deepcopy(self.claims[key]), "status": copy.deepcopy(obj.get("status") or {})}
        self.writes.append(("status", body))
        return self.put(body)

    def create_claim(self, obj: KubeObject) -> KubeObject:
        body = copy.deepcopy(dict(obj))
        body["metadata"]["name"] = body["metadata"].pop("generateName") + f"{len(self.claims):05d}"
        body["metadata"]["uid"] = f"created-{len(self.claims)}"
        body.setdefault("status", {})
        self.writes.append(("create", body))
        return self.put(body)

    def delete_claim(self, namespace: str, name: str, uid: str) -> None:
        gone = self.claims.pop((namespace, name), None)
        if gone is not None:
            self.writes.append(("delete", gone))
            self.deliver("DELETED", gone)

    def set_extended_resource_claim_status(self, namespace: str, pod: str, status: Any) -> None:
        self.pod_statuses[(namespace, pod)] = dict(status)

    def patch_claim_status(self, namespace: str, name: str, patch: Any) -> KubeObject:
        body = copy.deepcopy(self.claims[(namespace, name)])
        drop = {r["uid"] for r in patch["status"]["reservedFor"]}
        body["status"]["reservedFor"] = [r for r in body["status"].get("reservedFor") or () if r["uid"] not in drop]
        self.writes.append(("patch", body))
        return self.put(body)


class Rig:
    def __init__(self, nodes: tuple[str, ...] = ("n1", "n2")) -> None:
        self.api = FakeAPI()
        self.claims = FakeClaimAPI()
        self.scheduler: Scheduler = make_scheduler(api=self.api, claim_writer=self.claims)
        handlers = self.scheduler.handlers
        self.claims.deliver = lambda event, obj: handlers.on_object_event(CLAIMS, event, obj)
        for name in nodes:
            handlers.on_node_event("ADDED", fake_node(name))
        for kind in (SLICES, CLASSES, CLAIMS):
            handlers.on_synced(kind.name)

    def add(self, kind: Any, obj: Obj) -> None:
        self.scheduler.handlers.on_object_event(kind, "ADDED", obj)

    @property
    def index(self) -> DraIndex:
        return self.scheduler.indexes.get(DraIndex)

    def schedule(self, pod: Obj) -> Any:
        self.api.add_pod(pod)
        return self.scheduler.schedule_one(timeout=1)

    def plugin(self) -> DynamicResources:
        plugin = self.scheduler.frameworks["metrics-sched"].instances["DynamicResources"]
        assert isinstance(plugin, DynamicResources)
        return plugin


def message(rig: Rig, pod: str) -> str:
    assert rig.scheduler.reporter.wait_idle(10)
    cond = rig.api.pod_scheduled(f"default/{pod}")
    assert cond is not None
    return cond["message"]


# -- PreEnqueue: the claims must exist --------------------------------------------------------------------------------
def test_a_pod_whose_claim_is_missing_waits_until_it_is_created() -> None:
    rig = Rig()
    rig.add(SLICES, gpu_slice("n1", 2))
    rig.add(CLASSES, device_class())
    pod = claim_pod("p", "gpu-claim")
    assert rig.schedule(pod) is None  # gated: nothing to pop
    status = rig.plugin().pre_enqueue(parse_pod(pod))
    assert (status.code, status.reason) == (Code.UNRESOLVABLE, 'resourceclaim.resource.k8s.io "gpu-claim" not found')
    rig.claims.put(claim("gpu-claim"))  # the claim's ADDED event wakes the pod
    drain(rig.scheduler, rig.api)
    assert rig.api.binds == [("default/p", "n1")]


@pytest.mark.parametrize(("pod", "claims", "reason"), [
    (claim_pod("p", template="tpl"), [], 'pod "default/p": ResourceClaim not created yet'),
    (claim_pod("p", "c", uid="pod-uid"), [claim("c", deleting=True)], 'resourceclaim "c" is being deleted'),
    (claim_pod("p", template="tpl", status_name="p-tpl", uid="pod-uid"), [claim("p-tpl", owner="someone-else")],
     "ResourceClaim default/p-tpl was not created for Pod default/p (Pod is not owner)"),
])
def test_pre_enqueue_reasons_are_upstreams(pod: Obj, claims: list[Obj], reason: str) -> None:
    rig = Rig()
    for body in claims:
        rig.claims.put(body)
    status = rig.plugin().pre_enqueue(parse_pod(pod))
    assert (status.code, status.reason) == (Code.UNRESOLVABLE, reason)


def test_a_template_claim_owned_by_the_pod_is_allocated() -> None:
    rig = Rig()
    rig.add(SLICES, gpu_slice("n2", 1))
    rig.add(CLASSES, device_class())
    rig.claims.put(claim("p-tpl", owner="pod-uid"))
    rig.schedule(claim_pod("p", template="tpl", status_name="p-tpl", uid="pod-uid"))
    drain(rig.scheduler, rig.api)
    assert rig.api.binds == [("default/p", "n2")]
    written = rig.claims.claims[("default", "p-tpl")]
    assert written["status"]["allocation"]["devices"]["results"] == [
        {"request": "req-1", "driver": DRIVER, "pool": "n2", "device": "gpu-0"}]
    assert written["status"]["reservedFor"] == [{"resource": "pods", "name": "p", "uid": "pod-uid"}]
    assert "resource.kubernetes.io/delete-protection" in written["metadata"]["finalizers"]
    assert written["status"]["allocation"]["allocationTimestamp"]


# -- PreFilter / Filter -----------------------------------------------------------------------------------------------
def test_a_missing_device_class_is_named() -> None:
    rig = Rig()
    rig.add(SLICES, gpu_slice("n1", 1))
    rig.claims.put(claim("c", cls="nope"))
    rig.schedule(claim_pod("p", "c"))
    assert "request req-1: device class nope does not exist" in message(rig, "p")


def test_no_node_with_enough_devices_is_cannot_allocate_all_claims() -> None:
    rig = Rig()
    rig.add(SLICES, gpu_slice("n1", 1))
    rig.add(CLASSES, device_class())
    rig.claims.put(claim("c", count=2))
    rig.schedule(claim_pod("p", "c"))
    assert message(rig, "p").startswith("0/2 nodes are available: 2 cannot allocate all claims.")
    assert rig.api.binds == []


def test_two_pods_never_get_one_device() -> None:
    """The first pod's allocation is pending (Reserve) while its write is held back: the second takes the other
    device; a third finds none."""
    rig = Rig(("n1",))
    rig.add(SLICES, gpu_slice("n1", 2))
    rig.add(CLASSES, device_class())
    for name in ("a", "b", "c"):
        rig.claims.put(claim(name))
    for name in ("a", "b", "c"):
        rig.schedule(claim_pod(f"p-{name}", name))
    drain(rig.scheduler, rig.api)
    assert sorted(rig.api.binds) == [("default/p-a", "n1"), ("default/p-b", "n1")]
    devices = {rig.claims.claims[("default", n)]["status"]["allocation"]["devices"]["results"][0]["device"]
               for n in ("a", "b")}
    assert devices == {"gpu-0", "gpu-1"}
    assert "cannot allocate all claims" in message(rig, "p-c")
    # Deleting a bound pod's claim frees its device: the waiting pod is moved and binds.
    freed = rig.claims.claims.pop(("default", "a"))
    rig.scheduler.handlers.on_object_event(CLAIMS, "DELETED", freed)
    drain(rig.scheduler, rig.api)
    assert ("default/p-c", "n1") in rig.api.binds


def test_a_claim_shared_by_two_pods_is_allocated_once_and_reserved_for_both() -> None:
    rig = Rig(("n1", "n2"))
    rig.add(SLICES, gpu_slice("n2", 1))
    rig.add(CLASSES, device_class())
    rig.claims.put(claim("shared"))
    rig.schedule(claim_pod("p1", "shared", uid="u1"))
    drain(rig.scheduler, rig.api)
    rig.schedule(claim_pod("p2", "shared", uid="u2"))
    drain(rig.scheduler, rig.api)
    assert sorted(rig.api.binds) == [("default/p1", "n2"), ("default/p2", "n2")]
    status = rig.claims.claims[("default", "shared")]["status"]
    assert [r["uid"] for r in status["reservedFor"]] == ["u1", "u2"]


def test_an_allocated_claim_keeps_the_pod_on_its_node() -> None:
    rig = Rig(("n1", "n2"))
    rig.add(CLASSES, device_class())
    rig.claims.put(claim("c", allocation=on_node("n2", "gpu-0")))
    rig.schedule(claim_pod("p", "c"))
    drain(rig.scheduler, rig.api)
    assert rig.api.binds == [("default/p", "n2")]


def test_an_allocated_claim_elsewhere_is_not_available_and_post_filter_deallocates_it() -> None:
    rig = Rig(("n1", "n2"))
    rig.add(CLASSES, device_class())
    rig.claims.put(claim("c", allocation=on_node("gone", "gpu-0")))
    rig.schedule(claim_pod("p", "c"))
    assert "resourceclaim not available on the node" in message(rig, "p")
    # PostFilter deallocated the claim (nobody else uses it): the claim is free now.
    assert not rig.claims.claims[("default", "c")]["status"].get("allocation")


def test_a_selector_that_fails_to_evaluate_is_an_error_not_a_mismatch() -> None:
    rig = Rig(("n1",))
    rig.add(SLICES, gpu_slice("n1", 1))
    rig.add(CLASSES, device_class())
    rig.claims.put(claim("c", selector=f'device.attributes["{DRIVER}"].missing == 1'))
    outcome = rig.schedule(claim_pod("p", "c"))
    assert outcome is not None and outcome.status.code == Code.ERROR
    assert "CEL runtime error" in outcome.status.reason and "no such key: missing" in outcome.status.reason
    assert rig.api.binds == []


def test_a_write_conflict_is_decided_again_on_the_fresh_claim() -> None:
    rig = Rig(("n1",))
    rig.add(SLICES, gpu_slice("n1", 1))
    rig.add(CLASSES, device_class())
    rig.claims.put(claim("c"))
    rig.claims.fail_next = ApiError(409, "the object has been modified")
    rig.schedule(claim_pod("p", "c"))
    drain(rig.scheduler, rig.api)
    assert rig.api.binds == [("default/p", "n1")]
    assert rig.claims.claims[("default", "c")]["status"]["allocation"]


def test_a_failed_write_unreserves_and_frees_the_pending_allocation() -> None:
    rig = Rig(("n1",))
    rig.add(SLICES, gpu_slice("n1", 1))
    rig.add(CLASSES, device_class())
    rig.claims.put(claim("c"))
    rig.claims.fail_next = ApiError(500, "etcd is down")
    rig.schedule(claim_pod("p", "c"))
    assert rig.scheduler.binder.drain(10)
    assert rig.index.pending(rig.claims.claims[("default", "c")]["metadata"]["uid"]) is None
    drain(rig.scheduler, rig.api, timeout=5)  # the retry after backoff binds
    assert rig.api.binds == [("default/p", "n1")]


# -- queueing hints (Test_isSchedulableAfterClaimChange) --------------------------------------------------------------
def test_claim_change_hints() -> None:
    rig = Rig()
    hint = next(e.hint for e in rig.plugin().events_to_register() if e.event == ClusterEvent.RESOURCE_CLAIM_CHANGED)
    assert hint is not None
    mine = claim("mine")
    rig.claims.put(mine)
    pod = parse_pod(claim_pod("p", "mine"))
    other = claim("other")
    allocated = claim("other", allocation=on_node("n1", "gpu-0"))
    assert hint(pod, ClaimChange(allocated, other)) == QueueingHint.QUEUE  # deallocated: any pod
    assert hint(pod, ClaimChange(allocated, None)) == QueueingHint.QUEUE  # deleted while allocated
    assert hint(pod, ClaimChange(None, other)) == QueueingHint.SKIP  # not the pod's
    assert hint(pod, ClaimChange(None, mine)) == QueueingHint.QUEUE  # the pod's, new
    finalized = copy.deepcopy(mine)
    finalized["metadata"]["finalizers"] = ["x"]
    assert hint(pod, ClaimChange(mine, finalized)) == QueueingHint.SKIP  # status unchanged
    changed = copy.deepcopy(mine)
    changed["status"]["reservedFor"] = []
    changed["status"]["allocation"] = on_node("n1", "gpu-0")
    assert hint(pod, ClaimChange(mine, changed)) == QueueingHint.QUEUE


def test_a_device_taint_rule_refuses_dra_pods_naming_it_until_it_is_gone() -> None:
    """DRADeviceTaintRules is off by default in 1.36: where a cluster uses it anyway, its taints would be ignored
    here, so DRA pods are refused while a rule exists, and retried when it goes."""
    from metrics_sched.plugins.dynamic_resources.index import TAINT_RULES
    rig = Rig(("n1",))
    rig.add(SLICES, gpu_slice("n1", 1))
    rig.add(CLASSES, device_class())
    rig.claims.put(claim("c"))
    rule = {"metadata": {"name": "maintenance", "resourceVersion": "1"}, "spec": {}}
    rig.add(TAINT_RULES, rule)
    rig.schedule(claim_pod("p", "c"))
    assert "DeviceTaintRule maintenance exists" in message(rig, "p")
    rig.scheduler.handlers.on_object_event(TAINT_RULES, "DELETED", rule)
    drain(rig.scheduler, rig.api)
    assert rig.api.binds == [("default/p", "n1")]


# -- extended resources backed by DRA (extendeddynamicresources.go) ---------------------------------------------------
def test_an_extended_resource_on_a_node_without_it_is_served_through_a_claim_the_scheduler_makes() -> None:
    """`nvidia.com/gpu: 1` where a DeviceClass backs it: node n1 advertises none (a DRA-only node) and has a device,
    n2 advertises none and has no device; the pod goes to n1 with a claim named after it, reserved for it."""
    rig = Rig(("n1", "n2"))
    rig.add(SLICES, gpu_slice("n1", 1))
    backing = device_class("gpu")
    backing["spec"]["extendedResourceName"] = "nvidia.com/gpu"
    rig.add(CLASSES, backing)
    pod = fake_pod("x", gpus=1)
    pod["metadata"]["uid"] = "pod-x"
    rig.schedule(pod)
    drain(rig.scheduler, rig.api)
    assert rig.api.binds == [("default/x", "n1")]
    [created] = [body for verb, body in rig.claims.writes if verb == "create"]
    assert created["metadata"]["name"].startswith("x-extended-resources-")
    assert created["metadata"]["annotations"] == {"resource.kubernetes.io/extended-resource-claim": "true"}
    assert created["spec"]["devices"]["requests"] == [{"name": "container-0-request-2", "exactly": {
        "deviceClassName": "gpu", "allocationMode": "ExactCount", "count": 1}}]  # cpu, memory, nvidia.com/gpu
    claim_now = rig.claims.claims[("default", created["metadata"]["name"])]
    assert claim_now["status"]["allocation"]["devices"]["results"][0]["device"] == "gpu-0"
    assert claim_now["status"]["reservedFor"] == [{"resource": "pods", "name": "x", "uid": "pod-x"}]
    assert rig.claims.pod_statuses[("default", "x")] == {
        "resourceClaimName": created["metadata"]["name"],
        "requestMappings": [{"containerName": "c", "resourceName": "nvidia.com/gpu",
                             "requestName": "container-0-request-2"}]}


def test_a_node_with_the_extended_resource_serves_it_through_its_device_plugin() -> None:
    """Where the node advertises nvidia.com/gpu, NodeResourcesFit counts it as always and no claim is made."""
    rig = Rig(("n1",))
    rig.scheduler.handlers.on_node_event("ADDED", fake_node("plugin-node", gpus=2))
    rig.add(SLICES, gpu_slice("n1", 0))
    backing = device_class("gpu")
    backing["spec"]["extendedResourceName"] = "nvidia.com/gpu"
    rig.add(CLASSES, backing)
    rig.schedule(fake_pod("x", gpus=1))
    drain(rig.scheduler, rig.api)
    assert rig.api.binds == [("default/x", "plugin-node")]
    assert not [verb for verb, _ in rig.claims.writes if verb == "create"]


def test_requests_and_mappings_follow_upstreams_naming_and_init_container_reuse() -> None:
    """createRequestsAndMappings (extendeddynamicresources_test.go): an init container reuses a later container's
    request when it asks for no more; requests sorted by name."""
    from metrics_sched.plugins.dynamic_resources.extended import requests_and_mappings
    gpu = "example.com/gpu"
    body = fake_pod("p")
    body["spec"]["initContainers"] = [{"name": "init", "resources": {"requests": {gpu: "1"}}}]
    body["spec"]["containers"] = [{"name": "main", "resources": {"requests": {gpu: "2", "cpu": "1"}}}]
    requests, mappings = requests_and_mappings(parse_pod(body), {gpu: "cls"})
    assert requests == [{"name": "container-1-request-1", "exactly": {
        "deviceClassName": "cls", "allocationMode": "ExactCount", "count": 2}}]
    assert mappings == [
        {"containerName": "main", "resourceName": gpu, "requestName": "container-1-request-1"},
        {"containerName": "init", "resourceName": gpu, "requestName": "container-1-request-1"}]


def test_first_available_prefers_the_node_that_gives_the_first_subrequest() -> None:
    """Score (dynamicresources.go): 8 - index of the subrequest chosen, normalised with the highest at 100; n1 has
    only the second choice, n2 the first, so n2 scores 100 and n1 0 and the pod goes to n2."""
    rig = Rig(("n1", "n2"))
    rig.add(SLICES, gpu_slice("n1", 1, attrs=lambda i: {"model": {"string": "small"}}))
    rig.add(SLICES, gpu_slice("n2", 1, attrs=lambda i: {"model": {"string": "big"}}))
    rig.add(CLASSES, device_class())
    body = claim("c")
    body["spec"]["devices"]["requests"] = [{"name": "gpu", "firstAvailable": [
        {"name": "big", "deviceClassName": "gpu", "allocationMode": "ExactCount", "count": 1,
         "selectors": [{"cel": {"expression": f'device.attributes["{DRIVER}"].model == "big"'}}]},
        {"name": "small", "deviceClassName": "gpu", "allocationMode": "ExactCount", "count": 1}]}]  # API defaults
    rig.claims.put(body)
    outcome = rig.schedule(claim_pod("p", "c"))
    assert outcome is not None and outcome.node == "n2"
    [term] = [t for t in outcome.terms if t.plugin == "DynamicResources"]
    rows = {rig.scheduler.state.table.name(int(r)): i for i, r in enumerate(outcome.feasible_rows.tolist())}
    assert term.raw[rows["n2"]] == 8 and term.raw[rows["n1"]] == 7
    assert term.normalized[rows["n2"]] == 100
    drain(rig.scheduler, rig.api)
    result = rig.claims.claims[("default", "c")]["status"]["allocation"]["devices"]["results"]
    assert [r["request"] for r in result] == ["gpu/big"]


def test_device_metric_can_be_turned_off_in_the_config() -> None:
    """`deviceMetric: ""` (docs/dra.md): upstream's first-fit order; the args parser refuses other empty strings."""
    config = {"profiles": [{"pluginConfig": [{"name": "DynamicResources", "args": {"deviceMetric": ""}}]}]}
    plugin = make_scheduler(config).frameworks["metrics-sched"].instances["DynamicResources"]
    assert isinstance(plugin, DynamicResources) and plugin.args.device_metric == ""
    assert plugin._rank() is None


@pytest.mark.parametrize("selector", [None, f'device.attributes["{DRIVER}"].odd == 1'])
def test_dra_filters_only_the_nodes_the_earlier_filters_let_through(selector: str | None) -> None:
    """Upstream's Filter is not asked about a node an earlier filter (here NodeAffinity) rejected. A claim allocated
    on the one node the pod may use is available there: when the pod's other claim does not fit, PostFilter has
    nothing to deallocate ("still not schedulable"). A selector that would fail to evaluate on a device of a node
    the pod may not use does not end the attempt with an error."""
    rig = Rig(("n1", "n2"))
    rig.add(SLICES, gpu_slice("n1", 1))
    rig.add(SLICES, gpu_slice("n2", 1))
    rig.add(CLASSES, device_class())
    rig.claims.put(claim("held", allocation=on_node("n1", "gpu-0")))
    rig.claims.put(claim("more", selector=selector))
    pod = claim_pod("p", "held", "more")
    pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "n1"}
    outcome = rig.schedule(pod)
    assert outcome is not None and outcome.status.code != Code.ERROR, outcome.status.reason
    assert "cannot allocate all claims" in message(rig, "p")
    assert rig.claims.claims[("default", "held")]["status"].get("allocation")  # not deallocated
    assert rig.api.binds == []


def test_a_pod_deleted_while_it_waits_for_its_claim_is_forgotten() -> None:
    """The index's waiting list holds the pods that wait now (memory follows the cluster, not its history)."""
    rig = Rig(("n1",))
    pod = claim_pod("p", "never-made")
    rig.schedule(pod)
    rig.plugin().pre_enqueue(parse_pod(pod))
    assert rig.index.waiting() == 1
    rig.api.delete_pod("default/p")
    rig.scheduler.handlers.on_pod_event("DELETED", pod)
    assert rig.index.waiting() == 0


def test_a_claim_is_unavailable_only_where_the_other_claims_fit() -> None:
    """Upstream's Filter returns "cannot allocate all claims" before it records an allocated claim as unavailable:
    when the pod's other claim fits on no node, PostFilter has no claim to deallocate, even though the allocated
    claim's devices are on one of the two nodes the pod may use."""
    rig = Rig(("n1", "n2"))
    rig.add(SLICES, gpu_slice("n1", 1))
    rig.add(SLICES, gpu_slice("n2", 1))
    rig.add(CLASSES, device_class())
    rig.claims.put(claim("held", allocation=on_node("n1", "gpu-0")))
    rig.claims.put(claim("more", count=2))
    rig.schedule(claim_pod("p", "held", "more"))
    assert message(rig, "p").startswith("0/2 nodes are available: 2 cannot allocate all claims.")
    assert rig.claims.claims[("default", "held")]["status"].get("allocation")  # not deallocated


def test_a_leftover_extended_resource_claim_is_refused_then_deleted_and_the_pod_starts_afresh() -> None:
    """extendeddynamicresources.go (TestPlugin extended-resource-name-with-resources-has-claim / -delete-claim): a
    claim an earlier attempt made for the pod's extended resources and left behind refuses every node ("cannot
    schedule extended resource claim"); PostFilter deletes it (finalizer first) and the pod is retried, with a new
    claim, once the deletion is seen."""
    rig = Rig(("n1",))
    rig.add(SLICES, gpu_slice("n1", 1))
    backing = device_class("gpu")
    backing["spec"]["extendedResourceName"] = "nvidia.com/gpu"
    rig.add(CLASSES, backing)
    pod = fake_pod("x", gpus=1)
    pod["metadata"]["uid"] = "pod-x"
    stale = claim("x-extended-resources-old", owner="pod-x")
    stale["metadata"]["annotations"] = {"resource.kubernetes.io/extended-resource-claim": "true"}
    stale["metadata"]["finalizers"] = ["resource.kubernetes.io/delete-protection"]
    rig.claims.put(stale)
    outcome = rig.schedule(pod)
    assert outcome is not None and outcome.node is None
    assert dict(outcome.rejections) == {"cannot schedule extended resource claim": 1}
    assert ("default", "x-extended-resources-old") not in rig.claims.claims
    assert [verb for verb, _ in rig.claims.writes][-2:] == ["update", "delete"]  # the finalizer, then the claim
    drain(rig.scheduler, rig.api)
    assert rig.api.binds == [("default/x", "n1")]
    [created] = [body for verb, body in rig.claims.writes if verb == "create"]
    assert created["metadata"]["name"].startswith("x-extended-resources-")


def test_malformed_dra_objects_are_dropped_or_refused_never_a_crash() -> None:
    """Bad input (issue 44): an object not shaped like one is dropped by the index (counted); a claim whose fields
    have the wrong types gives the pod an Error naming it, not an exception out of the cycle."""
    rig = Rig(("n1",))
    rig.add(CLASSES, device_class())
    for bad in ({"metadata": None}, {"metadata": ["x"]}, {"metadata": {"name": "s"}, "spec": "nope"}, {}):
        rig.add(SLICES, bad)
    assert rig.index.dropped == 4
    broken = claim("c")
    broken["spec"]["devices"]["requests"] = [True]
    rig.claims.put(broken)
    outcome = rig.schedule(claim_pod("p", "c"))
    assert outcome is not None and outcome.status.code == Code.ERROR
    assert "malformed DRA object" in outcome.status.reason
