"""DraIndex: the ResourceSlices, DeviceClasses and ResourceClaims the DynamicResources plugin reads, and the claims it
has allocated but the watch has not shown yet (kube-scheduler's DRA manager: informers plus the assume cache and the
in-flight allocations).

Two layers above the watched claims keep two pods from getting one device:
- pending: an allocation chosen in Reserve, by claim UID, until PreBind has written it (or Unreserve drops it);
  every other pod's allocator counts its devices as taken, and a pod sharing the claim waits for it.
- assumed: a claim as PreBind wrote it, until the watch delivers that version or a newer one.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from metrics_sched.framework import ApiKind, ClusterEvent, ClusterIndex, IndexChange, KubeObject

__all__ = ["CLAIMS", "CLASSES", "SLICES", "ClaimChange", "ClaimKey", "DraIndex", "claim_key_of", "resource_version"]

# Optional: a cluster that does not serve resource.k8s.io/v1 (older than 1.34) still schedules every other pod;
# a pod with claims then waits for its claims like one whose claims are not created yet.
SLICES = ApiKind("resource.k8s.io/v1", "resourceslices", optional=True)
CLASSES = ApiKind("resource.k8s.io/v1", "deviceclasses", optional=True)
CLAIMS = ApiKind("resource.k8s.io/v1", "resourceclaims", optional=True)

ClaimKey = tuple[str, str]  # (namespace, name)
T = TypeVar("T")


@dataclass(frozen=True)
class ClaimChange:
    """A ResourceClaimChange event's object: the claim before (None: new) and after (None: deleted)."""

    old: KubeObject | None
    new: KubeObject | None


def claim_key_of(claim: Mapping[str, Any]) -> ClaimKey:
    meta = claim.get("metadata") or {}
    return str(meta.get("namespace", "")), str(meta.get("name", ""))


def resource_version(obj: Mapping[str, Any] | None) -> int:
    """metadata.resourceVersion as a number for ordering (the API server's are etcd revisions); 0 if unknown."""
    if obj is None:
        return 0
    try:
        return int((obj.get("metadata") or {}).get("resourceVersion", 0))
    except (TypeError, ValueError):
        return 0


def _uid(claim: Mapping[str, Any]) -> str:
    return str((claim.get("metadata") or {}).get("uid", ""))


