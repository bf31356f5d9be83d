"""The cache comparer: the cluster state against a fresh LIST (fakes for the LIST, a real ClusterState)."""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from adapters.kubernetes.client import KubeClient
from adapters.kubernetes.config import KubeConfig
from adapters.kubernetes.lister import KubeClusterLister
from adapters.kubernetes.tokens import StaticToken
from metrics_sched.config import ConfigError, parse_config
from metrics_sched.model.podinfo import parse_pod
from metrics_sched.observability import SchedulerMetrics
from metrics_sched.plugins import in_tree_registry
from metrics_sched.ports import ApiError, KubeObject
from metrics_sched.state import ClusterState
from metrics_sched.state.comparer import CacheComparer, Comparison, Mismatch, MismatchKind
from tests.polling import poll
from tests.unit.fakes import node, pod
from tests.unit.test_telemetry_scoring import make

pytestmark = pytest.mark.unit

Obj = dict[str, Any]


class FakeLister:
    """The API's nodes and pods; `before_list` runs before each pod LIST (to change the API or the cache
    between and during rounds)."""

    def __init__(self, nodes: list[Obj], pods: list[Obj]) -> None:
        self.nodes = nodes
        self.pods = pods
        self.lists = 0
        self.before_list: Callable[[int], None] = lambda n: None
        self.error: ApiError | None = None

    def list_nodes(self) -> Iterator[KubeObject]:
        if self.error is not None:
            raise self.error
        yield from copy.deepcopy(self.nodes)

    def list_pods(self) -> Iterator[KubeObject]:
        self.lists += 1
        self.before_list(self.lists)
        yield from copy.deepcopy(self.pods)

    def namespace_pods(self, namespace: str, label_selector: str | None = None) -> Iterator[KubeObject]:
        # The comparer never reads one namespace; the port's other reader (the rebalancer) has its own tests.
        yield from (copy.deepcopy(p) for p in self.pods if p["metadata"].get("namespace") == namespace)


def cluster(nodes: list[Obj], pods: list[Obj]) -> ClusterState:
    """A cache that agrees with the API: every node, and every bound pod."""
    state = ClusterState()
    for n in nodes:
        state.upsert_node(n)
    for p in pods:
        if p["spec"].get("nodeName"):
            state.observe_bound_pod(parse_pod(p))
    return state


def run(state: ClusterState, lister: FakeLister) -> Comparison:
    return CacheComparer(state, lister, settle=0).compare()


def kinds(result: Comparison) -> set[tuple[MismatchKind, str, str]]:
    return {(m.kind, m.resource, m.name) for m in result.mismatches}


def test_a_cache_in_step_with_the_api_has_no_mismatch_and_lists_once() -> None:
    nodes = [node("n1"), node("n2", gpus=2)]
    pods = [pod("a", node_name="n1"), pod("b", node_name="n2", gpus=1), pod("pending")]
    state = cluster(nodes, pods)
    assumed = pod("assumed")  # bind in flight: the API still shows it unbound
    pods.append(assumed)
    state.assume(parse_pod(assumed), "n1")
    lister = FakeLister(nodes, pods)
    result = run(state, lister)
    assert result == Comparison((), nodes=2, pods=2)
    assert lister.lists == 1, "a clean first round needs no confirming round"


def test_missed_redundant_and_stale_nodes() -> None:
    state = cluster([node("n1"), node("gone"), node("n3", labels={"zone": "a"})], [])
    lister = FakeLister([node("n1"), node("new"), node("n3", labels={"zone": "b"})], [])
    result = run(state, lister)
    assert kinds(result) == {(MismatchKind.MISSED, "node", "new"), (MismatchKind.REDUNDANT, "node", "gone"),
                             (MismatchKind.STALE, "node", "n3")}
    stale = next(m for m in result.mismatches if m.kind == MismatchKind.STALE)
    assert stale.detail.startswith("labels:") and "'zone': 'a'" in stale.detail and "'zone': 'b'" in stale.detail


