"""kube-scheduler's DynamicResources TestPlugin cases, ported: each test names its upstream case.

Upstream: pkg/scheduler/framework/plugins/dynamicresources/dynamicresources_test.go, `testPlugin`'s `testcases`
(the resource.k8s.io/v1 version with the `testPluginCase` struct; cases that need a feature gate off, e.g.
"DRA-disabled", "tainted-device-disabled", "...-without-DRAAdminAccess-featuregate",
"claim-with-prioritized-list-feature-disabled", "timeout_disabled", are not ported: 1.36's gates are fixed here).
Like upstream's `verify`, claims are compared without resourceVersion and allocationTimestamp; unlike it, the
device chosen is compared too (every case here has one solution).

tests/unit/dra_stages.py rebuilds the case objects and drives the stages in upstream's order.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest

from metrics_sched.framework import Code
from tests.unit.dra_stages import (
    ATTR,
    CLAIM,
    CLAIM2,
    CLASS,
    DRIVER,
    EXTENDED,
    EXTENDED2,
    FINALIZER,
    IMPLICIT,
    NODE,
    NODE2,
    NODE3,
    POD,
    POD_UID,
    Obj,
    StageRig,
    allocated,
    allocation,
    claim,
    device_class,
    drive,
    node,
    pod,
    request,
    reserved_for,
    resource_slice,
    stripped,
)

pytestmark = pytest.mark.unit

BROKEN = {"cel": {"expression": f'device.attributes["{DRIVER}"].{ATTR}'}}  # brokenSelector: no such key on worker

PENDING = claim()  # pendingClaim
ALLOCATED = allocated(PENDING)  # allocatedClaim
IN_USE = reserved_for(ALLOCATED)  # inUseClaim
OTHER = claim("not-my-claim", owned=False)  # otherClaim
OTHER_ALLOCATED = allocated(OTHER)  # otherAllocatedClaim


def admin_access(body: Obj) -> Obj:
    """adminAccess(): every request asks for admin access, every allocated result has it."""
    out = copy.deepcopy(body)
    for r in out["spec"]["devices"]["requests"]:
        r["exactly"]["adminAccess"] = True
    for result in ((out["status"].get("allocation") or {}).get("devices") or {}).get("results") or ():
        result["adminAccess"] = True
    return out


def break_cel_in_claim(body: Obj) -> Obj:
    out = copy.deepcopy(body)
    for r in out["spec"]["devices"]["requests"]:
        r["exactly"]["selectors"] = [BROKEN]
    return out


# -- PreEnqueue ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("case", "body", "claims", "reason"), [
    ("missing-claim", pod(template=CLAIM, in_status=False), (ALLOCATED, OTHER),
     'pod "default/my-pod": ResourceClaim not created yet'),
    ("deleted-claim", pod(template=CLAIM), ({**ALLOCATED, "metadata": {
        **ALLOCATED["metadata"], "deletionTimestamp": "2026-12-07T00:00:00Z"}},),
     'resourceclaim "my-pod-my-resource" is being deleted'),
    # 1.36's resourceclaim.IsForPod says "Pod"/"(Pod is not owner)" (dynamic-resource-allocation v0.36.2,
    # resourceclaim/resourceclaim.go:137); the stored test version predates that and spells it in lower case.
    ("wrong-claim", pod(template=CLAIM), ({**ALLOCATED, "metadata": {
        **ALLOCATED["metadata"], "ownerReferences": [{**ALLOCATED["metadata"]["ownerReferences"][0],
                                                     "uid": POD_UID + "123"}]}},),
     "ResourceClaim default/my-pod-my-resource was not created for Pod default/my-pod (Pod is not owner)"),
])
def test_pre_enqueue(case: str, body: Obj, claims: tuple[Obj, ...], reason: str) -> None:
    run = drive(StageRig(claims=claims), body)
    assert (run.pre_enqueue.code, run.pre_enqueue.reason) == (Code.UNRESOLVABLE, reason), case
    assert run.pre_filter is None  # nothing else runs


# -- a pod without claims -----------------------------------------------------------------------------------------
def test_empty() -> None:
    """"empty" / "empty-with-extended-resources-enabled": PreFilter skips; PostFilter has nothing to deallocate
    (upstream's code is Unschedulable: our framework only acts on a PostFilter's Success, so the code is not
    compared, as upstream's verify compares only the message of a non-success status)."""
    run = drive(StageRig(), pod())
    assert run.pre_filter is not None and run.pre_filter.code == Code.SKIP
    assert run.node == NODE and run.reserve is not None and run.reserve.ok
    assert run.pre_bind is not None and run.pre_bind.ok
    assert run.stored["prebind"] == {}


# -- allocated claims: PreBind only reserves ----------------------------------------------------------------------
@pytest.mark.parametrize(("case", "body"), [
    ("claim-reference", pod(CLAIM)),
    ("claim-template", pod(template=CLAIM)),
    ("bound-claim-without-binding-conditions", pod(template=CLAIM)),
])
def test_an_allocated_claim_is_reserved_for_the_pod_at_pre_bind(case: str, body: Obj) -> None:
    rig = StageRig(claims=(ALLOCATED, OTHER))
    run = drive(rig, body)
    assert run.pre_enqueue.ok and run.pre_filter is not None and run.pre_filter.ok, case
    assert run.rejected == {} and run.node == NODE
    assert run.reserve is not None and run.reserve.ok and run.pending == []  # nothing to allocate
    assert run.pre_bind is not None and run.pre_bind.ok
    assert run.stored["prebind"] == {CLAIM: stripped(IN_USE), "not-my-claim": stripped(OTHER)}
    assert [verb for verb, _ in rig.claims.writes] == ["status"]  # no finalizer update: it is there


def test_reserved_okay() -> None:
    """"reserved-okay": already reserved for the pod: every stage succeeds and nothing is written."""
    rig = StageRig(claims=(IN_USE,))
    run = drive(rig, pod(CLAIM))
    assert run.pre_bind is not None and run.pre_bind.ok
    assert run.stored["prebind"] == {CLAIM: stripped(IN_USE)}
    assert rig.claims.writes == []


def test_good_topology() -> None:
    """"good-topology": the allocation's node selector (a hostname label) allows worker."""
    good = allocated(PENDING, {"nodeSelector": {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "kubernetes.io/hostname", "operator": "In", "values": [NODE]}]}]}})
    rig = StageRig(claims=(good,))
    run = drive(rig, pod(CLAIM))
    assert run.rejected == {} and run.pre_bind is not None and run.pre_bind.ok
    assert run.stored["prebind"] == {CLAIM: stripped(reserved_for(good))}