class DraIndex(ClusterIndex):
    kinds = (SLICES, CLASSES, CLAIMS)

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._slices: dict[str, KubeObject] = {}
        self._classes: dict[str, KubeObject] = {}
        self._claims: dict[ClaimKey, KubeObject] = {}
        self._assumed: dict[ClaimKey, KubeObject] = {}
        self._pending: dict[str, KubeObject] = {}
        # Pods kept out of the queue by PreEnqueue until a claim of theirs appears (by claim key).
        self._waiting: dict[ClaimKey, set[str]] = {}
        # Generations: any change of the layer; the snapshots below are rebuilt only when one moved.
        self.slices_generation = 0
        self.classes_generation = 0
        self.claims_generation = 0
        self._slice_snapshot: tuple[int, tuple[KubeObject, ...]] = (-1, ())
        self._class_snapshot: tuple[int, Mapping[str, KubeObject]] = (-1, {})
        self._claim_snapshot: tuple[int, tuple[KubeObject, ...]] = (-1, ())

    # -- watch events ------------------------------------------------------------------------------
    def on_event(self, kind: ApiKind, event: str, obj: KubeObject) -> IndexChange | None:
        meta = obj.get("metadata") or {}
        name = str(meta.get("name", ""))
        with self._cond:
            if kind.resource == "resourceslices":
                self._store(self._slices, name, event, obj)
                self.slices_generation += 1
                self._cond.notify_all()
                return None if event == "DELETED" else IndexChange(ClusterEvent.RESOURCE_SLICE_CHANGED, obj)
            if kind.resource == "deviceclasses":
                self._store(self._classes, name, event, obj)
                self.classes_generation += 1
                self._cond.notify_all()
                return None if event == "DELETED" else IndexChange(ClusterEvent.DEVICE_CLASS_CHANGED, obj)
            key = str(meta.get("namespace", "")), name
            old = self._claims.get(key)
            self._store(self._claims, key, event, obj)
            assumed = self._assumed.get(key)
            if assumed is not None and (event == "DELETED" or _uid(assumed) != _uid(obj)
                                        or resource_version(obj) >= resource_version(assumed)):
                del self._assumed[key]  # the watch caught up with what we wrote (or the claim is gone)
            self.claims_generation += 1
            woken = self._waiting.pop(key, set()) if event != "DELETED" else set()
            self._cond.notify_all()
        return IndexChange(ClusterEvent.RESOURCE_CLAIM_CHANGED, ClaimChange(old, None if event == "DELETED" else obj),
                           tuple(woken))

    @staticmethod
    def _store(store: dict[Any, KubeObject], key: Any, event: str, obj: KubeObject) -> None:
        if event == "DELETED":
            store.pop(key, None)
        else:
            store[key] = obj

    # -- reads (scheduling thread, bind workers) ---------------------------------------------------
    def claim(self, namespace: str, name: str) -> KubeObject | None:
        """The claim as the scheduler knows it: what PreBind wrote until the watch shows it, else the watched one."""
        key = (namespace, name)
        with self._cond:
            return self._assumed.get(key) or self._claims.get(key)

    def watched_claim(self, namespace: str, name: str) -> KubeObject | None:
        with self._cond:
            return self._claims.get((namespace, name))

    def device_class(self, name: str) -> KubeObject | None:
        with self._cond:
            return self._classes.get(name)

    def classes(self) -> Mapping[str, KubeObject]:
        """Every DeviceClass by name (a snapshot: rebuilt only after a class changed)."""
        with self._cond:
            generation, snapshot = self._class_snapshot
            if generation != self.classes_generation:
                snapshot = dict(self._classes)
                self._class_snapshot = (self.classes_generation, snapshot)
            return snapshot

    def slices(self) -> tuple[KubeObject, ...]:
        """Every ResourceSlice (a snapshot: rebuilt only after a slice changed)."""
        with self._cond:
            generation, snapshot = self._slice_snapshot
            if generation != self.slices_generation:
                snapshot = tuple(self._slices.values())
                self._slice_snapshot = (self.slices_generation, snapshot)
            return snapshot

    def allocated_claims(self) -> tuple[KubeObject, ...]:
        """Every claim whose allocation counts: watched, overlaid by assumed and then by pending ones (by UID)."""
        with self._cond:
            generation, snapshot = self._claim_snapshot
            if generation != self.claims_generation:
                by_uid: dict[str, KubeObject] = {}
                for key, claim in self._claims.items():
                    by_uid[_uid(claim)] = self._assumed.get(key, claim)
                for key, claim in self._assumed.items():
                    by_uid.setdefault(_uid(claim), claim)
                by_uid.update(self._pending)
                snapshot = tuple(c for c in by_uid.values() if (c.get("status") or {}).get("allocation"))
                self._claim_snapshot = (self.claims_generation, snapshot)
            return snapshot

    # -- the scheduler's own layers ----------------------------------------------------------------
    def pending(self, uid: str) -> KubeObject | None:
        with self._cond:
            return self._pending.get(uid)

    def signal_pending(self, claim: KubeObject) -> None:
        """Reserve chose this allocation: other pods' allocators count its devices from now on."""
        with self._cond:
            self._pending[_uid(claim)] = claim
            self.claims_generation += 1

    def remove_pending(self, uid: str) -> bool:
        with self._cond:
            found = self._pending.pop(uid, None) is not None
            if found:
                self.claims_generation += 1
                self._cond.notify_all()
            return found

    def assume(self, written: KubeObject) -> None:
        """PreBind wrote this version: it stands for the claim until the watch delivers it (or a newer one)."""
        key = claim_key_of(written)
        with self._cond:
            watched = self._claims.get(key)
            if watched is None or _uid(watched) != _uid(written) or resource_version(watched) < resource_version(
                    written):
                self._assumed[key] = written
                self.claims_generation += 1

    def restore(self, namespace: str, name: str) -> None:
        """Forget what was assumed for the claim (Unreserve after a failed write)."""
        with self._cond:
            if self._assumed.pop((namespace, name), None) is not None:
                self.claims_generation += 1

    def wait_for_claim(self, namespace: str, name: str, uid: str) -> None:
        """PreEnqueue found the claim missing: the pod `uid` goes back to the queue when it appears."""
        with self._cond:
            self._waiting.setdefault((namespace, name), set()).add(uid)

    def forget_waiter(self, uids: Iterable[str]) -> None:
        gone = set(uids)
        with self._cond:
            for key in [k for k, waiting in self._waiting.items() if waiting & gone]:
                self._waiting[key] -= gone
                if not self._waiting[key]:
                    del self._waiting[key]

    def wait_for(self, check: Callable[[], T | None], timeout: float, poll: float = 5.0) -> T | None:
        """check() (called without the lock) now, after each change of any layer, and at least every `poll`
        seconds, until it answers something other than None or `timeout` seconds pass; the last answer."""
        deadline = time.monotonic() + timeout
        while True:
            seen = (self.claims_generation, self.slices_generation)
            answer = check()
            if answer is not None:
                return answer
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            with self._cond:
                if (self.claims_generation, self.slices_generation) == seen:
                    self._cond.wait(min(remaining, poll))
