"""Reflector and KubeClusterSource against a scripted in-memory API server (httpx.MockTransport, no processes).

Each watch request takes the next scripted reply; with the script empty, a watch stays open and silent
until the reflector closes it, as a real quiet watch does.
"""

from __future__ import annotations

import copy
import json
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any, Literal

import httpx
import pytest

from adapters.kubernetes.client import KubeClient
from adapters.kubernetes.config import KubeConfig
from adapters.kubernetes.reflector import Reflector, ReflectorOptions, backoff_delay
from adapters.kubernetes.source import KubeClusterSource
from adapters.kubernetes.tokens import StaticToken
from metrics_sched.ports import ApiKind, ClusterSource, EventType, KubeObject
from tests.watched import default_resources

pytestmark = pytest.mark.unit

FAST = ReflectorOptions(backoff_initial=0.001, backoff_max=0.01)
PODS = "/api/v1/pods"
NODES = "/api/v1/nodes"
# Every collection KubeClusterSource watches for the default profile (namespaces, workloads, storage, budgets too).
DEFAULT_RESOURCES = default_resources()
ALL_PATHS = tuple(r.path for r in DEFAULT_RESOURCES)


class ScriptedStream(httpx.SyncByteStream):
    """A watch body: some lines, then the server's end, a read timeout, or silence until closed."""

    def __init__(self, events: list[dict[str, Any]], end: Literal["close", "timeout", "hang"]) -> None:
        self.lines = [json.dumps(e).encode() + b"\n" for e in events]
        self.end = end
        self.closed = threading.Event()

    def __iter__(self) -> Iterator[bytes]:
        yield from self.lines
        if self.end == "timeout":
            raise httpx.ReadTimeout("timed out")
        if self.end == "hang":
            self.closed.wait(30)

    def close(self) -> None:
        self.closed.set()


WatchReply = Callable[[httpx.Request], httpx.Response]


class FakeApiServer:
    """Collections of objects with a cluster-wide resourceVersion counter, paged LIST and scripted WATCH."""

    def __init__(self) -> None:
        self.rv = 100
        self.collections: dict[str, dict[str, dict[str, Any]]] = {path: {} for path in ALL_PATHS}
        self.watch_script: dict[str, list[WatchReply]] = {path: [] for path in ALL_PATHS}
        self.requests: list[httpx.Request] = []
        self.list_failures = 0
        self.streams: list[ScriptedStream] = []
        self.idle_watches: dict[str, list[ScriptedStream]] = {path: [] for path in ALL_PATHS}
        self.lock = threading.Lock()

    # -- state -----------------------------------------------------------------------------------
    def _bump(self) -> str:
        self.rv += 1
        return str(self.rv)

    def add(self, name: str, path: str = PODS, uid: str | None = None) -> dict[str, Any]:
        with self.lock:
            rv = self._bump()
            meta: dict[str, Any] = {"name": name, "uid": uid or f"uid-{name}", "resourceVersion": rv,
                                    "managedFields": [{"manager": "x"}]}
            if path == PODS:
                meta["namespace"] = "ns"
            obj = {"kind": "Pod" if path == PODS else "Node", "apiVersion": "v1", "metadata": meta, "spec": {}}
            self.collections[path][self.key(name, path)] = obj
            return copy.deepcopy(obj)

    def modify(self, name: str, path: str = PODS) -> dict[str, Any]:
        with self.lock:
            obj = self.collections[path][self.key(name, path)]
            obj["metadata"]["resourceVersion"] = self._bump()
            obj["spec"]["nodeName"] = "node-1"
            return copy.deepcopy(obj)

    def delete(self, name: str, path: str = PODS) -> dict[str, Any]:
        with self.lock:
            obj = self.collections[path].pop(self.key(name, path))
            obj["metadata"]["resourceVersion"] = self._bump()
            return copy.deepcopy(obj)

    @staticmethod
    def key(name: str, path: str) -> str:
        return f"ns/{name}" if path == PODS else name

    # -- HTTP ------------------------------------------------------------------------------------
    def handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        path = request.url.path
        if request.url.params.get("watch") == "true":
            with self.lock:
                script = self.watch_script[path]
                reply = script.pop(0) if script else None
            if reply is not None:
                return reply(request)
            response = self.stream([], "hang")
            self.idle_watches[path].append(self.streams[-1])
            return response
        if self.list_failures:
            self.list_failures -= 1
            raise httpx.ConnectError("connection refused")
        return self.list_page(path, request.url.params)

    def list_page(self, path: str, params: httpx.QueryParams) -> httpx.Response:
        with self.lock:
            limit = int(params["limit"])
            offset = int(params.get("continue") or 0)
            # A paged LIST is one snapshot; the fake's objects do not change while a test pages through.
            items = sorted(self.collections[path].values(), key=lambda o: o["metadata"]["name"])
            page = copy.deepcopy(items[offset:offset + limit])
            more = offset + limit < len(items)
            meta = {"resourceVersion": str(self.rv), **({"continue": str(offset + limit)} if more else {})}
            kind = "PodList" if path == PODS else "NodeList"
            for item in page:
                del item["kind"], item["apiVersion"]
            return httpx.Response(200, json={"kind": kind, "apiVersion": "v1", "metadata": meta, "items": page})

    def stream(self, events: list[dict[str, Any]], end: Literal["close", "timeout", "hang"]) -> httpx.Response:
        body = ScriptedStream(events, end)
        self.streams.append(body)
        return httpx.Response(200, stream=body)

    def watch_requests(self, path: str = PODS) -> list[httpx.QueryParams]:
        return [r.url.params for r in self.requests if r.url.path == path and r.url.params.get("watch") == "true"]

    def list_requests(self, path: str = PODS) -> list[httpx.QueryParams]:
        return [r.url.params for r in self.requests if r.url.path == path and "watch" not in r.url.params]


