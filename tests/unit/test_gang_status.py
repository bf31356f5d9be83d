"""PodGroup status: the adapter's patches for both gang APIs, the pod-group watches it picks from discovery, and the
background reporter (coalescing, a deleted group's 404)."""

from __future__ import annotations

import datetime as dt
import json
import threading
from typing import Any

import httpx
import pytest

from adapters.kubernetes.client import KubeClient
from adapters.kubernetes.config import KubeConfig
from adapters.kubernetes.pod_group_writer import KubePodGroupStatusWriter
from adapters.kubernetes.source import served_resources
from adapters.kubernetes.tokens import StaticToken
from metrics_sched.plugins.coscheduling.pod_groups import POD_GROUP_KINDS, PodGroupStore
from metrics_sched.plugins.coscheduling.status import GroupStatusReporter
from metrics_sched.ports import ApiError, PodGroupApi, PodGroupStatus

pytestmark = pytest.mark.unit

NOW = dt.datetime(2026, 12, 1, 16, 0, 0, tzinfo=dt.UTC)
SCHEDULED = PodGroupStatus("Scheduled", 8, "Scheduled", "8 of minMember 8 members placed")


def client(handler: Any) -> KubeClient:
    return KubeClient(KubeConfig(server="https://kube.test", token=StaticToken("t")),
                      transport=httpx.MockTransport(handler))


def test_the_crd_gets_a_merge_patch_of_phase_and_count_and_the_workload_api_its_condition() -> None:
    requests: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        requests.append(request)
        return httpx.Response(200, json={})

    writer = KubePodGroupStatusWriter(client(handler), clock=lambda: NOW)
    writer.write_pod_group_status("scheduling.x-k8s.io/v1alpha1", "ns", "train", SCHEDULED)
    writer.write_pod_group_status("scheduling.k8s.io/v1beta1", "ns", "train",
                                  PodGroupStatus("Pending", 0, "Unschedulable", "no zone holds it"))
    crd, workload = requests
    assert crd.method == "PATCH"
    assert crd.url.path == "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/ns/podgroups/train/status"
    assert crd.headers["content-type"] == "application/merge-patch+json"
    assert json.loads(crd.content) == {"status": {"phase": "Scheduled", "scheduled": 8}}
    assert workload.url.path == "/apis/scheduling.k8s.io/v1beta1/namespaces/ns/podgroups/train/status"
    assert workload.headers["content-type"] == "application/strategic-merge-patch+json"
    assert json.loads(workload.content) == {"status": {"conditions": [{
        "type": "PodGroupScheduled", "status": "False", "reason": "Unschedulable", "message": "no zone holds it",
        "lastTransitionTime": "2026-12-01T16:00:00Z"}]}}


def test_only_the_served_pod_group_apis_are_watched() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/apis/scheduling.x-k8s.io/v1alpha1":
            return httpx.Response(200, json={"resources": [{"name": "podgroups"}, {"name": "podgroups/status"}]})
        if request.url.path == "/apis/scheduling.k8s.io/v1beta1":
            return httpx.Response(200, json={"resources": [{"name": "workloads"}]})
        return httpx.Response(404, json={"kind": "Status", "code": 404, "reason": "NotFound"})

    served, missing = served_resources(client(handler), POD_GROUP_KINDS)
    assert [r.path for r in served] == ["/apis/scheduling.x-k8s.io/v1alpha1/podgroups"]
    assert missing == ["podgroups.scheduling.k8s.io/v1alpha2: scheduling.k8s.io/v1alpha2 is not served",
                       "podgroups.scheduling.k8s.io/v1beta1: scheduling.k8s.io/v1beta1 has no podgroups resource"]


class SlowWriter:
    """Holds the first write until released, so later reports pile up behind it."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.writes: list[tuple[str, str, PodGroupStatus]] = []
        self.fail_with: ApiError | None = None

    def write_pod_group_status(self, api: PodGroupApi, namespace: str, name: str, status: PodGroupStatus) -> None:
        self.release.wait(5)
        if self.fail_with is not None:
            raise self.fail_with
        self.writes.append((api, name, status))


def test_the_reporter_writes_the_latest_status_of_each_group_once() -> None:
    store = PodGroupStore()
    group, _ = store.upsert("scheduling.k8s.io/v1alpha2", {"metadata": {"namespace": "ns", "name": "a"},
                                                           "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}}})
    writer = SlowWriter()
    reporter = GroupStatusReporter(writer)
    try:
        scheduling = PodGroupStatus("Scheduling", 1, "Unschedulable", "1 of 2")
        reporter.report(group, scheduling)
        reporter.report(group, PodGroupStatus("Scheduling", 1, "Unschedulable", "again"))  # coalesced...
        reporter.report(group, SCHEDULED)  # ...into the latest
        writer.release.set()
        assert reporter.flush()
        assert [s.phase for _, _, s in writer.writes][-1] == "Scheduled"
        assert len(writer.writes) <= 2 and writer.writes[0][0] == "scheduling.k8s.io/v1alpha2"
        reporter.report(group, SCHEDULED)  # unchanged: not written again
        assert reporter.flush()
        count = len(writer.writes)
        writer.fail_with = ApiError(404, "gone")  # a deleted group: dropped quietly
        reporter.report(group, scheduling)
        assert reporter.flush() and len(writer.writes) == count
    finally:
        reporter.stop()
