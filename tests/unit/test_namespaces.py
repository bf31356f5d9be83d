"""NamespaceIndex (namespace labels for namespaceSelector) and how watch events reach it."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from metrics_sched.framework.events import ClusterEvent
from metrics_sched.model.selectors import EVERYTHING, NOTHING, LabelSelector
from metrics_sched.scheduler import Scheduler
from metrics_sched.scheduler.event_handlers import NAMESPACES, ClusterEventHandlers
from metrics_sched.state.cluster_state import ClusterState
from metrics_sched.state.namespaces import NamespaceIndex
from tests.schedulers import make_scheduler

pytestmark = pytest.mark.unit


def ns(name: str, **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "uid": f"uid-{name}", "labels": {"kubernetes.io/metadata.name": name,
                                                                         **labels}}}


def selector(**match_labels: str) -> LabelSelector:
    return LabelSelector.parse({"matchLabels": match_labels})


def test_upsert_reports_new_and_relabelled_namespaces_only() -> None:
    index = NamespaceIndex()
    assert index.upsert(ns("a", team="x")) is True
    generation = index.generation
    assert index.upsert(ns("a", team="x")) is False  # a status or annotation change: nothing to do
    assert index.generation == generation
    assert index.upsert(ns("a", team="y")) is True
    assert index.generation == generation + 1
    assert index.labels("a") == {"kubernetes.io/metadata.name": "a", "team": "y"}
    assert index.labels("missing") is None
    assert len(index) == 1 and "a" in index


def test_labels_are_a_read_only_copy() -> None:
    index = NamespaceIndex()
    obj = ns("a", team="x")
    index.upsert(obj)
    obj["metadata"]["labels"]["team"] = "changed"  # the watch's dict is not shared
    labels = index.labels("a")
    assert labels is not None and labels["team"] == "x"
    with pytest.raises(TypeError):
        labels["team"] = "y"  # type: ignore[index]


def test_a_namespace_without_labels_matches_only_everything() -> None:
    index = NamespaceIndex()
    index.upsert({"metadata": {"name": "bare"}})
    assert index.labels("bare") == {}
    assert index.matching(EVERYTHING) == {"bare"}
    assert index.matching(selector(team="x")) == frozenset()


def test_matching_follows_the_selector_semantics() -> None:
    index = NamespaceIndex()
    for name, team in (("a", "x"), ("b", "x"), ("c", "y")):
        index.upsert(ns(name, team=team))
    index.upsert(ns("d"))
    assert index.matching(selector(team="x")) == {"a", "b"}
    assert index.matching(EVERYTHING) == {"a", "b", "c", "d"}  # namespaceSelector: {} is every namespace
    assert index.matching(NOTHING) == frozenset()
    not_x = LabelSelector.parse({"matchExpressions": [{"key": "team", "operator": "NotIn", "values": ["x"]}]})
    assert index.matching(not_x) == {"c", "d"}
    has_team = LabelSelector.parse({"matchExpressions": [{"key": "team", "operator": "Exists"}]})
    assert index.matching(has_team) == {"a", "b", "c"}
    assert index.matching(selector(**{"kubernetes.io/metadata.name": "c"})) == {"c"}


def test_matching_is_cached_until_any_namespace_changes() -> None:
    index = NamespaceIndex()
    index.upsert(ns("a", team="x"))
    first = index.matching(selector(team="x"))
    assert index.matching(selector(team="x")) is first  # an equal selector hits the cache
    index.upsert(ns("b", team="x"))
    assert index.matching(selector(team="x")) == {"a", "b"}
    index.upsert(ns("a", team="y"))
    assert index.matching(selector(team="x")) == {"b"}
    index.remove("b")
    assert index.matching(selector(team="x")) == frozenset()
    index.remove("b")  # unknown: no change
    assert index.matching(selector(team="y")) == {"a"}


def test_the_cache_is_bounded() -> None:
    index = NamespaceIndex(cache_size=4)
    index.upsert(ns("a", team="t3"))
    for i in range(50):
        assert index.matching(selector(team=f"t{i}")) == ({"a"} if i == 3 else frozenset())
    assert len(index._cache) == 4
    # The most recently used stay.
    assert list(index._cache) == [selector(team=f"t{i}") for i in range(46, 50)]


def test_removal_frees_the_namespace() -> None:
    index = NamespaceIndex()
    for i in range(100):
        index.upsert(ns(f"n{i}"))
    for i in range(100):
        index.remove(f"n{i}")
    assert len(index) == 0 and index._labels == {}
    assert index.matching(EVERYTHING) == frozenset()


def test_concurrent_changes_and_lookups() -> None:
    index = NamespaceIndex()
    stop = threading.Event()
    errors: list[BaseException] = []

    def churn() -> None:
        i = 0
        while not stop.is_set():
            index.upsert(ns(f"n{i % 50}", team=str(i % 3)))
            if i % 7 == 0:
                index.remove(f"n{(i * 3) % 50}")
            i += 1

    def look() -> None:
        try:
            for i in range(2000):
                index.matching(selector(team=str(i % 3)))
                index.matching(EVERYTHING)
        except BaseException as exc:  # noqa: BLE001 - reported to the test thread
            errors.append(exc)

    writer = threading.Thread(target=churn)
    writer.start()
    readers = [threading.Thread(target=look) for _ in range(3)]
    for t in readers:
        t.start()
    for t in readers:
        t.join()
    stop.set()
    writer.join()
    assert not errors
    assert index.matching(EVERYTHING) == {f"n{i}" for i in range(50) if index.labels(f"n{i}") is not None}


# -- the handlers --------------------------------------------------------------------------------------
def make() -> Scheduler:
    return make_scheduler()


def test_namespace_events_reach_the_cluster_state() -> None:
    scheduler = make()
    handlers, namespaces = scheduler.handlers, scheduler.state.namespaces
    handlers.on_object_event(NAMESPACES, "ADDED", ns("a", team="x"))
    handlers.on_object_event(NAMESPACES, "ADDED", ns("b"))
    assert namespaces.matching(selector(team="x")) == {"a"}
    handlers.on_object_event(NAMESPACES, "MODIFIED", ns("b", team="x"))
    assert namespaces.matching(selector(team="x")) == {"a", "b"}
    handlers.on_object_event(NAMESPACES, "DELETED", ns("a", team="x"))
    assert namespaces.matching(selector(team="x")) == {"b"} and len(namespaces) == 1


class MoveRecorder:
    def __init__(self) -> None:
        self.moves: list[tuple[ClusterEvent, Any]] = []

    def move_all(self, event: ClusterEvent, detail: Any = None, *, besides: str | None = None) -> int:
        self.moves.append((event, detail))
        return 0


def test_a_new_or_relabelled_namespace_moves_parked_pods() -> None:
    queue = MoveRecorder()
    handlers = ClusterEventHandlers(ClusterState(), queue, frozenset({"metrics-sched"}))  # type: ignore[arg-type]
    handlers.on_object_event(NAMESPACES, "ADDED", ns("a"))
    handlers.on_object_event(NAMESPACES, "MODIFIED", {**ns("a"), "status": {"phase": "Active"}})  # labels unchanged
    handlers.on_object_event(NAMESPACES, "MODIFIED", ns("a", team="x"))
    handlers.on_object_event(NAMESPACES, "DELETED", ns("a", team="x"))
    assert queue.moves == [(ClusterEvent.NAMESPACE_LABELS, "a"), (ClusterEvent.NAMESPACE_LABELS, "a")]
    assert len(handlers.state.namespaces) == 0


def test_scheduling_waits_for_every_cache_namespaces_included() -> None:
    handlers = make().handlers
    storage = ("persistentvolumes", "persistentvolumeclaims", "storageclasses", "csinodes", "csidrivers",
               "csistoragecapacities", "volumeattachments")
    dra = ("resourceslices", "deviceclasses", "resourceclaims", "devicetaintrules")
    assert {"nodes", "pods", "namespaces", "services", "replicationcontrollers", "replicasets",
            "statefulsets", "poddisruptionbudgets", *storage, *dra} == handlers.awaited
    handlers.on_synced("nodes")
    handlers.on_synced("pods")
    assert not handlers.caches_synced()  # a namespaceSelector would see no namespace yet
    for resource in ("namespaces", "services", "replicationcontrollers", "replicasets", "poddisruptionbudgets",
                     *storage, *dra):
        handlers.on_synced(resource)
    assert not handlers.caches_synced()
    handlers.on_synced("statefulsets")
    assert handlers.caches_synced()