def test_bind_failure() -> None:
    """"bind-failure": Unreserve after a failed Bind takes the pod out of reservedFor again."""
    good = allocated(PENDING, {"nodeSelector": {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "kubernetes.io/hostname", "operator": "In", "values": [NODE]}]}]}})
    rig = StageRig(claims=(good,))
    run = drive(rig, pod(CLAIM), unreserve_after_pre_bind=True)
    assert run.stored["prebind"] == {CLAIM: stripped(reserved_for(good))}
    assert run.unreserved
    assert run.stored["unreserve"] == {CLAIM: {**stripped(good), "status": {**good["status"], "reservedFor": []}}}


def test_wrong_topology() -> None:
    """"wrong-topology": the allocation's node selector matches no node: Filter says the claim is not available,
    PostFilter deallocates it (nobody uses it)."""
    wrong = allocated(PENDING, {"nodeSelector": {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "no-such-label", "operator": "In", "values": ["no-such-value"]}]}]}})
    run = drive(StageRig(claims=(wrong,)), pod(CLAIM))
    assert run.rejected == {NODE: "resourceclaim not available on the node"}
    assert run.post_filter is not None
    assert (run.post_filter.code, run.post_filter.reason) == (Code.UNSCHEDULABLE,
                                                              "deallocation of ResourceClaim completed")
    want = stripped(wrong)
    del want["status"]["allocation"]
    assert run.stored["postfilter"] == {CLAIM: want}


