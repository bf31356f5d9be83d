"""How much the rebalancer may disrupt: per-tick budgets and what it remembers between ticks.

Budgets count the evictions planned in one tick (the rebalancer ticks once per interval, so "per interval"):
per node, per namespace, cluster-wide, and one pod per owner (two replicas of one controller would break its
cooldown within the tick). A gang moved whole counts every member against the budgets together (all fit or
none is planned), and each of its owners once. Between ticks it remembers only
  - cooldowns: an owner (the pod's own key when it has none) evicted less than `cooldown_seconds` ago;
  - back-offs: a pod whose eviction was refused (429: a PodDisruptionBudget) or failed is not tried again
    for 2 intervals, doubling on each refusal in a row, at most max(cooldown, interval); any other outcome
    ends it.
Both are dropped once over, and back-offs of pods that left the cluster go too: memory follows recent
evictions and live pods, not history.

Memory is this replica's alone: a new leader (or a restart, or a replica that leads again after a gap) does
not know what was evicted before it (issue 44, defect 5). Until it has ticked for a whole cooldown, an owner
counts as cooling when one of its pods started less than a cooldown ago: the replacement of a pod evicted
then started after it, so an eviction it did not see holds its owner as long as it would have. (An owner
that merely scaled up or rolled waits too, during that first cooldown only.)
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Container, Sequence
from dataclasses import dataclass

from metrics_sched.rebalance.model import EvictionLimits
from metrics_sched.rebalance.wording import duration

__all__ = ["Budget", "Memory"]


class Budget:
    """One tick's allowance."""

    def __init__(self, limits: EvictionLimits) -> None:
        self.limits = limits
        self._nodes: Counter[str] = Counter()
        self._namespaces: Counter[str] = Counter()
        self._owners: set[str] = set()
        self._total = 0

    def refusal(self, node: str, namespace: str, owner: str) -> str | None:
        """Why one more eviction here is over the limits, or None."""
        limits = self.limits
        if self._total >= limits.cluster:
            return f"limit: {limits.cluster} per interval cluster-wide"
        if self._nodes[node] >= limits.per_node:
            return f"limit: {limits.per_node} per node per interval"
        if self._namespaces[namespace] >= limits.per_namespace:
            return f"limit: {limits.per_namespace} per namespace per interval"
        if owner in self._owners:
            return f"limit: one pod of {owner} per cooldown"
        return None

    def refusal_all(self, places: Sequence[tuple[str, str]], owners: Collection[str]) -> str | None:
        """Why evicting a whole gang, its members at `places` ((node, namespace) each) and of `owners`, is over
        the limits, or None: all its members count together, each owner once."""
        limits = self.limits
        if self._total + len(places) > limits.cluster:
            return f"limit: {limits.cluster} per interval cluster-wide ({len(places)} members)"
        for node, count in Counter(node for node, _ in places).items():
            if self._nodes[node] + count > limits.per_node:
                return f"limit: {limits.per_node} per node per interval ({count} members on {node})"
        for namespace, count in Counter(namespace for _, namespace in places).items():
            if self._namespaces[namespace] + count > limits.per_namespace:
                return f"limit: {limits.per_namespace} per namespace per interval ({count} members in {namespace})"
        for owner in sorted(owners):
            if owner in self._owners:
                return f"limit: one pod of {owner} per cooldown"
        return None

    def take_all(self, places: Sequence[tuple[str, str]], owners: Collection[str]) -> None:
        for node, namespace in places:
            self._total += 1
            self._nodes[node] += 1
            self._namespaces[namespace] += 1
        self._owners.update(owners)

    def take(self, node: str, namespace: str, owner: str) -> None:
        self._total += 1
        self._nodes[node] += 1
        self._namespaces[namespace] += 1
        self._owners.add(owner)

    def give_back(self, node: str, namespace: str, owner: str | None) -> None:
        """An eviction planned this tick that did not happen: its slots go to the next candidate (issue 44,
        defect 9: a pod a PodDisruptionBudget protects must not hold its node). `owner` None keeps the owner
        taken: another pod of an owner whose PDB refused would be refused too."""
        self._total -= 1
        self._nodes[node] -= 1
        self._namespaces[namespace] -= 1
        if owner is not None:
            self._owners.discard(owner)


