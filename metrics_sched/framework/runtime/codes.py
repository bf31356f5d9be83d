"""The codes each extension point may return (anything else is a plugin bug, turned into an Error), shared by the
scheduling cycle's runner and the Reserve / Permit / binding steps."""

from __future__ import annotations

from metrics_sched.framework.status import Code, Status

__all__ = ["BIND", "PERMIT", "PRE", "REJECTIONS", "RESERVE", "checked"]

REJECTIONS = frozenset({Code.UNSCHEDULABLE, Code.UNRESOLVABLE})
PRE = frozenset({Code.SUCCESS, Code.SKIP, Code.ERROR}) | REJECTIONS
RESERVE = frozenset({Code.SUCCESS, Code.ERROR}) | REJECTIONS
PERMIT = frozenset({Code.SUCCESS, Code.SKIP, Code.WAIT, Code.ERROR}) | REJECTIONS
BIND = frozenset({Code.SUCCESS, Code.SKIP, Code.PENDING, Code.ERROR}) | REJECTIONS


def checked(status: Status, allowed: frozenset[Code], point: str) -> Status:
    if status.code in allowed:
        return status
    return Status.error(f"{point} returned {status.code.value}, which {point} may not return ({status.reason})")
