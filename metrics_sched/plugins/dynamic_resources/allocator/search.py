"""One allocation attempt for one node: upstream's incubating `allocator` (the state of one Allocate call).

The search is upstream's, step for step (docs/design/dra.md §3.2-§3.7): claims in order, requests in order,
`firstAvailable` subrequests tried in order with the rest of the search, `All` requests taking their precomputed
devices, `ExactCount` requests trying candidates in pool/slice/device order starting after the device the
previous device of the same request took, the first complete solution winning. A device refused after its
counters were taken, and a device given back on backtracking, return everything they took (kube-scheduler 1.36.3,
kubernetes/kubernetes#140663). Quirk kept on purpose: the available-counters cache is keyed by pool name only.

With a rank, the candidates of `ExactCount` requests are tried in rank order (stable over upstream's order);
each request's results are put back in upstream order afterwards.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from metrics_sched.plugins.dynamic_resources.allocator.capacity import consumed_from_request, request_fits
from metrics_sched.plugins.dynamic_resources.allocator.claims import ClaimSpec, RequestSpec
from metrics_sched.plugins.dynamic_resources.allocator.constraints import Constraint, DistinctAttribute, MatchAttribute
from metrics_sched.plugins.dynamic_resources.allocator.devices import DeviceInfo, SliceInfo
from metrics_sched.plugins.dynamic_resources.allocator.errors import (
    AllocationError,
    AllocationTimeout,
    NodeAllocationError,
)
from metrics_sched.plugins.dynamic_resources.allocator.memo import SelectorMemo
from metrics_sched.plugins.dynamic_resources.allocator.node_selection import NodeSelectorError, node_matches
from metrics_sched.plugins.dynamic_resources.allocator.pools import Candidate, Pool
from metrics_sched.plugins.dynamic_resources.allocator.quantity import Quantity
from metrics_sched.plugins.dynamic_resources.allocator.state import AllocatedState, DeviceID
from metrics_sched.plugins.dynamic_resources.cel import CelCompileError, CelRuntimeError, SelectorCache

__all__ = ["MAX_RESULTS", "Rank", "Search", "Shared"]

MAX_RESULTS = 32  # resourceapi.AllocationResultsMaxSize

Rank = Callable[[str, str, str, str], float]  # (node, driver, pool, device) -> preference, lower first


@dataclass(eq=False)
class Shared:
    """What one Allocator's attempts share (upstream's Allocator fields)."""

    state: AllocatedState
    classes: Mapping[str, Mapping[str, Any]]
    cel: SelectorCache
    memo: SelectorMemo | None
    counters_in_use: set[DeviceID] = field(init=False)
    # Available counters per pool *name* (upstream's cache key), filled on first use and kept for every node.
    available_counters: dict[str, dict[str, dict[str, int]]] = field(default_factory=dict)
    invocations: int = 0
    # Per request (by identity; the Allocator keeps the parsed claims alive): its class selectors, or the error.
    _checked: dict[int, tuple[RequestSpec, tuple[Mapping[str, Any], ...] | str]] = field(default_factory=dict,
                                                                                          init=False)

    def __post_init__(self) -> None:
        self.counters_in_use = self.state.devices_in_use()

    def checked(self, claim: ClaimSpec, spec: RequestSpec) -> tuple[Mapping[str, Any], ...] | str:
        """validateDeviceRequest's node-independent part, in upstream's order: the class selectors of the
        request, or the error text."""
        known = self._checked.get(id(spec))
        if known is not None and known[0] is spec:
            return known[1]
        result: tuple[Mapping[str, Any], ...] | str
        prefix = f"claim {claim.display_name}, request {spec.name}"
        missing = next((i for i, selector in enumerate(spec.selectors) if selector.get("cel") is None), None)
        device_class = self.classes.get(spec.class_name) if spec.class_name else None
        if missing is not None:
            result = f"{prefix}, selector #{missing}: CEL expression empty (unsupported selector type?)"
        elif not spec.class_name:
            result = f"{prefix}: missing device class name (unsupported request type?)"
        elif device_class is None:
            result = (f"{prefix}: could not retrieve device class {spec.class_name}: "
                      f'deviceclass.resource.k8s.io "{spec.class_name}" not found')
        elif spec.mode not in ("ExactCount", "All"):
            result = f"{prefix}: unsupported count mode {spec.mode}"
        else:
            result = tuple((device_class.get("spec") or {}).get("selectors") or ())
        self._checked[id(spec)] = (spec, result)
        return result


class _MaxSizeExceeded(Exception):
    """errAllocationResultMaxSizeExceeded: more than 32 results for a claim down this path."""


class _RequestData:
    """requestData: one per exact request or per subrequest."""

    __slots__ = ("all_devices", "class_name", "class_selectors", "matches", "num_devices", "parent", "request_name",
                 "selected_sub", "spec")

    def __init__(self, spec: RequestSpec, parent: str | None) -> None:
        self.spec = spec
        self.parent = parent  # the name of the request of a subrequest
        self.request_name = f"{parent}/{spec.name}" if parent is not None else spec.name
        self.class_name = ""
        self.class_selectors: Sequence[Mapping[str, Any]] = ()
        self.num_devices = 0
        self.selected_sub = 0
        self.all_devices: list[Candidate] = []
        self.matches: dict[DeviceID, bool] = {}  # deviceMatchesRequest, per request of this attempt


class _Result:
    __slots__ = ("admin", "candidate", "consumed", "data", "request_index", "share_id")

    def __init__(self, data: _RequestData, request_index: int, candidate: Candidate, share_id: str | None,
                 consumed: dict[str, Quantity] | None) -> None:
        self.data = data
        self.request_index = request_index
        self.candidate = candidate
        self.share_id = share_id
        self.consumed = consumed
        self.admin = data.spec.admin_access


def _tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """resourceclaim.ToleratesTaint."""
    effect = toleration.get("effect") or ""
    if effect and effect != taint.get("effect", ""):
        return False
    key = toleration.get("key") or ""
    if key and key != taint.get("key", ""):
        return False
    operator = toleration.get("operator") or ""
    if operator in ("", "Equal"):
        return bool((toleration.get("value") or "") == (taint.get("value") or ""))
    return operator == "Exists"


class Search:
    def __init__(self, shared: Shared, node: Mapping[str, Any], claims: Sequence[ClaimSpec], pools: list[Pool],
                 rank: Rank | None, deadline: float | None) -> None:
        meta = node.get("metadata") or {}
        self.shared = shared
        self.node_name = str(meta.get("name") or "")
        self.node_labels: Mapping[str, str] = meta.get("labels") or {}
        self.claims = claims
        self.pools = pools
        self.deadline = deadline
        self.state = shared.state
        self.allocating: dict[DeviceID, set[int]] = {}  # allocatingDevices
        self.allocating_capacity: dict[DeviceID, dict[str, int]] = {}
        self.allocating_shares: dict[DeviceID, int] = {}  # live shares of each shared device in this attempt
        self.consumed_counters: dict[str, dict[str, dict[str, int]]] = {}
        self.results: list[list[_Result]] = [[] for _ in claims]
        self.request_data: list[list[list[_RequestData]]] = []
        self.constraints: list[list[Constraint]] = []
        self.invocations = 0
        # Candidates of ExactCount requests in upstream's order (valid pools only; an incomplete or invalid pool
        # has none).
        candidates = [c for pool in pools for c in pool.candidates]
        if rank is not None and len(candidates) > 1:
            name = self.node_name
            keys = {id(c): rank(name, c.device.id[0], c.device.id[1], c.device.name) for c in candidates}
            candidates.sort(key=lambda c: keys[id(c)])
        self.candidates = candidates

    # -- entry point ------------------------------------------------------------------------------------------

    def run(self) -> list[dict[str, Any]] | None:
        try:
            self._prepare()
            done = self._allocate_one(0, 0, 0, 0, False, 0)
        finally:
            self.shared.invocations += self.invocations
        if not done:
            if any(pool.is_invalid for pool in self.pools):
                # Not fatal: other nodes may do; reported only if every node fails.
                raise NodeAllocationError("invalid resource pools were encountered")
            return None
        return [self._allocation(i) for i in range(len(self.claims))]

    # -- per-claim checks before the search (Allocate's first loop) ---------------------------------------------

    def _prepare(self) -> None:
        for ci, claim in enumerate(self.claims):
            per_request: list[list[_RequestData]] = []
            min_devices = 0
            for request in claim.requests:
                if request.sub_requests:
                    datas = [self._validate(ci, sub, request.name) for sub in request.sub_requests]
                    min_devices += min(d.num_devices for d in datas)
                else:
                    if request.exact is None:
                        raise AllocationError(f"resource claim {claim.display_name}, request {request.name}: "
                                              "unknown request type")
                    datas = [self._validate(ci, request.exact, None)]
                    min_devices += datas[0].num_devices
                per_request.append(datas)
            if min_devices > MAX_RESULTS:
                raise AllocationError(f"claim {claim.display_name}: number of requested devices {min_devices} "
                                      f"exceeds the claim limit of {MAX_RESULTS}")
            constraints: list[Constraint] = []
            for i, raw in enumerate(claim.constraints):
                requests = [str(r) for r in raw.get("requests") or ()]
                if raw.get("matchAttribute") is not None:
                    constraints.append(MatchAttribute(requests, str(raw["matchAttribute"])))
                elif raw.get("distinctAttribute") is not None:
                    constraints.append(DistinctAttribute(requests, str(raw["distinctAttribute"])))
                else:
                    raise AllocationError(f"claim {claim.display_name}, constraint #{i}: empty constraint "
                                          "(unsupported constraint type?)")
            self.request_data.append(per_request)
            self.constraints.append(constraints)
        # Matches found while counting `All` devices are not reused (upstream resets its cache here).
        for per_request in self.request_data:
            for datas in per_request:
                for data in datas:
                    data.matches = {}

    def _validate(self, ci: int, spec: RequestSpec, parent: str | None) -> _RequestData:
        """validateDeviceRequest: the node-independent checks once per request (Shared.checked), then `All`'s
        device list for this node."""
        claim = self.claims[ci]
        checked = self.shared.checked(claim, spec)
        if isinstance(checked, str):
            raise AllocationError(checked)
        data = _RequestData(spec, parent)
        data.class_name = spec.class_name
        data.class_selectors = checked
        if spec.mode == "All":
            for pool in self.pools:
                if pool.is_incomplete:
                    raise AllocationError(f"claim {claim.display_name}, request {spec.name}: asks for all devices, "
                                          f"but resource pool {pool.pool_id} is currently being updated")
                if pool.is_invalid:
                    raise AllocationError(f"claim {claim.display_name}, request {spec.name}: asks for all devices, "
                                          f"but resource pool {pool.pool_id} is currently invalid")
                for candidate in pool.candidates:
                    if self._selectable(ci, data, candidate) and self._capacity_fits(spec, candidate.device):
                        data.all_devices.append(candidate)
            data.num_devices = len(data.all_devices)
        else:
            data.num_devices = spec.count
        return data

    # -- the search (allocateOne) ---------------------------------------------------------------------------------

    def _allocate_one(self, ci: int, ri: int, si: int, di: int, allocate_sub: bool, start: int) -> bool:
        self.invocations += 1
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise AllocationTimeout("filter operation aborted: context deadline exceeded")
        if ci >= len(self.claims):
            return True
        per_request = self.request_data[ci]
        if ri >= len(per_request):
            try:
                return self._allocate_one(ci + 1, 0, 0, 0, False, 0)
            except _MaxSizeExceeded:
                return False  # a prior claim's other choice may let a smaller subrequest fit
        datas = per_request[ri]
        data = datas[si]
        if not allocate_sub and data.parent is not None:
            all_exceeded = True
            for sub in range(len(datas)):
                try:
                    ok = self._allocate_one(ci, ri, sub, di, True, 0)
                except _MaxSizeExceeded:
                    continue  # a later subrequest may ask for fewer devices
                all_exceeded = False
                if ok:
                    datas[0].selected_sub = sub
                    return True
            if all_exceeded:
                raise _MaxSizeExceeded
            return False

        spec = data.spec
        do_all = spec.mode == "All"
        if do_all and not data.all_devices:
            return False  # `All` needs at least one device
        if di >= data.num_devices:
            return self._allocate_one(ci, ri + 1, 0, 0, False, 0)
        if len(self.results[ci]) + data.num_devices - di > MAX_RESULTS:
            raise _MaxSizeExceeded

        if do_all:
            rollback = self._allocate_device(ci, ri, data, data.all_devices[di], must=True, capacity_checked=False)
            if rollback is None:
                return False  # every device is needed: one unusable device means no solution
            try:
                done = self._allocate_one(ci, ri, si, di + 1, allocate_sub, 0)
            except BaseException:
                rollback()
                raise
            if not done:
                rollback()
            return done

        admin = spec.admin_access
        allocating = self.allocating
        allocated = self.state.allocated_devices
        candidates = self.candidates
        for pos in range(start, len(candidates)):
            candidate = candidates[pos]
            device = candidate.device
            device_id = device.id
            # Checking for "in use" is cheap and thus done first.
            claims_using = allocating.get(device_id)
            if admin:
                if claims_using and ci in claims_using:
                    continue
            elif device_id in allocated or claims_using:
                continue
            if not self._selectable(ci, data, candidate):
                continue
            if not self._capacity_fits(spec, device):
                continue
            rollback = self._allocate_device(ci, ri, data, candidate, must=False, capacity_checked=True)
            if rollback is None:
                continue
            try:
                done = self._allocate_one(ci, ri, si, di + 1, allocate_sub, pos + 1)
            except BaseException:
                rollback()
                raise
            if done:
                return True
            rollback()
        return False

    # -- candidate checks -------------------------------------------------------------------------------------------

    def _selectable(self, ci: int, data: _RequestData, candidate: Candidate) -> bool:
        """isSelectable: class selectors, then request selectors, then the device's own node selection."""
        device = candidate.device
        cached = data.matches.get(device.id)
        if cached is not None:
            return cached
        info = candidate.slice
        ok = (self._selectors_match(ci, device, info, data.class_name, data.class_selectors)
              and self._selectors_match(ci, device, info, None, data.spec.selectors))
        if ok and info.per_device_node_selection:
            try:
                ok = node_matches(self.node_name, self.node_labels, device.node_name or "", device.all_nodes,
                                  device.node_selector)
            except NodeSelectorError as err:
                raise AllocationError(str(err)) from None
        data.matches[device.id] = ok
        return ok

    def _selectors_match(self, ci: int, device: DeviceInfo, info: SliceInfo, class_name: str | None,
                         selectors: Sequence[Mapping[str, Any]]) -> bool:
        memo = self.shared.memo if info.resource_version else None
        for i, selector in enumerate(selectors):
            where = f"class {class_name}" if class_name is not None else f"claim {self.claims[ci].display_name}"
            cel = selector.get("cel")
            if cel is None:
                raise AllocationError(f"{where}: selector #{i}: CEL expression empty (unsupported selector type?)")
            expression = str(cel.get("expression") or "")
            key = (expression, device.id[0], device.id[1], device.name, info.resource_version)
            if memo is not None:
                known = memo.get(key)
                if known is not None:
                    if not known:
                        return False
                    continue
            try:
                compiled = self.shared.cel.compile(expression)
            except CelCompileError as err:
                raise AllocationError(f"{where}: selector #{i}: CEL compile error: {err}") from None
            try:
                matches = compiled.matches(device.cel())
            except CelRuntimeError as err:
                raise AllocationError(f"{where}: selector #{i}: CEL runtime error: {err}") from None
            if memo is not None:
                memo.put(key, matches)
            if not matches:
                return False
        return True

    def _capacity_fits(self, spec: RequestSpec, device: DeviceInfo) -> bool:
        """CmpRequestOverCapacity (upstream runs it for every candidate with ConsumableCapacity on); its error
        (a requested capacity the device lacks) skips the device like a misfit."""
        current = self.state.aggregated_capacity.get(device.id)
        allocating = self.allocating_capacity.get(device.id)
        if spec.capacity_requests is None and current is None and allocating is None:
            return device.fits_unrequested is True
        return request_fits(current, spec.capacity_requests, device.capacities, allocating) is True

    @staticmethod
    def _taint_prevents(device: DeviceInfo, spec: RequestSpec) -> bool:
        """A NoSchedule or NoExecute taint no toleration of the request tolerates (admin access included)."""
        return any(not any(_tolerates(t, taint) for t in spec.tolerations) for taint in device.blocking_taints)

    # -- allocateDevice ------------------------------------------------------------------------------------------

    def _allocate_device(self, ci: int, ri: int, data: _RequestData, candidate: Candidate, *, must: bool,
                         capacity_checked: bool) -> Callable[[], None] | None:
        """Takes the device for the request if it is free, its counters suffice, its taints are tolerated and
        the claim's constraints hold; returns the rollback, or None.

        Every refusal after the counters were taken gives back what this call took (counters, constraints, the
        claim's mark), and the rollback of a taken device gives back all of it, its counters too when it is a
        shared device whose counters this call took: kube-scheduler 1.36.3 has this (kubernetes/kubernetes#140431,
        cherry-picked to release-1.36 by #140663; 1.36.2's allocateDevice left them taken)."""
        device = candidate.device
        device_id = device.id
        spec = data.spec
        multi = device.allow_multiple
        claims_using = self.allocating.get(device_id)
        if spec.admin_access:
            if not multi and claims_using and ci in claims_using:
                return None
        elif device_id in self.state.allocated_devices or claims_using:
            return None
        # A shared device whose capacity is already in use has had its counters taken by that first user.
        skip_counters = multi and (device_id in self.state.aggregated_capacity
                                   or device_id in self.allocating_capacity)
        took_counters = not skip_counters and bool(device.consumes)
        if took_counters and not self._take_counters(candidate):
            return None
        if data.parent is None:
            base, sub = spec.name, ""
        else:
            base, sub = data.parent, spec.name
        constraints = self.constraints[ci]
        added = 0
        marked: set[int] | None = None

        def give_back() -> None:  # rollbackDevice: what this call did, undone
            for constraint in constraints[:added]:
                constraint.remove(base, sub)
            if marked is not None:
                marked.discard(ci)
            if took_counters:
                self._give_back_counters(candidate)

        if device.blocking_taints and self._taint_prevents(device, spec):
            give_back()
            return None
        for constraint in constraints:
            if not constraint.add(base, sub, device.attributes, device_id):
                give_back()
                if must:
                    raise AllocationError(
                        f"claim {self.claims[ci].display_name}, request {spec.name}: cannot add device "
                        f"{device_id[0]}/{device_id[1]}/{device_id[2]} because a claim constraint would not be "
                        "satisfied")
                return None
            added += 1
        if claims_using is None:
            claims_using = self.allocating[device_id] = set()
        if not multi:
            claims_using.add(ci)
            marked = claims_using
        # Only `All` requests get here unchecked (their devices were checked before the search began).
        if not capacity_checked and not self._capacity_fits(spec, device):
            give_back()
            return None
        share_id: str | None = None
        consumed: dict[str, Quantity] | None = None
        if multi:
            consumed = consumed_from_request(spec.capacity_requests, device.capacities)
            share_id = str(uuid.uuid4())
            entry = self.allocating_capacity.setdefault(device_id, {})
            for name, quantity in consumed.items():
                entry[name] = entry.get(name, 0) + quantity.nanos
            self.allocating_shares[device_id] = self.allocating_shares.get(device_id, 0) + 1
        results = self.results[ci]
        previous = len(results)
        results.append(_Result(data, ri, candidate, share_id, consumed or None))

        def rollback() -> None:
            give_back()
            if multi:
                self._remove_allocating_capacity(device_id, consumed or {})
            del results[previous:]

        return rollback

    def _remove_allocating_capacity(self, device_id: DeviceID, consumed: Mapping[str, Quantity]) -> None:
        """One share of a shared device rolled back: its consumption subtracted; the device's entry (which makes
        later shares skip the counters) goes with its last live share."""
        shares = self.allocating_shares.get(device_id, 0) - 1
        if shares > 0:
            self.allocating_shares[device_id] = shares
        else:
            self.allocating_shares.pop(device_id, None)
        entry = self.allocating_capacity.get(device_id)
        if entry is None:
            return
        for name, quantity in consumed.items():
            if name in entry:
                entry[name] -= quantity.nanos
        if shares <= 0:
            del self.allocating_capacity[device_id]

    # -- shared counters (checkAvailableCounters) --------------------------------------------------------------

    def _available(self, pool: Pool) -> dict[str, dict[str, int]]:
        cache = self.shared.available_counters
        available = cache.get(pool.pool)
        if available is not None:
            return available
        available = {name: dict(counters) for name, counters in pool.counter_sets.items()}
        in_use = self.shared.counters_in_use
        for info in (*pool.slices_targeting, *pool.slices_not_targeting):
            for device in info.devices:
                if device.id not in in_use:
                    continue
                for set_name, counters in device.consumes:
                    counter_set = available.get(set_name)
                    if counter_set is None:
                        continue
                    for name, value in counters.items():
                        if name in counter_set:
                            counter_set[name] -= value  # may go negative: then nothing is left
        cache[pool.pool] = available
        return available

    def _take_counters(self, candidate: Candidate) -> bool:
        pool = candidate.pool
        available = self._available(pool)
        consumed = self.consumed_counters.setdefault(pool.pool, {})
        for set_name, counters in candidate.device.consumes:
            taken = consumed.setdefault(set_name, {})
            for name, value in counters.items():
                taken[name] = taken.get(name, 0) + value
        for set_name, counters in available.items():
            used = consumed.get(set_name) or {}
            for name, value in counters.items():
                if value < used.get(name, 0):
                    self._give_back_counters(candidate)
                    return False
        return True

    def _give_back_counters(self, candidate: Candidate) -> None:
        consumed = self.consumed_counters.setdefault(candidate.pool.pool, {})
        for set_name, counters in candidate.device.consumes:
            taken = consumed.setdefault(set_name, {})
            for name, value in counters.items():
                taken[name] = taken.get(name, 0) - value

    # -- the AllocationResult JSON --------------------------------------------------------------------------------

    def _allocation(self, ci: int) -> dict[str, Any]:
        claim = self.claims[ci]
        results = self.results[ci]
        # With a rank, a request's devices were found in rank order: write them in upstream's order.
        ordered: Sequence[_Result] = results
        if len(results) > 1:
            order = {id(pool): i for i, pool in enumerate(self.pools)}
            ordered = sorted(results, key=lambda r: (r.request_index, order[id(r.candidate.pool)], r.candidate.pos))
        devices: dict[str, Any] = {}
        if ordered:
            devices["results"] = [self._result_json(r) for r in ordered]
        config = self._config(ci)
        if config:
            devices["config"] = config
        allocation: dict[str, Any] = {"devices": devices}
        selector = self._node_selector(claim, ordered)
        if selector is not None:
            allocation["nodeSelector"] = selector
        return allocation

    @staticmethod
    def _result_json(result: _Result) -> dict[str, Any]:
        device = result.candidate.device
        out: dict[str, Any] = {"request": result.data.request_name, "driver": device.id[0], "pool": device.id[1],
                               "device": device.name}
        if result.admin:
            out["adminAccess"] = True
        tolerations = result.data.spec.tolerations
        if tolerations:
            out["tolerations"] = [dict(t) for t in tolerations]
        if device.binding_conditions:
            out["bindingConditions"] = list(device.binding_conditions)
        if device.binding_failure_conditions:
            out["bindingFailureConditions"] = list(device.binding_failure_conditions)
        if result.share_id is not None:
            out["shareID"] = result.share_id
        if result.consumed:
            out["consumedCapacity"] = {name: q.canonical() for name, q in result.consumed.items()}
        return out

    def _config(self, ci: int) -> list[dict[str, Any]]:
        claim = self.claims[ci]
        per_request = self.request_data[ci]
        config: list[dict[str, Any]] = []
        class_ranges: dict[str, tuple[int, int]] = {}
        for datas in per_request:
            data = datas[datas[0].selected_sub] if datas[0].parent is not None else datas[0]
            known = class_ranges.get(data.class_name)
            if known is not None:
                for i in range(*known):
                    config[i]["requests"].append(data.request_name)
                continue
            start = len(config)
            device_class = self.shared.classes.get(data.class_name) or {}
            for entry in (device_class.get("spec") or {}).get("config") or ():
                config.append({"source": "FromClass", "requests": [data.request_name],
                               **{k: v for k, v in entry.items() if k != "requests"}})
            class_ranges[data.class_name] = (start, len(config))
        for entry in claim.config:
            requests = list(entry.get("requests") or ())
            body = {k: v for k, v in entry.items() if k != "requests"}
            if not requests:
                config.append({"source": "FromClaim", **body})
                continue
            # Quirk (upstream): added once per claim request it names, and once more if it names the chosen
            # subrequest of a request.
            for request, datas in zip(claim.requests, per_request, strict=True):
                if request.name in requests:
                    config.append({"source": "FromClaim", "requests": list(requests), **body})
                    continue
                if datas[0].parent is None:
                    continue
                chosen = request.sub_requests[datas[0].selected_sub]
                if f"{request.name}/{chosen.name}" in requests:
                    config.append({"source": "FromClaim", "requests": list(requests), **body})
        return config

    def _node_selector(self, claim: ClaimSpec, results: Sequence[_Result]) -> dict[str, Any] | None:
        """createNodeSelector: this node if any device is local to a node (or binds to it); else the union of
        the single-term selectors; nothing when every device is available everywhere."""
        fields: list[dict[str, Any]] = []
        expressions: list[dict[str, Any]] = []
        for result in results:
            device = result.candidate.device
            info = result.candidate.slice
            if info.per_device_node_selection:
                node_name, selector = device.node_name, device.node_selector_raw
            else:
                node_name, selector = info.node_name, info.node_selector_raw
            if node_name is not None or device.binds_to_node:
                return {"nodeSelectorTerms": [{"matchFields": [
                    {"key": "metadata.name", "operator": "In", "values": [self.node_name]}]}]}
            if selector is None:
                continue
            terms = selector.get("nodeSelectorTerms") or []
            if len(terms) == 1:
                _add_requirements(terms[0].get("matchFields") or (), fields)
                _add_requirements(terms[0].get("matchExpressions") or (), expressions)
            elif len(terms) > 1:
                raise AllocationError(f"create NodeSelector for claim {claim.name}: unsupported "
                                      f"ResourceSlice.NodeSelector with {len(terms)} terms")
        if not fields and not expressions:
            return None
        term: dict[str, Any] = {}
        if expressions:
            term["matchExpressions"] = expressions
        if fields:
            term["matchFields"] = fields
        return {"nodeSelectorTerms": [term]}


def _add_requirements(source: Sequence[Mapping[str, Any]], target: list[dict[str, Any]]) -> None:
    for requirement in source:
        values = set(requirement.get("values") or ())
        if any(r.get("key") == requirement.get("key") and r.get("operator") == requirement.get("operator")
               and set(r.get("values") or ()) == values for r in target):
            continue
        copy = dict(requirement)
        if "values" in copy:
            copy["values"] = list(copy["values"])
        target.append(copy)
