"""One placed (or assumed) pod as the cluster state keeps it: its own module, so the indexes that hold records
(nominations) need not import the cluster state that holds them."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

from metrics_sched.model.affinity import NO_TERMS, PodAffinityTerms
from metrics_sched.model.resize import ResourceFields
from metrics_sched.model.volumes import NO_VOLUMES, PodVolumes
from metrics_sched.state.node_table import IntArray
from metrics_sched.state.pod_shape import HostPort

__all__ = ["PodRecord"]


@dataclass(slots=True)  # one per pod in the cluster: no per-instance __dict__
class PodRecord:
    uid: str
    namespace: str
    name: str
    node: str
    vector: IntArray
    nonzero: tuple[int, int]
    owner_key: str | None
    assumed: bool
    row: int | None = None
    host_ports: tuple[HostPort, ...] = ()
    labels: Mapping[str, str] = dataclasses.field(default_factory=dict)
    terminating: bool = False  # being deleted: still occupies the node, but topology spreading skips it
    affinity: PodAffinityTerms = NO_TERMS
    resources: ResourceFields = b""  # the fields `vector` was computed from: an update that keeps them keeps it
    volumes: PodVolumes = NO_VOLUMES  # claims and in-line disks it mounts (volume restrictions and limits)
    # What the rebalancer's victim selection reads (parsed here once, not per tick): see `disruption`.
    priority: int = 0
    scheduler_name: str = ""
    controller: str | None = None  # the controlling owner as kind/namespace/name; None: standalone
    mirror: bool = False
    evictable: bool = True  # False when annotated metrics-sched.io/evictable: "false"
    # status.startTime (else its creation) in unix seconds: preemption spares longer-running pods first.
    started: float = 0.0
    # Set while being preempted by the scheduler (DisruptionTarget PreemptionByScheduler and a deletionTimestamp).
    preempted: bool = False

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"
