"""Selector results kept across pods.

A selector's result depends only on the expression and the device, and a device only changes with its slice, so
(expression, driver, pool, device, slice resourceVersion) -> bool stays true until the slice changes (then the
key changes). Only results are kept, never errors: a failing expression is evaluated again and fails again, as
upstream does.
"""

from __future__ import annotations

__all__ = ["MemoKey", "SelectorMemo"]

MemoKey = tuple[str, str, str, str, str]  # (expression, driver, pool, device, slice resourceVersion)


class SelectorMemo:
    """Bounded: when `max_entries` is reached the memo starts over (old versions' keys go with it). Safe to
    share between threads: single dict operations only."""

    def __init__(self, max_entries: int = 1_000_000) -> None:
        self._max = max_entries
        self._results: dict[MemoKey, bool] = {}

    def __len__(self) -> int:
        return len(self._results)

    def get(self, key: MemoKey) -> bool | None:
        return self._results.get(key)

    def put(self, key: MemoKey, matches: bool) -> None:
        if len(self._results) >= self._max:
            self._results = {}
        self._results[key] = matches