def gone(request: httpx.Request) -> httpx.Response:
    return httpx.Response(410, json={"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 410,
                                     "reason": "Expired", "message": "too old resource version: 101 (150)"})


class RecordingSink:
    def __init__(self) -> None:
        self.events: list[tuple[str, EventType, str, str]] = []  # resource, kind, key, resourceVersion
        self.objects: list[KubeObject] = []
        self.synced: list[str] = []
        self.lock = threading.Lock()

    def _record(self, resource: str, kind: EventType, obj: KubeObject) -> None:
        meta = obj["metadata"]
        key = f"{meta.get('namespace', '')}/{meta['name']}".lstrip("/")
        with self.lock:
            self.events.append((resource, kind, key, meta["resourceVersion"]))
            self.objects.append(obj)

    def on_node_event(self, kind: EventType, node: KubeObject) -> None:
        self._record("nodes", kind, node)

    def on_pod_event(self, kind: EventType, pod: KubeObject) -> None:
        self._record("pods", kind, pod)

    def on_object_event(self, kind: ApiKind, event: EventType, obj: KubeObject) -> None:
        self._record(kind.name, event, obj)

    def on_synced(self, resource: str) -> None:
        with self.lock:
            self.synced.append(resource)

    def kinds(self, skip: int = 0) -> list[tuple[EventType, str]]:
        with self.lock:
            return [(kind, key) for _, kind, key, _ in self.events[skip:]]


def wait_for(check: Callable[[], object], what: str, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.005)


@pytest.fixture
def server() -> FakeApiServer:
    return FakeApiServer()


@pytest.fixture
def client(server: FakeApiServer) -> Iterator[KubeClient]:
    config = KubeConfig(server="https://kube.test", token=StaticToken("t"))
    with KubeClient(config, transport=httpx.MockTransport(server.handle)) as kube:
        yield kube


@pytest.fixture
def sink() -> RecordingSink:
    return RecordingSink()


@pytest.fixture
def start_pods(client: KubeClient, sink: RecordingSink) -> Iterator[Callable[..., Reflector]]:
    started: list[Reflector] = []

    def start(**kwargs: Any) -> Reflector:
        reflector = Reflector(client, "pods", PODS, sink.on_pod_event, lambda: sink.on_synced("pods"),
                              options=kwargs.pop("options", FAST), rng=random.Random(1), **kwargs)
        reflector.start()
        started.append(reflector)
        return reflector

    yield start
    for reflector in started:
        reflector.stop()


