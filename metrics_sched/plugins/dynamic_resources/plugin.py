"""DynamicResources: pods that ask for devices through ResourceClaims (kube-scheduler 1.36's dynamicresources plugin,
with its default feature gates; docs/design/dra.md is the specification, with the upstream source of each rule).

- PreEnqueue keeps a pod out of the queue until each of its claims exists (a template's claim is made by the
  resource-claim controller), is not being deleted, and, for a template's claim, is owned by the pod.
- PreFilter sorts the claims: allocated ones (their node selector decides where the pod may go), and the ones to
  allocate, whose device classes must exist; it builds one allocator for the pod from the slices, the classes
  and every device already allocated (watched, written by us, or chosen by a Reserve not yet written).
- Filter runs the structured allocator for each node that may have devices; a fatal allocator error (a selector
  that fails to evaluate, a pool being updated under an `All` request) ends the attempt with an Error.
  With per-device telemetry, devices are tried coolest first, so the allocation a node would get is its best.
- Score: the firstAvailable preference (8 - index of the subrequest chosen, summed), as upstream.
- Reserve records the chosen allocations as pending (no other pod gets those devices); Unreserve drops them and
  takes the pod out of a claim's reservedFor it was written to.
- PreBind writes each claim: the delete-protection finalizer, then status.allocation and reservedFor, each
  conditional on the resourceVersion read (a conflict re-reads and decides again), then waits for the devices'
  binding conditions when they have any.
- PostFilter, when no node fits, deallocates one allocated claim that only this pod uses and that is not
  available where the pod could go (its devices may be elsewhere than the pod can run).
"""

from __future__ import annotations

import contextlib
import copy
import datetime
import json
import math
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

import numpy as np

from metrics_sched.framework import (
    DEVICE_SETS,
    DRA_EXTENDED_RESOURCES,
    FEASIBLE_BEFORE,
    SUCCESS,
    ApiError,
    ArgsError,
    Batchable,
    BatchScope,
    BoolArray,
    ClusterEvent,
    Code,
    CycleState,
    DeviceSets,
    EventHint,
    Filtered,
    FilterPlugin,
    FloatArray,
    Handle,
    IntArray,
    KubeObject,
    NodeTable,
    Normalized,
    PodInfo,
    PostFilterPlugin,
    PostFilterResult,
    PreBindPlugin,
    PreEnqueuePlugin,
    PreFilterPlugin,
    PreScorePlugin,
    QueueingHint,
    Reads,
    ReservePlugin,
    ScorePlugin,
    StateKey,
    Status,
    explain,
    max_normalize,
    term_mask,
)

from .allocator import (
    AllocationError,
    AllocationTimeout,
    Allocator,
    NodeAllocationError,
    SelectorMemo,
    SliceCache,
    SliceSet,
)
from .cel import SelectorCache
from .claims import ClaimMissing, PodClaim, is_allocated, is_reserved_for, resolve_claims
from .extended import (
    EXTENDED_CLAIM_ANNOTATION,
    SPECIAL_CLAIM_NAME,
    class_for_resources,
    is_dra_extended_resource,
    requests_and_mappings,
    special_claim,
)
from .index import ClaimChange, DraIndex

__all__ = [
    "DELETE_PROTECTION",
    "ERR_CANNOT_ALLOCATE",
    "ERR_NOT_AVAILABLE",
    "DynamicResources",
]

ERR_CANNOT_ALLOCATE = "cannot allocate all claims"
ERR_NOT_AVAILABLE = "resourceclaim not available on the node"
ERR_TIMEOUT = "timed out trying to allocate devices"
ERR_STALE_EXTENDED = "cannot schedule extended resource claim"
DELETE_PROTECTION = "resource.kubernetes.io/delete-protection"
# FirstAvailableDeviceRequestMaxSize: the Score of a firstAvailable request is this minus the subrequest's index.
_FIRST_AVAILABLE_MAX = 8
_WRITE_ATTEMPTS = 5  # retry.DefaultRetry's steps for a claim write that met a conflict


@dataclass
class _PodState:
    """One pod's cycle: its claims, which of them to allocate (indices into `claims`), the allocator, and what
    Filter found per node (allocation results, in `to_allocate` order)."""

    claims: tuple[PodClaim, ...]
    to_allocate: tuple[int, ...]
    allocator: Allocator | None
    shape: str = ""  # what the claims to allocate ask for (the row cache's key)
    extended: Mapping[str, str] = field(default_factory=dict)  # DRA-backed extended resource -> its class
    node_selectors: dict[int, BoolArray] = field(default_factory=dict)  # allocated claim index -> rows it allows
    groups: list[_Group] = field(default_factory=list)  # set by Filter: what each kind of node allocates
    row_group: IntArray | None = None  # per row, its group (-1: none)
    unavailable: set[int] = field(default_factory=set)  # allocated claims some node could not use
    reserved: tuple[KubeObject, ...] = ()  # claims as Reserve chose them (pending)
    special: KubeObject | None = None  # the extended-resource claim Reserve chose, with its allocation
    mappings: list[KubeObject] = field(default_factory=list)  # its container -> request mappings
    created: KubeObject | None = None  # that claim as PreBind created it
    written: set[str] = field(default_factory=set)  # claim UIDs PreBind reserved for this pod
    leftover: KubeObject | None = None  # an extended-resource claim an earlier attempt made and left behind

    def clone(self) -> _PodState:
        return _PodState(self.claims, self.to_allocate, self.allocator, self.shape, self.extended,
                         dict(self.node_selectors), list(self.groups), self.row_group, set(self.unavailable),
                         self.reserved, self.special, list(self.mappings), self.created, set(self.written),
                         self.leftover)

    def allocation(self, table: NodeTable, node: str) -> tuple[list[KubeObject], list[dict[str, Any]] | None]:
        """The claims allocated on `node` (the pod's unallocated ones, then its extended-resource claim if the
        node serves one through DRA) and their allocation results (None: none found)."""
        row = table.index.get(node)
        if row is None or self.row_group is None or row >= self.row_group.size or self.row_group[row] < 0:
            return [], None
        group = self.groups[int(self.row_group[row])]
        return group.claims, group.cache.results[row] if group.claims else []


