"""The cache comparer (kube-scheduler's cache debugger): the cluster state against a fresh LIST.

The scheduler decides on what its watches told it. If an event is ever lost (a relist that delivered the
wrong delta, a handler that skipped an update, a node deleted while the watch was down), the cache
drifts from the cluster silently and capacity is over- or under-counted. The comparer LISTs nodes and
pods afresh, compares them with the nodes in the NodeTable and the placed pods, logs each difference
and tells its observers (/metrics counts them by kind):

- missed: in the API, not in the cache (a node, or a bound pod);
- redundant: in the cache, not in the API (a node, a bound pod, or a pod still assumed though deleted);
- stale: in both, but the cache holds another node, labels, requests, deletion state (pods) or
  allocatable, labels, taints, readiness... (nodes).

Assumed pods are expected to be missing from the API's bound set (their bind is in flight): they are
only checked for existing, and for not being bound elsewhere.

The watch and the LIST see the cluster at different moments, so a first round finds the changes still
in flight. A difference is reported only if a second round, `settle` seconds later, finds exactly the
same one (same object, same values on both sides): an event in flight has arrived by then, a lost one
has not. The state lock is held only to copy the state, never during the LIST.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, fields
from enum import StrEnum
from typing import Literal

from metrics_sched.model.podinfo import parse_pod
from metrics_sched.model.resize import occupied_requests
from metrics_sched.ports import ClusterLister, KubeObject
from metrics_sched.state.cluster_state import ClusterState
from metrics_sched.state.node_table import NodeRecord, parse_node

log = logging.getLogger(__name__)

# Longer than a watch takes to come back after an API server restart (the reflector's reconnect backoff is at
# most 5 s, then a relist): a cache that is merely catching up is not reported.
DEFAULT_SETTLE_SECONDS = 10.0


class MismatchKind(StrEnum):
    MISSED = "missed"
    REDUNDANT = "redundant"
    STALE = "stale"


@dataclass(frozen=True)
class Mismatch:
    kind: MismatchKind
    resource: Literal["node", "pod"]
    key: str  # the node's name, or the pod's UID
    name: str  # what a person looks up: the node's name, or namespace/name
    detail: str = ""  # stale: each differing field, the cache's value then the API's

    def __str__(self) -> str:
        what = f"{self.kind} {self.resource} {self.name}" + (f" (uid {self.key})" if self.resource == "pod" else "")
        return f"{what}: {self.detail}" if self.detail else what


@dataclass(frozen=True)
class Comparison:
    """One run's confirmed mismatches, or the error that stopped it."""

    mismatches: tuple[Mismatch, ...] = ()
    nodes: int = 0  # nodes and bound pods the API listed (in the confirming round)
    pods: int = 0
    error: str | None = None

    def count(self, kind: MismatchKind) -> int:
        return sum(1 for m in self.mismatches if m.kind == kind)


@dataclass(frozen=True)
class _CachedPod:
    name: str
    node: str
    assumed: bool
    terminating: bool
    labels: Mapping[str, str]
    requests: tuple[tuple[str, int], ...]  # non-zero requests, sorted


@dataclass(frozen=True)
class _ApiPod:
    name: str
    node: str | None  # None: not bound
    terminating: bool
    labels: Mapping[str, str]
    requests: tuple[tuple[str, int], ...]


def _requests(resources: Iterable[tuple[str, int]]) -> tuple[tuple[str, int], ...]:
    return tuple(sorted((name, int(amount)) for name, amount in resources if amount))


def _snapshot(state: ClusterState) -> tuple[dict[str, NodeRecord], dict[str, _CachedPod]]:
    """What the comparison needs, copied under the lock (a record's fields are copied out, and its label dict is
    replaced, never changed in place, so holding a reference to it is safe); the request vectors are read back
    outside it."""
    with state.lock:
        table = state.table
        nodes = {name: record for name in table.index if (record := table.records[table.index[name]]) is not None}
        columns = list(table.resources)
        placed = [(p.uid, p.key, p.node, p.assumed, p.terminating, p.labels, p.vector.copy())
                  for p in state.pods.values()]
    pods = {uid: _CachedPod(key, node, assumed, terminating, labels,
                            _requests(zip(columns, (int(v) for v in vector), strict=False)))
            for uid, key, node, assumed, terminating, labels, vector in placed}
    return nodes, pods


def _api_pods(items: Iterable[KubeObject]) -> dict[str, _ApiPod]:
    pods = {}
    for item in items:
        info = parse_pod(item)
        if info.terminal:
            continue  # finished pods occupy nothing: the cache drops them
        # What the pod holds on its node, as the cache counts it (an in-place resize under way included).
        requests = occupied_requests(info)[0] if info.node_name else info.requests
        pods[info.uid] = _ApiPod(info.key, info.node_name, info.deleting, dict(info.labels),
                                 _requests(requests.items()))
    return pods


def _node_detail(cached: NodeRecord, actual: NodeRecord) -> str:
    differing = [f.name for f in fields(NodeRecord) if getattr(cached, f.name) != getattr(actual, f.name)]
    return "; ".join(f"{name}: {getattr(cached, name)!r} != {getattr(actual, name)!r}" for name in differing)


