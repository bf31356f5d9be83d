"""Cluster indexes: what a plugin keeps of the cluster's objects beyond nodes and pods (kube-scheduler's informers).

A plugin declares the index classes it reads (`Plugin.indexes`); each index declares the API kinds it indexes
(`ClusterIndex.kinds`) and receives their events. The scheduler builds one instance per index class, shared by
every plugin and profile that declares it, and watches exactly the kinds its indexes declare (a profile without
volume plugins lists no PersistentVolume). A plugin reaches its index with a typed lookup, once, in __init__:

    class Quotas(ClusterIndex):
        kinds = (ApiKind("example.com/v1", "quotas"),)
        def on_event(self, kind, event, obj): ...

    class QuotaFit(FilterPlugin):
        indexes = (Quotas,)
        def __init__(self, args, handle):
            super().__init__(args, handle)
            self.quotas = handle.index(Quotas)  # a Quotas

Events come from the watch threads, reads from the scheduling thread and bind workers: an index locks what it
shares. What an event may change for pods parked by a plugin is the index's answer (an IndexChange): the cluster
event to move them on (the plugins' queueing hints see its `detail`), and pods to activate at once.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import ClassVar, TypeVar

from metrics_sched.framework.events import ClusterEvent
from metrics_sched.model.podinfo import PodInfo
from metrics_sched.ports import ApiKind, EventType, KubeObject

__all__ = ["ApiKind", "ClusterIndex", "ClusterIndexes", "IndexChange"]

# The kinds the core itself watches, with sink methods of their own: no index may claim them.
CORE_KINDS = frozenset({"nodes", "pods"})


@dataclass(frozen=True)
class IndexChange:
    """What an event changed for parked pods: `event` moves the pods whose rejecting plugins registered it (their
    hints given `detail`); `activate` (pod UIDs) go straight back to the active queue (a gang that may go on)."""

    event: ClusterEvent | None = None
    detail: object = None
    activate: Iterable[str] = ()


class ClusterIndex:
    """One index of API objects, built once per scheduler with no arguments."""

    kinds: ClassVar[tuple[ApiKind, ...]] = ()

    def on_event(self, kind: ApiKind, event: EventType, obj: KubeObject) -> IndexChange | None:
        """An object of one of `kinds` as its watch delivers it (a relist delivers only what changed)."""
        raise NotImplementedError

    def on_synced(self, kind: ApiKind) -> None:
        """The initial list of `kind` has been delivered (and again after each relist)."""

    def on_pod(self, event: EventType, pod: PodInfo) -> IndexChange | None:
        """Every pod event, bound or pending (e.g. counting a group's members). Called only on an index that
        overrides it: pod events are the busiest path."""
        return None


IndexT = TypeVar("IndexT", bound=ClusterIndex)


class ClusterIndexes:
    """The scheduler's index instances, one per class, and the kinds they watch."""

    def __init__(self) -> None:
        self._instances: dict[type[ClusterIndex], ClusterIndex] = {}
        self._kinds: dict[str, ApiKind] = {}
        # Kind name -> the indexes it feeds; and the indexes that see every pod event.
        self._routes: dict[str, tuple[ClusterIndex, ...]] = {}
        self.pod_observers: tuple[ClusterIndex, ...] = ()

    def declare(self, cls: type[IndexT]) -> IndexT:
        """The instance of `cls`, built on its first declaration. Raises ValueError if it claims a core kind, or a
        kind another index declared otherwise (another path, or other awaited/optional flags)."""
        found = self._instances.get(cls)
        if found is not None:
            return found  # type: ignore[return-value]  # keyed by its own class
        for kind in cls.kinds:
            known = self._kinds.get(kind.name)
            if kind.name in CORE_KINDS or (known is not None and known != kind):
                raise ValueError(f"index {cls.__name__}: kind {kind.name} is declared otherwise already")
        index = cls()
        self._instances[cls] = index
        for kind in cls.kinds:
            self._kinds[kind.name] = kind
            self._routes[kind.name] = (*self._routes.get(kind.name, ()), index)
        if type(index).on_pod is not ClusterIndex.on_pod:
            self.pod_observers = (*self.pod_observers, index)
        return index

    def get(self, cls: type[IndexT]) -> IndexT:
        """The instance of `cls`; LookupError if no enabled plugin declares it."""
        found = self._instances.get(cls)
        if found is None:
            raise LookupError(f"no enabled plugin declares the index {cls.__name__} (Plugin.indexes)")
        return found  # type: ignore[return-value]  # keyed by its own class

    def find(self, cls: type[IndexT]) -> IndexT | None:
        """The instance of `cls`, or None if no enabled plugin declares it."""
        return self._instances.get(cls)  # type: ignore[return-value]  # keyed by its own class

    @property
    def instances(self) -> tuple[ClusterIndex, ...]:
        """Every index built, in declaration order."""
        return tuple(self._instances.values())

    @property
    def kinds(self) -> tuple[ApiKind, ...]:
        """Every kind some index declares, in declaration order."""
        return tuple(self._kinds.values())

    def routes(self, name: str) -> tuple[ClusterIndex, ...]:
        """The indexes fed by the kind `name` (none for a kind no index declares)."""
        return self._routes.get(name, ())
