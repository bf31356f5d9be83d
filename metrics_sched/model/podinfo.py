"""A pod parsed once, on arrival, into what scheduling needs (the raw JSON stays alongside)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from metrics_sched.model.resources import Resources, pod_requests
from metrics_sched.model.volumes import PodVolumes, parse_pod_volumes


@dataclass(frozen=True)
class Toleration:
    key: str | None
    operator: str  # Equal | Exists
    value: str | None
    effect: str | None  # None = all effects

    def tolerates(self, key: str, value: str | None, effect: str) -> bool:
        """Mirrors k8s.io/api/core/v1 Toleration.ToleratesTaint."""
        if self.effect and self.effect != effect:
            return False
        if self.key and self.key != key:
            return False
        if self.operator == "Exists":
            return True
        return (self.value or "") == (value or "")


@dataclass(slots=True)  # one per pod waiting or being scheduled (tens of thousands in a backlog): no __dict__
class PodInfo:
    raw: Mapping[str, Any]
    uid: str
    namespace: str
    name: str
    scheduler_name: str
    priority: int
    created: float
    node_name: str | None
    requests: Resources
    non_zero_requests: Resources
    labels: Mapping[str, str]
    node_selector: Mapping[str, str]
    tolerations: tuple[Toleration, ...]
    owner_key: str | None
    scheduling_gates: tuple[str, ...]
    deleting: bool
    phase: str
    resource_version: str = ""
    # Set instead of requests when the pod cannot be parsed; the scheduler reports it and moves on.
    parse_error: str | None = None
    attempts: int = 0
    _volumes: PodVolumes | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def affinity(self) -> Mapping[str, Any]:
        return (self.raw.get("spec") or {}).get("affinity") or {}

    @property
    def terminal(self) -> bool:
        return self.phase in ("Succeeded", "Failed")

    @property
    def volumes(self) -> PodVolumes:
        """spec.volumes as the volume plugins read them, parsed once per pod version (four plugins, their queueing
        hints and the cluster state read it; the spec's volumes are immutable)."""
        volumes = self._volumes
        if volumes is None:
            volumes = self._volumes = parse_pod_volumes(self.raw)
        return volumes


# Parsed toleration lists by their fields: most pods carry one of a few lists (the admission defaults
# not-ready/unreachable, a workload's own), so the Toleration objects are made once per list and shared; the
# plugins' memos key on these tuples, which then also compare by identity first.
_TOLERATIONS: dict[tuple[tuple[Any, ...], ...], tuple[Toleration, ...]] = {}
MAX_TOLERATION_LISTS = 4096  # beyond this many distinct lists, the cache starts over


def _tolerations(listed: Any) -> tuple[Toleration, ...]:
    if not listed:
        return ()
    fields = tuple((t.get("key") or None, t.get("operator") or "Equal", t.get("value"), t.get("effect") or None)
                   for t in listed)
    try:
        parsed = _TOLERATIONS.get(fields)
    except TypeError:  # a malformed value (a list, an object) is no key: parsed as it is, not cached
        return tuple(Toleration(*f) for f in fields)
    if parsed is None:
        if len(_TOLERATIONS) >= MAX_TOLERATION_LISTS:
            _TOLERATIONS.clear()
        parsed = _TOLERATIONS[fields] = tuple(Toleration(*f) for f in fields)
    return parsed


# A pod's requests (and their scoring view) by its containers' requests, for pods whose requests are only
# those (no init containers, pod-level resources or overhead): the replicas of a workload parse them once.
_REQUESTS: dict[tuple[tuple[tuple[str, Any], ...], ...], tuple[Resources, Resources]] = {}
MAX_REQUEST_SHAPES = 4096  # beyond this many distinct shapes, the cache starts over


def _requests(pod: Mapping[str, Any], spec: Mapping[str, Any]) -> tuple[Resources, Resources, str | None]:
    """(requests, non-zero requests, parse error): fresh dicts, the caller's to keep."""
    key = None
    if not (spec.get("initContainers") or spec.get("resources") or spec.get("overhead")):
        key = tuple(tuple(((c.get("resources") or {}).get("requests") or {}).items())
                    for c in spec.get("containers") or ())
        # Quantities as the API server writes them (strings) only: a malformed one (a number, a list) is parsed
        # below every time, and refused there if it is wrong.
        if all(type(amount) is str for container in key for _, amount in container):
            known = _REQUESTS.get(key)
            if known is not None:
                return dict(known[0]), dict(known[1]), None
        else:
            key = None
    try:
        requests = pod_requests(pod)
        non_zero = pod_requests(pod, non_zero=True)
    except ValueError as exc:
        return {}, {}, f"malformed resource quantity: {exc}"
    if key is not None:
        if len(_REQUESTS) >= MAX_REQUEST_SHAPES:
            _REQUESTS.clear()
        _REQUESTS[key] = (dict(requests), dict(non_zero))
    return requests, non_zero, None


# Strings that pods repeat (images, policies, toleration keys, namespaces, label values...), one object each.
_STRINGS: dict[str, str] = {}
MAX_SHARED_STRINGS = 65_536  # beyond this many distinct values, the table starts over
SHARED_STRING_MAX = 256  # longer values are rare and seldom repeated: left alone


def share_strings(pod: Mapping[str, Any]) -> None:
    """Replaces, in place, the string values of a pod's spec and status and of its metadata's namespace, creation
    time, labels and owners with equal strings shared between pods. A pending pod waits with its whole object; the
    replicas of a backlog repeat most of its values, each its own copy as decoded: sharing them takes about a
    third off the memory of every pod waiting (~1.2 of ~4 KB for a small pod). Names and uids are unique: left
    alone. A read-only mapping (not a dict) is left as it is."""
    if not isinstance(pod, dict):
        return
    meta = pod.get("metadata")
    if isinstance(meta, dict):
        for field_name in ("namespace", "creationTimestamp", "generateName"):
            value = meta.get(field_name)
            if type(value) is str:
                meta[field_name] = _shared(value)
        for field_name in ("labels", "ownerReferences"):
            if (value := meta.get(field_name)) is not None:
                _share_in(value)
    for field_name in ("spec", "status"):
        if (value := pod.get(field_name)) is not None:
            _share_in(value)
    if len(_STRINGS) > MAX_SHARED_STRINGS:
        _STRINGS.clear()


def _shared(value: str) -> str:
    if len(value) > SHARED_STRING_MAX:
        return value
    return _STRINGS.setdefault(value, value)


def _share_in(node: Any) -> None:
    if type(node) is dict:
        for key, value in node.items():
            kind = type(value)
            if kind is str:
                node[key] = _shared(value)
            elif kind is dict or kind is list:
                _share_in(value)
    elif type(node) is list:
        for i, value in enumerate(node):
            kind = type(value)
            if kind is str:
                node[i] = _shared(value)
            elif kind is dict or kind is list:
                _share_in(value)


def _timestamp(value: str | None) -> float:
    if not value:
        return 0.0
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def _owner_key(metadata: Mapping[str, Any]) -> str | None:
    for ref in metadata.get("ownerReferences") or []:
        if ref.get("controller"):
            return f"{ref.get('kind')}/{ref.get('uid')}"
    return None


def parse_pod(pod: Mapping[str, Any]) -> PodInfo:
    metadata = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    requests, non_zero, error = _requests(pod, spec)
    tolerations = _tolerations(spec.get("tolerations"))
    return PodInfo(
        raw=pod,
        uid=metadata.get("uid", ""),
        namespace=metadata.get("namespace", ""),
        name=metadata.get("name", ""),
        scheduler_name=spec.get("schedulerName") or "default-scheduler",
        priority=int(spec.get("priority") or 0),
        created=_timestamp(metadata.get("creationTimestamp")),
        node_name=spec.get("nodeName") or None,
        requests=requests,
        non_zero_requests=non_zero,
        labels=metadata.get("labels") or {},
        node_selector=spec.get("nodeSelector") or {},
        tolerations=tolerations,
        owner_key=_owner_key(metadata),
        scheduling_gates=tuple(g.get("name", "") for g in spec.get("schedulingGates") or []),
        deleting=bool(metadata.get("deletionTimestamp")),
        phase=status.get("phase") or "Pending",
        resource_version=metadata.get("resourceVersion", ""),
        parse_error=error,
    )