# -- claims to allocate -------------------------------------------------------------------------------------------
def _allocates(rig: StageRig, initial: Obj, want: Obj, before_pre_bind: Callable[[], None] | None = None) -> None:
    """The shape of "with-resources": Reserve keeps the allocation in flight (allocatedClaim) and writes nothing,
    PreBind writes the finalizer, the allocation and the reservation (inUseClaim) and nothing stays in flight."""
    run = drive(rig, pod(CLAIM), before_pre_bind=before_pre_bind)
    assert run.pre_filter is not None and run.pre_filter.ok
    assert run.rejected == {}
    assert run.reserve is not None and run.reserve.ok
    assert run.pending == [stripped(allocated(initial, want["status"]["allocation"]))]
    assert run.stored["reserve"][CLAIM] == stripped(initial)
    assert run.pre_bind is not None and run.pre_bind.ok, run.pre_bind
    assert run.stored["prebind"][CLAIM] == stripped(want)
    assert rig.index.pending(PENDING["metadata"]["uid"]) is None
    written = rig.claims.claims[("default", CLAIM)]
    assert written["status"]["allocation"]["allocationTimestamp"]  # set with the allocation (binding conditions on)


@pytest.mark.parametrize(("case", "initial"), [
    ("with-resources", PENDING),
    ("with-resources-has-finalizer", {**PENDING, "metadata": {**PENDING["metadata"], "finalizers": [FINALIZER]}}),
    ("timeout_zero", PENDING),  # filterTimeout 0: no limit
])
def test_with_resources(case: str, initial: Obj) -> None:
    rig = StageRig(claims=(initial,), classes=(device_class(),), slices=(resource_slice(),),
                   args={"filterTimeoutSeconds": 0} if case == "timeout_zero" else None)
    _allocates(rig, initial, reserved_for(ALLOCATED))
    updates = [verb for verb, _ in rig.claims.writes]
    assert updates == (["update", "status"] if case != "with-resources-has-finalizer" else ["status"]), case


def test_with_resources_finalizer_gets_removed() -> None:
    """"with-resources-finalizer-gets-removed": the finalizer is there at PreFilter and gone before PreBind: PreBind
    adds it again."""
    initial = {**PENDING, "metadata": {**PENDING["metadata"], "finalizers": [FINALIZER]}}
    rig = StageRig(claims=(initial,), classes=(device_class(),), slices=(resource_slice(),))

    def remove() -> None:
        current = copy.deepcopy(rig.claims.claims[("default", CLAIM)])
        current["metadata"]["finalizers"] = []
        rig.claims.put(current)

    _allocates(rig, initial, reserved_for(ALLOCATED), remove)
    assert [verb for verb, _ in rig.claims.writes] == ["update", "status"]


def test_with_resources_finalizer_gets_added() -> None:
    """"with-resources-finalizer-gets-added": no finalizer at PreFilter, added before PreBind: not added twice."""
    rig = StageRig(claims=(PENDING,), classes=(device_class(),), slices=(resource_slice(),))

    def add() -> None:
        current = copy.deepcopy(rig.claims.claims[("default", CLAIM)])
        current["metadata"]["finalizers"] = [FINALIZER]
        rig.claims.put(current)

    _allocates(rig, PENDING, reserved_for(ALLOCATED), add)
    assert [verb for verb, _ in rig.claims.writes] == ["status"]


def test_skip_bind() -> None:
    """"skip-bind": another PreBind plugin failed: Unreserve drops the in-flight allocation, nothing was written."""
    rig = StageRig(claims=(PENDING,), classes=(device_class(),), slices=(resource_slice(),))
    run = drive(rig, pod(CLAIM), unreserve_before_pre_bind=True)
    assert run.pending == [stripped(ALLOCATED)]
    assert run.unreserved and run.stored["unreserve"] == {CLAIM: stripped(PENDING)}
    assert rig.index.pending(PENDING["metadata"]["uid"]) is None
    assert rig.claims.writes == []