def _pod_detail(cached: _CachedPod, actual: _ApiPod, *, assumed: bool) -> str:
    pairs: list[tuple[str, object, object]] = [("node", cached.node, actual.node)]
    if not assumed:  # an assumed pod is what we asked for; only where it is bound can contradict us
        pairs += [("labels", dict(cached.labels), actual.labels), ("requests", dict(cached.requests),
                                                                    dict(actual.requests)),
                  ("terminating", cached.terminating, actual.terminating)]
    return "; ".join(f"{name}: {ours!r} != {theirs!r}" for name, ours, theirs in pairs if ours != theirs)


def differences(nodes: Mapping[str, NodeRecord], pods: Mapping[str, _CachedPod], api_nodes: Mapping[str, NodeRecord],
            api_pods: Mapping[str, _ApiPod]) -> list[Mismatch]:
    """One round: every difference between a copy of the cache and a LIST."""
    found: list[Mismatch] = []
    for name in sorted(api_nodes.keys() - nodes.keys()):
        found.append(Mismatch(MismatchKind.MISSED, "node", name, name))
    for name in sorted(nodes.keys() - api_nodes.keys()):
        found.append(Mismatch(MismatchKind.REDUNDANT, "node", name, name))
    for name in sorted(nodes.keys() & api_nodes.keys()):
        if nodes[name] != api_nodes[name]:
            found.append(Mismatch(MismatchKind.STALE, "node", name, name, _node_detail(nodes[name], api_nodes[name])))
    for uid, actual in sorted(api_pods.items()):
        if actual.node is not None and uid not in pods:
            found.append(Mismatch(MismatchKind.MISSED, "pod", uid, actual.name, f"bound to {actual.node}"))
    for uid, cached in sorted(pods.items()):
        listed = api_pods.get(uid)
        if listed is None or (listed.node is None and not cached.assumed):
            found.append(Mismatch(MismatchKind.REDUNDANT, "pod", uid, cached.name,
                                  f"{'assumed' if cached.assumed else 'bound'} on {cached.node}"))
        elif listed.node is not None and (detail := _pod_detail(cached, listed, assumed=cached.assumed)):
            found.append(Mismatch(MismatchKind.STALE, "pod", uid, cached.name, detail))
    return found


class CacheComparer:
    def __init__(self, state: ClusterState, lister: ClusterLister, *, settle: float = DEFAULT_SETTLE_SECONDS) -> None:
        self.state = state
        self.lister = lister
        self.settle = settle
        self.observers: list[Callable[[Comparison], None]] = []
        self._requested = threading.Event()
        self._closed = threading.Event()

    def _round(self) -> tuple[list[Mismatch], int, int]:
        nodes, pods = _snapshot(self.state)
        # After the copy, not before: what the watch delivers meanwhile shows as a difference the second round
        # clears, never as one hidden.
        api_nodes = {record.name: record for record in map(parse_node, self.lister.list_nodes())}
        api_pods = _api_pods(self.lister.list_pods())
        bound = sum(1 for p in api_pods.values() if p.node is not None)
        return differences(nodes, pods, api_nodes, api_pods), len(api_nodes), bound

    def compare(self) -> Comparison:
        """Two rounds `settle` apart; reports what both found, logs it and tells the observers. An API error
        ends the run as an error (the next run starts afresh)."""
        started = time.monotonic()
        try:
            first, nodes, bound = self._round()
            confirmed: list[Mismatch] = []
            if first and not self._closed.wait(self.settle):
                second, nodes, bound = self._round()
                suspects = set(first)
                confirmed = [m for m in second if m in suspects]
            result = Comparison(tuple(confirmed), nodes, bound)
        except Exception as exc:  # noqa: BLE001 - a failed run is reported and counted; the next one retries
            log.warning("cache comparer: the run failed: %s: %s", type(exc).__name__, exc)
            result = Comparison(error=f"{type(exc).__name__}: {exc}")
        else:
            for mismatch in result.mismatches:
                log.warning("cache mismatch: %s", mismatch)
            log.info("cache comparer: %d nodes, %d bound pods compared in %.2fs; %d missed, %d redundant, %d stale",
                     result.nodes, result.pods, time.monotonic() - started, result.count(MismatchKind.MISSED),
                     result.count(MismatchKind.REDUNDANT), result.count(MismatchKind.STALE))
        for observer in self.observers:
            try:
                observer(result)
            except Exception:
                log.exception("cache comparer: an observer failed")
        return result

    def request(self) -> None:
        """Asks for a run now (SIGUSR2): only sets a flag, so it is safe in a signal handler."""
        self._requested.set()

    def close(self) -> None:
        self._closed.set()
        self._requested.set()

    def serve(self, interval: float) -> None:
        """The comparer thread: a run every `interval` seconds (never when 0) and on each request(), until
        close(). A run's failure never ends the thread."""
        while True:
            self._requested.wait(interval if interval > 0 else None)
            if self._closed.is_set():
                return
            self._requested.clear()
            self.compare()