@dataclass
class _BackOff:
    until: float
    refusals: int
    why: str
    since: float


class Memory:
    """Cooldowns by owner and back-offs by pod uid."""

    def __init__(self, limits: EvictionLimits, interval: float) -> None:
        self.limits = limits
        self.interval = interval
        self._evicted: dict[str, float] = {}  # owner key -> when its pod was evicted
        self._back_offs: dict[str, _BackOff] = {}  # pod uid -> its back-off
        self.since = 0.0  # when this replica's current run of ticks began (see ticked)
        self._last_tick: float | None = None

    def ticked(self, now: float) -> None:
        """A tick: one after a gap of more than 2 intervals (or the first) starts a run whose past is unknown."""
        if self._last_tick is None or now - self._last_tick > 2 * self.interval:
            self.since = now
        self._last_tick = now

    def unsure(self, now: float) -> bool:
        """Whether evictions by another replica (or before a restart) may still hold owners in their cooldown."""
        return now - self.since < self.limits.cooldown_seconds

    def started_recently(self, owner: str, youngest: float | None, now: float) -> str | None:
        """While unsure: why `owner`, whose youngest pod started at `youngest`, counts as cooling, or None."""
        if youngest is None or not self.unsure(now) or now - youngest >= self.limits.cooldown_seconds:
            return None
        return (f"cooldown: {owner} has a pod started {duration(now - youngest)} ago, and this replica has "
                f"rebalanced for {duration(now - self.since)} only (an eviction by a previous leader would be as "
                f"recent; for {duration(self.limits.cooldown_seconds)})")

    def evicted(self, owner: str, uid: str, now: float) -> None:
        self._evicted[owner] = now
        self._back_offs.pop(uid, None)

    def refused(self, uid: str, why: str, now: float) -> float:
        """A refused or failed eviction: backs the pod off; returns until when."""
        previous = self._back_offs.get(uid)
        refusals = previous.refusals + 1 if previous else 1
        cap = max(self.limits.cooldown_seconds, self.interval)
        until = now + min(cap, self.interval * 2.0 ** min(refusals, 30))
        self._back_offs[uid] = _BackOff(until, refusals, why, now)
        return until

    def settled(self, uid: str) -> None:
        """Any other outcome (gone, ...): the back-off ends."""
        self._back_offs.pop(uid, None)

    def cooling(self, owner: str, now: float) -> str | None:
        at = self._evicted.get(owner)
        if at is None or now - at >= self.limits.cooldown_seconds:
            return None
        cooldown = duration(self.limits.cooldown_seconds)
        return f"cooldown: {owner} had a pod evicted {duration(now - at)} ago (for {cooldown})"

    def backing_off(self, uid: str, now: float) -> str | None:
        entry = self._back_offs.get(uid)
        if entry is None or now >= entry.until:
            return None
        return (f"back-off: eviction {entry.why} {duration(now - entry.since)} ago; next try in "
                f"{duration(entry.until - now)}")

    def prune(self, now: float, live: Container[str]) -> None:
        """Drops cooldowns that are over and back-offs of pods no longer in the cluster (refusal counts of live
        pods stay, so a PDB that keeps refusing keeps doubling the wait)."""
        over = [o for o, at in self._evicted.items() if now - at >= self.limits.cooldown_seconds]
        for owner in over:
            del self._evicted[owner]
        for uid in [u for u in self._back_offs if u not in live]:
            del self._back_offs[uid]

    def size(self) -> int:
        return len(self._evicted) + len(self._back_offs)
