"""Leader election on a coordination.k8s.io Lease (client-go's algorithm, on a monotonic clock).

Another holder's lease counts as expired only when *we* have seen its record unchanged for a whole
leaseDuration (our clock, not its timestamps, and counted from when our read *returned*), so clock skew
between replicas and slow reads cannot split the brain. A leader that has not renewed within
renewDeadline stops being leader at once, and one that sees another holder in the lease stops at once.

Binds are fenced more tightly than leadership: a bind may only *start* while
last renewal + renewDeadline - fence margin is in the future, and the bind request's own timeout is at
most that margin (`bind_timeout`). So every bind has been answered or abandoned by the renew deadline,
and leaseDuration - renewDeadline is left for a request the API server still finishes after we gave up:
a standby, which waits a whole leaseDuration after the last renewal it saw, binds only after that.
"""

from __future__ import annotations

import logging
import math
import random
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime

from metrics_sched.config.model import LeaderElectionConfig
from metrics_sched.ports import ApiError, LeaseRecord, LeaseStore

log = logging.getLogger(__name__)


def micro_time() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def bind_timeout(config: LeaderElectionConfig) -> float:
    """The fence margin, and so the longest a bind request may take: half of what renewDeadline leaves
    after one retryPeriod. A leader whose renewals keep succeeding (every retryPeriod) never hits the fence;
    one whose renewals fail stops starting binds after renewDeadline - this (6 s with the defaults)."""
    return (config.renew_deadline - config.retry_period) / 2


def lease_seconds(duration: float) -> int:
    """leaseDurationSeconds is whole seconds: round up, so a standby never waits less than we assume."""
    return max(1, math.ceil(duration))


