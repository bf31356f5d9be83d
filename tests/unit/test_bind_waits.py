"""Issue 44, defect 3: a binding cycle that waits must not hold the binder's shared pool.

VolumeBinding's PreBind waits, up to bindTimeoutSeconds, for the provisioner and the PV controller to finish what it
wrote. With 2 bind workers and a provisioner that never answers, two such waits held both workers, and a pod without
volumes bound only once they timed out. kube-scheduler runs each binding cycle on its own goroutine; here a waiting
cycle's worker is replaced in the pool for the wait (framework.blocking), and the wait does not count against the
scheduling loop's backpressure (Binder.max_pending) either.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from metrics_sched.framework import blocking
from metrics_sched.framework.worker_waits import hosted_by
from metrics_sched.plugins.volumes import VolumeStore
from metrics_sched.scheduler import Scheduler
from metrics_sched.scheduler.binding import _Workers
from metrics_sched.supervision import Supervisor
from tests.polling import poll
from tests.schedulers import make_scheduler
from tests.unit.fakes import FakeAPI
from tests.unit.fakes import node as fake_node
from tests.unit.fakes import pod as fake_pod
from tests.unit.test_volume_binding import (
    KEY,
    PROVISIONING,
    Cluster,
    FakeVolumeWriter,
    _LateWriter,
    claim_pod,
    pvc,
    storage_class,
)

pytestmark = pytest.mark.unit

BIND_TIMEOUT = 60  # seconds a volume wait may last: far past what any assertion here waits for


@pytest.fixture
def stopped() -> Iterator[list[Scheduler]]:
    started: list[Scheduler] = []
    yield started
    for scheduler in started:
        scheduler.stop(drain_timeout=5)


def _start(workers: int, started: list[Scheduler]) -> tuple[Scheduler, FakeAPI, Cluster, FakeVolumeWriter]:
    """A running scheduler whose provisioner never answers: PreBind writes the claim's selected node and waits."""
    api = FakeAPI()
    box: list[FakeVolumeWriter] = []
    config = {"bindWorkers": workers, "profiles": [{"pluginConfig": [
        {"name": "VolumeBinding", "args": {"bindTimeoutSeconds": BIND_TIMEOUT}}]}]}
    scheduler = make_scheduler(config, api, volume_writer=_LateWriter(box))
    cluster = Cluster(scheduler.state, scheduler.indexes.get(VolumeStore), scheduler.handlers.on_object_event)
    box.append(FakeVolumeWriter(cluster))
    node = fake_node("node1")
    node["metadata"]["labels"][KEY] = "node1"  # in the provisioning class's allowed topology
    scheduler.handlers.on_node_event("ADDED", node)
    cluster.put(storage_class(PROVISIONING, topology=["node1"]))
    scheduler.start()
    started.append(scheduler)
    return scheduler, api, cluster, box[0]


def _add_waiting_pods(api: FakeAPI, cluster: Cluster, writer: FakeVolumeWriter, count: int) -> None:
    """`count` pods whose PreBind wrote their claim's selected node, and waits for a provisioner that never comes."""
    for i in range(count):
        cluster.put(pvc(f"data-{i}", sc=PROVISIONING))
        api.add_pod(claim_pod(f"data-{i}", name=f"db-{i}", pod_uid=f"uid-db-{i}"))
    poll(lambda: len(writer.calls) == count, 10, f"{count} claims given their node", interval=0.01)


@pytest.mark.parametrize(("workers", "waits"), [
    (2, 2),  # the reproduction: every worker of the pool in a volume wait
    (1, 5),  # more waits than Binder.max_pending (4 per worker): the loop must not stop for room they hold
])
def test_a_pod_without_volumes_binds_while_volume_waits_fill_the_pool(
        stopped: list[Scheduler], workers: int, waits: int) -> None:
    scheduler, api, cluster, writer = _start(workers, stopped)
    _add_waiting_pods(api, cluster, writer, waits)
    began = time.monotonic()
    api.add_pod(fake_pod("web"))
    poll(lambda: ("default/web", "node1") in api.binds, 5, "the pod without volumes bound", interval=0.01)
    assert time.monotonic() - began < 5
    assert scheduler.binder.in_flight() == waits  # the waiting ones still wait: nothing timed out
    assert scheduler.binder.waiting() == waits
    # Each wait runs on a thread of its own; the pool keeps its size for API work.
    assert scheduler.binder.pool.threads() == workers + waits
    # The provisioner answers one claim: that wait ends, its pod binds, its thread leaves.
    cluster.provision("data-0", "node1", volume="pv-0")
    poll(lambda: ("default/db-0", "node1") in api.binds, 5, "db-0 bound once its volume is", interval=0.01)
    poll(lambda: scheduler.binder.pool.threads() == workers + waits - 1, 5, "the thread of the ended wait gone",
         interval=0.01)
    assert scheduler.binder.waiting() == waits - 1
    assert not scheduler.supervisor.problems()  # a thread leaving the pool is no dead worker
    for i in range(1, waits):  # deleted pods end their waits (PreBind checks the pod is still placed)
        api.delete_pod(f"default/db-{i}")
    poll(lambda: scheduler.binder.in_flight() == 0, 10, "the other waits ended", interval=0.01)
    poll(lambda: scheduler.binder.pool.threads() == workers, 5, "only the pool's threads left", interval=0.01)
    assert not scheduler.supervisor.problems()


def test_waits_past_the_bound_keep_their_worker_and_shutdown_ends_every_thread() -> None:
    """max_waiting threads at most wait off the pool; a wait past it runs on its worker (as before the fix)."""
    supervisor = Supervisor()
    counted: list[int] = []
    pool = _Workers(1, "test", supervisor, waiting=counted.append, max_waiting=1)
    release = threading.Event()
    entered = threading.Semaphore(0)

    def wait() -> None:
        with blocking():
            entered.release()
            assert release.wait(10)

    done: list[str] = []
    pool.submit(wait)
    assert entered.acquire(timeout=5)
    poll(lambda: pool.threads() == 2, 5, "a thread in the waiting one's place")
    pool.submit(wait)  # the replacement takes it: past the bound, it waits on its worker
    assert entered.acquire(timeout=5)
    assert pool.threads() == 2 and counted == [1]
    pool.submit(lambda: done.append("api call"))
    assert pool.has_calls() and done == []  # both threads wait: no one takes it
    release.set()
    poll(lambda: done == ["api call"], 5, "the queued call run once the wait ended")
    pool.shutdown()
    assert pool.threads() == 0 and counted == [1, -1]
    assert not supervisor.problems()


def test_blocking_outside_a_pool_or_nested_changes_nothing() -> None:
    """A plugin called by a test or the scheduling thread waits in place; a wait inside a wait counts once."""
    with blocking():
        pass
    calls: list[str] = []

    class Host:
        def wait_began(self) -> None:
            calls.append("began")

        def wait_ended(self) -> None:
            calls.append("ended")

    with hosted_by(Host()):
        with blocking(), blocking():
            pass
        with blocking():
            pass
    assert calls == ["began", "ended", "began", "ended"]
