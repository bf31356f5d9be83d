"""The cluster's namespaces and their labels: what a pod affinity term's namespaceSelector selects
(kube-scheduler resolves it with a namespace lister, GetNamespaceLabelsSnapshot / MergeAffinityTerms).

Only names and labels are kept. Lookups come from the scheduling thread, changes from the watch's thread.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from metrics_sched.model.selectors import LabelSelector

__all__ = ["NamespaceIndex"]

# Distinct selectors whose answers are kept for the current generation. Pods of one workload share their
# selector, so a handful covers a burst; a change of any namespace empties the cache.
MATCH_CACHE_SIZE = 128


class NamespaceIndex:
    def __init__(self, *, cache_size: int = MATCH_CACHE_SIZE) -> None:
        self._lock = threading.Lock()
        self._labels: dict[str, Mapping[str, str]] = {}
        self._generation = 0
        self._cache_size = cache_size
        self._cache: OrderedDict[LabelSelector, frozenset[str]] = OrderedDict()
        self._cache_generation = 0

    def upsert(self, obj: Mapping[str, Any]) -> bool:
        """A Namespace as it is now; True if it is new or its labels changed."""
        meta = obj.get("metadata") or {}
        name = str(meta.get("name", ""))
        labels = MappingProxyType({str(k): str(v) for k, v in (meta.get("labels") or {}).items()})
        with self._lock:
            old = self._labels.get(name)
            if old is not None and old == labels:
                return False
            self._labels[name] = labels
            self._generation += 1
            return True

    def remove(self, name: str) -> None:
        with self._lock:
            if self._labels.pop(name, None) is not None:
                self._generation += 1

    def labels(self, name: str) -> Mapping[str, str] | None:
        """The namespace's labels (read-only), or None if there is no such namespace."""
        with self._lock:
            return self._labels.get(name)

    def matching(self, selector: LabelSelector) -> frozenset[str]:
        """The names of the namespaces whose labels match `selector` (NOTHING: none; EVERYTHING: all)."""
        if selector.nothing:
            return frozenset()
        with self._lock:
            if self._cache_generation != self._generation:
                self._cache.clear()
                self._cache_generation = self._generation
            found = self._cache.get(selector)
            if found is not None:
                self._cache.move_to_end(selector)
                return found
            found = frozenset(name for name, labels in self._labels.items() if selector.matches(labels))
            self._cache[selector] = found
            if len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
            return found

    @property
    def generation(self) -> int:
        """Bumped on every change (a namespace added, removed, or relabelled)."""
        with self._lock:
            return self._generation

    def __len__(self) -> int:
        with self._lock:
            return len(self._labels)

    def __contains__(self, name: object) -> bool:
        with self._lock:
            return name in self._labels
