"""The selectors of the cluster's Services, ReplicationControllers, ReplicaSets and StatefulSets, per namespace:
what kube-scheduler's DefaultSelector (pkg/scheduler/framework/plugins/helper/spread.go) reads to build
PodTopologySpread's system-default constraints for a pod.

Only what can change DefaultSelector's answer is kept, keyed by (namespace, name): a Service's or an RC's
selector map, a ReplicaSet's or StatefulSet's selector requirements. Objects that contribute nothing (a
Service without a selector, a ReplicaSet whose selector does not parse or is empty) are not stored: for
DefaultSelector they are the same as absent. Removing an object frees its entry, and a namespace's table
goes with its last entry. Lookups come from the scheduling thread, changes from the watches' threads.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any, Literal, TypeVar

from metrics_sched.model.selectors import LabelSelector, Requirement, SelectorError
from metrics_sched.ports import WorkloadKind

__all__ = ["WorkloadSelectors", "controller_of", "parse_group_version"]

LabelPairs = tuple[tuple[str, str], ...]  # a plain selector map (Service, ReplicationController), sorted
_MapKind = Literal["services", "replicationcontrollers"]
_SetKind = Literal["replicasets", "statefulsets"]
_V = TypeVar("_V")
# namespace -> name -> entry
_Table = dict[str, dict[str, _V]]

# The owner kinds DefaultSelector follows, as (group, version, kind) after schema.ParseGroupVersion.
_RC_GVK = ("", "v1", "ReplicationController")
_OWNER_KINDS: dict[tuple[str, str, str], WorkloadKind] = {
    _RC_GVK: "replicationcontrollers",
    ("apps", "v1", "ReplicaSet"): "replicasets",
    ("apps", "v1", "StatefulSet"): "statefulsets",
}


def parse_group_version(api_version: str) -> tuple[str, str] | None:
    """schema.ParseGroupVersion: "v1" -> ("", "v1"), "apps/v1" -> ("apps", "v1"), "" or "/" -> ("", "");
    None (an error) for more than one slash."""
    if api_version in ("", "/"):
        return "", ""
    count = api_version.count("/")
    if count == 0:
        return "", api_version
    if count == 1:
        group, version = api_version.split("/")
        return group, version
    return None


def controller_of(meta: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """metav1.GetControllerOf: the first ownerReference with controller: true."""
    for ref in meta.get("ownerReferences") or ():
        if isinstance(ref, Mapping) and ref.get("controller") is True:
            return ref
    return None


def _selector_map(raw: Any) -> LabelPairs:
    """A plain selector map (Service, RC) as sorted pairs; () for nil, empty or malformed."""
    if not isinstance(raw, Mapping):
        return ()
    return tuple(sorted((str(k), str(v)) for k, v in raw.items()))


def _selector_requirements(raw: Any) -> tuple[Requirement, ...]:
    """The requirements DefaultSelector adds for a ReplicaSet's or StatefulSet's metav1.LabelSelector:
    none when it is nil (labels.Nothing() has no Requirements), empty, or does not parse."""
    if raw is None:
        return ()
    try:
        selector = LabelSelector.parse(raw)
    except SelectorError:
        return ()
    return () if selector.nothing else selector.requirements


def _put(table: _Table[_V], namespace: str, name: str, value: _V | None) -> bool:
    """Stores value (None or empty: drops the entry). True if the table changed."""
    if not value:
        return _drop(table, namespace, name)
    names = table.setdefault(namespace, {})
    if names.get(name) == value:
        return False
    names[name] = value
    return True


def _drop(table: _Table[_V], namespace: str, name: str) -> bool:
    names = table.get(namespace)
    if names is None or name not in names:
        return False
    del names[name]
    if not names:
        del table[namespace]
    return True


def _key(obj: Mapping[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


class WorkloadSelectors:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._maps: dict[_MapKind, _Table[LabelPairs]] = {"services": {}, "replicationcontrollers": {}}
        self._sets: dict[_SetKind, _Table[tuple[Requirement, ...]]] = {"replicasets": {}, "statefulsets": {}}
        # Moves whenever what default_selector may answer changes (a kept batch's default constraints stand while
        # it is the same: PodTopologySpread's incremental scores).
        self.generation = 0

    def upsert(self, kind: WorkloadKind, obj: Mapping[str, Any]) -> bool:
        """An object as it is now; True if what DefaultSelector may answer changed."""
        namespace, name = _key(obj)
        raw = (obj.get("spec") or {}).get("selector")
        with self._lock:
            if kind == "services" or kind == "replicationcontrollers":
                changed = _put(self._maps[kind], namespace, name, _selector_map(raw))
            else:
                changed = _put(self._sets[kind], namespace, name, _selector_requirements(raw))
            if changed:
                self.generation += 1
            return changed

    def remove(self, kind: WorkloadKind, obj: Mapping[str, Any]) -> bool:
        """The object is gone (only its namespace and name are read). True if an entry was dropped."""
        namespace, name = _key(obj)
        with self._lock:
            if kind == "services" or kind == "replicationcontrollers":
                changed = _drop(self._maps[kind], namespace, name)
            else:
                changed = _drop(self._sets[kind], namespace, name)
            if changed:
                self.generation += 1
            return changed

    def default_selector(self, pod: Mapping[str, Any]) -> LabelSelector:
        """kube-scheduler's helper.DefaultSelector: the merged selectors of the pod's namespace's Services
        that select it, plus its controller's (RC: the selector map merged in; ReplicaSet or StatefulSet: the
        selector's requirements added). EVERYTHING (`.empty`) when nothing applies."""
        meta = pod.get("metadata") or {}
        namespace = str(meta.get("namespace") or "")
        labels = meta.get("labels") or {}
        owner = controller_of(meta)
        owner_kind: WorkloadKind | None = None
        if owner is not None:
            group_version = parse_group_version(str(owner.get("apiVersion") or ""))
            if group_version is not None:
                owner_kind = _OWNER_KINDS.get((*group_version, str(owner.get("kind") or "")))
        owner_name = str(owner.get("name") or "") if owner is not None else ""
        label_set: dict[str, str] = {}
        with self._lock:
            # GetPodServices: a Service selects the pod when every pair of its selector is among the pod's
            # labels. They all select the pod, so they cannot disagree: merging is safe.
            for pairs in (self._maps["services"].get(namespace) or {}).values():
                if all(labels.get(key) == value for key, value in pairs):
                    label_set.update(pairs)
            added: tuple[Requirement, ...] = ()
            if owner_kind == "replicationcontrollers":
                label_set.update(self._maps[owner_kind].get(namespace, {}).get(owner_name, ()))
            elif owner_kind == "replicasets" or owner_kind == "statefulsets":
                added = self._sets[owner_kind].get(namespace, {}).get(owner_name, ())
        selector = LabelSelector.from_set(label_set)
        return selector.adding(added) if added else selector

    def __len__(self) -> int:
        """How many objects are kept (those that contribute to some pod's default selector)."""
        with self._lock:
            return sum(len(names) for table in self._tables() for names in table.values())

    def namespaces(self) -> frozenset[str]:
        """The namespaces holding at least one kept object."""
        with self._lock:
            return frozenset(ns for table in self._tables() for ns in table)

    def _tables(self) -> list[Mapping[str, Mapping[str, object]]]:
        return [*self._maps.values(), *self._sets.values()]
