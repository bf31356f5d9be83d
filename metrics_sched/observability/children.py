"""A labelled metric's children by their label values, found with one dict lookup."""

from __future__ import annotations

from typing import Any

from prometheus_client import Counter, Histogram

__all__ = ["Children"]


class Children:
    """prometheus_client's labels() validates the values and takes a lock on every call, and the scheduler makes a
    dozen such calls per pod: each child is looked up once, then kept by its values. A metric without labels is its
    own only series (`labelled=False`: labels() would refuse to be called)."""

    __slots__ = ("_by_values", "metric")

    def __init__(self, metric: Counter | Histogram, *, labelled: bool = True) -> None:
        self.metric = metric
        self._by_values: dict[tuple[str, ...], Any] = {} if labelled else {(): metric}

    def __call__(self, *values: str) -> Any:
        child = self._by_values.get(values)
        if child is None:
            child = self._by_values[values] = self.metric.labels(*values)
        return child

    def remove(self, *values: str) -> None:
        """Drops the series (KeyError if it never existed, as the metric's own remove())."""
        self._by_values.pop(values, None)
        self.metric.remove(*values)
