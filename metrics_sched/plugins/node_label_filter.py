"""NodeLabelFilter: keep only nodes with the required labels (e.g. role=special) and without the
forbidden ones. Args:

    requiredLabels: {role: special}         # value or list of accepted values
    presentLabels: [gpu-ready]               # must exist, any value
    absentLabels: [maintenance]              # must not exist
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from metrics_sched.config.errors import ArgsError
from metrics_sched.framework.interfaces import ClusterEvent, CycleState, Filtered, FilterPlugin
from metrics_sched.podinfo import PodInfo
from metrics_sched.state.node_table import BoolArray, NodeTable


class NodeLabelFilter(FilterPlugin):
    name = "NodeLabelFilter"
    events = frozenset({ClusterEvent.NODE_ADDED, ClusterEvent.NODE_LABELS})

    def __init__(self, args: Mapping[str, Any], handle: Any) -> None:
        super().__init__(args, handle)
        self.required: dict[str, list[str]] = {
            k: [v] if isinstance(v, str) else list(v) for k, v in (args.get("requiredLabels") or {}).items()
        }
        self.present: list[str] = list(args.get("presentLabels") or [])
        self.absent: list[str] = list(args.get("absentLabels") or [])
        self._cache: tuple[int, int, BoolArray] | None = None

    @classmethod
    def check_args(cls, args: Mapping[str, Any]) -> None:
        for key in args:
            if key not in ("requiredLabels", "presentLabels", "absentLabels"):
                raise ArgsError(key, "unknown field (expected requiredLabels, presentLabels, absentLabels)")
        if not args:
            raise ArgsError("requiredLabels", "give at least one of requiredLabels, presentLabels, absentLabels")
        required = args.get("requiredLabels") or {}
        if not isinstance(required, Mapping):
            raise ArgsError("requiredLabels", "must map label keys to a value or a list of values")
        for key, value in required.items():
            ok = isinstance(value, str) or (isinstance(value, list) and all(isinstance(v, str) for v in value))
            if not ok:
                raise ArgsError(f"requiredLabels.{key}", f"must be a string or a list of strings, got {value!r}")
        for field in ("presentLabels", "absentLabels"):
            value = args.get(field) or []
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ArgsError(field, "must be a list of label keys")

    def filter(self, cycle: CycleState, pod: PodInfo, table: NodeTable) -> Filtered:
        if self._cache is None or self._cache[:2] != (table.labels_generation, table.capacity):
            mask = np.ones(table.capacity, dtype=bool)
            for key, values in self.required.items():
                mask &= table.label_in(key, values)
            for key in self.present:
                mask &= table.label_exists(key)
            for key in self.absent:
                mask &= ~table.label_exists(key)
            self._cache = (table.labels_generation, table.capacity, mask)
        return Filtered.single(self._cache[2].copy(), "node(s) didn't have the required labels")