def test_paged_list_then_watch_from_the_list_resource_version(
    server: FakeApiServer, sink: RecordingSink, start_pods: Callable[..., Reflector]
) -> None:
    for i in range(1201):
        server.add(f"p{i:04d}")
    list_rv = str(server.rv)
    reflector = start_pods()
    assert reflector.wait_synced(5)
    wait_for(lambda: server.watch_requests(), "the watch")
    assert [p.get("continue") for p in server.list_requests()] == [None, "500", "1000"]
    assert all(p["limit"] == "500" for p in server.list_requests())
    assert Counter(kind for kind, _ in sink.kinds()) == {"ADDED": 1201}
    assert sink.synced == ["pods"]
    assert sink.objects[0]["kind"] == "Pod" and sink.objects[0]["apiVersion"] == "v1"
    assert "managedFields" not in sink.objects[0]["metadata"]
    watch = server.watch_requests()[0]
    assert watch["resourceVersion"] == list_rv
    assert watch["allowWatchBookmarks"] == "true"
    assert 240 <= int(watch["timeoutSeconds"]) <= 360
    stats = reflector.stats()
    assert (stats.lists, stats.relists, stats.events, stats.synced) == (1, 0, 1201, True)


def test_watch_events_are_delivered_and_the_resource_version_follows(
    server: FakeApiServer, sink: RecordingSink, start_pods: Callable[..., Reflector]
) -> None:
    server.add("a")

    def live_changes(request: httpx.Request) -> httpx.Response:
        added, modified, deleted = server.add("b"), server.modify("a"), server.delete("a")
        return server.stream([{"type": "ADDED", "object": added}, {"type": "MODIFIED", "object": modified},
                              {"type": "DELETED", "object": deleted}], "hang")

    server.watch_script[PODS].append(live_changes)
    reflector = start_pods()
    wait_for(lambda: len(sink.events) == 4, "four events")
    assert sink.kinds() == [("ADDED", "ns/a"), ("ADDED", "ns/b"), ("MODIFIED", "ns/a"), ("DELETED", "ns/a")]
    assert reflector.resource_version == str(server.rv)
    assert reflector.stats().events == 4


def test_a_malformed_watch_event_is_dropped_and_counted_and_the_watch_goes_on(
    server: FakeApiServer, sink: RecordingSink, start_pods: Callable[..., Reflector]
) -> None:
    # Found by tests/unit/test_fuzz_watch_events.py: {"type": "ADDED"} (no object) ended the watch as an
    # error, a line that was not JSON too, and metadata that was not a mapping raised AttributeError in the
    # loop (a traceback); each time the next watch started from the same resourceVersion, after a backoff.
    def bad_then_good(request: httpx.Request) -> httpx.Response:
        response = server.stream([{"type": "ADDED"}, {"type": "MODIFIED", "object": {"metadata": "x"}},
                                  {"type": "ADDED", "object": server.add("b")}], "hang")
        server.streams[-1].lines.insert(1, b"not json\n")
        return response

    server.watch_script[PODS].append(bad_then_good)
    reflector = start_pods()
    wait_for(lambda: ("ADDED", "ns/b") in sink.kinds(), "the event after the bad ones")
    stats = reflector.stats()
    assert (stats.dropped_events, stats.errors, stats.watches) == (3, 0, 1)


def test_bookmarks_only_advance_the_resource_version(
    server: FakeApiServer, sink: RecordingSink, start_pods: Callable[..., Reflector]
) -> None:
    server.add("a")
    bookmark = {"type": "BOOKMARK", "object": {"kind": "Pod", "apiVersion": "v1",
                                               "metadata": {"resourceVersion": "500"}}}
    server.watch_script[PODS].append(lambda r: server.stream([bookmark], "close"))
    reflector = start_pods()
    wait_for(lambda: len(server.watch_requests()) == 2, "the second watch")
    assert server.watch_requests()[1]["resourceVersion"] == "500"
    assert sink.kinds() == [("ADDED", "ns/a")]
    stats = reflector.stats()
    assert (stats.bookmarks, stats.watch_restarts, stats.relists) == (1, 1, 0)


