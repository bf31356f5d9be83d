"""The structured allocator as kube-scheduler 1.36 runs it with default feature gates: upstream's *incubating*
variant (AdminAccess, PrioritizedList, PartitionableDevices, DeviceTaints, ConsumableCapacity and binding
conditions all on), over raw API JSON.

Built once per pod with the cluster's allocated state, device classes and slices, then asked once per node.
Slices are split by node up front (upstream's NewAllocator); each node's pools are gathered on demand from the
slices' parsed form (kept across pods by a SliceCache) and searched (search.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from metrics_sched.plugins.dynamic_resources.allocator.claims import ClaimSpec, parse_claim
from metrics_sched.plugins.dynamic_resources.allocator.devices import SliceCache, SliceInfo
from metrics_sched.plugins.dynamic_resources.allocator.errors import AllocationError
from metrics_sched.plugins.dynamic_resources.allocator.memo import SelectorMemo
from metrics_sched.plugins.dynamic_resources.allocator.pools import gather_pools
from metrics_sched.plugins.dynamic_resources.allocator.search import Rank, Search, Shared
from metrics_sched.plugins.dynamic_resources.allocator.state import AllocatedState
from metrics_sched.plugins.dynamic_resources.cel import SelectorCache

__all__ = ["Allocator", "SliceSet"]


class SliceSet:
    """The cluster's slices as every pod's allocator reads them (NewAllocator's split: node-local slices by node,
    everything else, no node name or counter sets, shared), each parsed on first use. Build one per version of the
    slice list and hand it to every Allocator: the split is then made once, not once per pod."""

    def __init__(self, slices: Sequence[Mapping[str, Any]], slice_cache: SliceCache | None = None) -> None:
        self.slices = slices
        # No process-wide default: a cache outlives its scheduler, and a slice's name and version are unique per
        # API server only (one shared across tests served one test's slices to another).
        self._cache = slice_cache if slice_cache is not None else SliceCache()
        self._parsed: list[SliceInfo | None] = [None] * len(slices)
        self._by_pool: dict[tuple[str, str], list[int]] | None = None
        self.on_node: dict[str, list[int]] = {}
        self.everywhere: list[int] = []
        for i, raw in enumerate(slices):
            spec = raw.get("spec") or {}
            node_name = spec.get("nodeName") or ""
            if not node_name or spec.get("sharedCounters"):
                self.everywhere.append(i)
            else:
                self.on_node.setdefault(node_name, []).append(i)

    def pool_slices(self, driver: str, pool: str) -> Sequence[int]:
        """The indexes of the pool's slices cluster-wide: indexed on first use (a pool that looks incomplete from
        a node, e.g. one whose counter sets every node sees), so that each such pool costs its own slices, not a
        pass over every slice of the cluster."""
        if self._by_pool is None:
            by_pool: dict[tuple[str, str], list[int]] = {}
            for i, raw in enumerate(self.slices):
                spec = raw.get("spec") or {}
                key = (str(spec.get("driver") or ""), str((spec.get("pool") or {}).get("name") or ""))
                by_pool.setdefault(key, []).append(i)
            self._by_pool = by_pool
        return self._by_pool.get((driver, pool), ())

    def parsed(self, index: int) -> SliceInfo:
        info = self._parsed[index]
        if info is None:
            info = self._parsed[index] = self._cache.get(self.slices[index])
        return info


class Allocator:
    """Allocates devices for a pod's unallocated claims on one node at a time.

    `rank` (node, driver, pool, device) -> preference, lower first: the candidates of each `ExactCount` request
    are tried in that order (stable over upstream's), and each request's results are written in upstream's
    order. None: upstream's first-fit order exactly. `selector_memo` keeps selector results across pods.
    """

    def __init__(self, state: AllocatedState, classes: Mapping[str, Mapping[str, Any]],
                 slices: Sequence[Mapping[str, Any]] | SliceSet, cel: SelectorCache,
                 selector_memo: SelectorMemo | None = None, rank: Rank | None = None, *,
                 slice_cache: SliceCache | None = None) -> None:
        self._shared = Shared(state, classes, cel, selector_memo)
        self._set = slices if isinstance(slices, SliceSet) else SliceSet(slices, slice_cache)
        self._slices = self._set.slices
        self._rank = rank
        self._claims: dict[int, tuple[Mapping[str, Any], ClaimSpec]] = {}

    @property
    def num_allocate_one_invocations(self) -> int:
        """GetStats().NumAllocateOneInvocations: the search's steps over every allocate() so far."""
        return self._shared.invocations

    def allocate(self, node: Mapping[str, Any], claims: Sequence[Mapping[str, Any]], *,
                 deadline: float | None = None) -> list[dict[str, Any]] | None:
        """One AllocationResult JSON per claim, in claim order, or None if the claims do not fit on this node.

        Raises AllocationError for upstream's fatal errors, NodeAllocationError when nothing fits and some pool
        of this node is invalid, AllocationTimeout once `deadline` (time.monotonic()) has passed.
        """
        meta = node.get("metadata") or {}
        node_name = str(meta.get("name") or "")
        indexes = self._set.on_node.get(node_name, [])
        infos = [self._slice(i) for i in indexes] + [self._slice(i) for i in self._set.everywhere]
        try:
            pools = gather_pools(infos, node_name, meta.get("labels") or {}, self._pool_slices, self._slice)
        except AllocationError as err:
            raise AllocationError(f"gather pool information: {err}") from None
        specs = [self._claim(claim) for claim in claims]
        return Search(self._shared, node, specs, pools, self._rank, deadline).run()

    def _pool_slices(self, driver: str, pool: str) -> Sequence[int]:
        return self._set.pool_slices(driver, pool)

    def _slice(self, index: int) -> SliceInfo:
        return self._set.parsed(index)

    def _claim(self, claim: Mapping[str, Any]) -> ClaimSpec:
        known = self._claims.get(id(claim))
        if known is not None and known[0] is claim:
            return known[1]
        spec = parse_claim(claim)
        self._claims[id(claim)] = (claim, spec)
        return spec
