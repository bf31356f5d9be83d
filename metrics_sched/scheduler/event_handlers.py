"""Routes watch events: every bound pod to the cluster state, our pending pods to the queue, and
changes that may help parked pods to queue moves."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Literal

from metrics_sched.framework.events import ClusterEvent
from metrics_sched.model.podinfo import PodInfo, parse_pod
from metrics_sched.ports import EventType, KubeObject
from metrics_sched.scheduler.queue import SchedulingQueue
from metrics_sched.state.cluster_state import ClusterState

log = logging.getLogger(__name__)


class ClusterEventHandlers:
    def __init__(
        self,
        state: ClusterState,
        queue: SchedulingQueue,
        scheduler_names: frozenset[str],
        *,
        on_pod_deleted: Callable[[str], None] = lambda uid: None,
    ) -> None:
        self.state = state
        self.queue = queue
        self.scheduler_names = scheduler_names
        self.on_pod_deleted = on_pod_deleted  # e.g. reject the pod if it is held at Permit
        self.synced: set[str] = set()

    def responsible_for(self, pod: PodInfo) -> bool:
        """Pods we schedule: ours by name, unbound, not being deleted, not finished."""
        return (pod.scheduler_name in self.scheduler_names and not pod.node_name and not pod.deleting
                and not pod.terminal)

    def on_node_event(self, kind: EventType, node: KubeObject) -> None:
        name = (node.get("metadata") or {}).get("name", "")
        if kind == "DELETED":
            # Pods assumed there are dropped; their binds see the node gone and requeue them.
            self.state.remove_node(name)
            return
        change = self.state.upsert_node(node)
        if change.added:
            self.queue.move_all(ClusterEvent.NODE_ADDED, change.record)
            return
        for flag, event in ((change.allocatable, ClusterEvent.NODE_ALLOCATABLE),
                            (change.schedulable, ClusterEvent.NODE_SCHEDULABLE),
                            (change.labels, ClusterEvent.NODE_LABELS),
                            (change.taints, ClusterEvent.NODE_TAINTS)):
            if flag:
                self.queue.move_all(event, change.record)

    def on_pod_event(self, kind: EventType, pod: KubeObject) -> None:
        if kind == "MODIFIED" and self._unchanged_placement(pod):
            return  # status churn (Running, Ready...) of a pod we already count where it is
        info = parse_pod(pod)
        if kind == "DELETED" or info.terminal:
            released = self.state.remove_pod(info.uid)
            self.queue.delete(info.uid)
            self.on_pod_deleted(info.uid)
            if released is not None and not released.assumed:
                self.queue.move_all(ClusterEvent.POD_DELETED, released)
            return
        if info.node_name:
            self.state.observe_bound_pod(info)
            self.queue.delete(info.uid)
            return
        if info.deleting or info.scheduler_name not in self.scheduler_names:
            self.queue.delete(info.uid)
            return
        if self.state.is_placed(info.uid):
            return  # assumed by us, bind in flight; the watch has not caught up yet
        self.queue.add(info)

    def _unchanged_placement(self, pod: KubeObject) -> bool:
        node = (pod.get("spec") or {}).get("nodeName")
        if not node or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            return False
        return self.state.counted_on((pod.get("metadata") or {}).get("uid", ""), node)

    def on_synced(self, resource: Literal["nodes", "pods"]) -> None:
        self.synced.add(resource)
        log.info("%s synced", resource)
