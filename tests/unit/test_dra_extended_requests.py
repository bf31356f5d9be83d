"""The device requests and container mappings of the claim made for DRA-backed extended resources, ported from
pkg/scheduler/framework/plugins/dynamicresources/extendeddynamicresources_test.go:
Test_createRequestsAndMappings_requests and Test_createRequestsAndMappings_mappings (case names kept). Upstream
passes every extended resource and skips those without a class; `requests_and_mappings` is given the resources a
class serves (resource -> class).

The pods are st.MakePod's: Res() adds container con<i>, InitReq() init-con<i>, SidecarReq() sidecar-con<i> (an
init container with restartPolicy Always), <i> counting that list.
"""

from __future__ import annotations

from typing import Any

import pytest

from metrics_sched.model.podinfo import parse_pod
from metrics_sched.plugins.dynamic_resources.extended import requests_and_mappings
from tests.unit.fakes import pod as fake_pod

pytestmark = pytest.mark.unit

GPU = "example.com/gpu"
GPU1 = GPU + "1"
INIT = GPU + "init"
IMPLICIT = "deviceclass.resource.kubernetes.io/classInit"


def make_pod(*containers: tuple[str, dict[str, str]]) -> dict[str, Any]:
    """("res" | "init" | "sidecar", requests) in order."""
    body = fake_pod("my-pod")
    body["spec"]["containers"] = []
    body["spec"]["initContainers"] = []
    for kind, requests in containers:
        into = body["spec"]["containers"] if kind == "res" else body["spec"]["initContainers"]
        name = {"res": "con", "init": "init-con", "sidecar": "sidecar-con"}[kind] + str(len(into))
        container: dict[str, Any] = {"name": name, "resources": {"requests": dict(requests)}}
        if kind == "sidecar":
            container["restartPolicy"] = "Always"
        into.append(container)
    return body


POD1 = make_pod(("res", {GPU: "1", GPU1: "2"}))
POD2 = make_pod(("res", {GPU: "1"}), ("res", {GPU1: "2"}))
POD_INIT = make_pod(("res", {GPU: "1"}), ("init", {INIT: "2"}))
POD_INIT2 = make_pod(("res", {GPU: "1"}), ("init", {INIT: "1"}), ("init", {INIT: "2"}))
POD_INIT3 = make_pod(("res", {GPU: "1"}), ("init", {INIT: "1"}), ("sidecar", {INIT: "1"}), ("init", {INIT: "2"}))
POD1_INIT_IMPLICIT = make_pod(("init", {INIT: "1", IMPLICIT: "2"}))
POD_INIT_IMPLICIT = make_pod(("res", {GPU: "1"}), ("init", {INIT: "1"}), ("init", {IMPLICIT: "2"}))

DEV_MAP = {GPU: "class"}
DEV_MAP2 = {GPU: "class", GPU1: "class1"}
DEV_MAP_INIT = {GPU: "class", INIT: "classInit", IMPLICIT: "classInit"}


def served(resources: dict[str, int], classes: dict[str, str]) -> dict[str, str]:
    """What the plugin passes: the pod's DRA-served resources that some class backs."""
    return {r: classes[r] for r in resources if r in classes}


@pytest.mark.parametrize(("case", "body", "resources", "classes", "want"), [
    ("nil", POD1, {}, {}, []),
    ("one resource match", POD1, {GPU: 1}, DEV_MAP, [("container-0-request-0", "class", 1)]),
    ("one resource match, one resource not match", POD1, {GPU: 1, GPU1: 2}, DEV_MAP,
     [("container-0-request-0", "class", 1)]),
    ("two resources match", POD1, {GPU: 1, GPU1: 2}, DEV_MAP2,
     [("container-0-request-0", "class", 1), ("container-0-request-1", "class1", 2)]),
    ("two containers match", POD2, {GPU: 1, GPU1: 2}, DEV_MAP2,
     [("container-0-request-0", "class", 1), ("container-1-request-0", "class1", 2)]),
    ("one init container, one regular container", POD_INIT, {GPU: 1, INIT: 2}, DEV_MAP_INIT,
     [("container-0-request-0", "classInit", 2), ("container-1-request-0", "class", 1)]),
    ("two init containers, one regular container", POD_INIT2, {GPU: 1, INIT: 2}, DEV_MAP_INIT,
     [("container-1-request-0", "classInit", 2), ("container-2-request-0", "class", 1)]),
    ("three init containers, one sidecar, one regular container", POD_INIT3, {GPU: 1, INIT: 2}, DEV_MAP_INIT,
     [("container-1-request-0", "classInit", 1), ("container-2-request-0", "classInit", 2),
      ("container-3-request-0", "class", 1)]),
])
def test_create_requests_and_mappings_requests(case: str, body: dict[str, Any], resources: dict[str, int],
                                               classes: dict[str, str], want: list[tuple[str, str, int]]) -> None:
    requests, _ = requests_and_mappings(parse_pod(body), served(resources, classes))
    assert [(r["name"], r["exactly"]["deviceClassName"], r["exactly"]["count"]) for r in requests] == want, case
    assert all(r["exactly"]["allocationMode"] == "ExactCount" for r in requests)


@pytest.mark.parametrize(("case", "body", "resources", "classes", "want"), [
    ("one container, two requests", POD1, {GPU: 1, GPU1: 2}, DEV_MAP2,
     [("container-0-request-0", "con0", GPU), ("container-0-request-1", "con0", GPU1)]),
    ("one container, one explicit and one implicit request", POD1_INIT_IMPLICIT, {GPU: 1, INIT: 2, IMPLICIT: 2},
     DEV_MAP_INIT, [("container-0-request-0", "init-con0", IMPLICIT), ("container-0-request-1", "init-con0", INIT)]),
    ("two containers, two requests", POD2, {GPU: 1, GPU1: 2}, DEV_MAP2,
     [("container-0-request-0", "con0", GPU), ("container-1-request-0", "con1", GPU1)]),
    ("one init container, one regular container, one request", POD_INIT, {GPU: 1, INIT: 2}, DEV_MAP_INIT,
     [("container-0-request-0", "init-con0", INIT), ("container-1-request-0", "con0", GPU)]),
    ("three containers (two are init container), two requests", POD_INIT2, {GPU: 1, INIT: 2}, DEV_MAP_INIT,
     [("container-1-request-0", "init-con0", INIT), ("container-1-request-0", "init-con1", INIT),
      ("container-2-request-0", "con0", GPU)]),
    ("three containers (two are init container), both explicit and implicit resources", POD_INIT_IMPLICIT,
     {GPU: 1, INIT: 2, IMPLICIT: 2}, DEV_MAP_INIT,
     [("container-0-request-0", "init-con0", INIT), ("container-1-request-0", "init-con1", IMPLICIT),
      ("container-2-request-0", "con0", GPU)]),
    ("four containers (two are init container, one sidecar), three requests", POD_INIT3, {GPU: 1, INIT: 2},
     DEV_MAP_INIT,
     [("container-1-request-0", "init-con0", INIT), ("container-1-request-0", "sidecar-con1", INIT),
      ("container-2-request-0", "init-con2", INIT), ("container-3-request-0", "con0", GPU)]),
])
def test_create_requests_and_mappings_mappings(case: str, body: dict[str, Any], resources: dict[str, int],
                                               classes: dict[str, str], want: list[tuple[str, str, str]]) -> None:
    _, mappings = requests_and_mappings(parse_pod(body), served(resources, classes))
    got = sorted((m["requestName"], m["containerName"], m["resourceName"]) for m in mappings)
    assert got == want, case