@dataclass
class _Group:
    """Nodes that allocate the same claims (they serve the same extended resources through DRA)."""

    claims: list[KubeObject]
    cache: _RowCache
    mappings: list[KubeObject]


_STATE = StateKey[_PodState]("DynamicResources/pod")
_SHAPES = 64  # claim shapes whose per-row allocations are kept


class _RowCache:
    """For one claim shape, what each row would be allocated: valid until that node's inputs change (its slices,
    the allocations on it) or every node's do (classes, shared slices, node labels, telemetry when it ranks).
    A pod like the last one then runs the allocator only on the nodes that changed since (usually the one the last
    pod went to), not on all of them."""

    def __init__(self, size: int) -> None:
        self.valid = np.zeros(size, dtype=bool)
        self.ok = np.zeros(size, dtype=bool)
        self.results: list[list[dict[str, Any]] | None] = [None] * size
        self.values = np.full(size, np.nan)  # the worst device metric value of the row's allocation (NaN: none)
        self.scores = np.zeros(size)  # the row's firstAvailable score (computeScore), made with its allocation


def _shape(claims: Sequence[KubeObject]) -> str:
    """What allocating `claims` depends on of the claims themselves: their device specs (not names or uids)."""
    return json.dumps([(c.get("spec") or {}).get("devices") for c in claims], sort_keys=True, separators=(",", ":"))


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class DynamicResources(PreEnqueuePlugin, PreFilterPlugin, FilterPlugin, PostFilterPlugin, PreScorePlugin,
                       ScorePlugin, ReservePlugin, PreBindPlugin, Batchable):
    name = "DynamicResources"
    indexes = (DraIndex,)
    normalized = Normalized.COMPLETE  # max_normalize: 0-100 on every row
    # Its reasons are UnschedulableAndUnresolvable upstream: removing pods does not free devices (their claims
    # are deallocated by the controller afterwards, and that event requeues the pod).
    resolvable_reasons: ClassVar[frozenset[str]] = frozenset()

    @dataclass(frozen=True)
    class Args:
        # How long PreBind waits for the binding conditions of allocated devices (upstream's bindingTimeout).
        binding_timeout_seconds: float = 600.0
        # The per-device metric devices are preferred by, lowest first ("" : upstream's first-fit order), and the
        # slice device attributes that name a device the way the metric's source does (the first one present:
        # NVIDIA's driver publishes `uuid`, DCGM labels its series with UUID; `index` matches DCGM's gpu label).
        # Literal[""] first: a plain str field refuses the empty string, which is how the config says "none".
        device_metric: Literal[""] | str = "gpu_temperature"
        device_id_attributes: tuple[str, ...] = ("uuid", "index")
        # SchedulerFilterTimeout (beta, on in 1.36): how long the allocator may search one node (0: no limit).
        filter_timeout_seconds: float = 10.0

        def validate(self) -> None:
            if not self.binding_timeout_seconds > 0:
                raise ArgsError("bindingTimeoutSeconds", "must be > 0")
            if self.filter_timeout_seconds < 0:
                raise ArgsError("filterTimeoutSeconds", "must be >= 0")
            if self.device_metric and not self.device_id_attributes:
                raise ArgsError("deviceIdAttributes", "must name at least one attribute when deviceMetric is set")

    args: Args

    def __init__(self, args: Args, handle: Handle) -> None:
        super().__init__(args, handle)
        self.index = handle.index(DraIndex)
        # Compiled selectors and their results per device live across pods: a device's match changes only with
        # its slice, an expression's program never.
        self.selectors = SelectorCache()
        self.selector_memo = SelectorMemo()
        self.slice_cache = SliceCache()  # each slice version parsed once (this scheduler's: it ages with its slices)
        self._row_caches: OrderedDict[str, _RowCache] = OrderedDict()
        self._cursor = 0  # where this plugin is in the index's log of node changes
        self._table_key: tuple[int, int, int, int] = (-1, -1, -1, -1)
        self._candidates: tuple[tuple[int, int], IntArray] = ((-1, -1), np.zeros(0, dtype=np.int64))
        self._device_ids: tuple[int, dict[tuple[str, str, str], str]] = (-1, {})
        self._extended_classes: tuple[int, dict[str, str]] = (-1, {})
        self._slices: tuple[int, SliceSet | None] = (-1, None)

    def batch_scope(self, pod: PodInfo) -> BatchScope | None:
        """A pod with claims (or DRA-backed extended resources) is never batched: its allocation on a node depends
        on every claim in the cluster. Any other pod: the plugin skips it."""
        if (pod.raw.get("spec") or {}).get("resourceClaims") or self._extended(pod):
            return None
        return BatchScope(Reads.NONE)

    # -- queueing ------------------------------------------------------------------------------------
    def events_to_register(self) -> list[EventHint]:
        return [
            EventHint(ClusterEvent.NODE_ADDED), EventHint(ClusterEvent.NODE_LABELS),
            EventHint(ClusterEvent.NODE_ALLOCATABLE),
            EventHint(ClusterEvent.RESOURCE_CLAIM_CHANGED, self._claim_hint),
            EventHint(ClusterEvent.RESOURCE_SLICE_CHANGED), EventHint(ClusterEvent.DEVICE_CLASS_CHANGED),
            EventHint(ClusterEvent.DEVICE_TAINT_RULE_CHANGED),
        ]

    def _claim_hint(self, pod: PodInfo, detail: Any) -> QueueingHint:
        """isSchedulableAfterClaimChange (a deletion is treated as a deallocation, which upstream hears of first)."""
        if not isinstance(detail, ClaimChange):
            return QueueingHint.QUEUE
        old, new = detail.old, detail.new
        changed = new if new is not None else old
        if changed is not None and _controlled_by(changed, pod.uid) and (
                (changed.get("metadata") or {}).get("annotations") or {}).get(EXTENDED_CLAIM_ANNOTATION) == "true":
            return QueueingHint.QUEUE  # its own leftover extended-resource claim went or changed
        if isinstance(resolve_claims(pod, self.index), ClaimMissing):
            return QueueingHint.SKIP  # a claim of its own is missing: only its creation helps (PreEnqueue waits)
        if old is not None and is_allocated(old) and (new is None or not is_allocated(new)):
            return QueueingHint.QUEUE  # devices were freed: any pod may use them
        if new is None:
            return QueueingHint.SKIP
        meta = new.get("metadata") or {}
        if meta.get("namespace") != pod.namespace or meta.get("name") not in _claim_names(pod):
            return QueueingHint.SKIP
        if old is None:
            return QueueingHint.QUEUE
        return QueueingHint.SKIP if old.get("status") == new.get("status") else QueueingHint.QUEUE

    # -- PreEnqueue ----------------------------------------------------------------------------------
    def pre_enqueue(self, pod: PodInfo) -> Status:
        if not (pod.raw.get("spec") or {}).get("resourceClaims"):
            return SUCCESS
        found = resolve_claims(pod, self.index)
        if isinstance(found, ClaimMissing):
            if found.waiting_for is not None:
                self.index.wait_for_claim(pod.namespace, found.waiting_for, pod.uid)
            return Status(Code.UNRESOLVABLE, found.reason)
        return SUCCESS

    # -- PreFilter -----------------------------------------------------------------------------------
    def pre_filter(self, cycle: CycleState, pod: PodInfo) -> Status:
        try:
            return self._pre_filter(cycle, pod)
        except (AttributeError, TypeError, KeyError, ValueError) as exc:
            # A claim or class the API server would never store (wrong types where objects belong): an Error for
            # this pod naming the problem, never the scheduling loop's catch-all.
            return Status.error(f"malformed DRA object for pod {pod.key}: {type(exc).__name__}: {exc}")

    def _pre_filter(self, cycle: CycleState, pod: PodInfo) -> Status:
        found = resolve_claims(pod, self.index)
        if isinstance(found, ClaimMissing):
            return Status(Code.UNRESOLVABLE, found.reason)
        extended = self._extended(pod)
        if not found and not extended:
            return Status(Code.SKIP)
        leftover = self.index.extended_claim_of(pod.uid) if extended else None
        if extended:
            cycle.write(DRA_EXTENDED_RESOURCES, frozenset(extended))
        rule = self.index.taint_rule()
        if rule is not None:
            return Status(Code.UNRESOLVABLE, f"DeviceTaintRule {rule} exists: device taint rules (DRADeviceTaintRules, "
                                             "off by default in Kubernetes 1.36) are not supported yet")
        to_allocate: list[int] = []
        for i, pod_claim in enumerate(found):
            claim = pod_claim.claim
            if is_allocated(claim):
                continue
            if self.index.pending(pod_claim.uid) is not None:
                return Status(Code.UNRESOLVABLE,
                              f"resource claim {pod_claim.key} is in the process of being allocated")
            status = self._check_requests(pod_claim)
            if not status.ok:
                return status
            to_allocate.append(i)
        allocator = None
        if to_allocate or extended:
            index = self.index
            allocator = Allocator(index.allocated_state(), index.classes(), self._slice_set(), self.selectors,
                                  selector_memo=self.selector_memo, rank=self._rank())
        cycle.write(_STATE, _PodState(found, tuple(to_allocate), allocator,
                                      _shape([found[i].claim for i in to_allocate]), extended, leftover=leftover))
        return SUCCESS

    def _slice_set(self) -> SliceSet:
        """The slices split by node once per version of the slice list, for every pod's allocator."""
        generation, found = self._slices
        if found is None or generation != self.index.slices_generation:
            generation = self.index.slices_generation
            found = SliceSet(self.index.slices(), self.slice_cache)
            self._slices = (generation, found)
        return found

    def _extended(self, pod: PodInfo) -> dict[str, str]:
        """The pod's extended resources some DeviceClass serves (resource -> class)."""
        wanted = [r for r, amount in pod.requests.items() if amount and is_dra_extended_resource(r)]
        if not wanted:
            return {}
        generation, classes = self._extended_classes
        if generation != self.index.classes_generation:
            generation = self.index.classes_generation
            classes = class_for_resources(self.index.classes())
            self._extended_classes = (generation, classes)
        return {r: classes[r] for r in wanted if r in classes}

    def _check_requests(self, pod_claim: PodClaim) -> Status:
        """Every request's device class exists (an unknown class waits for a DeviceClass event)."""
        for request in ((pod_claim.claim.get("spec") or {}).get("devices") or {}).get("requests") or ():
            name = str(request.get("name", ""))
            exactly = request.get("exactly")
            if exactly is not None:
                classes = [(name, str(exactly.get("deviceClassName", "")))]
            elif request.get("firstAvailable"):
                classes = [(f"{name}/{sub.get('name', '')}", str(sub.get("deviceClassName", "")))
                           for sub in request["firstAvailable"]]
            else:
                return Status(Code.UNRESOLVABLE, f"resource claim {pod_claim.key}, request {name}: unknown request "
                                                 "type")
            for where, class_name in classes:
                if not class_name:
                    return Status.error(f"request {where}: unsupported request type")
                if self.index.device_class(class_name) is None:
                    return Status(Code.UNRESOLVABLE, f"request {where}: device class {class_name} does not exist")
        return SUCCESS

    # -- Filter --------------------------------------------------------------------------------------
    def filter(self, cycle: CycleState, pod: PodInfo, table: NodeTable) -> Filtered:
        state = cycle.get(_STATE)
        size = table.capacity
        if state is None:
            return Filtered(np.ones(size, dtype=bool))
        if state.leftover is not None and ((state.leftover.get("spec") or {}).get("devices") or {}).get("requests"):
            # An earlier attempt's claim (its delete failed, or the scheduler restarted mid-bind): upstream refuses
            # every node and PostFilter deletes it, then the pod starts afresh.
            return Filtered.single(np.zeros(size, dtype=bool), ERR_STALE_EXTENDED)
        # Upstream's Filter sees only the nodes every earlier filter let through: a claim is unavailable (PostFilter
        # may deallocate it) and the allocator searches (a fatal error ends the attempt) on those alone.
        seen = cycle.get(FEASIBLE_BEFORE)
        considered = table.present[:size] if seen is None else table.present[:size] & seen[:size]
        available = np.ones(size, dtype=bool)
        now = time.time()
        for i, pod_claim in enumerate(state.claims):
            if not is_allocated(pod_claim.claim):
                continue
            mask = np.zeros(size, dtype=bool)
            if not self._binding_stuck(pod_claim.claim, now):
                selector = ((pod_claim.claim.get("status") or {}).get("allocation") or {}).get("nodeSelector")
                if selector is None:
                    continue
                for term in selector.get("nodeSelectorTerms") or ():
                    mask |= term_mask(table, term)
            # else its devices failed to bind, or not in time: no node can use it, and PostFilter may deallocate it
            # so that other devices are tried.
            state.node_selectors[i] = mask
            available &= mask
        allocated = np.ones(size, dtype=bool)
        timed_out = np.zeros(size, dtype=bool)
        if state.allocator is not None:
            self._refresh_caches(table)
            candidates = self._candidate_rows(table)
            values = np.full(size, np.nan)
            allocated = np.zeros(size, dtype=bool)
            state.row_group = np.full(size, -1, dtype=np.int64)
            state.groups = []
            for rows, claims, shape, mappings in self._groups(state, pod, table):
                state.row_group[rows] = len(state.groups)
                cache = self._cache_for(shape, table)
                state.groups.append(_Group(claims, cache, mappings))
                if not claims:  # the device plugin serves the extended resources there, no claim to allocate
                    allocated |= rows
                    continue
                group_rows = candidates[rows[candidates] & considered[candidates]]
                stale = group_rows[~cache.valid[group_rows]]
                try:
                    for row in stale.tolist():
                        ok, results = self._allocate(state.allocator, table, row, claims)
                        if ok is None:
                            timed_out[row] = True
                            continue  # not kept: the next pod searches this node again
                        cache.ok[row], cache.results[row] = ok, results
                        cache.values[row] = self._set_value(table, row, cache.results[row])
                        cache.scores[row] = _first_available_score(claims, results)
                        cache.valid[row] = True
                except AllocationError as exc:
                    return Filtered(np.zeros(size, dtype=bool), {}, str(exc))
                allocated[group_rows] = cache.ok[group_rows]
                values[group_rows] = cache.values[group_rows]
            allocated &= ~timed_out
            if self.args.device_metric:
                cycle.write(DEVICE_SETS, DeviceSets(self.args.device_metric, values))
        # Upstream records a claim as unavailable only on a node where the claims to allocate fit (its Filter returns
        # "cannot allocate all claims" first): only such a claim may PostFilter deallocate.
        fits = considered & allocated
        for i, mask in state.node_selectors.items():
            if (fits & ~mask).any():
                state.unavailable.add(i)
        reasons: dict[str, BoolArray] = {}
        if timed_out.any():
            reasons[ERR_TIMEOUT] = timed_out
        allocated_or_late = allocated | timed_out
        if not allocated_or_late.all():
            reasons[ERR_CANNOT_ALLOCATE] = ~allocated_or_late
        unavailable = allocated & ~available
        if unavailable.any():
            reasons[ERR_NOT_AVAILABLE] = unavailable
        return Filtered(allocated & available, reasons)

    def _allocate(self, allocator: Allocator, table: NodeTable, row: int,
                  claims: Sequence[KubeObject]) -> tuple[bool | None, list[dict[str, Any]] | None]:
        """(fits, its allocation results) on one row; (None, None) when the search ran out of time."""
        record = table.records[row]
        if record is None:
            return False, None
        node = {"metadata": {"name": record.name, "labels": dict(record.labels)}}
        timeout = self.args.filter_timeout_seconds
        try:
            results = allocator.allocate(node, claims, deadline=time.monotonic() + timeout if timeout else None)
        except NodeAllocationError:
            return False, None
        except AllocationTimeout:
            return None, None
        if results is None or len(results) != len(claims):
            return False, None
        return True, results

    def _groups(self, state: _PodState, pod: PodInfo,
                table: NodeTable) -> list[tuple[BoolArray, list[KubeObject], str, list[KubeObject]]]:
        """(rows, claims to allocate there, their shape, extended-resource mappings) per kind of node: a node
        without any of a DRA-backed extended resource the pod asks for gets it through DRA (filterExtendedResources),
        one with some through its device plugin."""
        size = table.capacity
        user = [state.claims[i].claim for i in state.to_allocate]
        if not state.extended:
            return [(np.ones(size, dtype=bool), user, state.shape, [])]
        resources = sorted(state.extended)
        codes = np.zeros(size, dtype=np.int64)
        for bit, resource in enumerate(resources):
            col = table.resource_index.get(resource)
            through_dra = (np.ones(size, dtype=bool) if col is None
                           else table.allocatable_by_resource[col][:size] == 0)
            codes |= through_dra.astype(np.int64) << bit
        groups: list[tuple[BoolArray, list[KubeObject], str, list[KubeObject]]] = []
        for code in np.unique(codes).tolist():
            served = {r: state.extended[r] for bit, r in enumerate(resources) if code >> bit & 1}
            rows = codes == code
            if not served:
                groups.append((rows, user, state.shape, []))
                continue
            requests, mappings = requests_and_mappings(pod, served)
            claims = [*user, special_claim(pod, requests)]
            groups.append((rows, claims, state.shape + json.dumps(requests, sort_keys=True), list(mappings)))
        return groups

    def _refresh_caches(self, table: NodeTable) -> None:
        """Marks stale, in every shape's row cache, the rows whose inputs changed since the last cycle."""
        # With telemetry ranking devices, a refresh may change every node's best devices.
        telemetry = self.handle.metrics.generation if self.args.device_metric else 0
        key = (table.rows_generation, table.labels_generation, table.capacity, telemetry)
        changes = self.index.changes_since(self._cursor)
        self._cursor = changes.cursor
        if key != self._table_key or changes.nodes is None:
            self._row_caches.clear()  # nodes came, went or were relabelled, or every node's inputs changed
            self._table_key = key
        elif changes.nodes:
            rows = [table.index[n] for n in changes.nodes if n in table.index]
            for cache in self._row_caches.values():
                cache.valid[rows] = False

    def _cache_for(self, shape: str, table: NodeTable) -> _RowCache:
        cache = self._row_caches.get(shape)
        if cache is None:
            cache = self._row_caches[shape] = _RowCache(table.capacity)
            while len(self._row_caches) > _SHAPES:
                self._row_caches.popitem(last=False)
        else:
            self._row_caches.move_to_end(shape)
        return cache

    def _ids(self) -> dict[tuple[str, str, str], str]:
        """(driver, pool, device) -> the device's id in its telemetry (the first of deviceIdAttributes it has),
        rebuilt when slices change."""
        generation, ids = self._device_ids
        if generation == self.index.slices_generation:
            return ids
        generation, ids = self.index.slices_generation, {}
        names = self.args.device_id_attributes
        for slice_ in self.index.slices():
            spec = slice_.get("spec") or {}
            driver, pool = str(spec.get("driver", "")), str((spec.get("pool") or {}).get("name", ""))
            for device in spec.get("devices") or ():
                attributes = device.get("attributes") or {}
                for name in names:
                    value = attributes.get(name) or attributes.get(f"{driver}/{name}")
                    if value:
                        ids[(driver, pool, str(device.get("name", "")))] = str(next(iter(value.values())))
                        break
        self._device_ids = (generation, ids)
        return ids

    def _rank(self) -> Callable[[str, str, str, str], float] | None:
        """Devices by their telemetry, lowest first: a device without a value of its own on a node whose other
        devices have one comes last; on a node without per-device values all are equal (upstream's order)."""
        metric = self.args.device_metric
        if not metric:
            return None
        ids = self._ids()
        read = self.handle.metrics.device_values

        def rank(node: str, driver: str, pool: str, device: str) -> float:
            values = read(metric, node)
            if not values:
                return 0.0
            found = values.get(ids.get((driver, pool, device), ""))
            return math.inf if found is None else found.value

        return rank

    def _described(self, node: str, device: Mapping[str, Any]) -> str:
        """driver/pool/device, with its own telemetry value when it has one (explain, the decision record)."""
        name = f"{device.get('driver')}/{device.get('pool')}/{device.get('device')}"
        metric = self.args.device_metric
        if not metric:
            return name
        key = self._ids().get((str(device.get("driver")), str(device.get("pool")), str(device.get("device"))), "")
        found = self.handle.metrics.device_values(metric, node).get(key)
        return name if found is None else f"{name} ({metric} {found.value:g})"

    def _set_value(self, table: NodeTable, row: int, results: Sequence[KubeObject] | None) -> float:
        """The hottest device of an allocation by its own telemetry (NaN: none of them has a value)."""
        metric = self.args.device_metric
        record = table.records[row]
        if not metric or not results or record is None:
            return math.nan
        values = self.handle.metrics.device_values(metric, record.name)
        if not values:
            return math.nan
        ids = self._ids()
        worst = math.nan
        for result in results:
            for device in (result.get("devices") or {}).get("results") or ():
                found = values.get(ids.get((str(device.get("driver")), str(device.get("pool")),
                                            str(device.get("device"))), ""))
                if found is not None and not found.value <= worst:
                    worst = found.value
        return worst

    def _candidate_rows(self, table: NodeTable) -> IntArray:
        """Rows that may have devices: every present node when some slice is not tied to one node by name (a node
        selector, all nodes, per-device selection, counters), else the nodes the slices name."""
        key = (self.index.slices_generation, table.rows_generation)
        if key == self._candidates[0]:
            return self._candidates[1]
        present = np.flatnonzero(table.present[: table.capacity]).astype(np.int64)
        rows: list[int] = []
        for slice_ in self.index.slices():
            node_name = (slice_.get("spec") or {}).get("nodeName")
            if not node_name:
                rows = present.tolist()
                break
            row = table.index.get(str(node_name))
            if row is not None:
                rows.append(row)
        found = np.unique(np.asarray(rows, dtype=np.int64))
        self._candidates = (key, found)
        return found

    # -- PostFilter ----------------------------------------------------------------------------------
    def post_filter(self, cycle: CycleState, pod: PodInfo, table: NodeTable,
                    rejections: Mapping[str, int]) -> tuple[PostFilterResult, Status]:
        state = cycle.get(_STATE)
        if state is None or (not state.claims and not state.extended):
            return PostFilterResult(), Status.unschedulable("no new claims to deallocate")
        writer = self.handle.claim_writer
        if state.leftover is not None and writer is not None and self.handle.may_write():
            return PostFilterResult(), self._delete_leftover(writer, state.leftover)
        for i in sorted(state.unavailable):
            claim = self.index.claim(state.claims[i].namespace, state.claims[i].name)
            if claim is None or not is_allocated(claim):
                continue
            reserved = (claim.get("status") or {}).get("reservedFor") or ()
            if reserved and not (len(reserved) == 1 and is_reserved_for(claim, pod)):
                continue
            if writer is None or not self.handle.may_write():
                break
            freed = _copy(claim)
            status = freed.setdefault("status", {})
            for key in ("reservedFor", "allocation", "devices"):
                status.pop(key, None)
            try:
                writer.update_claim_status(freed)
            except ApiError as exc:
                return PostFilterResult(), Status.error(f"deallocate claim {state.claims[i].key}: {exc}")
            explain(cycle, f"claim {state.claims[i].key}: deallocated, its devices are not where the pod can go")
            return PostFilterResult(), Status.unschedulable("deallocation of ResourceClaim completed")
        return PostFilterResult(), Status.unschedulable("still not schedulable")

    def _delete_leftover(self, writer: Any, claim: KubeObject) -> Status:
        """deleteClaim: the delete-protection finalizer off (retried on conflicts), then the claim itself."""
        meta = claim.get("metadata") or {}
        namespace, name, uid = str(meta.get("namespace", "")), str(meta.get("name", "")), str(meta.get("uid", ""))
        try:
            current: KubeObject | None = claim
            for _ in range(_WRITE_ATTEMPTS):
                if current is None:
                    break
                finalizers = (current.get("metadata") or {}).get("finalizers") or []
                if DELETE_PROTECTION not in finalizers:
                    break
                body = _copy(current)
                body["metadata"]["finalizers"] = [f for f in finalizers if f != DELETE_PROTECTION]
                try:
                    writer.update_claim(body)
                    break
                except ApiError as exc:
                    if not exc.conflict:
                        raise
                    current = writer.get_claim(namespace, name)
            writer.delete_claim(namespace, name, uid)
        except ApiError as exc:
            return Status.error(f"delete claim {namespace}/{name}: {exc}")
        return Status.unschedulable("deletion of ResourceClaim completed")

    # -- PreScore / Score ----------------------------------------------------------------------------
    def pre_score(self, cycle: CycleState, pod: PodInfo, table: NodeTable, rows: IntArray) -> Status:
        state = cycle.get(_STATE)
        if state is None or not any(_first_available(state.claims[i].claim) for i in state.to_allocate):
            return Status(Code.SKIP)
        return SUCCESS

    def score(self, cycle: CycleState, pod: PodInfo, table: NodeTable, rows: IntArray) -> FloatArray:
        # Each row's score was made with its allocation (in Filter, once per allocation kept): a gather per group.
        state = cycle.read(_STATE)
        scores = np.zeros(rows.size, dtype=np.float64)
        if state.row_group is None:
            return scores
        groups = state.row_group[rows]
        for g, group in enumerate(state.groups):
            at = np.flatnonzero(groups == g)
            if at.size and group.claims:
                scores[at] = group.cache.scores[rows[at]]
        return scores

    def normalize(self, scores: FloatArray) -> FloatArray:
        return max_normalize(scores)

    # -- Reserve / Unreserve -------------------------------------------------------------------------
    def reserve(self, cycle: CycleState, pod: PodInfo, node: str) -> Status:
        state = cycle.get(_STATE)
        if state is None or state.allocator is None:
            return SUCCESS
        claims, results = state.allocation(self.handle.table, node)
        if results is None or len(results) != len(claims):
            return Status.error(f"internal error, have {0 if results is None else len(results)} allocations, "
                                f"{len(claims)} claims to allocate")
        reserved = []
        for original, result in zip(claims, results, strict=True):
            claim = _copy(original)
            finalizers = claim.setdefault("metadata", {}).setdefault("finalizers", [])
            if DELETE_PROTECTION not in finalizers:
                finalizers.append(DELETE_PROTECTION)
            claim.setdefault("status", {})["allocation"] = result
            self.index.signal_pending(claim)
            meta = claim["metadata"]
            if meta.get("name") == SPECIAL_CLAIM_NAME:
                state.special = claim
                group = state.groups[int(state.row_group[self.handle.table.index[node]])]  # type: ignore[index]
                state.mappings = group.mappings
            else:
                reserved.append(claim)
            devices = ", ".join(self._described(node, d) for d in (result.get("devices") or {}).get("results") or ())
            explain(cycle, f"claim {meta.get('namespace')}/{meta.get('name')}: devices {devices} on {node}")
        state.reserved = tuple(reserved)
        return SUCCESS

    def unreserve(self, cycle: CycleState, pod: PodInfo, node: str) -> None:
        state = cycle.get(_STATE)
        if state is None:
            return
        for pod_claim in state.claims:
            self.index.remove_pending(pod_claim.uid)
        writer = self.handle.claim_writer
        if state.special is not None:
            self.index.remove_pending(str(state.special["metadata"]["uid"]))
            created, state.created = state.created, None
            if created is not None and writer is not None:
                meta = created["metadata"]
                # A claim made for this attempt only goes with it; if that fails, the garbage collector removes it
                # with the pod, its owner.
                with contextlib.suppress(ApiError):
                    writer.delete_claim(str(meta["namespace"]), str(meta["name"]), str(meta["uid"]))
                self.index.restore(str(meta["namespace"]), str(meta["name"]))
        for pod_claim in state.claims:
            if pod_claim.uid not in state.written or writer is None:
                continue
            patch = {"metadata": {"uid": pod_claim.uid},
                     "status": {"reservedFor": [{"$patch": "delete", "uid": pod.uid}]}}
            # Gone or changed: the controller drops reservations of pods that will not run.
            with contextlib.suppress(ApiError):
                writer.patch_claim_status(pod_claim.namespace, pod_claim.name, patch)
            self.index.restore(pod_claim.namespace, pod_claim.name)
            state.written.discard(pod_claim.uid)

    # -- PreBind -------------------------------------------------------------------------------------
    def pre_bind(self, cycle: CycleState, pod: PodInfo, node: str) -> Status:
        state = cycle.get(_STATE)
        if state is None or (not state.claims and state.special is None):
            return SUCCESS
        writer = self.handle.claim_writer
        if writer is None:
            return Status.error("allocating devices: no ResourceClaim writer is configured")
        chosen = {str(c["metadata"].get("uid", "")): c for c in state.reserved}
        for pod_claim in state.claims:
            status = self._bind_claim(writer, pod, pod_claim, chosen.get(pod_claim.uid))
            if not status.ok:
                return status
            state.written.add(pod_claim.uid)
        if state.special is not None:
            status = self._bind_extended_claim(writer, pod, state)
            if not status.ok:
                return status
        return self._wait_binding_conditions(cycle, pod, state, node)

    def _bind_extended_claim(self, writer: Any, pod: PodInfo, state: _PodState) -> Status:
        """Creates the extended-resource claim, allocates and reserves it like any claim, and tells the pod which
        claim and requests serve its extended resources."""
        special = state.special
        assert special is not None
        if state.created is None:
            body = _copy(special)
            meta = body["metadata"]
            for key in ("name", "uid", "finalizers"):
                meta.pop(key, None)
            body.pop("status", None)
            try:
                state.created = writer.create_claim(body)
            except ApiError as exc:
                return Status.error(f"create claim for extended resources {pod.namespace}/"
                                    f"{meta.get('generateName', '')}: {exc}")
        created = state.created
        assert created is not None
        self.index.remove_pending(str(special["metadata"]["uid"]))
        made = PodClaim("<extended-resources>", created, False)
        # Counted at once under its real uid (the watch brings it later), so no other pod takes its devices.
        self.index.signal_pending({**created, "status": {"allocation": special["status"]["allocation"]}})
        status = self._bind_claim(writer, pod, made, {"status": special["status"]})
        self.index.remove_pending(made.uid)
        if not status.ok:
            return status
        try:
            writer.set_extended_resource_claim_status(pod.namespace, pod.name, {
                "resourceClaimName": made.name, "requestMappings": state.mappings})
        except ApiError as exc:
            return Status.error(f"update pod {pod.key} ExtendedResourceClaimStatus: {exc}")
        return SUCCESS

    def _bind_claim(self, writer: Any, pod: PodInfo, pod_claim: PodClaim, chosen: KubeObject | None) -> Status:
        """bindClaim: the allocation (if Reserve chose one) and the pod's reservation, retried on conflicts."""
        allocation = None if chosen is None else chosen["status"]["allocation"]
        claim = self.index.claim(pod_claim.namespace, pod_claim.name) or pod_claim.claim
        verb = "add allocation and reservation to" if allocation is not None else "add reservation to"
        try:
            for attempt in range(_WRITE_ATTEMPTS):
                if attempt:
                    claim = writer.get_claim(pod_claim.namespace, pod_claim.name)
                    if claim is None:
                        return Status.error(f"{verb} claim {pod_claim.key}: not found")
                if is_reserved_for(claim, pod):
                    self.index.assume(claim)
                    self.index.remove_pending(pod_claim.uid)
                    return SUCCESS
                current = (claim.get("status") or {}).get("allocation")
                if allocation is not None and current is not None and not _same_allocation(current, allocation):
                    return Status.error(f"claim {pod_claim.key} got allocated elsewhere in the meantime")
                try:
                    claim = _copy(claim)
                    if allocation is not None and current is None:
                        finalizers = claim.setdefault("metadata", {}).setdefault("finalizers", [])
                        if DELETE_PROTECTION not in finalizers:
                            finalizers.append(DELETE_PROTECTION)
                            claim = writer.update_claim(claim)
                        claim.setdefault("status", {})["allocation"] = allocation
                    status = claim.setdefault("status", {})
                    if status.get("allocation") and not status["allocation"].get("allocationTimestamp"):
                        # Also for a claim allocated by someone else: its binding timeout runs from here.
                        status["allocation"] = {**status["allocation"], "allocationTimestamp": _now()}
                    status["reservedFor"] = [*(status.get("reservedFor") or ()),
                                             {"resource": "pods", "name": pod.name, "uid": pod.uid}]
                    written = writer.update_claim_status(claim)
                except ApiError as exc:
                    if exc.conflict:
                        continue
                    return Status.error(f"{verb} claim {pod_claim.key}: {exc}")
                self.index.assume(written)
                self.index.remove_pending(pod_claim.uid)
                return SUCCESS
        except ApiError as exc:
            return Status.error(f"{verb} claim {pod_claim.key}: {exc}")
        return Status.error(f"{verb} claim {pod_claim.key}: still conflicting after {_WRITE_ATTEMPTS} attempts")

    def _binding_stuck(self, claim: Mapping[str, Any], now: float) -> bool:
        """An allocated claim whose devices have a binding failure condition True, or are not ready a binding
        timeout after their allocation (the Filter of isClaimReadyForBinding and isClaimTimeout)."""
        if not _binding_conditions(claim):
            return False
        verdict = _binding_verdict(claim)
        if verdict is not None:
            return not verdict.ok
        return _binding_timed_out(claim, self.args.binding_timeout_seconds, now)

    def _wait_binding_conditions(self, cycle: CycleState, pod: PodInfo, state: _PodState, node: str) -> Status:
        """Devices with bindingConditions: wait until the driver reports them all True (or a failure condition, or
        a claim's binding timeout since its allocation)."""
        claims = [*state.claims, *([PodClaim("<extended-resources>", state.created, False)] if state.created else [])]
        waiting = [pc for pc in claims if _binding_conditions(self.index.claim(pc.namespace, pc.name))]
        if not waiting:
            return SUCCESS
        explain(cycle, f"waiting for binding conditions for device on node {node}")
        timeout = self.args.binding_timeout_seconds

        def check() -> Status | None:
            for pod_claim in waiting:
                claim = self.index.claim(pod_claim.namespace, pod_claim.name)
                if claim is None:
                    return Status.error(f"claim {pod_claim.name} is gone")
                verdict = _binding_verdict(claim)
                if verdict is None:
                    if _binding_timed_out(claim, timeout, time.time()):
                        return Status.error(f"claim {pod_claim.name} binding timeout")
                    return None
                if not verdict.ok:
                    return Status.error(f"claim {pod_claim.name} {verdict.reason}")
            return SUCCESS

        done = self.index.wait_for(check, timeout)
        return done if done is not None else Status.error("device binding timeout")


