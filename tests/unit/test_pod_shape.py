"""PodShapes: the pods of one spec share what they hold and carry (ClusterState.record_of), and every shape, shared
or not, is what reading the pod itself gives."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from metrics_sched.model.podinfo import parse_pod
from metrics_sched.state.cluster_state import ClusterState
from metrics_sched.state.pod_shape import MAX_SHAPES, PodShape, PodShapes, read_shape
from tests.unit.fakes import node, pod

pytestmark = pytest.mark.unit


def _same(a: PodShape, b: PodShape) -> bool:
    return (np.array_equal(a.vector, b.vector) and a.nonzero == b.nonzero and a.host_ports == b.host_ports
            and a.affinity == b.affinity and a.resources == b.resources)


def _replica(name: str, **kw: Any) -> dict[str, Any]:
    return pod(name, cpu="250m", memory="1Gi", containers=[{
        "name": "c", "resources": {"requests": {"cpu": "250m", "memory": "1Gi"}},
        "ports": [{"containerPort": 80, "hostPort": 8080}]}], **kw)


def test_the_pods_of_one_spec_share_one_shape_equal_to_reading_each() -> None:
    state = ClusterState()
    state.upsert_node(node("n1"))
    first, second = parse_pod(_replica("web-1")), parse_pod(_replica("web-2"))
    a, b = state.shapes.of(first), state.shapes.of(second)
    assert a is b
    assert _same(a, read_shape(second, state.table))
    assert a.host_ports == (("0.0.0.0", "TCP", 8080),)
    with pytest.raises(ValueError):  # shared by records: never changed in place
        a.vector[0] += 1
    records = [state.assume(first, "n1"), state.assume(second, "n1")]
    assert records[0].vector is records[1].vector
    assert int(state.table.requested[0, state.table.resource_index["cpu"]]) == 500


def test_another_spec_gets_its_own_shape() -> None:
    state = ClusterState()
    shapes = state.shapes
    small = shapes.of(parse_pod(pod("a", cpu="100m")))
    large = shapes.of(parse_pod(pod("b", cpu="2")))
    assert small is not large
    assert int(large.vector[state.table.resource_index["cpu"]]) == 2000


def test_a_pod_whose_status_speaks_of_resources_is_read_itself() -> None:
    """A container status (what the kubelet allocated or applied) or an infeasible resize may change what a pod
    holds beyond its spec: such a pod's shape is its own, never one kept for its spec."""
    state = ClusterState()
    shapes = state.shapes
    pending = shapes.of(parse_pod(_replica("web-1")))
    running = _replica("web-2")
    running["status"]["containerStatuses"] = [{"name": "c", "allocatedResources": {"cpu": "500m", "memory": "1Gi"},
                                               "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}]
    resized = shapes.of(parse_pod(running))
    assert resized is not pending
    assert int(resized.vector[state.table.resource_index["cpu"]]) == 500
    assert _same(resized, read_shape(parse_pod(running), state.table))
    infeasible = _replica("web-3")
    infeasible["status"]["conditions"] = [{"type": "PodResizePending", "status": "True", "reason": "Infeasible"}]
    assert shapes.of(parse_pod(infeasible)) is not pending


def test_a_new_resource_column_keys_a_new_shape() -> None:
    """A vector is as long as the table's resource columns when it was made: a pod read after a column was added
    gets a vector of the new length."""
    table_state = ClusterState()
    shapes = table_state.shapes
    before = shapes.of(parse_pod(pod("a")))
    table_state.table.resource_column("example.com/fpga")
    after = shapes.of(parse_pod(pod("b")))
    assert after is not before
    assert after.vector.shape[0] == len(table_state.table.resources) == before.vector.shape[0] + 1


def test_shapes_kept_are_bounded() -> None:
    state = ClusterState()
    shapes = PodShapes(state.table)
    for i in range(MAX_SHAPES + 10):
        shapes.of(parse_pod(pod(f"p{i}", cpu=f"{i + 1}m")))
    assert len(shapes._kept) == MAX_SHAPES


def test_inter_pod_terms_are_read_with_the_pods_namespace_and_labels() -> None:
    """A term without namespaces selects in the pod's own namespace, and matchLabelKeys takes the pod's label values:
    pods of one spec in other namespaces or with other labels carry other terms."""
    state = ClusterState()
    term = {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "kubernetes.io/hostname",
            "matchLabelKeys": ["tier"]}
    affinity = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}

    def shaped(name: str, namespace: str, tier: str) -> PodShape:
        body = pod(name, namespace=namespace, affinity=affinity)
        body["metadata"]["labels"] = {"app": "db", "tier": tier}
        info = parse_pod(body)
        shape = state.shapes.of(info)
        assert shape.affinity == read_shape(info, state.table).affinity
        return shape

    first = shaped("a", "team-a", "gold")
    assert shaped("b", "team-a", "gold") is first
    assert shaped("c", "team-b", "gold").affinity != first.affinity
    assert shaped("d", "team-a", "silver").affinity != first.affinity