class LeaderElector:
    def __init__(
        self,
        store: LeaseStore,
        config: LeaderElectionConfig,
        identity: str,
        *,
        fence_margin: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """fence_margin: the bind request timeout (see bind_timeout()); binds stop that long before the
        renew deadline."""
        if not 0 <= fence_margin < config.renew_deadline:
            raise ValueError(f"fence margin {fence_margin:g}s must be in [0, renewDeadline {config.renew_deadline:g}s)")
        self.store = store
        self.config = config
        self.identity = identity
        self.fence_margin = fence_margin
        self._clock = clock
        self._lock = threading.Lock()
        self._last_renew: float | None = None
        self._observed: tuple[str | None, str | None, str | None] | None = None
        self._observed_at = 0.0
        self.lost = threading.Event()
        self.acquired = threading.Event()

    @property
    def is_leader(self) -> bool:
        return self._within(self.config.renew_deadline)

    def may_bind(self) -> bool:
        """Whether a bind may start now: leader, with the whole fence margin left before the renew deadline."""
        return self._within(self.config.renew_deadline - self.fence_margin)

    def _within(self, seconds: float) -> bool:
        with self._lock:
            return (
                self._last_renew is not None
                and not self.lost.is_set()
                and self._clock() - self._last_renew < seconds
            )

    def try_acquire_or_renew(self) -> bool:
        namespace, name = self.config.resource_namespace, self.config.resource_name
        duration = lease_seconds(self.config.lease_duration)
        current = self.store.get(namespace, name)
        # After the read returned: the record may have been written at any moment of the read.
        read_at = self._clock()
        stamp = micro_time()
        if current is None:
            sent_at = self._clock()
            self.store.create(LeaseRecord(namespace, name, self.identity, duration, stamp, stamp, 0))
            self._renewed(sent_at)
            return True
        observed = (current.holder, current.renew_time, current.resource_version)
        if observed != self._observed:
            self._observed, self._observed_at = observed, read_at
        held_by_other = current.holder not in (None, "", self.identity)
        if held_by_other:
            # Someone else holds it (we were too slow, or a partition healed): stop binding now, not at our
            # own deadline.
            self._superseded(current.holder)
            # Wait at least as long as our own config says, whatever the record (written by another
            # version, possibly truncated) claims.
            expires = self._observed_at + max(float(current.lease_duration_seconds), self.config.lease_duration)
            if expires > read_at:
                return False
        if current.holder == self.identity:
            record = LeaseRecord(namespace, name, self.identity, duration, current.acquire_time, stamp,
                                 current.lease_transitions, current.resource_version)
        else:
            record = LeaseRecord(namespace, name, self.identity, duration, stamp, stamp,
                                 current.lease_transitions + 1, current.resource_version)
        # The renewal counts from before it was sent: no standby can have seen it earlier.
        sent_at = self._clock()
        updated = self.store.update(record)
        self._observed = (updated.holder, updated.renew_time, updated.resource_version)
        self._observed_at = sent_at
        self._renewed(sent_at)
        return True

    def _renewed(self, at: float) -> None:
        with self._lock:
            self._last_renew = at

    def _superseded(self, holder: str | None) -> None:
        with self._lock:
            if self._last_renew is None:
                return
            self._last_renew = None
        log.error("lease %s/%s is held by %s: stopped binding", self.config.resource_namespace,
                  self.config.resource_name, holder)

    def run(self, stop: threading.Event, on_started: Callable[[], None], on_lost: Callable[[], None]) -> None:
        """Blocks: acquires, then renews every retryPeriod; calls on_lost once if leadership goes."""
        leading = False
        while not stop.is_set():
            try:
                ok = self.try_acquire_or_renew()
            except ApiError as exc:
                log.warning("leader election: %s", exc)
                ok = False
            except Exception:
                log.exception("leader election failed")
                ok = False
            if ok and not leading:
                leading = True
                self.acquired.set()
                log.info("became leader (lease %s/%s, identity %s)", self.config.resource_namespace,
                         self.config.resource_name, self.identity)
                on_started()
            if leading and not self.is_leader:
                self.lost.set()
                log.error("lost leadership (no renewal within %gs, or another holder)", self.config.renew_deadline)
                on_lost()
                return
            period = self.config.retry_period
            stop.wait(period if leading else period * (1 + 0.2 * random.random()))

    def release(self) -> None:
        """On clean shutdown, hand the lease over at once instead of letting it expire."""
        if not self.is_leader:
            return
        current = self.store.get(self.config.resource_namespace, self.config.resource_name)
        if current is None or current.holder != self.identity:
            return
        with self._lock:
            self._last_renew = None
        try:
            self.store.update(LeaseRecord(current.namespace, current.name, "", 1, current.acquire_time,
                                          micro_time(), current.lease_transitions, current.resource_version))
        except ApiError as exc:
            log.warning("could not release the lease: %s", exc)


class MemoryLeaseStore:
    """A LeaseStore in memory with the API server's optimistic concurrency (409 on a stale resourceVersion, 404 on an
    update of a missing Lease): for tests and benchmarks, where several electors share one process."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.leases: dict[tuple[str, str], LeaseRecord] = {}
        self.version = 0

    def get(self, namespace: str, name: str) -> LeaseRecord | None:
        with self.lock:
            return self.leases.get((namespace, name))

    def create(self, record: LeaseRecord) -> LeaseRecord:
        with self.lock:
            if (record.namespace, record.name) in self.leases:
                raise ApiError(409, "already exists")
            return self._store(record)

    def update(self, record: LeaseRecord) -> LeaseRecord:
        with self.lock:
            current = self.leases.get((record.namespace, record.name))
            if current is None:
                raise ApiError(404, "not found")
            if current.resource_version != record.resource_version:
                raise ApiError(409, "the object has been modified")
            return self._store(record)

    def _store(self, record: LeaseRecord) -> LeaseRecord:
        """Called with the lock held."""
        self.version += 1
        stored = LeaseRecord(record.namespace, record.name, record.holder, record.lease_duration_seconds,
                             record.acquire_time, record.renew_time, record.lease_transitions, str(self.version))
        self.leases[(record.namespace, record.name)] = stored
        return stored
