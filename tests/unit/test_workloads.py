"""WorkloadSelectors: kube-scheduler's DefaultSelector (helper/spread.go) over the watched Services,
ReplicationControllers, ReplicaSets and StatefulSets; and how the source and the handlers feed it."""

from __future__ import annotations

from typing import Any

import pytest

from metrics_sched.model.selectors import EVERYTHING, LabelSelector, Requirement
from metrics_sched.ports import ApiKind, EventType, KubeObject, WorkloadKind
from metrics_sched.scheduler.event_handlers import REPLICA_SETS, SERVICES
from metrics_sched.state.workloads import WorkloadSelectors, parse_group_version
from tests.schedulers import make_scheduler
from tests.watched import default_resources

pytestmark = pytest.mark.unit


def meta(name: str, namespace: str) -> dict[str, Any]:
    return {"name": name, "namespace": namespace, "uid": f"uid-{namespace}-{name}"}


def service(name: str, selector: dict[str, str] | None, namespace: str = "ns") -> dict[str, Any]:
    spec: dict[str, Any] = {"ports": [{"port": 80}]}
    if selector is not None:
        spec["selector"] = selector
    return {"apiVersion": "v1", "kind": "Service", "metadata": meta(name, namespace), "spec": spec}


def rc(name: str, selector: dict[str, str] | None, namespace: str = "ns") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ReplicationController", "metadata": meta(name, namespace),
            "spec": {"selector": selector}}


def labelled_set(kind: str, name: str, selector: Any, namespace: str = "ns") -> dict[str, Any]:
    return {"apiVersion": "apps/v1", "kind": kind, "metadata": meta(name, namespace), "spec": {"selector": selector}}


def pod(labels: dict[str, str], *owners: dict[str, Any], namespace: str = "ns") -> dict[str, Any]:
    return {"metadata": {"name": "p", "namespace": namespace, "labels": labels, "ownerReferences": list(owners)}}


def owner(kind: str, name: str, api_version: str = "apps/v1", *, controller: bool | None = True) -> dict[str, Any]:
    ref: dict[str, Any] = {"apiVersion": api_version, "kind": kind, "name": name, "uid": f"uid-{name}"}
    if controller is not None:
        ref["controller"] = controller
    return ref


def eq(**pairs: str) -> LabelSelector:
    return LabelSelector.from_set(pairs)


WEB = {"app": "web", "tier": "front", "pod-template-hash": "abc"}


@pytest.fixture
def ws() -> WorkloadSelectors:
    return WorkloadSelectors()


def test_nothing_applies_is_everything(ws: WorkloadSelectors) -> None:
    assert ws.default_selector(pod(WEB)) == EVERYTHING
    assert ws.default_selector(pod(WEB)).empty
    assert ws.default_selector({}).empty


def test_the_selectors_of_the_services_that_select_the_pod_are_merged(ws: WorkloadSelectors) -> None:
    ws.upsert("services", service("web", {"app": "web"}))
    ws.upsert("services", service("front", {"tier": "front"}))
    ws.upsert("services", service("both", {"app": "web", "tier": "front"}))
    ws.upsert("services", service("other", {"app": "db"}))  # does not select the pod
    ws.upsert("services", service("partial", {"app": "web", "zone": "a"}))  # needs a label the pod lacks
    ws.upsert("services", service("headless", None))  # nil selector: matches nothing (GetPodServices)
    ws.upsert("services", service("empty", {}))
    assert ws.default_selector(pod(WEB)) == eq(app="web", tier="front")
    assert ws.default_selector(pod({"app": "db"})) == eq(app="db")
    assert ws.default_selector(pod({})) == EVERYTHING


def test_a_services_selector_change_and_removal(ws: WorkloadSelectors) -> None:
    assert ws.upsert("services", service("web", {"app": "web"})) is True
    assert ws.upsert("services", service("web", {"app": "web"})) is False
    assert ws.upsert("services", service("web", {"tier": "front"})) is True
    assert ws.default_selector(pod(WEB)) == eq(tier="front")
    assert ws.upsert("services", service("web", None)) is True  # the selector removed: the entry goes
    assert ws.default_selector(pod(WEB)) == EVERYTHING and len(ws) == 0
    ws.upsert("services", service("web", {"app": "web"}))
    assert ws.remove("services", service("web", {"app": "web"})) is True
    assert ws.remove("services", service("web", None)) is False
    assert ws.default_selector(pod(WEB)) == EVERYTHING


