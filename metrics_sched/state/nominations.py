"""Nominated pods: where preemption made room for a pod that waits for its victims to leave.

kube-scheduler's nominator: a nominated pod's requests (and host ports, and its labels for the inter-pod
rules) are held on its nominated node against lower-priority pods: the filters of a pod count the nominated
pods whose priority is >= its own (RunFilterPluginsWithNominatedPods), so a lower-priority pod cannot take the
room the victims left, while a pod that outranks the nominated one may.
A nomination ends when the pod is assumed or bound (anywhere), deleted, or when preemption finds that it no
longer helps. The few nominated pods are counted onto their rows for the cycle (ClusterState.simulated), never
a loop over nodes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from metrics_sched.model.podinfo import PodInfo

if TYPE_CHECKING:
    from metrics_sched.state.node_table import NodeTable
    from metrics_sched.state.pod_record import PodRecord

__all__ = ["Nomination", "Nominations"]


@dataclass(frozen=True)
class Nomination:
    uid: str
    key: str  # namespace/name
    node: str
    priority: int
    record: PodRecord  # what the pod would hold on `node` (built once, never stored in the cluster state)


class Nominations:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_uid: dict[str, Nomination] = {}

    def nominate(self, info: PodInfo, node: str, record_of: Callable[[PodInfo, str], PodRecord]) -> Nomination:
        nomination = Nomination(info.uid, info.key, node, info.priority, record_of(info, node))
        with self._lock:
            self._by_uid[info.uid] = nomination
        return nomination

    def remove(self, uid: str) -> Nomination | None:
        with self._lock:
            return self._by_uid.pop(uid, None)

    def get(self, uid: str) -> Nomination | None:
        with self._lock:
            return self._by_uid.get(uid)

    def __len__(self) -> int:
        with self._lock:
            return len(self._by_uid)

    def on_node(self, node: str) -> list[Nomination]:
        with self._lock:
            return [n for n in self._by_uid.values() if n.node == node]

    def held_for(self, pod: PodInfo, table: NodeTable) -> list[tuple[PodRecord, int]]:
        """The nominated pods `pod`'s filters must count (priority >= its own, not itself), with their rows."""
        if not self._by_uid:  # the common case: no lock, no list
            return []
        with self._lock:
            found = [n for n in self._by_uid.values() if n.priority >= pod.priority and n.uid != pod.uid]
        held: list[tuple[PodRecord, int]] = []
        for nomination in found:
            row = table.index.get(nomination.node)
            if row is not None:
                held.append((nomination.record, row))
        return held
