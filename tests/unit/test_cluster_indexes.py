"""Cluster indexes: a plugin declares the indexes it reads, the scheduler builds one of each, feeds it the events of
the kinds it declares and watches exactly those kinds (with nodes and pods, and what the cluster state keeps)."""

from __future__ import annotations

from typing import Any

import pytest

from metrics_sched.config import parse_config
from metrics_sched.framework import ApiKind, ClusterIndex, ClusterIndexes, EventType, IndexChange, KubeObject
from metrics_sched.plugins import in_tree_registry
from metrics_sched.plugins.coscheduling.pod_groups import PodGroupStore
from metrics_sched.plugins.default_preemption.disruption_budgets import BUDGETS, DisruptionBudgets
from metrics_sched.plugins.volumes import STORAGE_KINDS, VolumeStore
from metrics_sched.scheduler import Scheduler
from tests.unit.fakes import FakeAPI
from tests.watched import resources_of

pytestmark = pytest.mark.unit

VOLUME_PLUGINS = ("VolumeBinding", "VolumeZone", "VolumeRestrictions", "NodeVolumeLimits")


def scheduler(config: dict[str, Any] | None = None) -> Scheduler:
    registry = in_tree_registry(third_party=False)
    return Scheduler(parse_config(config or {}, registry.catalog()), registry.plugins, FakeAPI())


def watched_paths(s: Scheduler) -> set[str]:
    return {r.path for r in resources_of(s)}


def test_a_profile_without_the_volume_plugins_does_not_watch_storage() -> None:
    disabled = [{"name": name} for name in VOLUME_PLUGINS]
    without = scheduler({"profiles": [{"plugins": {"multiPoint": {"disabled": disabled}}}]})
    paths = watched_paths(without)
    assert "/api/v1/persistentvolumes" not in paths and not {k.path for k in STORAGE_KINDS} & paths
    assert {"/api/v1/nodes", "/api/v1/pods", "/apis/policy/v1/poddisruptionbudgets"} <= paths
    assert without.indexes.find(VolumeStore) is None
    assert "persistentvolumes" not in without.handlers.awaited  # readiness waits only for what is watched
    # The default profile does.
    assert {k.path for k in STORAGE_KINDS} <= watched_paths(scheduler())


def test_one_instance_per_index_shared_by_every_plugin_and_profile() -> None:
    s = scheduler({"profiles": [{"schedulerName": "a"}, {"schedulerName": "b"}]})
    store = s.indexes.get(VolumeStore)
    plugins = [f.instances[name] for f in s.frameworks.values() for name in VOLUME_PLUGINS]
    assert len(plugins) == 8 and all(p.handle.index(VolumeStore) is store for p in plugins)
    assert isinstance(s.indexes.get(DisruptionBudgets), DisruptionBudgets)
    assert s.frameworks["a"].instances["Coscheduling"].handle.index(PodGroupStore) is s.indexes.get(PodGroupStore)
    with pytest.raises(LookupError, match="Seen"):  # no enabled plugin declares it
        s.frameworks["a"].instances["VolumeBinding"].handle.index(Seen)
    # The PodGroups are watched where served, and not awaited: a member waits for its group, not the scheduler.
    groups = [kind for kind in s.handlers.kinds if kind.resource == "podgroups"]
    assert len(groups) == 3 and all(kind.optional for kind in groups)
    assert not {kind.name for kind in groups} & s.handlers.awaited


def test_events_reach_the_index_of_their_kind_and_its_answer_moves_parked_pods() -> None:
    s = scheduler()
    s.handlers.on_object_event(BUDGETS, "ADDED", {"metadata": {"name": "b", "namespace": "ns"},
                                                  "spec": {"selector": {"matchLabels": {"a": "b"}}}})
    assert len(s.indexes.get(DisruptionBudgets)) == 1
    moves: list[tuple[object, object]] = []
    s.queue.move_all = lambda event, detail=None, *, besides=None: moves.append((event, detail)) or 0  # type: ignore[method-assign]
    pv = next(k for k in STORAGE_KINDS if k.resource == "persistentvolumes")
    s.handlers.on_object_event(pv, "ADDED", {"metadata": {"name": "pv1", "resourceVersion": "1"}, "spec": {}})
    assert [str(event) for event, _ in moves] == ["PersistentVolumeChange"]
    assert s.indexes.get(VolumeStore).watched_volume("pv1") is not None


class Seen(ClusterIndex):
    kinds = (ApiKind("example.com/v1", "widgets"),)

    def __init__(self) -> None:
        self.events: list[tuple[str, EventType]] = []
        self.synced: list[str] = []

    def on_event(self, kind: ApiKind, event: EventType, obj: KubeObject) -> IndexChange | None:
        self.events.append((kind.name, event))
        return None

    def on_synced(self, kind: ApiKind) -> None:
        self.synced.append(kind.name)


def test_the_registry_builds_each_class_once_and_refuses_a_kind_declared_otherwise() -> None:
    indexes = ClusterIndexes()
    seen = indexes.declare(Seen)
    assert indexes.declare(Seen) is seen and indexes.get(Seen) is seen and indexes.kinds == Seen.kinds
    assert indexes.routes("widgets") == (seen,) and indexes.pod_observers == ()

    class Clash(ClusterIndex):
        kinds = (ApiKind("example.com/v2", "widgets"),)

    class Core(ClusterIndex):
        kinds = (ApiKind("v1", "pods"),)

    for cls in (Clash, Core):
        with pytest.raises(ValueError, match="declared otherwise"):
            indexes.declare(cls)
    assert indexes.find(Clash) is None
    assert ApiKind("v1", "persistentvolumes").path == "/api/v1/persistentvolumes"
    assert ApiKind("policy/v1", "poddisruptionbudgets").path == "/apis/policy/v1/poddisruptionbudgets"
