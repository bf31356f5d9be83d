"""Split-brain fences of leader election (issue 14 item 3), on a fake monotonic clock.

The invariant: a standby may bind only after the old leader's binds have all started and been answered
or abandoned (at most fence margin after the last bind started), with slack for the API server.
"""

from __future__ import annotations

import contextlib
import socket
import socketserver
import threading
from collections.abc import Callable, Iterator

import httpx
import pytest

from adapters.kubernetes.client import Fenced, KubeClient, WriteFence, lease_client
from adapters.kubernetes.config import KubeConfig
from adapters.kubernetes.pod_writer import KubePodWriter
from adapters.kubernetes.rate_limit import TokenBucket
from adapters.kubernetes.tokens import StaticToken
from metrics_sched.config import LeaderElectionConfig
from metrics_sched.leader import LeaderElector, bind_timeout
from metrics_sched.ports import ApiError, LeaseRecord
from tests.unit.fakes import FakeAPI

pytestmark = pytest.mark.unit

NS, NAME = "kube-system", "metrics-sched"


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_binds_stop_a_fence_margin_before_the_renew_deadline() -> None:
    store, clock = FakeAPI(), Clock()
    config = LeaderElectionConfig()  # 15 s / 10 s / 2 s
    margin = bind_timeout(config)
    assert margin == 4.0
    a = LeaderElector(store, config, "a", fence_margin=margin, clock=clock)
    assert a.try_acquire_or_renew() and a.may_bind()
    clock.now = 10 - margin - 0.01
    assert a.may_bind()
    clock.now = 10 - margin + 0.01
    assert a.is_leader and not a.may_bind()  # still the holder, but no new bind may start
    assert a.try_acquire_or_renew() and a.may_bind()  # a renewal reopens the fence


def test_the_fence_margin_must_leave_room_before_the_deadline() -> None:
    with pytest.raises(ValueError, match="fence margin"):
        LeaderElector(FakeAPI(), LeaderElectionConfig(), "a", fence_margin=10.0)


def test_a_holder_that_sees_another_holder_stops_at_once() -> None:
    store, clock = FakeAPI(), Clock()
    a = LeaderElector(store, LeaderElectionConfig(), "a", fence_margin=4, clock=clock)
    assert a.try_acquire_or_renew()
    clock.now = 1.0
    # b took the lease (say a's renewals were stuck long enough for b to see it expire on b's clock).
    current = store.get(NS, NAME)
    assert current is not None
    store.update(LeaseRecord(NS, NAME, "b", 15, "t", "t", 1, current.resource_version))
    assert not a.try_acquire_or_renew()
    assert not a.is_leader and not a.may_bind()  # not at a's own deadline (t=10): now


def test_the_standby_counts_from_when_its_read_returned() -> None:
    """A slow GET: the record it returns may have been written just before the answer."""
    store, clock = FakeAPI(), Clock()
    config = LeaderElectionConfig()
    a = LeaderElector(store, config, "a", fence_margin=4, clock=clock)
    assert a.try_acquire_or_renew()

    class SlowRead:
        """b's GET takes 6 s, and a renews while it is on the wire."""

        def __init__(self) -> None:
            self.calls = 0

        def get(self, namespace: str, name: str) -> LeaseRecord | None:
            self.calls += 1
            if self.calls == 1:
                clock.now += 5.9
                assert a.try_acquire_or_renew()
                clock.now += 0.1
            return store.get(namespace, name)

        def create(self, record: LeaseRecord) -> LeaseRecord:
            return store.create(record)

        def update(self, record: LeaseRecord) -> LeaseRecord:
            return store.update(record)

    b = LeaderElector(SlowRead(), config, "b", fence_margin=4, clock=clock)
    assert not b.try_acquire_or_renew()  # read at t=6: a's renewal of t=5.9
    clock.now = 15.5  # a is leader until 5.9 + 10
    assert a.is_leader
    assert not b.try_acquire_or_renew() and not b.is_leader
    clock.now = 6.0 + 15 + 0.01
    assert not a.is_leader
    assert b.try_acquire_or_renew() and b.is_leader


def test_fractional_lease_durations_are_not_truncated() -> None:
    store, clock = FakeAPI(), Clock()
    config = LeaderElectionConfig(lease_duration=10.9, renew_deadline=10.5, retry_period=2.0)
    a = LeaderElector(store, config, "a", clock=clock)
    b = LeaderElector(store, config, "b", clock=clock)
    assert a.try_acquire_or_renew()
    assert not b.try_acquire_or_renew()
    lease = store.get(NS, NAME)
    assert lease is not None and lease.lease_duration_seconds == 11  # rounded up, never down
    clock.now = 10.2
    assert a.is_leader
    assert not b.try_acquire_or_renew()  # truncated to 10 s, b would take over while a still leads
    clock.now = 11.0
    assert not a.is_leader
    assert b.try_acquire_or_renew()


