"""KubeClusterSource: the ClusterSource port on reflectors, one per watched resource (nodes, pods, and the kinds
the scheduler's cluster indexes declare: served_resources)."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from adapters.kubernetes.client import KubeClient
from adapters.kubernetes.reflector import Reflector, ReflectorOptions, ReflectorStats
from metrics_sched.ports import ApiError, ApiKind, ClusterEventSink, EventType, KubeObject


@dataclass(frozen=True)
class WatchedResource:
    """A resource to list and watch, and how its events reach the sink.

    Nodes and pods have sink methods of their own; every other kind is a cluster index's (watched(kind)), listed and
    watched only when the scheduler's enabled plugins declare it: the reflector itself is resource-agnostic.
    """

    name: str
    path: str
    deliver: Callable[[ClusterEventSink, EventType, KubeObject], None]
    synced: Callable[[ClusterEventSink], None]
    params: Mapping[str, str] = field(default_factory=dict)  # labelSelector / fieldSelector


NODES = WatchedResource(
    "nodes", "/api/v1/nodes",
    deliver=lambda sink, kind, obj: sink.on_node_event(kind, obj),
    synced=lambda sink: sink.on_synced("nodes"),
)
PODS = WatchedResource(
    "pods", "/api/v1/pods",
    deliver=lambda sink, kind, obj: sink.on_pod_event(kind, obj),
    synced=lambda sink: sink.on_synced("pods"),
)
CORE_RESOURCES: tuple[WatchedResource, ...] = (NODES, PODS)


def watched(kind: ApiKind) -> WatchedResource:
    """A kind some cluster index declares (or the cluster state keeps): its events reach the sink's on_object_event."""
    return WatchedResource(
        kind.name, kind.path,
        deliver=lambda sink, event, obj: sink.on_object_event(kind, event, obj),
        synced=lambda sink: sink.on_synced(kind.name),
    )


def served_resources(client: KubeClient, kinds: Iterable[ApiKind]) -> tuple[tuple[WatchedResource, ...], list[str]]:
    """The resources to watch for `kinds`: each, but an optional kind (a CRD, an alpha API) only where this API server
    serves it; and a line for each optional kind it does not serve (or whose discovery failed)."""
    served: list[WatchedResource] = []
    missing: list[str] = []
    for kind in kinds:
        unserved = _unserved(client, kind) if kind.optional else None
        if unserved is None:
            served.append(watched(kind))
        else:
            missing.append(f"{kind.name}: {unserved}")
    return tuple(served), missing


def _unserved(client: KubeClient, kind: ApiKind) -> str | None:
    """Why the API server does not serve `kind` (None: it does)."""
    try:
        found = client.request("GET", kind.path.removesuffix(f"/{kind.resource}"))
    except ApiError as exc:
        if not exc.not_found:
            return f"discovery failed ({exc})"
        return f"{kind.group_version} is not served"
    if any(r.get("name") == kind.resource for r in found.get("resources") or ()):
        return None
    return f"{kind.group_version} has no {kind.resource} resource"


class KubeClusterSource:
    def __init__(self, client: KubeClient, *, resources: Sequence[WatchedResource] = CORE_RESOURCES,
                 options: ReflectorOptions | None = None, rng: random.Random | None = None) -> None:
        self._client = client
        self._resources = tuple(resources)
        self._options = options
        self._rng = rng
        self._reflectors: dict[str, Reflector] = {}

    def start(self, sink: ClusterEventSink) -> None:
        if self._reflectors:
            raise RuntimeError("KubeClusterSource already started")
        if len(self._resources) > self._client.max_watch_connections:
            # A watch beyond the pool would wait for a connection forever, its resource never synced.
            raise ValueError(f"{len(self._resources)} watched resources need at least as many watch connections; "
                             f"the client has {self._client.max_watch_connections}")
        for resource in self._resources:
            self._reflectors[resource.name] = Reflector(
                self._client, resource.name, resource.path,
                on_event=_bind_deliver(resource, sink), on_synced=_bind_synced(resource, sink),
                params=resource.params, options=self._options, rng=self._rng,
            )
        for reflector in self._reflectors.values():
            reflector.start()

    def stop(self) -> None:
        # Abort every watch first, then wait: stopping one by one would add up their shutdown times.
        for reflector in self._reflectors.values():
            reflector.request_stop()
        for reflector in self._reflectors.values():
            reflector.join()

    def wait_synced(self, timeout: float | None = None) -> bool:
        """True once every resource has delivered its initial list (False on timeout)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for reflector in self._reflectors.values():
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not reflector.wait_synced(left):
                return False
        return bool(self._reflectors)

    def stats(self) -> dict[str, ReflectorStats]:
        """Per resource: lists, relists, watch restarts, events... for the metrics endpoint."""
        return {name: reflector.stats() for name, reflector in self._reflectors.items()}


def _bind_deliver(resource: WatchedResource, sink: ClusterEventSink) -> Callable[[EventType, KubeObject], None]:
    return lambda kind, obj: resource.deliver(sink, kind, obj)


def _bind_synced(resource: WatchedResource, sink: ClusterEventSink) -> Callable[[], None]:
    return lambda: resource.synced(sink)
