"""DraIndex: the ResourceSlices, DeviceClasses and ResourceClaims the DynamicResources plugin reads, and the claims it
has allocated but the watch has not shown yet (kube-scheduler's DRA manager: informers plus the assume cache and the
in-flight allocations).

Two layers above the watched claims keep two pods from getting one device:
- pending: an allocation chosen in Reserve, by claim UID, until PreBind has written it (or Unreserve drops it);
  every other pod's allocator counts its devices as taken, and a pod sharing the claim waits for it.
- assumed: a claim as PreBind wrote it, until the watch delivers that version or a newer one.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from metrics_sched.framework import ApiKind, ClusterEvent, ClusterIndex, IndexChange, KubeObject, PodInfo, blocking

from .allocator import AllocatedState
from .tracker import AllocatedTracker, allocation_node

log = logging.getLogger(__name__)

__all__ = ["CLAIMS", "CLASSES", "SLICES", "TAINT_RULES", "ClaimChange", "ClaimKey", "DraIndex", "NodeChanges",
           "claim_key_of", "resource_version"]

# How many node changes the log keeps for readers that are behind (a reader further behind starts over).
_LOG_SIZE = 65536

# Optional: a cluster that does not serve resource.k8s.io/v1 (older than 1.34) still schedules every other pod;
# a pod with claims then waits for its claims like one whose claims are not created yet.
SLICES = ApiKind("resource.k8s.io/v1", "resourceslices", optional=True)
CLASSES = ApiKind("resource.k8s.io/v1", "deviceclasses", optional=True)
CLAIMS = ApiKind("resource.k8s.io/v1", "resourceclaims", optional=True)
# DeviceTaintRules are beta and off by default in 1.36 (DRADeviceTaintRules): where a cluster serves and uses them,
# their taints are not applied here, so DRA pods are refused while one exists rather than placed ignoring it.
TAINT_RULES = ApiKind("resource.k8s.io/v1beta2", "devicetaintrules", optional=True)

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


def _allocation(claim: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    return None if claim is None else (claim.get("status") or {}).get("allocation")


@dataclass(frozen=True)
class NodeChanges:
    """What changed for allocation since a reader's cursor: the nodes (None: possibly every node), and the cursor to
    pass next time."""

    nodes: frozenset[str] | None
    cursor: int


class DraIndex(ClusterIndex):
    kinds = (SLICES, CLASSES, CLAIMS, TAINT_RULES)

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._slices: dict[str, KubeObject] = {}
        self._classes: dict[str, KubeObject] = {}
        self._claims: dict[ClaimKey, KubeObject] = {}
        self._assumed: dict[ClaimKey, KubeObject] = {}
        self._pending: dict[str, KubeObject] = {}
        # Pods kept out of the queue by PreEnqueue until a claim of theirs appears (by claim key).
        self._waiting: dict[ClaimKey, set[str]] = {}
        self._waiter_of: dict[str, ClaimKey] = {}  # pod uid -> the claim it waits for (to forget a deleted pod)
        self._taint_rules: set[str] = set()
        self.dropped = 0  # malformed objects the watch delivered
        # The scheduler-made extended-resource claims (annotated), by the uid of the pod that controls each.
        self._extended_of: dict[str, ClaimKey] = {}
        # Generations: any change of the layer; the snapshots below are rebuilt only when one moved.
        self.slices_generation = 0
        self.classes_generation = 0
        self.claims_generation = 0
        self._slice_snapshot: tuple[int, tuple[KubeObject, ...]] = (-1, ())
        self._class_snapshot: tuple[int, Mapping[str, KubeObject]] = (-1, {})
        self._tracker = AllocatedTracker()
        self._tracked_node: dict[str, str] = {}  # claim uid -> the node its counted allocation is tied to
        self._claim_uids: dict[str, ClaimKey] = {}  # watched claims' uid -> key
        # Nodes whose allocation inputs changed, in order ("": every node); `_log_base` is the first entry's number.
        self._log: list[str] = []
        self._log_base = 0

    # -- watch events ------------------------------------------------------------------------------
    def on_event(self, kind: ApiKind, event: str, obj: KubeObject) -> IndexChange | None:
        meta = obj.get("metadata") if isinstance(obj, Mapping) else None
        if not isinstance(meta, Mapping) or not meta.get("name") or not isinstance(obj.get("spec", {}), Mapping):
            # The API server validates these objects; one that is not even shaped like one is dropped (counted),
            # never let into the allocator's inputs.
            self.dropped += 1
            log.warning("dropping a malformed %s event (no name, or metadata or spec not a mapping)", kind.name)
            return None
        name = str(meta.get("name", ""))
        with self._cond:
            if kind.resource == "resourceslices":
                old_slice = self._slices.get(name)
                self._store(self._slices, name, event, obj)
                self.slices_generation += 1
                self._note(*(n for n in (_slice_node(old_slice), _slice_node(obj)) if n is not None))
                self._cond.notify_all()
                return None if event == "DELETED" else IndexChange(ClusterEvent.RESOURCE_SLICE_CHANGED, obj)
            if kind.resource == "devicetaintrules":
                if event == "DELETED":
                    self._taint_rules.discard(name)
                else:
                    self._taint_rules.add(name)
                return IndexChange(ClusterEvent.DEVICE_TAINT_RULE_CHANGED, obj)
            if kind.resource == "deviceclasses":
                self._store(self._classes, name, event, obj)
                self.classes_generation += 1
                self._note("")
                self._cond.notify_all()
                return None if event == "DELETED" else IndexChange(ClusterEvent.DEVICE_CLASS_CHANGED, obj)
            key = str(meta.get("namespace", "")), name
            old = self._claims.get(key)
            self._store(self._claims, key, event, obj)
            owner = _extended_owner(obj)
            if owner:
                if event == "DELETED":
                    self._extended_of.pop(owner, None)
                else:
                    self._extended_of[owner] = key
            if event == "DELETED":
                self._claim_uids.pop(_uid(obj), None)
            else:
                self._claim_uids[_uid(obj)] = key
            assumed = self._assumed.get(key)
            if assumed is not None and (event == "DELETED" or _uid(assumed) != _uid(obj)
                                        or resource_version(obj) >= resource_version(assumed)):
                del self._assumed[key]  # the watch caught up with what we wrote (or the claim is gone)
                if _uid(assumed) != _uid(obj):
                    self._track(_uid(assumed))
            if old is not None and _uid(old) != _uid(obj):
                self._track(_uid(old))
            self._track(_uid(obj))
            self.claims_generation += 1
            woken = self._waiting.pop(key, set()) if event != "DELETED" else set()
            for uid in woken:
                self._waiter_of.pop(uid, None)
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

    def extended_claim_of(self, pod_uid: str) -> KubeObject | None:
        """The extended-resource claim a scheduler made for the pod (an earlier attempt's), if the watch has one."""
        with self._cond:
            key = self._extended_of.get(pod_uid)
            return None if key is None else self._claims.get(key)

    def taint_rule(self) -> str | None:
        """The name of a DeviceTaintRule that exists (the first by name), if any."""
        with self._cond:
            return min(self._taint_rules) if self._taint_rules else None

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

    def allocated_state(self) -> AllocatedState:
        """Every device allocated to a claim: watched claims, overlaid by the ones PreBind wrote and then by the ones
        Reserve chose (a snapshot, shared until the next change: the allocator must not change it)."""
        with self._cond:
            return self._tracker.snapshot()

    def changes_since(self, cursor: int) -> NodeChanges:
        """The nodes whose allocation inputs (slices, allocations, classes) changed since `cursor` (0: the start)."""
        with self._cond:
            end = self._log_base + len(self._log)
            if cursor < self._log_base or cursor > end:
                return NodeChanges(None, end)
            names = frozenset(self._log[cursor - self._log_base:])
            return NodeChanges(None if "" in names else names, end)

    # -- bookkeeping (under the lock) --------------------------------------------------------------------------
    def _effective(self, uid: str) -> KubeObject | None:
        """The claim whose allocation counts for `uid`: pending, else assumed, else watched."""
        pending = self._pending.get(uid)
        if pending is not None:
            return pending
        key = self._claim_uids.get(uid)
        if key is None:
            return None
        assumed = self._assumed.get(key)
        if assumed is not None and _uid(assumed) == uid:
            return assumed
        return self._claims.get(key)

    def _track(self, uid: str) -> None:
        before = self._tracked_node.get(uid)
        claim = self._effective(uid)
        if self._tracker.set(uid, claim):
            after = allocation_node(_allocation(claim)) if _allocation(claim) else None
            self._note(*(n for n in (before, after) if n is not None))
            if after is None:
                self._tracked_node.pop(uid, None)
            else:
                self._tracked_node[uid] = after

    def _note(self, *nodes: str) -> None:
        self._log.extend(nodes)
        if len(self._log) > _LOG_SIZE:
            drop = len(self._log) - _LOG_SIZE // 2
            del self._log[:drop]
            self._log_base += drop

    # -- the scheduler's own layers ----------------------------------------------------------------
    def pending(self, uid: str) -> KubeObject | None:
        with self._cond:
            return self._pending.get(uid)

    def signal_pending(self, claim: KubeObject) -> None:
        """Reserve chose this allocation: other pods' allocators count its devices from now on."""
        with self._cond:
            self._pending[_uid(claim)] = claim
            self._track(_uid(claim))
            self.claims_generation += 1

    def remove_pending(self, uid: str) -> bool:
        with self._cond:
            found = self._pending.pop(uid, None) is not None
            if found:
                self._track(uid)
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
                self._claim_uids.setdefault(_uid(written), key)
                self._track(_uid(written))
                self.claims_generation += 1

    def restore(self, namespace: str, name: str) -> None:
        """Forget what was assumed for the claim (Unreserve after a failed write)."""
        with self._cond:
            assumed = self._assumed.pop((namespace, name), None)
            if assumed is not None:
                self._track(_uid(assumed))
                self.claims_generation += 1

    def wait_for_claim(self, namespace: str, name: str, uid: str) -> None:
        """PreEnqueue found the claim missing: the pod `uid` goes back to the queue when it appears."""
        with self._cond:
            previous = self._waiter_of.get(uid)
            if previous is not None and previous != (namespace, name):
                self._forget(uid)
            self._waiting.setdefault((namespace, name), set()).add(uid)
            self._waiter_of[uid] = (namespace, name)

    def on_pod(self, event: str, pod: PodInfo) -> IndexChange | None:
        """A pod deleted (or bound elsewhere) while it waited for a claim is forgotten: the waiting map holds the
        pods waiting now, not every pod that ever waited."""
        if pod.uid in self._waiter_of and (event == "DELETED" or pod.node_name):
            with self._cond:
                self._forget(pod.uid)
        return None

    def _forget(self, uid: str) -> None:
        key = self._waiter_of.pop(uid, None)
        if key is None:
            return
        waiting = self._waiting.get(key)
        if waiting is not None:
            waiting.discard(uid)
            if not waiting:
                del self._waiting[key]

    def waiting(self) -> int:
        """How many pods wait for a claim to appear."""
        with self._cond:
            return len(self._waiter_of)

    def wait_for(self, check: Callable[[], T | None], timeout: float, poll: float = 5.0) -> T | None:
        """check() (called without the lock) now, after each change of any layer, and at least every `poll`
        seconds, until it answers something other than None or `timeout` seconds pass; the last answer. A bind
        worker waiting here is replaced in its pool meanwhile (framework.worker_waits.blocking)."""
        deadline = time.monotonic() + timeout
        with blocking():
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


def _slice_node(slice_: Mapping[str, Any] | None) -> str | None:
    """The node a slice's devices are tied to ("" for a slice that may serve several), None for no slice."""
    if slice_ is None:
        return None
    spec = slice_.get("spec") or {}
    return "" if spec.get("sharedCounters") or not spec.get("nodeName") else str(spec["nodeName"])


_EXTENDED_ANNOTATION = "resource.kubernetes.io/extended-resource-claim"


def _extended_owner(claim: Mapping[str, Any]) -> str:
    """The uid of the pod controlling a scheduler-made extended-resource claim ("" for any other claim)."""
    meta = claim.get("metadata") or {}
    if (meta.get("annotations") or {}).get(_EXTENDED_ANNOTATION) != "true":
        return ""
    for ref in meta.get("ownerReferences") or ():
        if ref.get("controller") and ref.get("kind", "Pod") == "Pod":
            return str(ref.get("uid", ""))
    return ""
