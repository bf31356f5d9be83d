"""PodActivator: moves pods straight back to the active queue (kube-scheduler's PodsToActivate).

A gang's plugin parks members while the gang cannot go on (too few members, a failed attempt backing off)
and wakes them when it may: its first member waits at Permit (the others should follow at once), or the
backoff ends. The scheduler connects the activator to its queue; until then (and in plugin tests) it does
nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

__all__ = ["PodActivator"]


class PodActivator:
    def __init__(self) -> None:
        self._target: Callable[[Iterable[str]], object] | None = None

    def connect(self, target: Callable[[Iterable[str]], object]) -> None:
        self._target = target

    def activate(self, uids: Iterable[str]) -> None:
        """The pods (by UID) leave backoff, the unschedulable pods and the gated ones for the active queue."""
        if self._target is not None:
            self._target(list(uids))
