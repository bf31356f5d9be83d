"""The bind loop: runs each pod's binding cycle (Framework.run_binding_cycle) on a pool of workers and
hands its outcome to the scheduler's failure handler (scheduler.failures: the queue action and the report).

What a bind error means is decided by the Bind plugin (DefaultBinder re-reads the pod): bound by us
after all, bound elsewhere, gone, rejected, or unknown. An unknown outcome keeps the pod assumed
(never overcommit) and the same binding cycle runs again after a backoff. Whenever a pod is
un-assumed, the pods parked for lack of room get another try (kube-scheduler moves them as if an
assigned pod had been deleted).

`is_leader` is the leader's bind fence (LeaderElector.may_bind): looked at before every binding cycle; a
cycle that fails while it is closed is the replica's problem, not the pod's (requeued, not reported).
The bind request itself is fenced again in the client, after its rate limiter and just before it is sent.

The scheduling loop may hold its binds back briefly (`submit(hold=True)`, then `hand_over`) while more pods wait
for it: waking a worker costs the loop far more than the worker's own work. A woken thread waits for the GIL, and
the loop gives the GIL up in every numpy operation on a whole node column (numpy releases it past 500 elements):
each of those becomes a hand-off across CPUs until the worker has run. Several workers woken at once wait through
that once (bench, 5,000 nodes: waking an idle worker per decision cost the loop ~150 µs; 8 at once cost about
what one does). Having handed a batch over while more pods wait, the loop lets go of the GIL once (`yield_gil`),
so the workers just woken run their part now, at once, instead of at every numpy release of its next decisions:
in the core bench the binds' and their reports' ~450 µs then land on one decision instead of stretching three
(~5 % more decisions/s). With real bind requests a worker takes the GIL back only when its response comes in.
A decision that has already taken long (SLOW_DECISION: a candidate left its batch, a full cycle) does not hand a
batch over at its end: the next decision does, first thing, so no one decision pays for both (in the core bench at
5,000 nodes most of the slowest 1 % were such decisions, a batch's ~0.3 ms on top of a ~0.9 ms cycle).

A binding cycle that waits (PreBind for a volume's provisioner or a device's binding conditions, up to minutes) does
so in `framework.blocking()`: its worker leaves the pool for the wait and a new one takes its place (kube-scheduler
runs each binding cycle on its own goroutine), so the pool's workers stay free for API calls whatever waits, and a
waiting cycle does not count against the loop's backpressure either (`max_pending`: binds that need a worker). At
most MAX_WAITING threads wait so; past that a wait keeps its worker, as every wait once did.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from queue import SimpleQueue

from metrics_sched.framework.interfaces import BindOutcomeKind, BindStatus
from metrics_sched.framework.runtime import CycleResult, Framework
from metrics_sched.framework.status import Code
from metrics_sched.framework.worker_waits import hosted_by
from metrics_sched.model.podinfo import PodInfo
from metrics_sched.scheduler.failures import FailureHandler, Outcome, bind_outcome
from metrics_sched.scheduler.queue import SchedulingQueue
from metrics_sched.scheduler.reporting import PodReporter
from metrics_sched.state.cluster_state import ClusterState
from metrics_sched.supervision import Supervisor, Worker

log = logging.getLogger(__name__)

HANDOFF_BATCH = 8  # binds held back at most, while more pods wait for the loop
HANDOFF_DELAY = 0.002  # seconds the oldest held bind may wait for the batch to fill (checked at each decision)
# Seconds after which a decision leaves a due batch to the next one (module docstring): about twice what a batched
# decision takes at 5,000 nodes, so only the ones that also did something slow defer.
SLOW_DECISION = 0.0006
# Threads at most that left the pool to wait (module docstring). Each is a mostly idle thread (its stack is reserved,
# hardly touched); the bound keeps a flood of waits on a dead provisioner from exhausting the process's threads.
MAX_WAITING = 1024


class _Member:
    """One thread of the pool, and the BlockingHost its calls run under (framework.blocking)."""

    def __init__(self, pool: _Workers) -> None:
        self.pool = pool
        self.left = False  # replaced in the pool for a wait: exits once its call is done
        self.holding = False  # its current wait keeps its place (MAX_WAITING threads already wait)

    def wait_began(self) -> None:
        self.pool.wait_began(self)

    def wait_ended(self) -> None:
        self.pool.wait_ended(self)


@dataclass(frozen=True)
class BindOutcome:
    pod: PodInfo
    node: str
    result: BindOutcomeKind
    detail: str = ""
    seconds: float = 0.0


class _Workers:
    """A fixed set of daemon threads taking calls from one queue, started at the first call. What a
    ThreadPoolExecutor would do here, without its per-call Future, work item and idle semaphore: the binder
    reports outcomes itself and never waits on a call, and those cost ~12 µs of CPU per pod on the scheduling loop's
    interpreter (bench: a bind a decision)."""

    def __init__(self, workers: int, name: str, supervisor: Supervisor,
                 idle: Callable[[], None] | None = None, waiting: Callable[[int], None] | None = None,
                 max_waiting: int = MAX_WAITING) -> None:
        self.size = workers
        self.name = name
        self.supervisor = supervisor
        self.idle = idle  # called by a worker that finds no call waiting after its own
        self.waiting = waiting  # told +1 / -1 as a call begins / ends a wait it does off the pool
        self.max_waiting = max_waiting
        self._calls: SimpleQueue[Callable[[], object] | None] = SimpleQueue()
        self._threads: dict[_Member, threading.Thread] = {}  # the pool's and those that left it, until they end
        self._away = 0  # threads that left the pool and have not ended
        self._spawned = 0
        self._lock = threading.Lock()
        self._closed = False
        self._held: list[Callable[[], object]] = []  # submitted with hold=True, not yet queued
        self._held_since = 0.0
        self.clock: Callable[[], float] = time.monotonic

    def submit(self, call: Callable[[], object], *, hold: bool = False) -> None:
        """Queues `call` (with hold, keeps it until flush()); RuntimeError once shut down (as an executor's
        submit)."""
        with self._lock:  # so no call is queued behind the end markers of shutdown()
            if self._closed:
                raise RuntimeError("cannot schedule new binds after shutdown")
            if not self._threads:
                for _ in range(self.size):
                    self._spawn()
            if not hold:
                self._calls.put(call)
                return
            if not self._held:
                self._held_since = self.clock()
            self._held.append(call)

    def _spawn(self) -> None:
        """Under the lock. Supervised: a thread that dies fails /healthz, as the reporter's; one that left the pool
        ends when its call is done."""
        member = _Member(self)
        name = f"{self.name}_{self._spawned}"
        self._spawned += 1
        self._threads[member] = self.supervisor.spawn(Worker.BINDER, lambda: self._work(member), name=name,
                                                      stopping=lambda: self._closed or member.left)

    def threads(self) -> int:
        """Threads running: the pool's, and those that left it to wait."""
        with self._lock:
            return len(self._threads)

    def wait_began(self, member: _Member) -> None:
        """`member`'s call is about to wait: another thread takes its place in the pool (once per thread)."""
        with self._lock:
            member.holding = not member.left and (self._closed or self._away >= self.max_waiting)
            if member.holding:
                if not self._closed:
                    log.warning("%d bind waits already run off the pool: this one keeps its worker", self._away)
                return
            if not member.left:
                member.left = True
                self._away += 1
                self._spawn()
        if self.waiting is not None:
            self.waiting(1)

    def wait_ended(self, member: _Member) -> None:
        if not member.holding and self.waiting is not None:
            self.waiting(-1)

    def due(self) -> bool:
        """Whether the held calls should go now: a full batch, or the oldest has waited long enough."""
        held = len(self._held)  # read without the lock: only the holding thread adds to it
        return held >= HANDOFF_BATCH or (held > 0 and self.clock() - self._held_since >= HANDOFF_DELAY)

    def has_calls(self) -> bool:
        """Whether a queued call waits for a worker."""
        return not self._calls.empty()

    def flush(self) -> None:
        """Queues the held calls, in the order they were submitted."""
        if not self._held:
            return
        with self._lock:
            self._queue_held()

    def _queue_held(self) -> None:
        """Under the lock."""
        held, self._held = self._held, []
        for call in held:
            self._calls.put(call)

    def _work(self, member: _Member) -> None:
        with hosted_by(member):  # for the thread's life: nothing to set per call
            self._serve(member)

    def _serve(self, member: _Member) -> None:
        calls = self._calls
        while True:
            call = calls.get()
            if call is None:
                self._ended(member)
                return
            try:
                call()
            except Exception as exc:  # noqa: BLE001 - Binder._run guards itself; counted, and the worker goes on
                self.supervisor.failed(Worker.BINDER, exc)
            # Let go of it before waiting for the next: an idle worker's last call holds its pod's CycleResult
            # (whole-table score and evidence arrays, ~0.5 MB at 5,000 nodes), and 64 idle workers held 64.
            del call
            if member.left:  # its place was taken for its wait
                self._ended(member)
                return
            if self.idle is not None and calls.empty():
                try:
                    self.idle()
                except Exception as exc:  # noqa: BLE001 - as a call's
                    self.supervisor.failed(Worker.BINDER, exc)

    def _ended(self, member: _Member) -> None:
        with self._lock:
            if member.left:
                self._away -= 1
            del self._threads[member]

    def shutdown(self) -> None:
        """Runs what is queued, then stops the threads (one end marker each, after the queued calls)."""
        with self._lock:
            self._closed = True  # from now on no thread leaves the pool: one end marker for each in it
            threads = list(self._threads.values())
            in_pool = sum(not member.left for member in self._threads)
            self._queue_held()  # ahead of the end markers: shutdown runs what was submitted
        for _ in range(in_pool):
            self._calls.put(None)
        for thread in threads:
            thread.join()


