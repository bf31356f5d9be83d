"""Consumable capacity (DRAConsumableCapacity, beta, on): upstream's incubating/consumable_capacity.go.

A request's `capacity.requests` is rounded by the device capacity's `requestPolicy` (validRange min/step,
validValues), an unrequested capacity consumes the policy's default or else the whole capacity, and the sum of
what is already allocated, what this attempt allocates and the new consumption must stay within the capacity
value. Values are nano units (Quantity.nanos); the Quantity objects keep their format for the results written.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from metrics_sched.plugins.dynamic_resources.allocator.quantity import Quantity, ceil_units

__all__ = ["DeviceCapacity", "RequestPolicy", "consumed_capacity", "consumed_from_request", "parse_capacities",
           "request_fits", "violates_policy"]


@dataclass(frozen=True, slots=True)
class RequestPolicy:
    default: Quantity | None
    valid_values: tuple[Quantity, ...] | None  # None: not set (Go's nil slice)
    has_range: bool
    range_min: Quantity | None
    range_max: Quantity | None
    range_step: Quantity | None


@dataclass(frozen=True, slots=True)
class DeviceCapacity:
    value: Quantity
    policy: RequestPolicy | None


def _optional(raw: Any) -> Quantity | None:
    return None if raw is None else Quantity.parse(raw)


def parse_capacities(raw: Mapping[str, Any] | None) -> dict[str, DeviceCapacity]:
    """A device's `capacity` map, parsed once per slice version."""
    out: dict[str, DeviceCapacity] = {}
    for name, cap in (raw or {}).items():
        cap = cap or {}
        policy = None
        raw_policy = cap.get("requestPolicy")
        if raw_policy is not None:
            raw_range = raw_policy.get("validRange")
            raw_values = raw_policy.get("validValues")
            policy = RequestPolicy(
                default=_optional(raw_policy.get("default")),
                valid_values=None if raw_values is None else tuple(Quantity.parse(v) for v in raw_values),
                has_range=raw_range is not None,
                range_min=_optional((raw_range or {}).get("min")),
                range_max=_optional((raw_range or {}).get("max")),
                range_step=_optional((raw_range or {}).get("step")),
            )
        out[str(name)] = DeviceCapacity(Quantity.parse(cap.get("value", "0")), policy)
    return out


def _round_up_range(requested: Quantity, policy: RequestPolicy) -> Quantity:
    minimum = policy.range_min
    if minimum is None:  # the caller checks; kept for the type checker
        return requested
    if requested.nanos < minimum.nanos:
        return minimum
    if policy.range_step is None:
        return requested
    step = ceil_units(policy.range_step.nanos)
    low = ceil_units(minimum.nanos)
    added = ceil_units(requested.nanos) - low
    n = _go_div(added, step)
    if _go_mod(added, step) != 0:
        n += 1
    return Quantity.from_int(low + step * n)


def _go_div(a: int, b: int) -> int:
    """Go's integer division (truncates toward zero)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def _go_mod(a: int, b: int) -> int:
    return a - b * _go_div(a, b)


def consumed_capacity(requested: Quantity | None, cap: DeviceCapacity) -> Quantity:
    """calculateConsumedCapacity: the request rounded by the policy; unrequested: the default, else the value."""
    policy = cap.policy
    if requested is None:
        if policy is not None and policy.default is not None:
            return policy.default
        return cap.value
    if policy is None:
        return requested
    if policy.has_range and policy.range_min is not None:
        return _round_up_range(requested, policy)
    if policy.valid_values is not None:
        for value in policy.valid_values:
            if requested.nanos <= value.nanos:
                return value
        return requested
    return requested


def violates_policy(consumed: Quantity, policy: RequestPolicy | None) -> bool:
    """violatesPolicy. Upstream compares with the default by Go struct equality (`requestedVal ==
    *policy.Default`); this compares values. The two differ only for a default its own policy rejects, which API
    validation does not let into a slice."""
    if policy is None:
        return False
    if policy.default is not None and consumed.nanos == policy.default.nanos:
        return False
    if policy.has_range:
        if policy.range_max is not None and consumed.nanos > policy.range_max.nanos:
            return True
        if policy.range_step is not None:
            low = ceil_units(policy.range_min.nanos) if policy.range_min is not None else 0
            return _go_mod(ceil_units(consumed.nanos) - low, ceil_units(policy.range_step.nanos)) != 0
        return False
    if policy.valid_values:
        return all(consumed.nanos != value.nanos for value in policy.valid_values)
    return False


def request_fits(current: Mapping[str, int] | None, requests: Mapping[str, Quantity] | None,
                 capacities: Mapping[str, DeviceCapacity], allocating: Mapping[str, int] | None) -> bool | None:
    """CmpRequestOverCapacity: True if the request fits beside what is allocated (`current`) and being allocated
    in this attempt (`allocating`); None for upstream's error "some requested capacity has not been defined"
    (the caller skips the device)."""
    if requests:
        for name in requests:
            if name not in capacities:
                return None
    for name, cap in capacities.items():
        consumed = consumed_capacity(requests.get(name) if requests else None, cap)
        if violates_policy(consumed, cap.policy):
            return False
        total = consumed.nanos
        if current:
            total += current.get(name, 0)
        if allocating:
            total += allocating.get(name, 0)
        if total > cap.value.nanos:
            return False
    return True


def consumed_from_request(requests: Mapping[str, Quantity] | None,
                          capacities: Mapping[str, DeviceCapacity]) -> dict[str, Quantity]:
    """GetConsumedCapacityFromRequest: what a shared allocation takes of every capacity of the device."""
    return {name: consumed_capacity(requests.get(name) if requests else None, cap)
            for name, cap in capacities.items()}