def test_a_replica_set_controller_adds_its_selectors_requirements(ws: WorkloadSelectors) -> None:
    ws.upsert("services", service("web", {"app": "web"}))
    ws.upsert("replicasets", labelled_set("ReplicaSet", "web-abc", {
        "matchLabels": {"app": "web", "pod-template-hash": "abc"},
        "matchExpressions": [{"key": "tier", "operator": "In", "values": ["front", "edge"]},
                             {"key": "canary", "operator": "DoesNotExist"}]}))
    found = ws.default_selector(pod(WEB, owner("ReplicaSet", "web-abc")))
    assert found == LabelSelector((Requirement("app", "In", ("web",)), Requirement("canary", "DoesNotExist"),
                                   Requirement("pod-template-hash", "In", ("abc",)),
                                   Requirement("tier", "In", ("edge", "front"))))
    assert found.matches(WEB) and not found.matches({**WEB, "canary": "1"})


def test_a_stateful_set_controller_adds_its_selectors_requirements(ws: WorkloadSelectors) -> None:
    ws.upsert("statefulsets", labelled_set("StatefulSet", "db", {"matchLabels": {"app": "db"}}))
    assert ws.default_selector(pod({"app": "db"}, owner("StatefulSet", "db"))) == eq(app="db")
    # A ReplicaSet of the same name is another object.
    assert ws.default_selector(pod({"app": "db"}, owner("ReplicaSet", "db"))) == EVERYTHING


def test_a_replication_controller_merges_its_selector_map(ws: WorkloadSelectors) -> None:
    ws.upsert("services", service("web", {"app": "web"}))
    ws.upsert("replicationcontrollers", rc("web-rc", {"app": "web", "tier": "front"}))
    assert ws.default_selector(pod(WEB, owner("ReplicationController", "web-rc", "v1"))) == eq(app="web",
                                                                                                tier="front")
    # labels.Merge: the RC's value wins over a Service's for the same key.
    ws.upsert("replicationcontrollers", rc("web-rc", {"app": "other"}))
    assert ws.default_selector(pod(WEB, owner("ReplicationController", "web-rc", "v1"))) == eq(app="other")
    # A nil selector merges nothing: the Services' selector stays.
    ws.upsert("replicationcontrollers", rc("web-rc", None))
    assert ws.default_selector(pod(WEB, owner("ReplicationController", "web-rc", "v1"))) == eq(app="web")


def test_only_the_controller_owner_with_the_exact_group_version_kind_counts(ws: WorkloadSelectors) -> None:
    ws.upsert("replicasets", labelled_set("ReplicaSet", "rs", {"matchLabels": {"app": "web"}}))
    ws.upsert("statefulsets", labelled_set("StatefulSet", "ss", {"matchLabels": {"tier": "front"}}))
    ws.upsert("replicationcontrollers", rc("rc", {"app": "web"}))
    assert ws.default_selector(pod(WEB, owner("ReplicaSet", "rs", controller=False))) == EVERYTHING
    assert ws.default_selector(pod(WEB, owner("ReplicaSet", "rs", controller=None))) == EVERYTHING
    # The first controller reference decides, even if a later one would match something.
    assert ws.default_selector(pod(WEB, owner("ReplicaSet", "rs", controller=False),
                                   owner("StatefulSet", "ss"), owner("ReplicaSet", "rs"))) == eq(tier="front")
    for api_version, kind, name in [
        ("extensions/v1beta1", "ReplicaSet", "rs"), ("apps/v1beta2", "ReplicaSet", "rs"),
        ("apps/v1", "ReplicationController", "rc"), ("core/v1", "ReplicationController", "rc"),
        ("v1", "ReplicaSet", "rs"), ("apps/v1/x", "ReplicaSet", "rs"), ("apps/v1", "Deployment", "rs"),
        ("", "ReplicaSet", "rs"),
    ]:
        assert ws.default_selector(pod(WEB, owner(kind, name, api_version))) == EVERYTHING, (api_version, kind)
    # schema.ParseGroupVersion reads "/v1" as the core group.
    assert ws.default_selector(pod(WEB, owner("ReplicationController", "rc", "/v1"))) == eq(app="web")
    assert ws.default_selector(pod(WEB, owner("ReplicaSet", "missing"))) == EVERYTHING


