"""PodDisruptionBudgets as preemption reads them (kube-scheduler's PDB lister, filterPodsWithPDBViolation).

Only what deciding a victim's PDB violation needs is kept: the namespace, the selector, status.disruptionsAllowed
and status.disruptedPods (pods the API server has already counted as disrupted: removing one of them again does
not spend the budget a second time). The watch keeps it current; preemption takes a snapshot per attempt.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from metrics_sched.framework import (
    NOTHING,
    ApiKind,
    ClusterIndex,
    EventType,
    IndexChange,
    KubeObject,
    LabelSelector,
    SelectorError,
)

__all__ = ["BUDGETS", "Budget", "DisruptionBudgets", "parse_budget"]

BUDGETS = ApiKind("policy/v1", "poddisruptionbudgets")


@dataclass(frozen=True)
class Budget:
    namespace: str
    name: str
    selector: LabelSelector  # NOTHING for a nil, empty or malformed selector: matches no pod, as upstream
    allowed: int  # status.disruptionsAllowed
    disrupted: frozenset[str]  # status.disruptedPods: pod names

    def selects(self, namespace: str, labels: Mapping[str, str]) -> bool:
        return namespace == self.namespace and bool(labels) and self.selector.matches(labels)


def parse_budget(obj: Mapping[str, Any]) -> Budget:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    try:
        selector = LabelSelector.parse(spec.get("selector"))
    except SelectorError:
        selector = NOTHING  # upstream: an invalid selector does not match the pod
    if selector.empty:
        selector = NOTHING  # upstream: "A PDB with a nil or empty selector matches nothing"
    return Budget(
        namespace=str(meta.get("namespace", "")), name=str(meta.get("name", "")), selector=selector,
        allowed=int(status.get("disruptionsAllowed") or 0),
        disrupted=frozenset((status.get("disruptedPods") or {}).keys()),
    )


class DisruptionBudgets(ClusterIndex):
    """The cluster's PDBs by namespace/name; fed by the watch, read by preemption (any thread)."""

    kinds = (BUDGETS,)

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._budgets: dict[str, Budget] = {}

    def upsert(self, obj: Mapping[str, Any]) -> Budget:
        budget = parse_budget(obj)
        with self._lock:
            self._budgets[f"{budget.namespace}/{budget.name}"] = budget
        return budget

    def remove(self, obj: Mapping[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        with self._lock:
            self._budgets.pop(f"{meta.get('namespace', '')}/{meta.get('name', '')}", None)

    def on_event(self, kind: ApiKind, event: EventType, obj: KubeObject) -> IndexChange | None:
        # Preemption's input only (which victims to spare): no parked pod can start to fit, as upstream.
        if event == "DELETED":
            self.remove(obj)
        else:
            self.upsert(obj)
        return None

    def snapshot(self) -> tuple[Budget, ...]:
        with self._lock:
            return tuple(self._budgets.values())

    def __len__(self) -> int:
        with self._lock:
            return len(self._budgets)
