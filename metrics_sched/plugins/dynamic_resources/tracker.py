"""AllocatedTracker: the devices already allocated (upstream's AllocatedState), kept up to date claim by claim.

Upstream gathers the state afresh for every pod from every allocated claim; at 5,000 nodes x 8 GPUs that is a loop
over tens of thousands of claims per pod. Here each claim's contribution is added and removed as the claim changes,
and a pod takes a snapshot (three set/dict copies, in C) only when something changed since the last one.

It also says which nodes a change concerns (`changed_nodes`): an allocation tied to one node (its nodeSelector is
upstream's matchFields metadata.name In [node]) changes only what that node can still allocate; anything else
(a network-attached pool, a class, a slice without a node name) concerns every node ("" in the log).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from .allocator import AllocatedState
from .allocator.quantity import Quantity

__all__ = ["AllocatedTracker", "allocation_node"]

DeviceID = tuple[str, str, str]
_Contribution = tuple[tuple[DeviceID, ...], tuple[tuple[str, str, str, str], ...],
                      tuple[tuple[DeviceID, tuple[tuple[str, int], ...]], ...]]


def allocation_node(allocation: Mapping[str, Any] | None) -> str:
    """The one node an allocation is tied to, or "" (several nodes, or none: available everywhere)."""
    if not allocation:
        return ""
    terms: list[Mapping[str, Any]] = list((allocation.get("nodeSelector") or {}).get("nodeSelectorTerms") or [])
    if len(terms) != 1 or terms[0].get("matchExpressions"):
        return ""
    fields: list[Mapping[str, Any]] = list(terms[0].get("matchFields") or [])
    if len(fields) == 1 and fields[0].get("key") == "metadata.name" and fields[0].get("operator") == "In":
        values: list[Any] = list(fields[0].get("values") or [])
        if len(values) == 1:
            return str(values[0])
    return ""


def _contribution(claim: Mapping[str, Any]) -> _Contribution | None:
    allocation = (claim.get("status") or {}).get("allocation")
    if not allocation:
        return None
    dedicated: list[DeviceID] = []
    shared: list[tuple[str, str, str, str]] = []
    consumed: list[tuple[DeviceID, tuple[tuple[str, int], ...]]] = []
    for result in (allocation.get("devices") or {}).get("results") or ():
        if result.get("adminAccess") is True:
            continue  # admin access does not take the device
        device: DeviceID = (str(result.get("driver", "")), str(result.get("pool", "")), str(result.get("device", "")))
        share = result.get("shareID")
        if share is None:
            dedicated.append(device)
            continue
        shared.append((*device, str(share)))
        amounts = result.get("consumedCapacity")
        if amounts is not None:
            consumed.append((device, tuple((str(k), Quantity.parse(v).nanos) for k, v in amounts.items())))
    return tuple(dedicated), tuple(shared), tuple(consumed)


class AllocatedTracker:
    """Not locked: the index calls it under its own lock."""

    def __init__(self) -> None:
        self._by_claim: dict[str, _Contribution] = {}
        self._devices: Counter[DeviceID] = Counter()
        self._shared: Counter[tuple[str, str, str, str]] = Counter()
        self._capacity: dict[DeviceID, Counter[str]] = {}
        self.version = 0
        self._snapshot: tuple[int, AllocatedState] = (-1, AllocatedState())

    def set(self, uid: str, claim: Mapping[str, Any] | None) -> bool:
        """The claim's allocation is now `claim`'s (None: none); True if that changed what is allocated."""
        new = None if claim is None else _contribution(claim)
        old = self._by_claim.get(uid)
        if old == new:
            return False
        if old is not None:
            self._apply(old, -1)
            del self._by_claim[uid]
        if new is not None:
            self._apply(new, 1)
            self._by_claim[uid] = new
        self.version += 1
        return True

    def _apply(self, contribution: _Contribution, sign: int) -> None:
        dedicated, shared, consumed = contribution
        for device in dedicated:
            self._devices[device] += sign
            if self._devices[device] <= 0:
                del self._devices[device]
        for share in shared:
            self._shared[share] += sign
            if self._shared[share] <= 0:
                del self._shared[share]
        for device, amounts in consumed:
            totals = self._capacity.setdefault(device, Counter())
            for name, nanos in amounts:
                totals[name] += sign * nanos
                if totals[name] == 0:
                    del totals[name]
            if not totals:
                del self._capacity[device]

    def snapshot(self) -> AllocatedState:
        """The state as it is now, as the allocator's own copy (made only when something changed)."""
        version, state = self._snapshot
        if version != self.version:
            state = AllocatedState(set(self._devices), set(self._shared),
                                   {device: dict(totals) for device, totals in self._capacity.items()})
            self._snapshot = (self.version, state)
        return state

    def __len__(self) -> int:
        return len(self._by_claim)
