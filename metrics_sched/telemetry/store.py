"""MetricValues: one metric's latest value per key, held in arrays (the MetricCache's store).

A key is a node name (the node store), or a (node, device id) pair (the device store, DeviceValues in
metrics_sched.telemetry.devices). Each key the metric has a value for owns a slot; a slot holds the value,
its observed_at (the stamp clamped to the fetch, scheduler clock), its fetched_at, the sample's own stamp and
the source (by id). Arrays rather than an object per key: a refresh of 5,000 nodes (or 40,000 GPUs) is stored
by a few numpy operations, and the bookkeeping after it (freshness, coverage, expiry) is vectorised too. A
source's batch usually names the same keys in the same order refresh after refresh: the slots of its keys are
remembered per source (`slots_for`) and reused while no slot has been freed since, so a refresh does no lookup
per key.

Not thread-safe: the cache holds its lock around every use.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Iterator
from typing import Generic, TypeVar

import numpy as np
import numpy.typing as npt

from metrics_sched.state.node_table import FloatArray

__all__ = ["NO_SLOT", "NO_SOURCE", "SENTINEL_LIMIT", "IntArray", "MetricValues"]

IntArray = npt.NDArray[np.intp]
NO_SOURCE = -1  # the source id of a free slot
NO_SLOT = -1  # what `_slot` gives a key it refuses (a store with a bound: DeviceValues)
# Values beyond this are an exporter's "blank" sentinels, never a measurement: the adapters drop them already,
# the store never trusts them either.
SENTINEL_LIMIT = 1e15

K = TypeVar("K", bound=Hashable)


class MetricValues(Generic[K]):
    def __init__(self) -> None:
        self.slots: dict[K, int] = {}  # key -> slot
        self.keys: list[K | None] = []  # slot -> key (None: free)
        self._free: list[int] = []
        self.value: FloatArray = np.empty(0)
        self.observed: FloatArray = np.empty(0)
        self.fetched: FloatArray = np.empty(0)
        self.stamp: FloatArray = np.empty(0)
        self.source: npt.NDArray[np.int32] = np.empty(0, dtype=np.int32)
        # Bumped whenever a slot is freed: slot arrays remembered before then may point at reused slots.
        self.layout = 0
        # Bumped whenever a slot changes hands (given to a key or freed): what slot -> row maps are keyed on.
        self.assigned = 0
        # source id -> (layout, the batch's key list, its slots)
        self._batch_slots: dict[int, tuple[int, list[K], IntArray]] = {}

    # A key can own a slot without a value (its first value was invalid): these read only keys with one.
    def __len__(self) -> int:
        return int(np.count_nonzero(self.source[: self.size] != NO_SOURCE))

    def __iter__(self) -> Iterator[K]:
        source = self.source
        return iter([key for key, slot in self.slots.items() if source[slot] != NO_SOURCE])

    def held(self, key: K) -> int | None:
        """The slot holding the key's value, or None when it has none."""
        slot = self.slots.get(key)
        return None if slot is None or self.source[slot] == NO_SOURCE else slot

    @property
    def size(self) -> int:
        """Slots in use or free (the arrays' meaningful length)."""
        return len(self.keys)

    def _grow(self, needed: int) -> None:
        capacity = len(self.value)
        if needed <= capacity:
            return
        capacity = max(needed, 2 * capacity, 64)

        def grown(array: npt.NDArray[np.generic], fill: float) -> npt.NDArray[np.generic]:
            out = np.full(capacity, fill, dtype=array.dtype)
            out[: len(array)] = array
            return out

        self.value = grown(self.value, np.nan)  # type: ignore[assignment]
        self.observed = grown(self.observed, -np.inf)  # type: ignore[assignment]
        self.fetched = grown(self.fetched, -np.inf)  # type: ignore[assignment]
        self.stamp = grown(self.stamp, np.nan)  # type: ignore[assignment]
        self.source = grown(self.source, NO_SOURCE)  # type: ignore[assignment]

    def _slot(self, key: K) -> int:
        """The key's slot, a new one for a new key (a subclass may refuse one: NO_SLOT)."""
        slot = self.slots.get(key)
        if slot is None:
            if self._free:
                slot = self._free.pop()
                self.keys[slot] = key
            else:
                slot = len(self.keys)
                self._grow(slot + 1)
                self.keys.append(key)
            self.slots[key] = slot
            self.assigned += 1
        return slot

    def slots_for(self, source: int, keys: list[K]) -> IntArray | None:
        """The slot of each key (new slots for new keys; NO_SLOT where refused), or None when a key comes twice:
        remembered per source while the same keys come in the same order and no slot was freed."""
        known = self._batch_slots.get(source)
        if known is not None and known[0] == self.layout and (known[1] is keys or known[1] == keys):
            return known[2]
        if len(set(keys)) != len(keys):
            return None
        slots = np.fromiter(map(self._slot, keys), dtype=np.intp, count=len(keys))
        self._batch_slots[source] = (self.layout, keys, slots)
        return slots

    def store(self, source: int, slots: IntArray, values: FloatArray, stamps: FloatArray,
              fetched_at: float) -> tuple[int, int]:
        """Stores the valid values (finite, within the sentinel limit, with a finite stamp) at `slots` (NO_SLOT
        entries are skipped: the caller counted them); (invalid, clamped)."""
        valid = np.isfinite(values) & (np.abs(values) <= SENTINEL_LIMIT) & np.isfinite(stamps)
        bad = len(values) - int(np.count_nonzero(valid))
        keep = valid & (slots != NO_SLOT)
        if not keep.all():
            slots, values, stamps = slots[keep], values[keep], stamps[keep]
        # Every time is the scheduler's: a stamp from the future is clamped to the fetch.
        ahead = stamps > fetched_at
        observed = np.where(ahead, fetched_at, stamps)
        # The same measurement fetched again keeps the clamped time of its first fetch: it does not get younger.
        before = self.observed[slots]
        same = (self.stamp[slots] == stamps) & (self.source[slots] == source) & (before < observed)
        if same.any():
            observed = np.where(same, before, observed)
        self.value[slots] = values
        self.observed[slots] = observed
        self.fetched[slots] = fetched_at
        self.stamp[slots] = stamps
        self.source[slots] = source
        return bad, int(np.count_nonzero(ahead))

    def free(self, keys: Iterable[K]) -> None:
        for key in keys:
            slot = self.slots.pop(key)
            self.keys[slot] = None
            self._free.append(slot)
            self.value[slot], self.observed[slot], self.fetched[slot] = np.nan, -np.inf, -np.inf
            self.stamp[slot], self.source[slot] = np.nan, NO_SOURCE
        self.layout += 1
        self.assigned += 1
        self._batch_slots.clear()

    def expires(self, max_age: float, ttl: float) -> FloatArray:
        """Per slot, when its value stops being fresh (fresh while now - observed <= max_age and now - fetched
        <= ttl); -inf for a free slot."""
        n = self.size
        return np.minimum(self.observed[:n] + max_age, self.fetched[:n] + ttl)

    def fresh(self, now: float, max_age: float, ttl: float) -> npt.NDArray[np.bool_]:
        """Per slot, fresh now by the contract's rule (the same float comparisons as the column's)."""
        n = self.size
        fresh: npt.NDArray[np.bool_] = (now - self.observed[:n] <= max_age) & (now - self.fetched[:n] <= ttl)
        return fresh
