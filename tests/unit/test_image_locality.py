"""ImageLocality: the NodeTable's image index and kube-scheduler's image_locality_test.go numbers."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from metrics_sched.framework import CycleState, Handle
from metrics_sched.model.podinfo import parse_pod
from metrics_sched.plugins.image_locality.plugin import ImageLocality, normalized_image_name, pod_images
from metrics_sched.state.cluster_state import ClusterState
from metrics_sched.state.node_table import NodeImage, NodeTable, parse_node
from metrics_sched.telemetry.cache import MetricCache
from metrics_sched.telemetry.ledger import InFlightLedgerStore
from tests.unit.fakes import FakeAPI, node, pod
from tests.unit.test_scheduler import make

pytestmark = pytest.mark.unit

MB = 1024 * 1024


def imaged(name: str, *images: tuple[list[str], int]) -> dict[str, Any]:
    body = node(name)
    body["status"]["images"] = [{"names": names, "sizeBytes": size} for names, size in images]
    return body


# upstream's node403002000, node25010 and nodeWithNoImages
NODE_40_300_2000 = (
    (["gcr.io/40:latest", "gcr.io/40:v1", "gcr.io/40:v1"], 40 * MB),
    (["gcr.io/300:latest", "gcr.io/300:v1"], 300 * MB),
    (["gcr.io/2000:latest"], 2000 * MB),
)
NODE_250_10 = ((["gcr.io/250:latest"], 250 * MB), (["gcr.io/10:latest", "gcr.io/10:v1"], 10 * MB))


def with_images(name: str, *images: str, init: tuple[str, ...] = ()) -> dict[str, Any]:
    body = pod(name)
    body["spec"]["containers"] = [{"name": f"c{i}", "image": image} for i, image in enumerate(images)]
    if init:
        body["spec"]["initContainers"] = [{"name": f"i{i}", "image": image} for i, image in enumerate(init)]
    return body


def scores(nodes: list[dict[str, Any]], incoming: dict[str, Any]) -> list[float]:
    state = ClusterState()
    for n in nodes:
        state.upsert_node(n)
    plugin = ImageLocality({}, Handle(state, MetricCache(), InFlightLedgerStore(), FakeAPI()))
    rows = np.array([state.table.index[n["metadata"]["name"]] for n in nodes], dtype=np.int64)
    return plugin.score(CycleState(), parse_pod(incoming), state.table, rows).tolist()


CASES = [
    # TestImageLocalityPriority (maxThreshold = 1000 MiB x the pod's number of images)
    ("two images spread on two nodes, prefer the larger image one",
     ["gcr.io/40", "gcr.io/250"], [NODE_40_300_2000, NODE_250_10], [0, 5]),  # 250M/2 -> 100*(125-23)/(2000-23)
    ("two images on one node, prefer this node",
     ["gcr.io/40", "gcr.io/300"], [NODE_40_300_2000, NODE_250_10], [7, 0]),  # (40M+300M)/2 = 170M
    ("if exceed limit, use limit",
     ["gcr.io/10", "gcr.io/2000"], [NODE_40_300_2000, NODE_250_10], [49, 0]),  # 2000M/2 = 1000M
    ("if exceed limit, use limit (with node which has no images present)",
     ["gcr.io/10", "gcr.io/2000"], [NODE_40_300_2000, NODE_250_10, ()], [32, 0, 0]),  # 2000M/3
]


@pytest.mark.parametrize(("name", "images", "node_images", "expected"), CASES, ids=[c[0] for c in CASES])
def test_upstream_cases(name: str, images: list[str], node_images: list[tuple[tuple[list[str], int], ...]],
                        expected: list[int]) -> None:
    nodes = [imaged(f"node{i + 1}", *held) for i, held in enumerate(node_images)]
    assert scores(nodes, with_images("p", *images)) == expected


def test_init_containers_count_and_a_repeated_image_counts_twice() -> None:
    nodes = [imaged("node1", *NODE_40_300_2000), imaged("node2", *NODE_250_10)]
    # init gcr.io/300 + containers gcr.io/300 twice: 3 x 150M over a 3000M max -> 100*(450-23)/(3000-23) = 14
    assert scores(nodes, with_images("p", "gcr.io/300", "gcr.io/300", init=("gcr.io/300:v1",))) == [14, 0]
    # no image known anywhere, and a pod without containers, score 0
    assert scores(nodes, with_images("q", "nginx")) == [0, 0]
    assert scores(nodes, with_images("r")) == [0, 0]


@pytest.mark.parametrize(("given", "normalized"), [
    ("root", "root:latest"),
    ("gcr.io:5000/root", "gcr.io:5000/root:latest"),
    ("root:tag", "root:tag"),
    ("root@sha256:" + "a" * 64, "root@sha256:" + "a" * 64),
])
def test_normalized_image_name(given: str, normalized: str) -> None:
    # TestNormalizedImageName: only the tag is added, the registry is not (nginx does not match docker.io/library/...)
    assert normalized_image_name(given) == normalized


def test_pod_images_include_image_volumes() -> None:
    body = with_images("p", "app:1", init=("init",))
    body["spec"]["volumes"] = [{"name": "data", "image": {"reference": "registry/data"}}, {"name": "tmp"}]
    assert pod_images(body) == ["init:latest", "app:1", "registry/data:latest"]


def test_image_index_follows_node_changes() -> None:
    table = NodeTable(capacity=2)
    a = table.upsert(parse_node(imaged("a", (["x:1", "x:latest"], 100), (["y:1"], 5))))[0]
    b = table.upsert(parse_node(imaged("b", (["x:1"], 999))))[0]
    assert parse_node(imaged("a", (["x:1"], 100))).images == (NodeImage(("x:1",), 100),)
    # the size is the first reporter's (upstream's cache keeps ImageStateSummary.Size from the first node)
    assert table.images["x:1"].size == 100 and sorted(table.images["x:1"].row_array()) == [a, b]
    # a node update replaces its names; a name no node has any more is dropped
    table.upsert(parse_node(imaged("a", (["z:1"], 7))))
    assert set(table.images) == {"x:1", "z:1"} and table.images["x:1"].row_array().tolist() == [b]
    table.upsert(parse_node(imaged("c", (["z:1"], 8))))  # grows the table past its capacity
    assert len(table.images["z:1"].rows) == 2 and table.images["z:1"].size == 7
    table.remove("a")
    assert table.images["z:1"].size == 7 and len(table.images["z:1"].rows) == 1
    table.remove("b")
    assert "x:1" not in table.images
    # only the first node with a name sets its size; once it is gone from every node, a new one resets it
    table.upsert(parse_node(imaged("d", (["x:1"], 3))))
    assert table.images["x:1"].size == 3


def test_default_profile_scores_with_image_locality() -> None:
    scheduler, _ = make()
    scheduler.handlers.on_node_event("ADDED", imaged("n0", (["registry/big:1"], 900 * MB)))
    scheduler.handlers.on_node_event("ADDED", imaged("n1"))
    framework = scheduler.frameworks["metrics-sched"]
    result = framework.schedule(parse_pod(with_images("p", "registry/big:1")), scheduler.state.table)
    [term] = [t for t in result.terms if t.plugin == "ImageLocality"]
    by_node = dict(zip(scheduler.state.table.names_of(result.feasible_rows), term.raw.tolist(), strict=True))
    assert by_node == {"n0": 43, "n1": 0}  # 900M/2 = 450M -> 100*(450-23)/(1000-23)