def test_parse_group_version_is_schemas() -> None:
    assert parse_group_version("v1") == ("", "v1")
    assert parse_group_version("apps/v1") == ("apps", "v1")
    assert parse_group_version("") == ("", "")
    assert parse_group_version("/") == ("", "")
    assert parse_group_version("/v1") == ("", "v1")
    assert parse_group_version("a/b/c") is None


def test_selectors_of_another_namespace_are_ignored(ws: WorkloadSelectors) -> None:
    ws.upsert("services", service("web", {"app": "web"}, namespace="other"))
    ws.upsert("replicasets", labelled_set("ReplicaSet", "rs", {"matchLabels": {"app": "web"}}, namespace="other"))
    ws.upsert("replicationcontrollers", rc("rc", {"app": "web"}, namespace="other"))
    assert ws.default_selector(pod(WEB, owner("ReplicaSet", "rs"))) == EVERYTHING
    assert ws.default_selector(pod(WEB, owner("ReplicationController", "rc", "v1"))) == EVERYTHING
    assert ws.default_selector(pod(WEB, owner("ReplicaSet", "rs"), namespace="other")) == eq(app="web")


@pytest.mark.parametrize("selector", [
    None,  # nil: labels.Nothing() has no requirements to add
    {},  # empty: Everything, nothing to add
    {"matchExpressions": [{"key": "app", "operator": "Bogus", "values": ["x"]}]},
    {"matchExpressions": [{"key": "app", "operator": "In"}]},
    {"matchExpressions": [{"key": "app", "operator": "Exists", "values": ["x"]}]},
    {"matchExpressions": ["not a mapping"]},
    "not a mapping",
])
def test_a_set_selector_that_does_not_parse_or_selects_nothing_is_ignored(ws: WorkloadSelectors, selector: Any) -> None:
    ws.upsert("services", service("web", {"app": "web"}))
    ws.upsert("replicasets", labelled_set("ReplicaSet", "rs", selector))
    ws.upsert("statefulsets", labelled_set("StatefulSet", "ss", selector))
    assert ws.default_selector(pod(WEB, owner("ReplicaSet", "rs"))) == eq(app="web")
    assert ws.default_selector(pod(WEB, owner("StatefulSet", "ss"))) == eq(app="web")
    assert len(ws) == 1  # only the Service is kept


def test_a_replica_set_whose_selector_becomes_unusable_is_dropped(ws: WorkloadSelectors) -> None:
    assert ws.upsert("replicasets", labelled_set("ReplicaSet", "rs", {"matchLabels": {"app": "web"}})) is True
    assert ws.upsert("replicasets", labelled_set("ReplicaSet", "rs", {"matchLabels": {"app": "web"}})) is False
    assert ws.upsert("replicasets", labelled_set("ReplicaSet", "rs", {"matchExpressions": [{"operator": "?"}]}))
    assert ws.default_selector(pod(WEB, owner("ReplicaSet", "rs"))) == EVERYTHING and len(ws) == 0


def test_removal_frees_memory(ws: WorkloadSelectors) -> None:
    objects: list[tuple[WorkloadKind, dict[str, Any]]] = []
    for n in range(20):
        namespace = f"ns{n}"
        objects += [("services", service(f"s{n}", {"app": "web"}, namespace)),
                    ("replicationcontrollers", rc(f"rc{n}", {"app": "web"}, namespace)),
                    ("replicasets", labelled_set("ReplicaSet", f"rs{n}", {"matchLabels": {"app": "web"}}, namespace)),
                    ("statefulsets", labelled_set("StatefulSet", f"ss{n}", {"matchLabels": {"a": "b"}}, namespace))]
    for kind, obj in objects:
        ws.upsert(kind, obj)
    assert len(ws) == 80 and len(ws.namespaces()) == 20
    for kind, obj in objects:
        assert ws.remove(kind, obj) is True
    assert len(ws) == 0 and ws.namespaces() == frozenset()
    # No empty per-namespace tables are left behind.
    assert all(not table for table in (*ws._maps.values(), *ws._sets.values()))