@pytest.mark.parametrize(("case", "claims", "slices"), [
    ("no-resources", (PENDING,), ()),
    ("exhausted-resources", (PENDING, OTHER_ALLOCATED), (resource_slice(),)),
    ("tainted-device-enabled", (PENDING,), (resource_slice(taints=[
        {"key": "taint-key", "value": "taint-value", "effect": "NoSchedule"}]),)),
])
def test_cannot_allocate_all_claims(case: str, claims: tuple[Obj, ...], slices: tuple[Obj, ...]) -> None:
    rig = StageRig(claims=claims, classes=(device_class(),), slices=slices)
    run = drive(rig, pod(CLAIM))
    assert run.rejected == {NODE: "cannot allocate all claims"}, case
    assert run.post_filter is not None and run.post_filter.reason == "still not schedulable"
    assert run.stored["postfilter"] == {c["metadata"]["name"]: stripped(c) for c in claims}


def test_request_admin_access() -> None:
    """"request-admin-access-with-DRAAdminAccess-featuregate" (GA in 1.36): the only device is allocated to another
    claim, and an admin-access request gets it anyway, marked adminAccess."""
    rig = StageRig(claims=(admin_access(PENDING), OTHER_ALLOCATED), classes=(device_class(),),
                   slices=(resource_slice(),))
    run = drive(rig, pod(CLAIM))
    assert run.pending == [stripped(admin_access(ALLOCATED))]
    assert run.pre_bind is not None and run.pre_bind.ok
    assert run.stored["prebind"][CLAIM] == stripped(admin_access(IN_USE))


def test_structured_ignore_allocated_admin_access() -> None:
    """"structured-ignore-allocated-admin-access": the other claim holds the device with admin access, which does not
    take it."""
    rig = StageRig(claims=(PENDING, admin_access(OTHER_ALLOCATED)), classes=(device_class(),),
                   slices=(resource_slice(),))
    run = drive(rig, pod(CLAIM))
    assert run.pending == [stripped(ALLOCATED)]
    assert run.stored["prebind"][CLAIM] == stripped(IN_USE)


# -- CEL runtime errors: an Error that aborts the attempt --------------------------------------------------------
@pytest.mark.parametrize(("case", "claims", "classes", "nodes", "slices", "error"), [
    ("claim-parameters-CEL-runtime-error", (break_cel_in_claim(PENDING),), (device_class(),), (node(),),
     (resource_slice(),), f"claim default/{CLAIM}: selector #0: CEL runtime error: no such key: {ATTR}"),
    ("class-parameters-CEL-runtime-error", (PENDING,), (device_class(selectors=[BROKEN]),), (node(),),
     (resource_slice(),), f"class {CLASS}: selector #0: CEL runtime error: no such key: {ATTR}"),
    # Some nodes have the attribute: the pod is still not scheduled (an Error, not a mismatch on one node).
    ("CEL-runtime-error-for-one-of-two-nodes", (break_cel_in_claim(PENDING),), (device_class(),),
     (node(), node(NODE2)), (resource_slice(), resource_slice(NODE2, attributes={ATTR: {"bool": True}})),
     f"claim default/{CLAIM}: selector #0: CEL runtime error: no such key: {ATTR}"),
    ("CEL-runtime-error-for-one-of-three-nodes", (break_cel_in_claim(PENDING),), (device_class(),),
     (node(), node(NODE2), node(NODE3)),
     (resource_slice(), *(resource_slice(n, attributes={ATTR: {"bool": True}}) for n in (NODE2, NODE3))),
     f"claim default/{CLAIM}: selector #0: CEL runtime error: no such key: {ATTR}"),
])
def test_cel_runtime_errors(case: str, claims: tuple[Obj, ...], classes: tuple[Obj, ...], nodes: tuple[Obj, ...],
                            slices: tuple[Obj, ...], error: str) -> None:
    rig = StageRig(*nodes, claims=claims, classes=classes, slices=slices)
    run = drive(rig, pod(CLAIM), nodes=tuple(n["metadata"]["name"] for n in nodes))
    assert run.filter_error == error, case
    assert run.reserve is None and run.post_filter is None
    assert rig.claims.writes == []


# -- PreFilter refusals -------------------------------------------------------------------------------------------
def _with_class(body: Obj, cls: str) -> Obj:
    """updateDeviceClassName."""
    out = copy.deepcopy(body)
    for r in out["spec"]["devices"]["requests"]:
        for sub in r.get("firstAvailable") or [r.get("exactly")]:
            sub["deviceClassName"] = cls
    return out


