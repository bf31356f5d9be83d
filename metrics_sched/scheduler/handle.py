"""The Handle plugins receive: read access to the cluster state and named services."""

from __future__ import annotations

from typing import Any

from metrics_sched.state.cluster_state import ClusterState
from metrics_sched.state.node_table import IntArray, NodeTable


class SchedulerHandle:
    def __init__(self, state: ClusterState, services: dict[str, Any] | None = None) -> None:
        self.state = state
        self.services: dict[str, Any] = dict(services or {})

    @property
    def table(self) -> NodeTable:
        return self.state.table

    def owner_counts(self, owner_key: str) -> IntArray:
        return self.state.owner_counts(owner_key)

    def service(self, name: str) -> Any:
        try:
            return self.services[name]
        except KeyError:
            raise KeyError(f"no service {name!r} is wired into this scheduler") from None
