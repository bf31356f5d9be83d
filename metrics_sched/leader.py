"""Leader election on a coordination.k8s.io Lease (client-go's algorithm, on a monotonic clock).

Another holder's lease counts as expired only when *we* have seen its record unchanged for a whole
leaseDuration (our clock, not its timestamps), so clock skew between replicas cannot split the
brain. A leader that has not renewed within renewDeadline stops being leader at once: `is_leader`
turns False without waiting for the loop, and the bind path checks it before every bind.
"""

from __future__ import annotations

import logging
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


class LeaderElector:
    def __init__(
        self,
        store: LeaseStore,
        config: LeaderElectionConfig,
        identity: str,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store = store
        self.config = config
        self.identity = identity
        self._clock = clock
        self._lock = threading.Lock()
        self._last_renew: float | None = None
        self._observed: tuple[str | None, str | None, str | None] | None = None
        self._observed_at = 0.0
        self.lost = threading.Event()
        self.acquired = threading.Event()

    @property
    def is_leader(self) -> bool:
        with self._lock:
            return (
                self._last_renew is not None
                and not self.lost.is_set()
                and self._clock() - self._last_renew < self.config.renew_deadline
            )

    def try_acquire_or_renew(self) -> bool:
        now = self._clock()
        namespace, name = self.config.resource_namespace, self.config.resource_name
        duration = int(self.config.lease_duration)
        current = self.store.get(namespace, name)
        stamp = micro_time()
        if current is None:
            self.store.create(LeaseRecord(namespace, name, self.identity, duration, stamp, stamp, 0))
            self._renewed(now)
            return True
        observed = (current.holder, current.renew_time, current.resource_version)
        if observed != self._observed:
            self._observed, self._observed_at = observed, now
        held_by_other = current.holder not in (None, "", self.identity)
        if held_by_other and self._observed_at + current.lease_duration_seconds > now:
            return False
        if current.holder == self.identity:
            record = LeaseRecord(namespace, name, self.identity, duration, current.acquire_time, stamp,
                                 current.lease_transitions, current.resource_version)
        else:
            record = LeaseRecord(namespace, name, self.identity, duration, stamp, stamp,
                                 current.lease_transitions + 1, current.resource_version)
        updated = self.store.update(record)
        self._observed, self._observed_at = (updated.holder, updated.renew_time, updated.resource_version), now
        self._renewed(now)
        return True

    def _renewed(self, now: float) -> None:
        with self._lock:
            self._last_renew = now

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
                log.error("lost leadership (no renewal within %.0fs)", self.config.renew_deadline)
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