def test_the_result_is_a_value_usable_as_an_index_key(ws: WorkloadSelectors) -> None:
    ws.upsert("services", service("web", {"app": "web"}))
    ws.upsert("replicasets", labelled_set("ReplicaSet", "rs", {"matchLabels": {"app": "web", "tier": "front"}}))
    first = ws.default_selector(pod(WEB, owner("ReplicaSet", "rs")))
    second = ws.default_selector(pod({**WEB, "pod-template-hash": "zzz"}, owner("ReplicaSet", "rs")))
    assert first == second and hash(first) == hash(second)
    assert first == eq(app="web", tier="front")


# -- the source's routing and the handlers -------------------------------------------------------------
class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, ...]] = []

    def on_node_event(self, kind: EventType, node: KubeObject) -> None:
        self.calls.append(("node", kind))

    def on_pod_event(self, kind: EventType, pod: KubeObject) -> None:
        self.calls.append(("pod", kind))

    def on_object_event(self, kind: ApiKind, event: EventType, obj: KubeObject) -> None:
        self.calls.append(("object", kind.name, event))

    def on_synced(self, resource: str) -> None:
        self.calls.append(("synced", resource))


def test_the_default_resources_route_to_their_sink_methods() -> None:
    resources = default_resources()
    by_name = {r.name: r for r in resources}
    assert {name: r.path for name, r in by_name.items()} == {
        "nodes": "/api/v1/nodes", "pods": "/api/v1/pods", "namespaces": "/api/v1/namespaces",
        "services": "/api/v1/services", "replicationcontrollers": "/api/v1/replicationcontrollers",
        "replicasets": "/apis/apps/v1/replicasets", "statefulsets": "/apis/apps/v1/statefulsets",
        "persistentvolumes": "/api/v1/persistentvolumes",
        "persistentvolumeclaims": "/api/v1/persistentvolumeclaims",
        "storageclasses": "/apis/storage.k8s.io/v1/storageclasses", "csinodes": "/apis/storage.k8s.io/v1/csinodes",
        "csidrivers": "/apis/storage.k8s.io/v1/csidrivers",
        "csistoragecapacities": "/apis/storage.k8s.io/v1/csistoragecapacities",
        "volumeattachments": "/apis/storage.k8s.io/v1/volumeattachments",
        "poddisruptionbudgets": "/apis/policy/v1/poddisruptionbudgets"}
    sink = Recorder()
    for resource in resources:
        resource.deliver(sink, "MODIFIED", {})
        resource.synced(sink)
    assert sink.calls == [
        ("node", "MODIFIED"), ("synced", "nodes"), ("pod", "MODIFIED"), ("synced", "pods"),
        *[c for kind in ("namespaces", "services", "replicationcontrollers", "replicasets", "statefulsets",
                         "persistentvolumes", "persistentvolumeclaims", "storageclasses", "csinodes", "csidrivers",
                         "csistoragecapacities", "volumeattachments", "poddisruptionbudgets")
          for c in (("object", kind, "MODIFIED"), ("synced", kind))],
    ]


def test_workload_events_reach_the_cluster_state() -> None:
    scheduler = make_scheduler()
    handlers, workloads = scheduler.handlers, scheduler.state.workloads
    rs = labelled_set("ReplicaSet", "rs", {"matchLabels": {"app": "web"}})
    handlers.on_object_event(SERVICES, "ADDED", service("front", {"tier": "front"}))
    handlers.on_object_event(REPLICA_SETS, "ADDED", rs)
    p = pod(WEB, owner("ReplicaSet", "rs"))
    assert workloads.default_selector(p) == eq(app="web", tier="front")
    handlers.on_object_event(REPLICA_SETS, "MODIFIED",
                               labelled_set("ReplicaSet", "rs", {"matchLabels": {"pod-template-hash": "abc"}}))
    assert workloads.default_selector(p) == eq(**{"pod-template-hash": "abc", "tier": "front"})
    handlers.on_object_event(REPLICA_SETS, "DELETED", rs)
    handlers.on_object_event(SERVICES, "DELETED", service("front", {"tier": "front"}))
    assert workloads.default_selector(p) == EVERYTHING and len(workloads) == 0
    assert scheduler.queue.lengths() == {"active": 0, "backoff": 0, "unschedulable": 0, "gated": 0}
