"""adapters/kubernetes against the real kube-apiserver of the dev cluster.

Pods here name a scheduler that does not run, so nothing but these tests binds them. The apiserver
restart test comes last: it disturbs the shared cluster for a few seconds.
"""

from __future__ import annotations

import base64
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from adapters.kubernetes import (
    KubeClient,
    KubeClusterSource,
    KubeLeaseStore,
    KubePodWriter,
    ReflectorOptions,
    load,
    load_in_cluster,
)
from devcluster import DevCluster
from devcluster.kubeapi import KubeAPI
from metrics_sched.model.podinfo import parse_pod
from metrics_sched.model.selectors import EVERYTHING, LabelSelector
from metrics_sched.ports import (
    ApiError,
    ApiKind,
    EventSeries,
    EventType,
    KubeObject,
    LeaseRecord,
    SchedulingEvent,
)
from metrics_sched.scheduler.reporting import SERIES_FINISH, PodReporter
from tests.e2e import kube
from tests.schedulers import make_scheduler
from tests.watched import default_resources, resources_of

DEFAULT_RESOURCES = default_resources()  # what the default profile watches

SCHEDULER = "metrics-sched-e2e"


class StateSink:
    """Applies deliveries to a map and records any that break exactly-once (ADDED twice, DELETED unknown...)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.state: dict[tuple[str, str], KubeObject] = {}
        self.deleted_uids: set[str] = set()
        self.violations: list[str] = []
        self.counts: Counter[tuple[str, EventType]] = Counter()
        self.synced: Counter[str] = Counter()

    def _apply(self, resource: str, kind: EventType, obj: KubeObject) -> None:
        meta = obj["metadata"]
        key = (resource, f"{meta['namespace']}/{meta['name']}" if meta.get("namespace") else meta["name"])
        with self.lock:
            self.counts[(resource, kind)] += 1
            known = self.state.get(key)
            if kind == "ADDED" and (known is not None or meta["uid"] in self.deleted_uids):
                self.violations.append(f"ADDED twice: {key} {meta['uid']}")
            if kind != "ADDED" and (known is None or known["metadata"]["uid"] != meta["uid"]):
                self.violations.append(f"{kind} of an unknown object: {key} {meta['uid']}")
            if kind == "DELETED":
                self.state.pop(key, None)
                self.deleted_uids.add(meta["uid"])
            else:
                self.state[key] = obj

    def on_node_event(self, kind: EventType, node: KubeObject) -> None:
        self._apply("nodes", kind, node)

    def on_pod_event(self, kind: EventType, pod: KubeObject) -> None:
        self._apply("pods", kind, pod)

    def on_object_event(self, kind: ApiKind, event: EventType, obj: KubeObject) -> None:
        self._apply(kind.name, event, obj)

    def on_synced(self, resource: str) -> None:
        with self.lock:
            self.synced[resource] += 1

    def pods(self, namespace: str) -> dict[str, tuple[str, str]]:
        with self.lock:
            return {obj["metadata"]["name"]: (obj["metadata"]["uid"], obj["metadata"]["resourceVersion"])
                    for (resource, key), obj in self.state.items()
                    if resource == "pods" and key.startswith(f"{namespace}/")}

    def node_names(self) -> set[str]:
        with self.lock:
            return {key for resource, key in self.state if resource == "nodes"}

    def get(self, resource: str, key: str) -> KubeObject | None:
        with self.lock:
            return self.state.get((resource, key))


def api_pods(api: KubeAPI, namespace: str) -> dict[str, tuple[str, str]]:
    return {p["metadata"]["name"]: (p["metadata"]["uid"], p["metadata"]["resourceVersion"])
            for p in kube.list_pods(api, namespace)}


def create_pod(api: KubeAPI, namespace: str, name: str) -> dict[str, Any]:
    pod: dict[str, Any] = api.post(f"/api/v1/namespaces/{namespace}/pods", kube.pod_manifest(name, scheduler=SCHEDULER))
    return pod


def delete_pod(api: KubeAPI, namespace: str, name: str) -> None:
    api.request("DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}", params={"gracePeriodSeconds": "0"})


@pytest.fixture
def client(cluster: DevCluster) -> Iterator[KubeClient]:
    with KubeClient(load(cluster.kubeconfig), max_connections=8) as kube_client:
        yield kube_client


@pytest.fixture
def source(client: KubeClient) -> Iterator[tuple[KubeClusterSource, StateSink]]:
    # A short read timeout so a dead connection after the apiserver restart is noticed within seconds.
    src = KubeClusterSource(client, resources=DEFAULT_RESOURCES, options=ReflectorOptions(read_timeout=10.0))
    sink = StateSink()
    src.start(sink)
    try:
        assert src.wait_synced(30), "the initial lists did not complete"
        yield src, sink
    finally:
        src.stop()


def test_source_delivers_all_nodes_and_pods_then_live_changes(
    api: KubeAPI, namespace: str, client: KubeClient
) -> None:
    for i in range(5):
        create_pod(api, namespace, f"pre-{i}")
    src = KubeClusterSource(client, resources=DEFAULT_RESOURCES)
    sink = StateSink()
    src.start(sink)
    try:
        assert src.wait_synced(30)
        assert sink.synced == {resource.name: 1 for resource in DEFAULT_RESOURCES}
        assert sink.node_names() == {n["metadata"]["name"] for n in api.get("/api/v1/nodes")["items"]}
        assert sink.pods(namespace) == api_pods(api, namespace)

        create_pod(api, namespace, "live")
        api.merge_patch(f"/api/v1/namespaces/{namespace}/pods/pre-0", {"metadata": {"labels": {"seen": "yes"}}})
        delete_pod(api, namespace, "pre-1")
        kube.poll(lambda: sink.pods(namespace) == api_pods(api, namespace), 15, "the live changes in the sink")
        pre0 = sink.get("pods", f"{namespace}/pre-0")
        assert pre0 is not None and pre0["metadata"]["labels"]["seen"] == "yes"
        assert "managedFields" not in pre0["metadata"]
        assert not sink.violations
        stats = src.stats()
        assert stats["pods"].lists == 1 and stats["pods"].relists == 0 and stats["pods"].events >= 8
        # Both watches are open and mostly silent: stop must not wait for a read timeout.
        started = time.monotonic()
        src.stop()
        assert time.monotonic() - started < 2.0
        assert not [t.name for t in threading.enumerate() if t.name.startswith("reflector-")]
    finally:
        src.stop()


def test_bind_sets_node_name_and_a_second_bind_conflicts(
    cluster: DevCluster, api: KubeAPI, namespace: str, client: KubeClient
) -> None:
    writer = KubePodWriter(client)
    pod = create_pod(api, namespace, "bind-me")
    node = cluster.nodes[0].name
    writer.bind(namespace, "bind-me", pod["metadata"]["uid"], node)
    bound = writer.get_pod(namespace, "bind-me")
    assert bound is not None and bound["spec"]["nodeName"] == node
    with pytest.raises(ApiError) as info:
        writer.bind(namespace, "bind-me", pod["metadata"]["uid"], cluster.nodes[1].name)
    assert info.value.status == 409 and info.value.conflict
    assert writer.get_pod(namespace, "gone") is None


def test_bind_with_a_stale_uid_is_refused(cluster: DevCluster, api: KubeAPI, namespace: str,
                                          client: KubeClient) -> None:
    writer = KubePodWriter(client)
    old = create_pod(api, namespace, "recreated")
    delete_pod(api, namespace, "recreated")
    kube.poll(lambda: writer.get_pod(namespace, "recreated") is None, 10, "the deletion")
    new = create_pod(api, namespace, "recreated")
    with pytest.raises(ApiError) as info:
        writer.bind(namespace, "recreated", old["metadata"]["uid"], cluster.nodes[0].name)
    assert info.value.status == 409, info.value
    current = writer.get_pod(namespace, "recreated")
    assert current is not None and current["metadata"]["uid"] == new["metadata"]["uid"]
    assert not current["spec"].get("nodeName")


def test_event_and_condition_are_visible_on_the_pod(api: KubeAPI, namespace: str, client: KubeClient) -> None:
    writer = KubePodWriter(client)
    pod = create_pod(api, namespace, "unschedulable")
    uid = pod["metadata"]["uid"]
    message = "0/50 nodes are available: 50 GPU temperature above 85C."
    writer.set_pod_scheduled_condition(namespace, "unschedulable", status="False", reason="Unschedulable",
                                       message=message)
    writer.record_event(SchedulingEvent(
        namespace=namespace, pod_name="unschedulable", pod_uid=uid, type="Warning", reason="FailedScheduling",
        action="Scheduling", note=message + " " + "x" * 2000, reporting_controller="metrics-sched",
        reporting_instance="metrics-sched-e2e-0"))

    current = writer.get_pod(namespace, "unschedulable")
    assert current is not None
    condition = next(c for c in current["status"]["conditions"] if c["type"] == "PodScheduled")
    assert (condition["status"], condition["reason"], condition["message"]) == ("False", "Unschedulable", message)

    events = api.get(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")["items"]
    assert len(events) == 1
    event = events[0]
    assert event["metadata"]["name"].startswith("unschedulable.")
    assert event["regarding"]["uid"] == uid and event["reason"] == "FailedScheduling"
    assert event["note"].startswith(message) and len(event["note"].encode()) <= 1024
    # What `kubectl describe pod` reads: the core/v1 view of the same event.
    core = api.get(f"/api/v1/namespaces/{namespace}/events")["items"]
    assert [(e["involvedObject"]["name"], e["type"]) for e in core] == [("unschedulable", "Warning")]


def pod_scheduled(writer: KubePodWriter, namespace: str, name: str) -> dict[str, Any]:
    pod = writer.get_pod(namespace, name)
    assert pod is not None
    condition: dict[str, Any] = next(c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled")
    return condition


def test_a_verdict_that_lands_after_the_bind_is_refused(
    cluster: DevCluster, api: KubeAPI, namespace: str, client: KubeClient
) -> None:
    writer = KubePodWriter(client)
    attempt = parse_pod(create_pod(api, namespace, "late"))  # the pod as a failed attempt saw it
    with pytest.raises(ApiError) as info:  # the precondition itself: any change to the pod refuses the patch
        writer.set_pod_scheduled_condition(namespace, "late", status="False", reason="Unschedulable", message="m",
                                           resource_version="1")
    assert info.value.conflict, info.value

    writer.bind(namespace, "late", attempt.uid, cluster.nodes[0].name)
    assert pod_scheduled(writer, namespace, "late")["status"] == "True"  # the binding sets it
    reporter = PodReporter(writer, "metrics-sched", instance="metrics-sched-e2e-0", workers=1)
    try:
        reporter.failed(attempt, "0/50 nodes are available.", reason="Unschedulable")
        assert reporter.wait_idle(10)
        stats = reporter.stats()
        assert (stats.conflicts, stats.stale_dropped, stats.conditions_written) == (1, 1, 0), stats
        assert pod_scheduled(writer, namespace, "late")["status"] == "True"

        # Still pending after a change: the verdict is written on the pod's new version.
        pending = parse_pod(create_pod(api, namespace, "pending"))
        api.merge_patch(f"/api/v1/namespaces/{namespace}/pods/pending", {"metadata": {"labels": {"x": "1"}}})
        reporter.failed(pending, "0/50 nodes are available.", reason="Unschedulable")
        assert reporter.wait_idle(10)
        condition = pod_scheduled(writer, namespace, "pending")
        assert (condition["status"], condition["reason"]) == ("False", "Unschedulable")
        assert reporter.stats().conflicts == 2
    finally:
        reporter.shutdown()


def test_repeated_failures_are_one_event_with_a_series(api: KubeAPI, namespace: str, client: KubeClient) -> None:
    writer = KubePodWriter(client)
    attempt = parse_pod(create_pod(api, namespace, "stuck"))
    now = [time.time()]
    reporter = PodReporter(writer, "metrics-sched", instance="metrics-sched-e2e-0", workers=1, clock=lambda: now[0])
    events_path = f"/apis/events.k8s.io/v1/namespaces/{namespace}/events"
    try:
        for i in range(4):
            reporter.failed(attempt, f"0/50 nodes are available (attempt {i}).", reason="Unschedulable")
            assert reporter.wait_idle(10)
            now[0] += 10
        [event] = api.get(events_path)["items"]
        assert event["series"]["count"] == 2
        assert event["note"] == "0/50 nodes are available (attempt 0)."  # the API keeps the first note
        # The series ends: its final count is written.
        now[0] += SERIES_FINISH + 1
        reporter.tick()
        assert reporter.wait_idle(10)
        [event] = api.get(events_path)["items"]
        assert event["series"]["count"] == 4
        # What `kubectl describe pod` reads ("x4 over 30s"): one core/v1 event with the series.
        [core] = api.get(f"/api/v1/namespaces/{namespace}/events")["items"]
        assert (core["involvedObject"]["name"], core["series"]["count"]) == ("stuck", 4)
    finally:
        reporter.shutdown()

    # An Event that expired meanwhile is created again, under its name, with its series.
    name = event["metadata"]["name"]
    api.delete(f"{events_path}/{name}")
    sent = SchedulingEvent(namespace=namespace, pod_name="stuck", pod_uid=attempt.uid, type="Warning",
                           reason="FailedScheduling", action="Scheduling", note="again",
                           reporting_controller="metrics-sched", reporting_instance="metrics-sched-e2e-0")
    writer.update_event_series(sent, name, EventSeries(5, time.time()))
    [event] = api.get(events_path)["items"]
    assert (event["metadata"]["name"], event["series"]["count"], event["note"]) == (name, 5, "again")


def test_lease_create_update_and_conflict(namespace: str, client: KubeClient) -> None:
    store = KubeLeaseStore(client)
    assert store.get(namespace, "metrics-sched") is None
    record = LeaseRecord(namespace=namespace, name="metrics-sched", holder="a", lease_duration_seconds=15,
                         acquire_time="2026-11-30T13:05:10.123456Z", renew_time="2026-11-30T13:05:10.123456Z",
                         lease_transitions=0)
    created = store.create(record)
    assert created.holder == "a" and created.resource_version
    with pytest.raises(ApiError) as info:
        store.create(record)
    assert info.value.status == 409

    renewed = store.update(LeaseRecord(**{**created.__dict__, "renew_time": "2026-11-30T13:05:12.000000Z"}))
    assert renewed.renew_time == "2026-11-30T13:05:12.000000Z"
    assert renewed.resource_version != created.resource_version
    assert store.get(namespace, "metrics-sched") == renewed
    # A candidate still holding the first read loses the race.
    with pytest.raises(ApiError) as info:
        store.update(LeaseRecord(**{**created.__dict__, "holder": "b", "lease_transitions": 1}))
    assert info.value.conflict
    taken = store.update(LeaseRecord(**{**renewed.__dict__, "holder": "b", "lease_transitions": 1}))
    assert (taken.holder, taken.lease_transitions) == ("b", 1)


def test_token_file_and_in_cluster_configs_reach_the_server(cluster: DevCluster, tmp_path: Path) -> None:
    assert cluster.endpoints is not None
    ca = Path(cluster.endpoints.ca_file)
    token_file = Path(cluster.endpoints.admin_token_file)
    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": cluster.endpoints.apiserver,
                                               "certificate-authority-data": base64.b64encode(ca.read_bytes())
                                               .decode()}}],
        "users": [{"name": "u", "user": {"tokenFile": str(token_file)}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
    }
    (tmp_path / "kubeconfig").write_text(yaml.safe_dump(config))
    with KubeClient(load(tmp_path / "kubeconfig")) as from_file:
        assert from_file.request("GET", "/api/v1/namespaces/default")["metadata"]["name"] == "default"

    sa = tmp_path / "serviceaccount"
    sa.mkdir()
    (sa / "ca.crt").write_bytes(ca.read_bytes())
    (sa / "token").write_text(token_file.read_text())
    port = cluster.endpoints.apiserver.rsplit(":", 1)[1]
    in_cluster = load_in_cluster(environ={"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": port},
                                 service_account_dir=sa)
    with KubeClient(in_cluster) as from_pod:
        assert from_pod.request("GET", "/api/v1/namespaces/default")["metadata"]["name"] == "default"
    (sa / "token").write_text("not-a-valid-token")
    with KubeClient(load_in_cluster(environ={"KUBERNETES_SERVICE_HOST": "127.0.0.1",
                                             "KUBERNETES_SERVICE_PORT": port}, service_account_dir=sa)) as bad, \
            pytest.raises(ApiError) as info:
        bad.request("GET", "/api/v1/namespaces/default")
    assert info.value.status == 401 and "not-a-valid-token" not in str(info.value)


def test_namespace_labels_and_workload_selectors_reach_the_cluster_state(
    api: KubeAPI, namespace: str, client: KubeClient
) -> None:
    scheduler = make_scheduler(api=KubePodWriter(client))
    state = scheduler.state
    src = KubeClusterSource(client, resources=resources_of(scheduler))
    src.start(scheduler.handlers)
    rs_path = f"/apis/apps/v1/namespaces/{namespace}/replicasets"
    svc_path = f"/api/v1/namespaces/{namespace}/services"
    try:
        assert src.wait_synced(30)
        assert scheduler.handlers.caches_synced()
        # The initial list: the apiserver labels every namespace with its name.
        labels = state.namespaces.labels(namespace)
        assert labels is not None and labels["kubernetes.io/metadata.name"] == namespace
        assert {"default", "kube-system", namespace} <= state.namespaces.matching(EVERYTHING)

        team = LabelSelector.parse({"matchLabels": {"e2e-team": namespace}})
        assert state.namespaces.matching(team) == frozenset()
        api.merge_patch(f"/api/v1/namespaces/{namespace}", {"metadata": {"labels": {"e2e-team": namespace}}})
        kube.poll(lambda: state.namespaces.matching(team) == {namespace}, 15, "the namespace's new label")

        # replicas: 0, so the ReplicaSet controller makes no pods: only its selector matters here.
        template_labels = {"app": "web", "tier": "front"}
        rs = api.post(rs_path, {
            "apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "web"},
            "spec": {"replicas": 0,
                     "selector": {"matchLabels": {"app": "web"},
                                  "matchExpressions": [{"key": "tier", "operator": "In", "values": ["front", "x"]}]},
                     "template": {"metadata": {"labels": template_labels},
                                  "spec": {"containers": [{"name": "c", "image": "registry.invalid/web:1"}]}}}})
        api.post(svc_path, {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web"},
                            "spec": {"selector": {"tier": "front"}, "ports": [{"port": 80}]}})
        pod = {"metadata": {"name": "web-1", "namespace": namespace, "labels": template_labels,
                            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web",
                                                 "uid": rs["metadata"]["uid"], "controller": True}]}}
        expected = LabelSelector.from_set({"tier": "front"}).adding(
            LabelSelector.parse(rs["spec"]["selector"]).requirements)
        kube.poll(lambda: state.workloads.default_selector(pod) == expected, 15,
                  "the Service's and the ReplicaSet's selectors")

        api.delete(f"{rs_path}/web")
        api.delete(f"{svc_path}/web")
        kube.poll(lambda: state.workloads.default_selector(pod).empty and namespace not in state.workloads.namespaces(),
                  15, "the deletions")
    finally:
        src.stop()
        # The dev cluster has no namespace controller: objects left in a deleted namespace would outlive it.
        api.delete(f"{rs_path}/web")
        api.delete(f"{svc_path}/web")


def test_apiserver_restart_mid_watch_misses_nothing(
    cluster: DevCluster, api: KubeAPI, namespace: str, source: tuple[KubeClusterSource, StateSink]
) -> None:
    src, sink = source
    for i in range(10):
        create_pod(api, namespace, f"before-{i}")
    kube.poll(lambda: sink.pods(namespace) == api_pods(api, namespace), 15, "the first pods in the sink")

    cluster.restart_apiserver(down_for=1.0)
    # Changes right after the restart, while the reflectors are still reconnecting.
    for i in range(10):
        create_pod(api, namespace, f"after-{i}")
    for i in range(3):
        delete_pod(api, namespace, f"before-{i}")
    api.merge_patch(f"/api/v1/namespaces/{namespace}/pods/before-5", {"metadata": {"labels": {"changed": "1"}}})

    kube.poll(lambda: sink.pods(namespace) == api_pods(api, namespace), 60, "the sink to catch up after the restart",
              interval=0.2)
    assert sink.node_names() == {n["metadata"]["name"] for n in api.get("/api/v1/nodes")["items"]}
    assert not sink.violations, sink.violations
    stats = src.stats()["pods"]
    assert stats.watch_restarts + stats.relists >= 1, stats
    print(f"after the restart: pods {stats}")
