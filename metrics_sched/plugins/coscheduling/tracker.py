"""The live state of each gang's attempt: which members hold a node (reserved, waiting at Permit), the
domain chosen for the gang, whether the quorum was reached, and the backoff after a failed attempt.

An attempt starts when the first member is reserved and ends when minMember members hold a node (then all
are allowed at once) or when it fails: a member found no node, a member's Permit wait timed out, a member
was rejected or deleted. A failure rejects every waiting member together (their Unreserve frees what they
held), clears the domain (the next attempt chooses again, on fresh telemetry) and backs the group off.

Touched by the scheduling thread, Permit timers and bind workers: one re-entrant lock, never held while a
waiting pod is rejected or allowed (that calls back into Unreserve).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from metrics_sched.framework import GroupKey
from metrics_sched.plugins.coscheduling.placement import DomainChoice

__all__ = ["FAILURE_REASONS", "SCHEDULED", "Attempt", "FailureReason", "GangDecision", "GangTracker"]

SCHEDULED = "scheduled"  # the outcome of an attempt that reached its quorum (the others end with a FailureReason)


class FailureReason:
    TIMEOUT = "timeout"  # a member's Permit wait ran out
    MEMBER_UNSCHEDULABLE = "member_unschedulable"  # a member found no node (PostFilter)
    NO_DOMAIN = "no_domain"  # no topology domain holds the whole gang
    MEMBER_REJECTED = "member_rejected"  # a member was rejected or unreserved otherwise (deleted, bind failed...)


FAILURE_REASONS = (FailureReason.TIMEOUT, FailureReason.MEMBER_UNSCHEDULABLE, FailureReason.NO_DOMAIN,
                   FailureReason.MEMBER_REJECTED)


@dataclass(frozen=True)
class GangDecision:
    """Where the gang goes this attempt, and why: every member's decision record links here."""

    group: GroupKey
    topology_key: str
    domain: str | None  # None: members placed by score alone (no domain to choose, or the configured fallback)
    chosen_by: str  # the member whose cycle chose it
    why: str

    def note(self) -> str:
        where = f"{self.topology_key}={self.domain}" if self.domain is not None else "no single domain"
        return f"gang {self.group} ({self.group.api}): {where}, chosen with member {self.chosen_by}: {self.why}"


@dataclass
class Attempt:
    started: float  # monotonic
    reserved: dict[str, str] = field(default_factory=dict)  # uid -> node
    decision: GangDecision | None = None
    choice: DomainChoice | None = None
    complete: bool = False  # the quorum was reached: every member was allowed


Observer = Callable[[GroupKey, str, float], None]  # (group, outcome SCHEDULED or a FailureReason, seconds)


