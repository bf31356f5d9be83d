"""MetricValues: one metric's latest value per node, held in arrays (the MetricCache's store).

Each node the metric has a value for owns a slot; a slot holds the value, its observed_at (the stamp
clamped to the fetch, scheduler clock), its fetched_at, the sample's own stamp and the source (by id).
Arrays rather than an object per node: a refresh of 5,000 nodes is stored by a few numpy operations, and
the bookkeeping after it (freshness, coverage, expiry) is vectorised too. A source's batch usually names
the same nodes in the same order refresh after refresh: the slots of its nodes are remembered per source
(`slots_for`) and reused while no slot has been freed since, so a refresh does no lookup per node.

Not thread-safe: the cache holds its lock around every use.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np
import numpy.typing as npt

from metrics_sched.state.node_table import FloatArray

IntArray = npt.NDArray[np.intp]
NO_SOURCE = -1  # the source id of a free slot


class MetricValues:
    def __init__(self) -> None:
        self.slots: dict[str, int] = {}  # node -> slot
        self.nodes: list[str | None] = []  # slot -> node (None: free)
        self._free: list[int] = []
        self.value: FloatArray = np.empty(0)
        self.observed: FloatArray = np.empty(0)
        self.fetched: FloatArray = np.empty(0)
        self.stamp: FloatArray = np.empty(0)
        self.source: npt.NDArray[np.int32] = np.empty(0, dtype=np.int32)
        # Bumped whenever a slot is freed: slot arrays remembered before then may point at reused slots.
        self.layout = 0
        # Bumped whenever a slot changes hands (given to a node or freed): what slot -> row maps are keyed on.
        self.assigned = 0
        # source id -> (layout, the batch's node list, its slots)
        self._batch_slots: dict[int, tuple[int, list[str], IntArray]] = {}

    # A node can own a slot without a value (its first value was invalid): these read only nodes with one.
    def __len__(self) -> int:
        return int(np.count_nonzero(self.source[: self.size] != NO_SOURCE))

    def __iter__(self) -> Iterator[str]:
        source = self.source
        return iter([node for node, slot in self.slots.items() if source[slot] != NO_SOURCE])

    def held(self, node: str) -> int | None:
        """The slot holding the node's value, or None when it has none."""
        slot = self.slots.get(node)
        return None if slot is None or self.source[slot] == NO_SOURCE else slot

    @property
    def size(self) -> int:
        """Slots in use or free (the arrays' meaningful length)."""
        return len(self.nodes)

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

    def _slot(self, node: str) -> int:
        slot = self.slots.get(node)
        if slot is None:
            if self._free:
                slot = self._free.pop()
                self.nodes[slot] = node
            else:
                slot = len(self.nodes)
                self._grow(slot + 1)
                self.nodes.append(node)
            self.slots[node] = slot
            self.assigned += 1
        return slot

    def slots_for(self, source: int, nodes: list[str]) -> IntArray | None:
        """The slot of each node (new slots for new nodes), or None when a node comes twice: remembered per
        source while the same nodes come in the same order and no slot was freed."""
        known = self._batch_slots.get(source)
        if known is not None and known[0] == self.layout and (known[1] is nodes or known[1] == nodes):
            return known[2]
        if len(set(nodes)) != len(nodes):
            return None
        slots = np.fromiter(map(self._slot, nodes), dtype=np.intp, count=len(nodes))
        self._batch_slots[source] = (self.layout, nodes, slots)
        return slots

    def free(self, nodes: Iterable[str]) -> None:
        for node in nodes:
            slot = self.slots.pop(node)
            self.nodes[slot] = None
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
