"""The allocator's errors, with upstream's texts (docs/design/dra.md §7)."""

from __future__ import annotations

__all__ = ["AllocationError", "AllocationTimeout", "NodeAllocationError"]


class AllocationError(Exception):
    """A fatal error of upstream's allocator: Filter turns it into an Error status that ends the scheduling
    attempt (CEL errors, an incomplete pool for `All`, too many devices, an impossible constraint ...)."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class NodeAllocationError(AllocationError):
    """upstream's ErrFailedAllocationOnNode: only this node is out ("invalid resource pools were encountered");
    Filter reports it as Unschedulable for the node and goes on with the others."""


class AllocationTimeout(AllocationError):
    """The deadline given to allocate() passed ("filter operation aborted: context deadline exceeded");
    the plugin reports "timed out trying to allocate devices"."""