PRIORITIZED = claim(CLAIM, {"name": "req-1", "firstAvailable": [
    {"name": "subreq-1", "deviceClassName": CLASS, "allocationMode": "ExactCount", "count": 1}]})


@pytest.mark.parametrize(("case", "body", "classes", "reason"), [
    ("missing-class", PENDING, (), f"request req-1: device class {CLASS} does not exist"),
    ("claim-with-request-with-unknown-device-class", _with_class(claim(owned=False), "does-not-exist"), (),
     "request req-1: device class does-not-exist does not exist"),
    ("claim-with-prioritized-list-unknown-device-class", _with_class(PRIORITIZED, "does-not-exist"), (),
     "request req-1/subreq-1: device class does-not-exist does not exist"),
])
def test_pre_filter_refuses_a_missing_class(case: str, body: Obj, classes: tuple[Obj, ...], reason: str) -> None:
    run = drive(StageRig(claims=(body,), classes=classes, slices=(resource_slice(),)), pod(CLAIM))
    assert run.pre_filter is not None
    assert (run.pre_filter.code, run.pre_filter.reason) == (Code.UNRESOLVABLE, reason), case
    assert run.post_filter is not None and run.post_filter.reason == "no new claims to deallocate"


# -- prioritized lists and their score ---------------------------------------------------------------------------
def test_claim_with_prioritized_list() -> None:
    rig = StageRig(claims=(PRIORITIZED,), classes=(device_class(),), slices=(resource_slice(),))
    want = allocation(("req-1/subreq-1", DRIVER, NODE, "instance-1"))
    run = drive(rig, pod(CLAIM))
    assert run.pending == [stripped(allocated(PRIORITIZED, want))]
    assert run.stored["prebind"][CLAIM] == stripped(reserved_for(allocated(PRIORITIZED, want)))


def _sub(name: str, count: int, **fields: object) -> Obj:
    return {"name": name, "deviceClassName": CLASS, "allocationMode": "ExactCount", "count": count, **fields}


def test_single_claim_prioritized_list_scoring() -> None:
    """"single-claim-prioritized-list-scoring": worker has a healthy device (subreq-1), worker-2 an unhealthy one
    (subreq-2): scores 8 and 7; normalised 100 and 87.5 (upstream truncates to 87: our scores stay floats)."""
    body = claim(CLAIM, {"name": "req-1", "firstAvailable": [
        _sub("subreq-1", 1, selectors=[{"cel": {"expression": f'device.attributes["{DRIVER}"].{ATTR}'}}]),
        _sub("subreq-2", 1)]})
    rig = StageRig(node(), node(NODE2), claims=(body,), classes=(device_class(),), slices=(
        resource_slice(attributes={ATTR: {"bool": True}}), resource_slice(NODE2, attributes={ATTR: {"bool": False}})))
    run = drive(rig, pod(CLAIM), nodes=(NODE, NODE2))
    assert run.scores == {NODE: 8, NODE2: 7}
    assert run.normalized == {NODE: 100, NODE2: 87.5}
    want = allocation(("req-1/subreq-1", DRIVER, NODE, "instance-1"))
    assert run.node == NODE and run.stored["prebind"][CLAIM] == stripped(reserved_for(allocated(body, want)))


