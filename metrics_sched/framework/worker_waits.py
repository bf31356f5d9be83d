"""Waits that must not hold a shared worker: a plugin that blocks for something outside its own work (PreBind
waiting for the PV controller, a provisioner or a device driver, for up to minutes) says so with `blocking()`, and
the thread running it, if it belongs to a fixed pool (the binder's), is replaced in that pool for the wait.

kube-scheduler runs each binding cycle on its own goroutine, so one cycle's wait delays nobody else's bind. Here the
binding cycles share a few worker threads (they exist to bound the API calls in flight, and to keep the scheduling
loop from waking a thread per pod): a worker that waited in PreBind took a bind slot from every other pod for as long
as it waited (bindTimeoutSeconds, 600 s by default). `blocking()` is the pool's managed block (as Java's
ForkJoinPool.managedBlock): the pool starts a thread in the waiting one's place, and the waiting thread leaves the
pool once its call is done, so the pool keeps its size for API work whatever waits. Outside such a pool (a test
calling the plugin, the scheduling thread) it does nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol

__all__ = ["BlockingHost", "blocking", "hosted_by"]


class BlockingHost(Protocol):
    """What runs the current thread's work and can stand in for it while it waits (the binder's pool)."""

    def wait_began(self) -> None:
        """The current thread is about to wait: have its share of the work done by another."""

    def wait_ended(self) -> None:
        """The current thread's wait is over (it finishes its call, and leaves the pool if it was replaced)."""


class _Hosted(threading.local):
    host: BlockingHost | None = None


_hosted = _Hosted()


@contextmanager
def hosted_by(host: BlockingHost) -> Iterator[None]:
    """Marks the current thread's work as `host`'s while the block runs (a pool's thread, for its life)."""
    outer = _hosted.host
    _hosted.host = host
    try:
        yield
    finally:
        _hosted.host = outer


@contextmanager
def blocking() -> Iterator[None]:
    """Around a wait for something the thread does not do itself (a watch to deliver a change, a timeout)."""
    host = _hosted.host
    if host is None:
        yield
        return
    _hosted.host = None  # a wait nested inside this one is already covered
    host.wait_began()
    try:
        yield
    finally:
        host.wait_ended()
        _hosted.host = host