def test_410_at_watch_start_relists_and_delivers_the_delta_once(
    server: FakeApiServer, sink: RecordingSink, start_pods: Callable[..., Reflector]
) -> None:
    for name in ("a", "b", "c"):
        server.add(name)
    before = {obj["metadata"]["name"]: obj["metadata"]["resourceVersion"] for obj in server.collections[PODS].values()}

    def changed_while_away(request: httpx.Request) -> httpx.Response:
        server.modify("b")
        server.delete("c")
        server.add("d")
        return gone(request)

    server.watch_script[PODS].append(changed_while_away)
    reflector = start_pods()
    wait_for(lambda: sink.synced == ["pods", "pods"], "the relist")
    assert sink.kinds(3) == [("DELETED", "ns/c"), ("MODIFIED", "ns/b"), ("ADDED", "ns/d")]
    # The DELETED carries the object as the sink last saw it.
    assert sink.events[3][3] == before["c"]
    wait_for(lambda: len(server.watch_requests()) == 2, "the watch after the relist")
    assert server.watch_requests()[1]["resourceVersion"] == str(server.rv)
    stats = reflector.stats()
    assert (stats.lists, stats.relists, stats.events) == (2, 1, 6)


def test_410_as_an_error_event_relists_without_duplicates(
    server: FakeApiServer, sink: RecordingSink, start_pods: Callable[..., Reflector]
) -> None:
    for name in ("a", "b"):
        server.add(name)

    def error_mid_stream(request: httpx.Request) -> httpx.Response:
        e = server.add("e")
        server.modify("a")
        server.delete("b")
        server.add("f")
        error = {"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                             "message": "too old resource version: 102 (104)",
                                             "reason": "Expired", "code": 410}}
        return server.stream([{"type": "ADDED", "object": e}, error], "close")

    server.watch_script[PODS].append(error_mid_stream)
    reflector = start_pods()
    wait_for(lambda: sink.synced == ["pods", "pods"], "the relist")
    # e came on the watch and is not repeated by the relist.
    assert sink.kinds(2) == [("ADDED", "ns/e"), ("DELETED", "ns/b"), ("MODIFIED", "ns/a"), ("ADDED", "ns/f")]
    assert reflector.stats().relists == 1


def test_a_recreated_object_is_deleted_then_added(
    server: FakeApiServer, sink: RecordingSink, start_pods: Callable[..., Reflector]
) -> None:
    server.add("a")

    def recreated(request: httpx.Request) -> httpx.Response:
        server.delete("a")
        server.add("a", uid="uid-a-2")
        return gone(request)

    server.watch_script[PODS].append(recreated)
    start_pods()
    wait_for(lambda: sink.synced == ["pods", "pods"], "the relist")
    assert sink.kinds() == [("ADDED", "ns/a"), ("DELETED", "ns/a"), ("ADDED", "ns/a")]
    assert [o["metadata"]["uid"] for o in sink.objects] == ["uid-a", "uid-a", "uid-a-2"]


def test_read_timeout_rewatches_from_the_last_resource_version(
    server: FakeApiServer, sink: RecordingSink, start_pods: Callable[..., Reflector]
) -> None:
    server.add("a")
    server.watch_script[PODS].append(lambda r: server.stream([{"type": "ADDED", "object": server.add("x")}],
                                                             "timeout"))
    reflector = start_pods()
    wait_for(lambda: len(server.watch_requests()) == 2, "the second watch")
    assert server.watch_requests()[1]["resourceVersion"] == str(server.rv)
    assert sink.kinds() == [("ADDED", "ns/a"), ("ADDED", "ns/x")]
    stats = reflector.stats()
    assert (stats.lists, stats.relists, stats.watch_timeouts, stats.watch_restarts) == (1, 0, 1, 1)


def test_a_non_410_error_event_resumes_the_watch_without_relisting(
    server: FakeApiServer, sink: RecordingSink, start_pods: Callable[..., Reflector]
) -> None:
    server.add("a")
    rv = str(server.rv)
    error = {"type": "ERROR", "object": {"kind": "Status", "code": 500, "reason": "InternalError",
                                         "message": "etcd hiccup"}}
    server.watch_script[PODS].append(lambda r: server.stream([error], "close"))
    reflector = start_pods()
    wait_for(lambda: len(server.watch_requests()) == 2, "the second watch")
    assert server.watch_requests()[1]["resourceVersion"] == rv
    assert reflector.stats().errors == 1 and reflector.stats().lists == 1