def test_multiple_claims_prioritized_list_scoring() -> None:
    """"multiple-claims-prioritized-list-scoring": worker-3 (one device) cannot hold both claims; on worker (4
    devices) claim 1 takes one and claim 2 gets subreq-2 (3 devices): 8 + 7; on worker-2 (2 devices) subreq-4:
    8 + 5."""
    first = claim(CLAIM, {"name": "req-1", "firstAvailable": [_sub("subreq-1", 1)]})
    second = claim(CLAIM2, {"name": "req-1", "firstAvailable": [
        _sub("subreq-1", 4), _sub("subreq-2", 3), _sub("subreq-3", 2), _sub("subreq-4", 1)]})
    instances = [f"instance-{i}" for i in range(1, 5)]
    rig = StageRig(node(), node(NODE2), node(NODE3), claims=(first, second), classes=(device_class(),), slices=(
        resource_slice(NODE, DRIVER, *instances), resource_slice(NODE2, DRIVER, *instances[:2]),
        resource_slice(NODE3, DRIVER, *instances[:1])))
    run = drive(rig, pod(CLAIM, CLAIM2), nodes=(NODE, NODE2, NODE3))
    assert run.rejected == {NODE3: "cannot allocate all claims"}
    assert run.scores == {NODE: 15, NODE2: 13}
    assert run.node == NODE
    assert run.stored["prebind"][CLAIM] == stripped(reserved_for(allocated(
        first, allocation(("req-1/subreq-1", DRIVER, NODE, "instance-1")))))
    assert run.stored["prebind"][CLAIM2] == stripped(reserved_for(allocated(second, allocation(
        *(("req-1/subreq-2", DRIVER, NODE, f"instance-{i}") for i in (2, 3, 4))))))


def test_multiple_requests_prioritized_list_scoring() -> None:
    """"multiple-requests-prioritized-list-scoring": two requests each preferring 2 devices over 1: 4 devices give
    16, 3 give 15, 2 give 14."""
    body = claim(CLAIM, *({"name": f"req-{i}", "firstAvailable": [_sub("subreq-1", 2), _sub("subreq-2", 1)]}
                          for i in (1, 2)))
    instances = [f"instance-{i}" for i in range(1, 5)]
    rig = StageRig(node(), node(NODE2), node(NODE3), claims=(body,), classes=(device_class(),), slices=(
        resource_slice(NODE, DRIVER, *instances), resource_slice(NODE2, DRIVER, *instances[:3]),
        resource_slice(NODE3, DRIVER, *instances[:2])))
    run = drive(rig, pod(CLAIM), nodes=(NODE, NODE2, NODE3))
    assert run.scores == {NODE: 16, NODE2: 15, NODE3: 14}
    assert run.node == NODE
    want = allocation(("req-1/subreq-1", DRIVER, NODE, "instance-1"), ("req-1/subreq-1", DRIVER, NODE, "instance-2"),
                      ("req-2/subreq-1", DRIVER, NODE, "instance-3"), ("req-2/subreq-1", DRIVER, NODE, "instance-4"))
    assert run.stored["prebind"][CLAIM] == stripped(reserved_for(allocated(body, want)))


# -- filterTimeout ------------------------------------------------------------------------------------------------
def test_timeout() -> None:
    """"timeout": a 1 ns filterTimeout on a claim of five requests over four devices: the search runs out of time
    (reason `timed out trying to allocate devices`), PostFilter has nothing to deallocate."""
    large = claim(CLAIM, *(request(f"req-{i}") for i in range(1, 6)))
    rig = StageRig(claims=(large,), classes=(device_class(),),
                   slices=(resource_slice(NODE, DRIVER, *(f"instance-{i}" for i in range(1, 5))),),
                   args={"filterTimeoutSeconds": 1e-9})
    run = drive(rig, pod(CLAIM))
    assert run.rejected == {NODE: "timed out trying to allocate devices"}
    assert run.post_filter is not None and run.post_filter.reason == "still not schedulable"


# -- extended resources backed by DRA -----------------------------------------------------------------------------
EXTENDED_CLASS = device_class(extended=EXTENDED)  # deviceClassWithExtendResourceName
EXTENDED_CLASS2 = device_class(CLASS + "2", extended=EXTENDED2)


def _extended_claim(requests: list[Obj], result: Obj) -> Obj:
    """extendedResourceClaim as PreBind creates it (name generated, owned by the pod), allocated and reserved."""
    body = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"namespace": "default",
                         "annotations": {"resource.kubernetes.io/extended-resource-claim": "true"},
                         "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": POD, "uid": POD_UID,
                                              "controller": True, "blockOwnerDeletion": True}]},
            "spec": {"devices": {"requests": requests}}, "status": {"allocation": result}}
    return reserved_for(body)


