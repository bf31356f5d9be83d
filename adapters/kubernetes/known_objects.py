"""What a reflector has told its sink so far, so that watch events and relists become exact deltas.

Per key only a tombstone of the last object delivered is kept: its kind and identity (name, namespace, uid,
resourceVersion, labels, owners, deletion), references into the object the sink received, not copies. A
DELETED found by a relist carries it: every sink reads only those fields of a deleted object (the scheduler
drops a pod by uid, a workload or a volume by namespace and name). Keeping the whole object instead held
every bound pod's JSON for as long as the pod lived, a few kilobytes each, the largest share of the
scheduler's memory at 10,000 pods and more.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from metrics_sched.ports import EventType, KubeObject

Delta = tuple[EventType, KubeObject]


# The metadata a deleted object's tombstone keeps.
TOMBSTONE_METADATA = ("name", "namespace", "uid", "resourceVersion", "labels", "ownerReferences",
                      "deletionTimestamp")


@dataclass(frozen=True, slots=True)
class Known:
    uid: str
    resource_version: str
    obj: KubeObject  # the tombstone


def tombstone(obj: KubeObject) -> KubeObject:
    """The object as a DELETED delta needs it: kind, apiVersion and the identifying metadata."""
    meta = obj.get("metadata") or {}
    return {"apiVersion": obj.get("apiVersion", ""), "kind": obj.get("kind", ""),
            "metadata": {field: meta[field] for field in TOMBSTONE_METADATA if field in meta}}


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
        self._entries[key] = Known(uid, rv, tombstone(obj))
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