def test_a_short_lease_record_does_not_shorten_our_wait() -> None:
    """A record written by another version with a shorter (truncated) duration: our own leaseDuration wins."""
    store, clock = FakeAPI(), Clock()
    store.create(LeaseRecord(NS, NAME, "old", 10, "t", "t", 0))
    b = LeaderElector(store, LeaderElectionConfig(), "b", clock=clock)
    assert not b.try_acquire_or_renew()
    clock.now = 14.9
    assert not b.try_acquire_or_renew()
    clock.now = 15.0
    assert b.try_acquire_or_renew()


# -- the write fence in the Kubernetes client ----------------------------------------------------------
class Fence:
    """A fence that closes after `open_for` looks (or at a clock time, with the leader elector)."""

    def __init__(self, open_for: int) -> None:
        self.looks = 0
        self.open_for = open_for

    def __call__(self) -> bool:
        self.looks += 1
        return self.looks <= self.open_for


def fenced_client(fence: Callable[[], bool], handler: Callable[[httpx.Request], httpx.Response],
                  timeout: float = 4.0) -> KubeClient:
    config = KubeConfig(server="https://kube.test", token=StaticToken("t"))
    return KubeClient(config, qps=1.0, burst=1, write_fence=WriteFence(fence, timeout),
                      transport=httpx.MockTransport(handler))


def test_a_bind_is_not_sent_when_the_fence_closes_while_the_token_bucket_sleeps() -> None:
    store, clock = FakeAPI(), Clock()
    elector = LeaderElector(store, LeaderElectionConfig(), "a", fence_margin=4, clock=clock)
    assert elector.try_acquire_or_renew()
    sent: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append(request.url.path)
        return httpx.Response(201, json={"kind": "Status"})

    client = fenced_client(elector.may_bind, handler)
    assert client.limiter is not None
    clock.now = 5.0
    client.limiter = TokenBucket(1.0, 1, clock=clock, sleep=lambda s: setattr(clock, "now", clock.now + s))
    writer = KubePodWriter(client)
    writer.bind("default", "p", "uid-1", "n0")  # t=5: the fence is open (until 10 - 4)
    assert sent == ["/api/v1/namespaces/default/pods/p/binding"]
    with pytest.raises(Fenced):
        writer.bind("default", "q", "uid-2", "n0")  # waits 1 s for a token: t=6, fence closed
    assert len(sent) == 1
    writer.get_pod("default", "q")  # reads are never fenced
    assert sent[-1] == "/api/v1/namespaces/default/pods/q"


def _silent(request: socket.socket) -> None:
    """Reads the request, answers nothing: a partitioned or overloaded API server."""
    request.recv(65536)  # until the client gives up and closes


def _created(request: socket.socket) -> None:
    request.sendall(b"HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")


@contextlib.contextmanager
def loopback(answer: Callable[[socket.socket], None]) -> Iterator[tuple[KubeConfig, list[bytes]]]:
    """A one-thread-per-connection server; yields its address and what each connection sent first."""
    received: list[bytes] = []

    class Handler(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            received.append(self.request.recv(65536))
            answer(self.request)

    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    try:
        yield KubeConfig(server=f"http://127.0.0.1:{server.server_address[1]}", token=StaticToken("t")), received
    finally:
        server.shutdown()
        server.server_close()


def test_the_fence_is_checked_again_once_a_connection_is_in_hand() -> None:
    """Waiting for a pooled connection and connecting happen after the first look: the last look is
    made when the first byte is about to go out."""
    with loopback(_created) as (config, received), \
            KubeClient(config, write_fence=WriteFence(Fence(open_for=1), 4.0)) as client, pytest.raises(Fenced):
        client.send("POST", "/api/v1/namespaces/default/pods/p/binding", {})
    assert not any(received)  # connected, but not a byte of the request was sent
    with loopback(_created) as (config, received), \
            KubeClient(config, write_fence=WriteFence(Fence(open_for=2), 4.0)) as client:
        assert client.send("POST", "/api/v1/namespaces/default/pods/p/binding", {}) == 201
    assert [r.split(b" ", 2)[:2] for r in received] == [[b"POST", b"/api/v1/namespaces/default/pods/p/binding"]]


def test_a_started_write_is_abandoned_within_the_fence_timeout() -> None:
    """The server takes the bind and never answers: the client gives up (outcome unknown) instead of waiting
    the client's 30 s request timeout, past the renew deadline."""
    with loopback(_silent) as (config, received), \
            KubeClient(config, write_fence=WriteFence(lambda: True, 0.2), request_timeout=30) as client, \
            pytest.raises(ApiError) as raised:
        client.send("POST", "/api/v1/namespaces/default/pods/p/binding", {})
    assert raised.value.ambiguous and not isinstance(raised.value, Fenced)
    assert len(received) == 1


def test_leases_have_a_client_of_their_own() -> None:
    """Lease calls never queue behind binds and reports for a connection, nor behind the rate limiter."""
    config = KubeConfig(server="https://kube.test", token=StaticToken("t"))
    client = lease_client(config, request_timeout=5.0, transport=httpx.MockTransport(lambda r: httpx.Response(200)))
    assert client.limiter is None and client.write_fence is None and client.request_timeout == 5.0