def _created(rig: StageRig) -> Obj:
    """The claim PreBind created (its name from generateName, which the fake API consumes), without what the API
    server sets."""
    [(_, name)] = [key for key in rig.claims.claims if key[1].startswith(f"{POD}-extended-resources-")]
    out = stripped(rig.claims.claims[("default", name)])
    for key in ("name", "uid", "finalizers"):
        out["metadata"].pop(key)
    return out


@pytest.mark.parametrize(("case", "nodes", "body", "classes", "slices", "requests", "results", "mappings"), [
    ("extended-resource-name-with-resources", (node(),), pod(requests={EXTENDED: "1"}), (EXTENDED_CLASS,),
     (resource_slice(),), [request("container-0-request-0", CLASS)],
     [("container-0-request-0", DRIVER, NODE, "instance-1")], [("c", EXTENDED, "container-0-request-0")]),
    ("extended-resource-name-with-zero-allocatable", (node(extended={EXTENDED: "0"}),), pod(requests={EXTENDED: "1"}),
     (EXTENDED_CLASS,), (resource_slice(),), [request("container-0-request-0", CLASS)],
     [("container-0-request-0", DRIVER, NODE, "instance-1")], [("c", EXTENDED, "container-0-request-0")]),
    # example.com/gpu from the device plugin (the node has one), example.com/gpu2 through DRA.
    ("extended-resource-one-device-plugin-one-dra", (node(extended={EXTENDED: "1"}),),
     pod(requests={EXTENDED: "1", EXTENDED2: "1"}), (EXTENDED_CLASS, EXTENDED_CLASS2), (resource_slice(),),
     [request("container-0-request-1", CLASS + "2")], [("container-0-request-1", DRIVER, NODE, "instance-1")],
     [("c", EXTENDED2, "container-0-request-1")]),
    # The implicit name and the explicit one map to the same class: one request each, 1 + 2 devices.
    ("implicit-extended-resource-name-with-resources", (node(),), pod(requests={IMPLICIT: "1", EXTENDED: "2"}),
     (EXTENDED_CLASS,), (resource_slice(NODE, DRIVER, *(f"instance-{i}" for i in range(1, 5))),),
     [request("container-0-request-0", CLASS), request("container-0-request-1", CLASS, 2)],
     [("container-0-request-0", DRIVER, NODE, "instance-1"), ("container-0-request-1", DRIVER, NODE, "instance-2"),
      ("container-0-request-1", DRIVER, NODE, "instance-3")],
     [("c", EXTENDED, "container-0-request-1"), ("c", IMPLICIT, "container-0-request-0")]),
])
def test_extended_resources(case: str, nodes: tuple[Obj, ...], body: Obj, classes: tuple[Obj, ...],
                            slices: tuple[Obj, ...], requests: list[Obj], results: list[tuple[str, str, str, str]],
                            mappings: list[tuple[str, str, str]]) -> None:
    rig = StageRig(*nodes, classes=classes, slices=slices)
    run = drive(rig, body)
    assert run.pre_filter is not None and run.pre_filter.ok, case
    assert run.rejected == {}
    assert run.reserve is not None and run.reserve.ok
    [in_flight] = run.pending  # the in-memory claim, allocated
    assert in_flight["metadata"]["name"] == "<extended-resources>"
    assert in_flight["spec"]["devices"]["requests"] == requests
    assert run.pre_bind is not None and run.pre_bind.ok, run.pre_bind
    assert _created(rig) == stripped(_extended_claim(requests, allocation(*results)))
    status = rig.claims.pod_statuses[("default", POD)]
    assert status["resourceClaimName"].startswith(f"{POD}-extended-resources-")
    assert sorted((m["containerName"], m["resourceName"], m["requestName"]) for m in status["requestMappings"]) == \
        sorted(mappings)


