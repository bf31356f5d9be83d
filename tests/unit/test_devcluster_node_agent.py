"""The node agent's kubelet part: extended resources of a KWOK node's capacity become its allocatable."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from devcluster.cluster import without_stage
from devcluster.node_agent import allocatable_patch, is_extended_resource, pod_deletion
from devcluster.nodes import NodeSpec

pytestmark = pytest.mark.unit


def kwok_node(capacity: dict[str, str], allocatable: dict[str, str]) -> dict[str, Any]:
    node = NodeSpec(name="n1", internal_ip="10.240.0.1").manifest()
    node["status"]["capacity"] = capacity
    node["status"]["allocatable"] = allocatable
    return node


@pytest.mark.parametrize(("name", "extended"), [
    ("example.com/beardsecond", True),
    ("nvidia.com/gpu", True),
    ("cpu", False),
    ("hugepages-2Mi", False),
    ("kubernetes.io/something", False),
    ("attachable-volumes.node.kubernetes.io/x", False),
    ("requests.example.com/foo", False),
])
def test_extended_resource_names_as_upstream(name: str, extended: bool) -> None:
    assert is_extended_resource(name) is extended


def test_an_extended_resource_added_to_capacity_is_copied_to_allocatable() -> None:
    # What the pod-overhead spec does: UpdateStatus with a new capacity entry, allocatable untouched.
    node = kwok_node({"cpu": "32", "example.com/beardsecond": "1000"}, {"cpu": "31"})
    assert allocatable_patch(node) == {"status": {"allocatable": {"example.com/beardsecond": "1000"}}}


def test_a_changed_value_is_copied_and_native_resources_are_left_alone() -> None:
    node = kwok_node({"cpu": "32", "memory": "1Gi", "example.com/foo": "5"},
                     {"cpu": "30", "memory": "512Mi", "example.com/foo": "3"})
    assert allocatable_patch(node) == {"status": {"allocatable": {"example.com/foo": "5"}}}


def test_an_extended_resource_removed_from_capacity_leaves_allocatable() -> None:
    # The spec's AfterEach deletes it from capacity only; a merge patch's null removes the key.
    node = kwok_node({"cpu": "32"}, {"cpu": "32", "example.com/beardsecond": "1000"})
    assert allocatable_patch(node) == {"status": {"allocatable": {"example.com/beardsecond": None}}}


def test_a_node_already_in_step_needs_no_patch() -> None:
    node = kwok_node({"cpu": "32", "nvidia.com/gpu": "8"}, {"cpu": "32", "nvidia.com/gpu": "8"})
    assert allocatable_patch(node) is None


def test_a_node_with_a_kubelet_is_not_touched() -> None:
    node = kwok_node({"example.com/foo": "5"}, {})
    del node["metadata"]["annotations"]["kwok.x-k8s.io/node"]
    assert allocatable_patch(node) is None


def terminating_pod(node: str, uid: str = "uid-1") -> dict[str, Any]:
    return {"metadata": {"namespace": "ns", "name": "without-label", "uid": uid,
                         "deletionTimestamp": "2026-12-07T23:11:53Z"},
            "spec": {"nodeName": node}}


def test_a_terminating_pod_on_a_kwok_node_is_deleted_with_its_uid_as_precondition() -> None:
    # KWOK's own stage deletes by name: a pod created under the same name right after would be deleted instead.
    path, body = pod_deletion(terminating_pod("node-000"), {"node-000"}) or ("", {})
    assert path == "/api/v1/namespaces/ns/pods/without-label"
    assert body["preconditions"] == {"uid": "uid-1"} and body["gracePeriodSeconds"] == 0


def test_running_pods_and_pods_on_other_nodes_are_left_alone() -> None:
    running = terminating_pod("node-000")
    del running["metadata"]["deletionTimestamp"]
    assert pod_deletion(running, {"node-000"}) is None
    assert pod_deletion(terminating_pod("real-node"), {"node-000"}) is None
    unscheduled = terminating_pod("")
    assert pod_deletion(unscheduled, {"node-000"}) is None


def test_the_kwok_config_can_leave_out_the_pod_delete_stage() -> None:
    stages = ("kind: Stage\nmetadata:\n  name: pod-ready\n---\nkind: Stage\nmetadata:\n  name: pod-delete\n"
              "spec: {}\n---\nkind: Stage\nmetadata:\n  name: pod-complete\n")
    kept = without_stage(stages, "pod-delete")
    assert [doc["metadata"]["name"] for doc in yaml.safe_load_all(kept)] == ["pod-ready", "pod-complete"]