def _claim_names(pod: PodInfo) -> set[str]:
    names = {str(e.get("resourceClaimName")) for e in (pod.raw.get("spec") or {}).get("resourceClaims") or ()
             if e.get("resourceClaimName")}
    names |= {str(s.get("resourceClaimName")) for s in (pod.raw.get("status") or {}).get("resourceClaimStatuses")
              or () if s.get("resourceClaimName")}
    return names


def _first_available_score(claims: Sequence[KubeObject], results: Sequence[KubeObject] | None) -> float:
    """computeScore: over the claims' firstAvailable requests, 8 - the index of each subrequest chosen (each counts
    once, however many devices it got)."""
    total = 0
    for claim, result in zip(claims, results or (), strict=False):
        chosen = {str(d.get("request", "")) for d in (result.get("devices") or {}).get("results") or ()}
        for request, names in _first_available(claim).items():
            total += sum(_FIRST_AVAILABLE_MAX - i for i, sub in enumerate(names) if f"{request}/{sub}" in chosen)
    return float(total)


def _first_available(claim: Mapping[str, Any]) -> dict[str, list[str]]:
    """request name -> its subrequest names, for the claim's firstAvailable requests."""
    return {str(r.get("name", "")): [str(s.get("name", "")) for s in r["firstAvailable"]]
            for r in ((claim.get("spec") or {}).get("devices") or {}).get("requests") or ()
            if r.get("firstAvailable")}