def test_implicit_extended_resource_name_two_containers_with_resources() -> None:
    """"implicit-extended-resource-name-two-containers-with-resources": one resource per container."""
    body = pod(requests={IMPLICIT: "1"})
    body["spec"]["containers"].append({"name": "c2", "resources": {"requests": {EXTENDED: "2"}}})
    rig = StageRig(classes=(EXTENDED_CLASS,),
                   slices=(resource_slice(NODE, DRIVER, *(f"instance-{i}" for i in range(1, 5))),))
    run = drive(rig, body)
    requests = [request("container-0-request-0", CLASS), request("container-1-request-0", CLASS, 2)]
    assert run.pre_bind is not None and run.pre_bind.ok
    assert _created(rig) == stripped(_extended_claim(requests, allocation(
        ("container-0-request-0", DRIVER, NODE, "instance-1"), ("container-1-request-0", DRIVER, NODE, "instance-2"),
        ("container-1-request-0", DRIVER, NODE, "instance-3"))))


def test_extended_resource_name_with_node_resource() -> None:
    """"extended-resource-name-with-node-resource": the node has the resource: its device plugin serves it, no claim
    is made."""
    rig = StageRig(node(extended={EXTENDED: "1"}), classes=(EXTENDED_CLASS,))
    run = drive(rig, pod(requests={EXTENDED: "1"}))
    assert run.rejected == {} and run.pre_bind is not None and run.pre_bind.ok
    assert rig.claims.writes == [] and rig.claims.pod_statuses == {}


def test_non_dra_extended_resource_name_with_zero_allocatable() -> None:
    """"non-DRA-extended-resource-name-with-zero-allocatable": no class names the resource: PreFilter skips."""
    rig = StageRig(node(extended={EXTENDED: "0"}), classes=(device_class(),), slices=(resource_slice(),))
    run = drive(rig, pod(requests={EXTENDED: "1"}))
    assert run.pre_filter is not None and run.pre_filter.code == Code.SKIP
    assert rig.claims.writes == []


def test_extended_resource_name_no_resource() -> None:
    """"extended-resource-name-no-resource": no device anywhere: cannot allocate, nothing created."""
    rig = StageRig(classes=(EXTENDED_CLASS,))
    run = drive(rig, pod(requests={EXTENDED: "1"}))
    assert run.rejected == {NODE: "cannot allocate all claims"}
    assert run.post_filter is not None and run.post_filter.reason == "still not schedulable"
    assert rig.claims.writes == []


def test_extended_resource_name_skip_bind() -> None:
    """"extended-resource-name-skip-bind": Unreserve before PreBind: the in-memory claim's allocation is dropped,
    nothing is created."""
    rig = StageRig(classes=(EXTENDED_CLASS,), slices=(resource_slice(),))
    run = drive(rig, pod(requests={EXTENDED: "1"}), unreserve_before_pre_bind=True)
    assert len(run.pending) == 1 and run.unreserved
    assert rig.index.pending(f"{POD_UID}/extended-resources") is None
    assert rig.claims.writes == []


def test_extended_resource_name_bind_failure() -> None:
    """"extended-resource-name-bind-failure": Unreserve after a failed Bind deletes the claim PreBind created."""
    rig = StageRig(classes=(EXTENDED_CLASS,), slices=(resource_slice(),))
    run = drive(rig, pod(requests={EXTENDED: "1"}), unreserve_after_pre_bind=True)
    assert run.pre_bind is not None and run.pre_bind.ok
    verbs = [verb for verb, _ in rig.claims.writes]
    assert (verbs[0], verbs[-1]) == ("create", "delete")
    assert run.stored["unreserve"] == {}


def test_extended_resource_name_claim_creation_failure() -> None:
    """"extended-resource-name-claim-creation-failure": the create is refused: PreBind fails with the API's message,
    Unreserve leaves nothing behind."""
    from metrics_sched.ports import ApiError

    rig = StageRig(classes=(EXTENDED_CLASS,), slices=(resource_slice(),))

    def refuse(obj: object) -> Obj:
        raise ApiError(400, "claim creation errors")

    rig.claims.create_claim = refuse  # type: ignore[method-assign]
    run = drive(rig, pod(requests={EXTENDED: "1"}), unreserve_after_pre_bind=True)
    assert run.pre_bind is not None and run.pre_bind.code == Code.ERROR
    assert "claim creation errors" in run.pre_bind.reason
    assert run.stored["unreserve"] == {} and rig.index.pending(f"{POD_UID}/extended-resources") is None
