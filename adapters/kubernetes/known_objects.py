"""What a reflector has told its sink so far, so that watch events and relists become exact deltas.

Per key only a tombstone of the last object delivered is kept: its kind and identity (name, namespace, uid,
resourceVersion, labels, owners, deletion), references into the object the sink received, not copies. A
DELETED found by a relist carries it: every sink reads only those fields of a deleted object (the scheduler
drops a pod by uid, a workload or a volume by namespace and name). Keeping the whole object instead held
every bound pod's JSON for as long as the pod lived, a few kilobytes each, the largest share of the
scheduler's memory at 10,000 pods and more. The tombstone is kept as the field references of a slotted entry
and made into an object only for the rare DELETED of a relist (its two dicts were ~400 bytes per object).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from metrics_sched.ports import EventType, KubeObject

Delta = tuple[EventType, KubeObject]


# The metadata a deleted object's tombstone keeps.
TOMBSTONE_METADATA = ("name", "namespace", "uid", "resourceVersion", "labels", "ownerReferences",
                      "deletionTimestamp")


_ABSENT = object()  # a metadata field the object did not have (the tombstone leaves it out too)


@dataclass(frozen=True, slots=True)
class Known:
    uid: str
    resource_version: str
    api_version: Any
    kind: Any
    metadata: tuple[Any, ...]  # TOMBSTONE_METADATA's values, _ABSENT where the object had none

    @property
    def obj(self) -> KubeObject:
        """The tombstone."""
        return {"apiVersion": self.api_version, "kind": self.kind,
                "metadata": {field: value for field, value in zip(TOMBSTONE_METADATA, self.metadata, strict=True)
                             if value is not _ABSENT}}


def _known(obj: KubeObject, uid: str, resource_version: str) -> Known:
    meta = obj.get("metadata") or {}
    return Known(uid, resource_version, obj.get("apiVersion", ""), obj.get("kind", ""),
                 tuple(meta.get(field, _ABSENT) for field in TOMBSTONE_METADATA))


def tombstone(obj: KubeObject) -> KubeObject:
    """The object as a DELETED delta needs it: kind, apiVersion and the identifying metadata."""
    uid, resource_version = _identity(obj)
    return _known(obj, uid, resource_version).obj


def object_key(obj: KubeObject) -> str:
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace")
    return f"{namespace}/{meta.get('name', '')}" if namespace else str(meta.get("name", ""))


def _identity(obj: KubeObject) -> tuple[str, str]:
    meta = obj.get("metadata") or {}
    return str(meta.get("uid", "")), str(meta.get("resourceVersion", ""))


class KnownObjects:
    def __init__(self) -> None:
        self._entries: dict[str, Known] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def upsert(self, obj: KubeObject) -> list[Delta]:
        """An object as it is now: ADDED if new, MODIFIED if changed, nothing if already delivered.

        A different uid under a known key is a re-created object (deleted and created again while we were
        not watching): the old one is reported DELETED first, so the sink never merges the two.
        """
        key = object_key(obj)
        uid, rv = _identity(obj)
        old = self._entries.get(key)
        if old is not None and old.uid == uid and old.resource_version == rv:
            return []
        self._entries[key] = _known(obj, uid, rv)
        if old is None:
            return [("ADDED", obj)]
        if old.uid != uid:
            return [("DELETED", old.obj), ("ADDED", obj)]
        return [("MODIFIED", obj)]

    def delete(self, obj: KubeObject) -> list[Delta]:
        """DELETED, unless the sink never heard of this object (or only of another one of the same name)."""
        key = object_key(obj)
        uid, _ = _identity(obj)
        old = self._entries.get(key)
        if old is None or (uid and old.uid != uid):
            return []
        del self._entries[key]
        return [("DELETED", obj)]

    def replace(self, items: Iterable[KubeObject]) -> list[Delta]:
        """The deltas that turn what the sink knows into exactly `items` (a fresh LIST)."""
        current = {object_key(obj): obj for obj in items}
        deltas: list[Delta] = [("DELETED", known.obj) for key, known in self._entries.items() if key not in current]
        for key in [key for key in self._entries if key not in current]:
            del self._entries[key]
        for obj in current.values():
            deltas.extend(self.upsert(obj))
        return deltas