class Binder:
    def __init__(
        self,
        state: ClusterState,
        queue: SchedulingQueue,
        reporter: PodReporter,
        *,
        workers: int,
        is_leader: Callable[[], bool],
        max_pending: int | None = None,
        on_outcome: Callable[[BindOutcome, CycleResult], None] | None = None,
        supervisor: Supervisor | None = None,
        failures: FailureHandler | None = None,
    ) -> None:
        self.supervisor = supervisor if supervisor is not None else Supervisor()
        self.state = state
        self.queue = queue
        self.reporter = reporter
        # What an outcome does to the pod (the scheduler's table, shared with its loop and Permit callback); an
        # unknown bind outcome comes back here to run the binding cycle again.
        self.failures = failures if failures is not None else FailureHandler(state, queue, reporter, self.supervisor)
        self.failures.rebind = self._retry_later
        self.is_leader = is_leader
        self.on_outcome = on_outcome
        # The Scheduled events of a batch of binds are written by a worker of the pool once the batch is bound,
        # while no bind waits for it (PodReporter.write_gathered): no writer woken for them.
        self.pool = _Workers(workers, "bind", self.supervisor, idle=self._between_batches, waiting=self._waiting)
        self.yield_gil: Callable[[], None] = lambda: time.sleep(0)  # releases the GIL, and takes it back
        self._in_flight = 0
        self._off_pool = 0  # of those in flight, the ones waiting off the pool (module docstring)
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        # Backpressure: when binds fall behind, the scheduling loop waits here instead of piling up assumed
        # pods (and their cycle state) in an unbounded executor queue; the pods wait, cheaply, in activeQ.
        self.max_pending = max_pending or 4 * workers

    def submit(self, framework: Framework, result: CycleResult, *, wait: bool = True, hold: bool = False) -> None:
        """Queues the pod's binding cycle. Only the scheduling loop waits for room (`wait`): a pod released
        from Permit by a bind worker, a timer or another thread must never block that thread. With `hold`
        (the loop's, while more pods wait for it) the cycle waits for hand_over() to queue it."""
        with self._idle:
            if wait and self._in_flight - self._off_pool >= self.max_pending:
                self.pool.flush()  # the room it waits for may be held by binds not yet queued
            while wait and self._in_flight - self._off_pool >= self.max_pending:
                self._idle.wait()
            self._in_flight += 1
        try:
            self.pool.submit(lambda: self._run(framework, result), hold=hold)
        except BaseException:
            with self._idle:  # not queued (shut down): it will not give its place back itself
                self._in_flight -= 1
                self._idle.notify_all()
            raise

    def hand_over(self, more: bool, began: float | None = None) -> None:
        """Queues the binds held back, unless `more` pods wait for the loop and the batch is neither full nor
        old (HANDOFF_BATCH, HANDOFF_DELAY): the loop calls this at each decision's start, at its end (`began`: when
        the decision began, on now()'s clock: one slower than SLOW_DECISION leaves the batch to the next decision's
        start), and before it waits."""
        if not more:
            self.pool.flush()
        elif self.pool.due() and (began is None or self.now() - began <= SLOW_DECISION):
            self.pool.flush()
            self.yield_gil()  # the loop goes on at once: let the workers just woken run first (module docstring)

    def now(self) -> float:
        """The clock hand-over decisions are timed by (the pool's: tests freeze it)."""
        return self.pool.clock()

    def _waiting(self, delta: int) -> None:
        """A binding cycle began (+1) or ended (-1) a wait off the pool: it needs no room meanwhile."""
        with self._idle:
            self._off_pool += delta
            self._idle.notify_all()

    def waiting(self) -> int:
        """Binding cycles waiting off the pool now."""
        with self._lock:
            return self._off_pool

    def _between_batches(self) -> None:
        """A worker found no bind waiting after its own: it writes the Scheduled events gathered meanwhile."""
        self.reporter.write_gathered(self.pool.has_calls)

    def in_flight(self) -> int:
        with self._lock:
            return self._in_flight

    def drain(self, timeout: float) -> bool:
        """Waits for binds in flight (SIGTERM); True when none is left."""
        deadline = time.monotonic() + timeout
        self.pool.flush()
        with self._idle:
            while self._in_flight:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._idle.wait(left)
        return True

    def shutdown(self) -> None:
        self.pool.shutdown()

    def _run(self, framework: Framework, result: CycleResult) -> BindOutcome:
        started = time.perf_counter()
        try:
            outcome = self._bind(framework, result)
        except Exception as exc:  # noqa: BLE001 - a bug outside the cycle: counted, the pod un-assumed and retried
            self.supervisor.failed(Worker.BINDER, exc, pod=result.pod.key)
            recover = functools.partial(self.failures.handle, Outcome.BIND_EXCEPTION, result, framework)
            self.supervisor.guard(Worker.BINDER, recover, pod=result.pod.key)
            outcome = BindOutcome(result.pod, result.node or "", BindOutcomeKind.ERROR, repr(exc))
        finally:
            # Always given back, or the scheduling loop would one day wait for room forever.
            with self._idle:
                self._in_flight -= 1
                self._idle.notify_all()
        outcome = BindOutcome(outcome.pod, outcome.node, outcome.result, outcome.detail,
                              time.perf_counter() - started)
        if self.on_outcome:
            try:
                self.on_outcome(outcome, result)
            except Exception as exc:  # noqa: BLE001 - logged and counted by the supervisor
                self.supervisor.failed(Worker.BINDER, exc, pod=result.pod.key)
        return outcome

    def _bind(self, framework: Framework, result: CycleResult) -> BindOutcome:
        pod, node = result.pod, result.node
        assert node is not None
        if not self.is_leader():
            self.failures.handle(Outcome.NOT_LEADER, result, framework)
            return BindOutcome(pod, node, BindOutcomeKind.NOT_LEADER)
        if not self.state.has_node(node):
            self.failures.handle(Outcome.NODE_GONE, result, framework)
            return BindOutcome(pod, node, BindOutcomeKind.NODE_GONE)
        try:
            status = framework.run_binding_cycle(result)
        except Exception as exc:  # noqa: BLE001 - the framework catches plugin errors: a bug in the cycle itself
            self.supervisor.failed(Worker.BINDER, exc, pod=pod.key)
            framework.unwind(result)
            status = BindStatus(Code.ERROR, repr(exc), "framework", BindOutcomeKind.ERROR)
        kind = status.outcome or BindOutcomeKind.ERROR
        if kind in (BindOutcomeKind.ERROR, BindOutcomeKind.REJECTED) and not self.is_leader():
            # The fence closed during the cycle (the bind was refused unsent, or failed meanwhile): not the
            # pod's fault, and a replica about to lose the lease reports nothing on it.
            self.failures.handle(Outcome.NOT_LEADER, result, framework)
            return BindOutcome(pod, node, BindOutcomeKind.NOT_LEADER, status.reason)
        try:
            self.failures.handle(bind_outcome(kind), result, framework, status)
        except Exception as exc:  # noqa: BLE001 - logged and counted by the supervisor
            self.supervisor.failed(Worker.BINDER, exc, pod=pod.key)
        return BindOutcome(pod, node, kind, status.reason)

    def _retry_later(self, framework: Framework, result: CycleResult) -> None:
        """Runs the same binding cycle again after a backoff (growing with each unknown outcome, up to the
        queue's maximum); the pod stays assumed meanwhile."""
        with self._lock:
            self._in_flight += 1
        result.bind_retries += 1
        def again() -> None:
            if not self.supervisor.guard(Worker.BINDER, lambda: self.pool.submit(lambda: self._run(framework, result)),
                                         pod=result.pod.key):
                with self._idle:  # the pool is gone (shutting down): the retry will not run
                    self._in_flight -= 1
                    self._idle.notify_all()

        timer = threading.Timer(self.queue.backoff_duration(result.pod.attempts + result.bind_retries), again)
        timer.daemon = True
        timer.start()