def test_missed_redundant_and_stale_pods() -> None:
    nodes = [node("n1"), node("n2")]
    kept, gone, relabelled, resized, moved = (pod(n, node_name="n1") for n in ("kept", "gone", "relabelled",
                                                                                  "resized", "moved"))
    state = cluster(nodes, [kept, gone, relabelled, resized, moved])
    missed = pod("missed", node_name="n2")
    relabelled["metadata"]["labels"] = {"app": "x"}
    resized["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "300m"  # an in-place resize
    moved["spec"]["nodeName"] = "n2"
    finished = pod("finished", node_name="n1")
    finished["status"]["phase"] = "Succeeded"  # occupies nothing: absent from the cache as it should be
    result = run(state, FakeLister(nodes, [kept, relabelled, resized, moved, missed, finished]))
    assert kinds(result) == {(MismatchKind.MISSED, "pod", "default/missed"),
                             (MismatchKind.REDUNDANT, "pod", "default/gone"),
                             (MismatchKind.STALE, "pod", "default/relabelled"),
                             (MismatchKind.STALE, "pod", "default/resized"),
                             (MismatchKind.STALE, "pod", "default/moved")}
    detail = {m.name: m.detail for m in result.mismatches}
    resized_detail = detail["default/resized"]
    assert resized_detail.startswith("requests: {'cpu': 100, ") and "{'cpu': 300, " in resized_detail
    assert detail["default/moved"].startswith("node: 'n1' != 'n2'")
    assert result.count(MismatchKind.STALE) == 3 and result.pods == 5


def test_an_assumed_pod_must_exist_and_not_be_bound_elsewhere() -> None:
    nodes = [node("n1"), node("n2")]
    deleted, elsewhere, landed = pod("deleted"), pod("elsewhere"), pod("landed")
    state = cluster(nodes, [])
    for p in (deleted, elsewhere, landed):
        state.assume(parse_pod(p), "n1")
    elsewhere["spec"]["nodeName"] = "n2"
    landed["spec"]["nodeName"] = "n1"  # bound where we assumed it; the watch has not confirmed it yet
    result = run(state, FakeLister(nodes, [elsewhere, landed]))
    assert kinds(result) == {(MismatchKind.REDUNDANT, "pod", "default/deleted"),
                             (MismatchKind.STALE, "pod", "default/elsewhere")}


def test_a_change_still_in_flight_is_not_reported() -> None:
    nodes = [node("n1")]
    state = cluster(nodes, [])
    late = pod("late", node_name="n1")
    lister = FakeLister(nodes, [late])
    # The watch delivers the pod while the first round lists: the first round's suspect is cleared by the second.
    lister.before_list = lambda n: state.observe_bound_pod(parse_pod(late)) if n == 1 else None
    assert run(state, lister) == Comparison((), nodes=1, pods=1)
    assert lister.lists == 2


def test_only_a_difference_both_rounds_find_alike_is_reported() -> None:
    nodes = [node("n1")]
    churned, stuck = pod("churned", node_name="n1"), pod("stuck", node_name="n1")
    state = cluster(nodes, [churned, stuck])
    lister = FakeLister(nodes, [churned, stuck])
    churned["metadata"]["labels"], stuck["metadata"]["labels"] = {"v": "1"}, {"v": "1"}

    def relabel(n: int) -> None:  # the churned pod changes again before the second round; the stuck one not
        if n == 2:
            lister.pods[0]["metadata"]["labels"] = {"v": "2"}

    lister.before_list = relabel
    result = run(state, lister)
    assert kinds(result) == {(MismatchKind.STALE, "pod", "default/stuck")}


def test_the_state_lock_is_free_during_the_list() -> None:
    nodes = [node("n1")]
    state = cluster(nodes, [pod("a", node_name="n1")])
    free: list[bool] = []

    def probe(_: int) -> None:
        # The scheduling loop and the watches take the lock from other threads: they must not wait on a LIST.
        def other() -> None:
            if state.lock.acquire(timeout=1):
                free.append(True)
                state.lock.release()

        thread = threading.Thread(target=other)
        thread.start()
        thread.join()

    lister = FakeLister(nodes, [pod("b", node_name="n1")])
    lister.before_list = probe
    run(state, lister)
    assert free == [True, True]


def test_an_api_error_ends_the_run_as_an_error_and_the_thread_carries_on() -> None:
    nodes = [node("n1")]
    state = cluster(nodes, [])
    lister = FakeLister(nodes, [])
    lister.error = ApiError(503, "unavailable")
    comparer = CacheComparer(state, lister, settle=0)
    seen: list[Comparison] = []
    comparer.observers.append(seen.append)
    thread = threading.Thread(target=comparer.serve, args=(0,))
    thread.start()
    try:
        comparer.request()  # what SIGUSR2 does
        poll(lambda: len(seen) == 1, 5, "the failed run reported", interval=0.005)
        assert seen[0].error == "ApiError: HTTP 503: unavailable" and not seen[0].mismatches
        lister.error = None
        lister.nodes = [node("n1"), node("n2")]
        comparer.request()
        poll(lambda: len(seen) == 2, 5, "the next run", interval=0.005)
        assert seen[1].error is None and kinds(seen[1]) == {(MismatchKind.MISSED, "node", "n2")}
    finally:
        comparer.close()
        thread.join(5)
    assert not thread.is_alive()


def test_runs_periodically_until_closed() -> None:
    comparer = CacheComparer(ClusterState(), FakeLister([], []), settle=0)
    seen: list[Comparison] = []
    comparer.observers.append(seen.append)
    thread = threading.Thread(target=comparer.serve, args=(0.01,))
    thread.start()
    poll(lambda: len(seen) >= 3, 5, "three periodic runs", interval=0.005)
    comparer.close()
    thread.join(5)
    assert not thread.is_alive()


def test_close_cuts_the_settle_wait_short() -> None:
    state = cluster([node("n1")], [])
    comparer = CacheComparer(state, FakeLister([], []), settle=3600)
    seen: list[Comparison] = []
    comparer.observers.append(seen.append)
    thread = threading.Thread(target=comparer.compare)
    thread.start()
    comparer.close()
    thread.join(5)
    assert not thread.is_alive() and seen == [Comparison((), nodes=0, pods=0)]


def test_mismatches_are_counted_by_kind_on_metrics() -> None:
    scheduler, _, _ = make()
    metrics = SchedulerMetrics(scheduler)

    def samples() -> dict[tuple[str, str], float]:
        families = text_string_to_metric_families(metrics.exposition().decode())
        return {(s.name, s.labels.get("kind") or s.labels.get("result", "")): s.value for f in families
                for s in f.samples if s.name.startswith("metrics_sched_cache_")}

    zero = samples()
    assert {k: v for k, v in zero.items() if k[0] == "metrics_sched_cache_mismatch_total"} == {
        ("metrics_sched_cache_mismatch_total", kind): 0.0 for kind in ("missed", "redundant", "stale")}
    metrics.on_compare(Comparison((Mismatch(MismatchKind.MISSED, "pod", "u1", "ns/a"),
                                   Mismatch(MismatchKind.MISSED, "node", "n1", "n1"),
                                   Mismatch(MismatchKind.STALE, "pod", "u2", "ns/b", "node: 'x' != 'y'"))))
    metrics.on_compare(Comparison(error="ApiError: HTTP 503"))
    after = samples()
    assert after[("metrics_sched_cache_mismatch_total", "missed")] == 2
    assert after[("metrics_sched_cache_mismatch_total", "redundant")] == 0
    assert after[("metrics_sched_cache_mismatch_total", "stale")] == 1
    assert after[("metrics_sched_cache_compare_runs_total", "ok")] == 1
    assert after[("metrics_sched_cache_compare_runs_total", "error")] == 1


def test_the_kube_lister_pages_through_a_consistent_read() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        token = request.url.params.get("continue")
        items = [{"metadata": {"name": "b"}}] if token else [{"metadata": {"name": "a"}}]
        return httpx.Response(200, json={"kind": "PodList", "items": items,
                                         "metadata": {} if token else {"continue": "next"}})

    client = KubeClient(KubeConfig(server="https://kube.test", token=StaticToken("t")),
                        transport=httpx.MockTransport(handler))
    with client:
        names = [p["metadata"]["name"] for p in KubeClusterLister(client, page_size=1).list_pods()]
    assert names == ["a", "b"]
    assert [(r.url.path, dict(r.url.params)) for r in seen] == [
        ("/api/v1/pods", {"limit": "1"}), ("/api/v1/pods", {"limit": "1", "continue": "next"})]


def test_the_period_is_configurable_and_zero_turns_it_off() -> None:
    catalog = in_tree_registry(third_party=False).catalog()
    assert parse_config({}, catalog).cache_compare_interval == 300
    assert parse_config({"cacheCompareInterval": "30s"}, catalog).cache_compare_interval == 30
    assert parse_config({"cacheCompareInterval": 0}, catalog).cache_compare_interval == 0
    with pytest.raises(ConfigError, match="cacheCompareInterval"):
        parse_config({"cacheCompareInterval": "soon"}, catalog)
    with pytest.raises(ConfigError, match="cacheCompareInterval: must be 0"):  # a LIST of everything in a loop
        parse_config({"cacheCompareInterval": "1ms"}, catalog)