def test_connection_errors_are_retried_and_never_end_the_thread(
    server: FakeApiServer, sink: RecordingSink, start_pods: Callable[..., Reflector]
) -> None:
    server.add("a")
    server.list_failures = 3
    reflector = start_pods()
    assert reflector.wait_synced(5)
    assert sink.kinds() == [("ADDED", "ns/a")]
    assert reflector.stats().errors == 3


def test_a_failing_sink_does_not_stop_the_stream(server: FakeApiServer, client: KubeClient) -> None:
    server.add("a")
    server.add("b")
    seen: list[str] = []

    def flaky(kind: EventType, obj: KubeObject) -> None:
        seen.append(obj["metadata"]["name"])
        if obj["metadata"]["name"] == "a":
            raise RuntimeError("sink bug")

    server.watch_script[PODS].append(lambda r: server.stream([{"type": "ADDED", "object": server.add("c")}],
                                                             "hang"))
    reflector = Reflector(client, "pods", PODS, flaky, lambda: None, options=FAST)
    reflector.start()
    try:
        wait_for(lambda: seen == ["a", "b", "c"], "all three events")
        assert reflector.stats().handler_errors == 1
    finally:
        reflector.stop()


def test_stop_ends_a_silent_watch_promptly(server: FakeApiServer, start_pods: Callable[..., Reflector]) -> None:
    reflector = start_pods()
    wait_for(lambda: server.watch_requests(), "the watch")
    started = time.monotonic()
    reflector.stop()
    assert time.monotonic() - started < 1.0
    assert server.streams[-1].closed.is_set()
    assert not any(t.name == "reflector-pods" and t.is_alive() for t in threading.enumerate())


def test_backoff_doubles_from_200ms_to_5s() -> None:
    options = ReflectorOptions()
    assert [backoff_delay(n, options) for n in range(1, 9)] == pytest.approx([0.2, 0.4, 0.8, 1.6, 3.2, 5, 5, 5])
    assert backoff_delay(10_000, options) == 5
    assert backoff_delay(1, options, jitter=0.5) == pytest.approx(0.1)


def test_source_feeds_nodes_and_pods_to_the_sink(server: FakeApiServer, client: KubeClient,
                                                 sink: RecordingSink) -> None:
    server.add("n1", NODES)
    server.add("n2", NODES)
    server.add("p1")
    source = KubeClusterSource(client, resources=DEFAULT_RESOURCES, options=FAST)
    port: ClusterSource = source
    port.start(sink)
    try:
        assert source.wait_synced(5)
        assert sorted(sink.synced) == sorted(r.name for r in DEFAULT_RESOURCES)
        server.watch_script[NODES].append(lambda r: server.stream([{"type": "DELETED",
                                                                    "object": server.delete("n2", NODES)}], "hang"))
        # The first node watch is already open and silent: end it, as the server would, so the next
        # watch gets the scripted change.
        wait_for(lambda: server.idle_watches[NODES], "the node watch")
        server.idle_watches[NODES][0].close()
        wait_for(lambda: ("nodes", "DELETED", "n2") in [(r, k, n) for r, k, n, _ in sink.events], "node n2 deleted")
        assert sorted((r, k, n) for r, k, n, _ in sink.events) == [
            ("nodes", "ADDED", "n1"), ("nodes", "ADDED", "n2"), ("nodes", "DELETED", "n2"), ("pods", "ADDED", "ns/p1")]
        assert set(source.stats()) == {r.name for r in DEFAULT_RESOURCES}
    finally:
        port.stop()


def test_every_watched_resource_gets_a_watch_connection(server: FakeApiServer, client: KubeClient) -> None:
    """A watch beyond the watch pool's size would wait for a connection forever (its resource never synced)."""
    assert client.max_watch_connections >= len(DEFAULT_RESOURCES)
    config = KubeConfig(server="https://kube.test", token=StaticToken("t"))
    with (KubeClient(config, transport=httpx.MockTransport(server.handle), max_watch_connections=3) as small,
          pytest.raises(ValueError, match=rf"{len(DEFAULT_RESOURCES)} watched resources need at least as many watch")):
        KubeClusterSource(small, resources=DEFAULT_RESOURCES).start(RecordingSink())
