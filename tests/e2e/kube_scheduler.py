"""Runs the real kube-scheduler (the dev cluster's build) for one test, with a profile whose schedulerName the
test picks."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from devcluster import DevCluster

DEFAULT_SCHEDULER = "default-scheduler"


@contextmanager
def kube_scheduler(cluster: DevCluster, scheduler_name: str = DEFAULT_SCHEDULER, *, qps: float = 50,
                   burst: int = 100, percentage_of_nodes_to_score: int | None = None,
                   profile: dict[str, Any] | None = None, feature_gates: tuple[str, ...] = ()) -> Iterator[str]:
    """kube-scheduler serving pods with `spec.schedulerName: scheduler_name` (its default plugins unless
    `profile` adds to the profile, or `feature_gates`, turned on, add to its defaults); yields its process
    name. QPS 50 / burst 100 are kube-scheduler's defaults. Stopped on exit."""
    default = scheduler_name == DEFAULT_SCHEDULER and profile is None and not feature_gates
    name = "kube-scheduler" if default else f"kube-scheduler-{secrets.token_hex(3)}"
    cluster.start_kube_scheduler(qps=qps, burst=burst, percentage_of_nodes_to_score=percentage_of_nodes_to_score,
                                 name=name, feature_gates=feature_gates,
                                 profile=None if default else {"schedulerName": scheduler_name, **(profile or {})})
    try:
        yield name
    finally:
        cluster.stop_kube_scheduler(name)
