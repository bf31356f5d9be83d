"""A ResourceClaim's device requests as the allocator reads them (upstream's requestAccessor: an exact request
or one subrequest of a `firstAvailable` list), parsed once per claim object per Allocator."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from metrics_sched.plugins.dynamic_resources.allocator.quantity import Quantity

__all__ = ["ClaimSpec", "RequestSpec", "claim_display_name", "parse_claim"]


@dataclass(frozen=True, slots=True)
class RequestSpec:
    """exactDeviceRequestAccessor / deviceSubRequestAccessor."""

    name: str
    class_name: str
    mode: str  # allocationMode as written ("" when unset: upstream refuses it as an unsupported count mode)
    count: int
    admin_access: bool  # subrequests have none
    selectors: tuple[Mapping[str, Any], ...]
    tolerations: tuple[Mapping[str, Any], ...]
    capacity_requests: Mapping[str, Quantity] | None


@dataclass(frozen=True, slots=True)
class ClaimRequest:
    name: str
    exact: RequestSpec | None
    sub_requests: tuple[RequestSpec, ...]  # firstAvailable, in priority order


@dataclass(frozen=True, slots=True)
class ClaimSpec:
    display_name: str  # klog.KObj: "<namespace>/<name>", or "<name>" without a namespace
    name: str
    requests: tuple[ClaimRequest, ...]
    constraints: tuple[Mapping[str, Any], ...]
    config: tuple[Mapping[str, Any], ...]


def claim_display_name(claim: Mapping[str, Any]) -> str:
    meta = claim.get("metadata") or {}
    namespace, name = meta.get("namespace") or "", meta.get("name") or ""
    return f"{namespace}/{name}" if namespace else str(name)


def _capacity(raw: Mapping[str, Any] | None) -> Mapping[str, Quantity] | None:
    requests = (raw or {}).get("requests")
    if not requests:
        return None
    return {str(name): Quantity.parse(q) for name, q in requests.items()}


def _spec(raw: Mapping[str, Any], name: str, admin_access: bool) -> RequestSpec:
    return RequestSpec(
        name=name,
        class_name=str(raw.get("deviceClassName") or ""),
        mode=str(raw.get("allocationMode") or ""),
        count=int(raw.get("count") or 0),
        admin_access=admin_access,
        selectors=tuple(raw.get("selectors") or ()),
        tolerations=tuple(raw.get("tolerations") or ()),
        capacity_requests=_capacity(raw.get("capacity")),
    )


def _request(raw: Mapping[str, Any]) -> ClaimRequest:
    name = str(raw.get("name") or "")
    exactly = raw.get("exactly")
    subs: Sequence[Mapping[str, Any]] = raw.get("firstAvailable") or ()
    return ClaimRequest(
        name=name,
        exact=None if exactly is None else _spec(exactly, name, exactly.get("adminAccess") is True),
        sub_requests=tuple(_spec(s, str(s.get("name") or ""), False) for s in subs),
    )


def parse_claim(claim: Mapping[str, Any]) -> ClaimSpec:
    devices = (claim.get("spec") or {}).get("devices") or {}
    return ClaimSpec(
        display_name=claim_display_name(claim),
        name=str((claim.get("metadata") or {}).get("name") or ""),
        requests=tuple(_request(r) for r in devices.get("requests") or ()),
        constraints=tuple(devices.get("constraints") or ()),
        config=tuple(devices.get("config") or ()),
    )