class GangTracker:
    def __init__(self, clock: Callable[[], float] = time.monotonic, wall: Callable[[], float] = time.time) -> None:
        self._lock = threading.RLock()
        self._clock = clock
        self._wall = wall
        self._attempts: dict[GroupKey, Attempt] = {}
        self._backoff_until: dict[GroupKey, float] = {}
        self._last_failure: dict[GroupKey, float] = {}  # wall time: the group's place in the queue after it
        self.observers: list[Observer] = []

    # -- attempts --------------------------------------------------------------------------------
    def attempt(self, key: GroupKey) -> Attempt | None:
        with self._lock:
            return self._attempts.get(key)

    def decision(self, key: GroupKey) -> GangDecision | None:
        with self._lock:
            found = self._attempts.get(key)
            return found.decision if found is not None else None

    def age(self, attempt: Attempt) -> float:
        """Seconds since the attempt's first member was reserved."""
        return self._clock() - attempt.started

    def decide(self, key: GroupKey, decision: GangDecision, choice: DomainChoice | None) -> None:
        with self._lock:
            attempt = self._attempts.setdefault(key, Attempt(self._clock()))
            attempt.decision, attempt.choice = decision, choice

    def reserve(self, key: GroupKey, uid: str, node: str, live: set[str] | frozenset[str] = frozenset()) -> None:
        """`live`: the group's members now. A complete attempt none of whose members is still live belongs to an
        earlier run of the gang (its pods were deleted and created again): a new attempt starts."""
        with self._lock:
            found = self._attempts.get(key)
            if found is not None and found.complete and not any(u in live for u in found.reserved):
                found = None
            if found is None:
                found = self._attempts[key] = Attempt(self._clock())
            found.reserved[uid] = node

    def retire(self, key: GroupKey, live: set[str] | frozenset[str]) -> bool:
        """Drops a complete attempt none of whose members is among `live` (the group's members now): it placed an
        earlier run of the gang (its pods were deleted, or evicted together), and its domain binds no replacement.
        True if it was dropped."""
        with self._lock:
            found = self._attempts.get(key)
            if found is None or not found.complete or any(u in live for u in found.reserved):
                return False
            del self._attempts[key]
            return True

    def reserved(self, key: GroupKey) -> dict[str, str]:
        with self._lock:
            found = self._attempts.get(key)
            return dict(found.reserved) if found is not None else {}

    def unreserve(self, key: GroupKey, uid: str) -> bool:
        """Drops the member; True if it held a place in an attempt that has not reached its quorum (which
        fails the attempt)."""
        with self._lock:
            found = self._attempts.get(key)
            if found is None or uid not in found.reserved:
                return False
            del found.reserved[uid]
            if found.complete:
                if not found.reserved:
                    del self._attempts[key]
                return False
            return True

    def complete(self, key: GroupKey) -> float | None:
        """The quorum is reached: the seconds the attempt took (None if it was already complete)."""
        with self._lock:
            found = self._attempts.get(key)
            if found is None or found.complete:
                return None
            found.complete = True
            self._last_failure.pop(key, None)
            seconds = self._clock() - found.started
        for observer in self.observers:
            observer(key, SCHEDULED, seconds)
        return seconds

    def fail(self, key: GroupKey, reason: str, backoff: float) -> dict[str, str] | None:
        """Ends the attempt (counted by the observers even if no member held a node yet) and backs the group off:
        the members that held a node (uid -> node), to reject; None if no attempt was running."""
        with self._lock:
            found = self._attempts.get(key)
            if found is not None and found.complete:
                return None  # the gang is placed: a late member's failure is its own
            self._attempts.pop(key, None)
            if backoff > 0:
                self._backoff_until[key] = self._clock() + backoff
            self._last_failure[key] = self._wall()
            seconds = self._clock() - found.started if found is not None else 0.0
        for observer in self.observers:
            observer(key, reason, seconds)
        return found.reserved if found is not None else None

    # -- backoff and queue order -----------------------------------------------------------------
    def backoff_left(self, key: GroupKey) -> float:
        with self._lock:
            until = self._backoff_until.get(key)
            if until is None:
                return 0.0
            left = until - self._clock()
            if left <= 0:
                del self._backoff_until[key]
                return 0.0
            return left

    def last_failure(self, key: GroupKey) -> float | None:
        with self._lock:
            return self._last_failure.get(key)

    def prune(self, known: Callable[[GroupKey], bool]) -> None:
        """Drops the state of groups that no longer exist."""
        with self._lock:
            for key in [k for k in (*self._attempts, *self._backoff_until, *self._last_failure) if not known(k)]:
                self._attempts.pop(key, None)
                self._backoff_until.pop(key, None)
                self._last_failure.pop(key, None)

    def forget(self, key: GroupKey) -> None:
        """The group is gone."""
        with self._lock:
            self._attempts.pop(key, None)
            self._backoff_until.pop(key, None)
            self._last_failure.pop(key, None)

    def active(self) -> dict[GroupKey, Attempt]:
        with self._lock:
            return dict(self._attempts)