def _same_allocation(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    strip = ("allocationTimestamp",)
    return {k: v for k, v in a.items() if k not in strip} == {k: v for k, v in b.items() if k not in strip}


def _binding_conditions(claim: Mapping[str, Any] | None) -> bool:
    if claim is None:
        return False
    results = (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or ()
    return any(r.get("bindingConditions") for r in results)


def _binding_timed_out(claim: Mapping[str, Any], timeout: float, now: float) -> bool:
    """isClaimTimeout: a device with binding conditions, allocated (allocationTimestamp) more than `timeout` ago."""
    allocation = (claim.get("status") or {}).get("allocation") or {}
    stamp = allocation.get("allocationTimestamp")
    if not stamp or not any(r.get("bindingConditions") is not None
                            for r in (allocation.get("devices") or {}).get("results") or ()):
        return False
    try:
        allocated_at = datetime.datetime.fromisoformat(str(stamp)).timestamp()
    except ValueError:
        return False
    return allocated_at + timeout < now


def _binding_verdict(claim: Mapping[str, Any]) -> Status | None:
    """isClaimReadyForBinding: None while some condition is not True yet; an error status on a failure condition."""
    status = claim.get("status") or {}
    devices = {(d.get("driver"), d.get("pool"), d.get("device")): d for d in status.get("devices") or ()}
    pending = False
    for result in ((status.get("allocation") or {}).get("devices") or {}).get("results") or ():
        wanted: Sequence[str] = result.get("bindingConditions") or ()
        if not wanted:
            continue
        device = devices.get((result.get("driver"), result.get("pool"), result.get("device")))
        if device is None:
            pending = True
            continue
        conditions = {c.get("type"): c for c in device.get("conditions") or ()}
        for failure in result.get("bindingFailureConditions") or ():
            condition = conditions.get(failure)
            if condition is not None and condition.get("status") == "True":
                return Status.error(f"binding failed: reason={condition.get('reason', '')}, "
                                    f'message="{condition.get("message", "")}"')
        if any((conditions.get(c) or {}).get("status") != "True" for c in wanted):
            pending = True
    return None if pending else SUCCESS


def _copy(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A deep, mutable copy of an API object (the watched ones are shared and never changed in place)."""
    return copy.deepcopy(dict(obj))


def _controlled_by(claim: Mapping[str, Any], uid: str) -> bool:
    return any(ref.get("controller") and ref.get("uid") == uid
               for ref in (claim.get("metadata") or {}).get("ownerReferences") or ())
