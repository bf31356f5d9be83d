"""The differential DRA cases replayed through an in-process metrics-sched Scheduler: the objects one copy had
before either scheduler looked (listed from the dev cluster), delivered as watch events; claims written through a
fake claim API that plays the API server (tests/unit/test_dra_plugin.FakeClaimAPI). Used by
tests/e2e/test_differential_dra.py to show that the comparison bites (with the allocator's constraints disabled,
some case must disagree with kube-scheduler) and, with them enabled, as a check of the harness itself.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, cast
from unittest import mock

from metrics_sched.framework import EXPLANATIONS, Code
from metrics_sched.plugins.dynamic_resources.allocator.constraints import DistinctAttribute, MatchAttribute
from metrics_sched.plugins.dynamic_resources.index import CLAIMS, CLASSES, SLICES
from metrics_sched.ports import EventType
from tests.schedulers import make_scheduler
from tests.unit.fakes import FakeAPI
from tests.unit.test_dra_plugin import FakeClaimAPI

__all__ = ["Outcome", "Replayed", "Snapshot", "constraints_disabled", "outcome_of", "replay"]

DEALLOCATED = "deallocation of ResourceClaim completed"  # PostFilter freed a claim: the pod is tried again


@dataclass(frozen=True)
class Outcome:
    """A scheduler's verdict on one pod: bound (to `node`), unschedulable, or error (SchedulerError)."""

    kind: str
    node: str = ""
    message: str = ""

    def __str__(self) -> str:
        if self.kind == "bound":
            return f"bound it to {self.node}"
        return f"{'found it unschedulable' if self.kind == 'unschedulable' else 'failed with an error'} " \
               f"({self.message})"


def outcome_of(pod: Mapping[str, Any]) -> Outcome | None:
    """Bound, or the PodScheduled=False condition its scheduler wrote; None while neither, while gated, and after
    PostFilter deallocated a claim (the pod is retried)."""
    node = (pod.get("spec") or {}).get("nodeName")
    if node:
        return Outcome("bound", str(node))
    for cond in (pod.get("status") or {}).get("conditions") or ():
        if cond.get("type") != "PodScheduled" or cond.get("status") != "False":
            continue
        reason, message = cond.get("reason"), str(cond.get("message", ""))
        if reason == "Unschedulable" and DEALLOCATED not in message:
            return Outcome("unschedulable", message=message)
        if reason == "SchedulerError":
            return Outcome("error", message=message)
    return None


@dataclass
class Snapshot:
    """What one scheduler's copies of the cases were made of before scheduling: the shared nodes, and the slices,
    classes, claims (templates' included) and pods (status included, gates still on)."""

    nodes: list[dict[str, Any]]
    slices: list[dict[str, Any]]
    classes: list[dict[str, Any]]
    claims: list[dict[str, Any]]
    pods: list[dict[str, Any]]


@dataclass
class Replayed:
    """The replay's verdict per pod, its pods (with the extendedResourceClaimStatus PreBind gave them) and each claim
    as it was left, by namespace/name."""

    outcomes: dict[str, Outcome] = field(default_factory=dict)
    pods: dict[str, dict[str, Any]] = field(default_factory=dict)
    claims: dict[str, dict[str, Any]] = field(default_factory=dict)


def _key(obj: Mapping[str, Any]) -> str:
    return f"{obj['metadata']['namespace']}/{obj['metadata']['name']}"


@contextmanager
def constraints_disabled() -> Iterator[None]:
    """The allocator with its claim constraints (matchAttribute, distinctAttribute) accepting every device."""
    with mock.patch.object(MatchAttribute, "add", lambda self, *args: True), \
            mock.patch.object(MatchAttribute, "remove", lambda self, *args: None), \
            mock.patch.object(DistinctAttribute, "add", lambda self, *args: True), \
            mock.patch.object(DistinctAttribute, "remove", lambda self, *args: None):
        yield


def replay(snapshot: Snapshot, waves: Sequence[Sequence[str]], config: Mapping[str, Any],
           timeout: float = 120.0) -> Replayed:
    """Schedules the snapshot's pods in `waves` (pod keys; a wave's gates are lifted once the previous wave has a
    verdict for each pod), in one in-process Scheduler with `config`, writing claims as the API server would."""
    api = FakeAPI()
    claims = FakeClaimAPI()
    scheduler = make_scheduler(config, api=api, claim_writer=claims)
    handlers = scheduler.handlers
    claims.deliver = lambda event, obj: handlers.on_object_event(CLAIMS, cast(EventType, event), obj)
    for node in snapshot.nodes:
        handlers.on_node_event("ADDED", copy.deepcopy(node))
    for kind, items in ((SLICES, snapshot.slices), (CLASSES, snapshot.classes)):
        for item in items:
            handlers.on_object_event(kind, "ADDED", copy.deepcopy(item))
    for claim in snapshot.claims:
        claims.put(claim)
    for kind in (SLICES, CLASSES, CLAIMS):
        handlers.on_synced(kind.name)
    pods = {_key(p): p for p in snapshot.pods}
    done = Replayed()
    deadline = time.monotonic() + timeout
    try:
        for wave in waves:
            for key in wave:
                pod = copy.deepcopy(pods[key])
                pod["spec"].pop("schedulingGates", None)
                pod["status"] = {k: v for k, v in (pod.get("status") or {}).items() if k == "resourceClaimStatuses"}
                api.add_pod(pod)
            waiting = set(wave)
            failed: dict[str, Outcome] = {}  # the last attempt of a pod that is not being placed nor retried
            while waiting:
                if time.monotonic() > deadline:
                    raise AssertionError(f"the replay gave no verdict for {sorted(waiting)[:10]} in {timeout:.0f}s")
                result = scheduler.schedule_one(timeout=0.005)
                if result is not None:
                    key = result.pod.key
                    notes = result.cycle.get(EXPLANATIONS) or ()
                    if result.node is not None or any("deallocated" in note for note in notes):
                        failed.pop(key, None)  # being placed, or tried again once PostFilter freed a claim
                    else:
                        verdict = "error" if result.status.code == Code.ERROR else "unschedulable"
                        failed[key] = Outcome(verdict, message=result.status.reason)
                for key in list(waiting):
                    with api.lock:
                        node = api.pods[key]["spec"].get("nodeName")
                    found = Outcome("bound", str(node)) if node else failed.get(key)
                    if found is not None:  # bound only after PreBind wrote its claims
                        done.outcomes[key] = found
                        waiting.discard(key)
    finally:
        scheduler.stop(drain_timeout=10)
    done.claims = {f"{ns}/{name}": copy.deepcopy(c) for (ns, name), c in claims.claims.items()}
    for key in done.outcomes:
        pod = done.pods[key] = copy.deepcopy(pods[key])
        ext = claims.pod_statuses.get((pod["metadata"]["namespace"], pod["metadata"]["name"]))
        if ext is not None:
            pod.setdefault("status", {})["extendedResourceClaimStatus"] = ext
    return done
