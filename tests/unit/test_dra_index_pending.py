"""DraIndex's in-flight allocations (Reserve'd, not yet written), after kube-scheduler's claim tracker tests in
pkg/scheduler/framework/plugins/dynamicresources/dra_manager_test.go: TestSignalClaimPendingAllocation,
TestGetPendingAllocation, TestMaybeRemoveClaimPendingAllocation. Their `sharers` counts belong to PodGroup claims
(DRAWorkloadResourceClaims, off by default in 1.36) and are not ported; "claim-already-allocated" (upstream records
nothing when the cached claim got allocated meanwhile) is not either: here the pending allocation stands for the
claim's until PreBind, which then finds it "allocated elsewhere in the meantime".
"""

from __future__ import annotations

import pytest

from metrics_sched.plugins.dynamic_resources.index import CLAIMS, DraIndex
from tests.unit.dra_stages import DRIVER, NODE, allocated, allocation, claim

pytestmark = pytest.mark.unit

PENDING = claim(uid="claim-uid-1")
ALLOCATED = allocated(PENDING)
ALLOCATED2 = allocated(claim("other", uid="claim-uid-2"), allocation(("req-1", DRIVER, NODE, "instance-2")))


def index_with(*watched: dict[str, object]) -> DraIndex:
    index = DraIndex()
    for body in watched:
        index.on_event(CLAIMS, "ADDED", body)
    return index


def devices(index: DraIndex) -> set[tuple[str, str, str]]:
    return set(index.allocated_state().allocated_devices)


def test_signal_claim_pending_allocation() -> None:
    """"empty": the watched claim is pending; Reserve's allocation is in flight and its device counted as taken."""
    index = index_with(PENDING)
    index.signal_pending(ALLOCATED)
    assert index.pending("claim-uid-1") == ALLOCATED
    assert devices(index) == {(DRIVER, NODE, "instance-1")}


def test_signal_claim_pending_allocation_not_in_cache() -> None:
    """"extended-resource-claim-not-in-cache": the extended-resource claim exists only in memory until PreBind."""
    index = index_with()
    special = allocated(claim("<extended-resources>", uid="pod-uid/extended-resources"))
    index.signal_pending(special)
    assert index.pending("pod-uid/extended-resources") == special
    assert devices(index) == {(DRIVER, NODE, "instance-1")}


@pytest.mark.parametrize(("case", "in_flight", "uid", "want"), [
    ("empty", (), "claim-uid-1", None),
    ("claim", (ALLOCATED, ALLOCATED2), "claim-uid-1", ALLOCATED),
])
def test_get_pending_allocation(case: str, in_flight: tuple[dict[str, object], ...], uid: str,
                                want: dict[str, object] | None) -> None:
    index = index_with(PENDING)
    for body in in_flight:
        index.signal_pending(body)
    before = devices(index)
    assert index.pending(uid) == want, case
    assert devices(index) == before  # reading is read-only


@pytest.mark.parametrize(("case", "in_flight", "removed", "left"), [
    ("empty", (), False, set()),
    ("delete-last-sharer", (ALLOCATED, ALLOCATED2), True, {(DRIVER, NODE, "instance-2")}),
])
def test_maybe_remove_claim_pending_allocation(case: str, in_flight: tuple[dict[str, object], ...], removed: bool,
                                               left: set[tuple[str, str, str]]) -> None:
    index = index_with(PENDING)
    for body in in_flight:
        index.signal_pending(body)
    assert index.remove_pending("claim-uid-1") is removed, case
    assert index.pending("claim-uid-1") is None
    assert devices(index) == left  # the device is free again (the watched claim has no allocation)
