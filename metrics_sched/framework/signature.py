"""Pod signatures for opportunistic batching (kube-scheduler's SignPod, KEP-5598), and what each plugin reads.

Two pods with equal signatures get the same verdict and the same scores from every plugin wherever the
cluster is the same, so the second one can reuse the first one's cycle for every node that has not changed
since. The signature is the pod's template (namespace, priority, owner, labels, annotations and the spec
without the fields that name one pod), which holds everything any plugin reads from a pod; each enabled
plugin then says, through `Plugin.batch_scope`, what of the cluster its verdict for one node reads
(`Reads`), or that it cannot say (None: the pod is not batched). A whole-template signature batches fewer
pods than upstream's per-plugin fragments, never wrongly: a plugin added later that reads a new pod field
is covered without knowing about batching.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field

from metrics_sched.model.json_key import JsonKey
from metrics_sched.model.podinfo import PodInfo

__all__ = ["MAX_DIRTY", "BatchScope", "Reads", "has_only_local_volumes", "template_of"]

# More changed rows than this since a batch: the full cycle is as cheap (framework.batching), so a batched cycle
# re-scores at most this many and the scorers size their few-rows paths to it (metric_score._FEW_SCORED).
MAX_DIRTY = 64


class Reads(enum.Flag):
    """What a plugin's Filter / Score verdict for one node reads, besides the pod (the batcher's invalidation).

    NONE      nothing of the cluster (pod-only, e.g. a PreFilter that skips)
    NODE      that node's own object (labels, taints, allocatable, images, readiness): any node change
              (a node added, removed or updated) ends every batch
    PODS      the pods placed on that node (requests, ports): the node is re-evaluated after an assume,
              forget or pod event on it
    LEDGER    the in-flight ledger's entries on that node: as PODS (an entry comes with an assume); an entry
              removed or aged out ends every batch
    TELEMETRY the telemetry cache: a new cache generation, or a value going stale, ends every batch
    CLUSTER   anything beyond that node (domain counts, other nodes' pods, volumes, workloads): the plugin's
              PreFilter, PreScore and Score run afresh in every batched cycle, over every candidate; a
              Filter that is not skipped makes the pod unbatchable
    """

    NONE = 0
    NODE = enum.auto()
    PODS = enum.auto()
    LEDGER = enum.auto()
    TELEMETRY = enum.auto()
    CLUSTER = enum.auto()


@dataclass(frozen=True)
class BatchScope:
    """A plugin's answer to "may pods like this one be batched": what it reads, and which metrics (TELEMETRY),
    whose freshness bounds how long a batch may live."""

    reads: Reads
    metrics: tuple[str, ...] = ()
    filtering: Reads | None = None  # what its Filter reads, when less than `reads` (None: the same)
    # State beyond the node the verdict depends on, as a cheap token that changes whenever that state does (e.g.
    # a generation): a batch is used only while it is the same.
    token: Callable[[], Hashable] | None = field(default=None, compare=False)

    @property
    def filter_reads(self) -> Reads:
        return self.reads if self.filtering is None else self.filtering


# Spec fields that name one pod, not its template (a StatefulSet's hostname); nodeName is absent on pending pods.
_VOLATILE_SPEC = frozenset({"nodeName", "hostname"})


def template_of(pod: PodInfo) -> Hashable | None:
    """The pod's template as a comparable value; None when the pod is not batchable whatever the plugins say
    (a nominated node, or a deletion under way)."""
    raw = pod.raw
    status = raw.get("status") or {}
    if status.get("nominatedNodeName") or pod.deleting or pod.parse_error is not None:
        return None
    metadata = raw.get("metadata") or {}
    spec = raw.get("spec") or {}
    if not _VOLATILE_SPEC.isdisjoint(spec):  # else the spec as it is (compared by value, never changed)
        spec = {k: v for k, v in spec.items() if k not in _VOLATILE_SPEC}
    return (pod.namespace, pod.priority, pod.owner_key, pod.scheduler_name, JsonKey(metadata.get("labels") or {}),
            JsonKey(metadata.get("annotations") or {}), JsonKey(spec))


# Volumes a pod carries that no volume plugin checks against the cluster (no claim, no disk, no limit).
_LOCAL_VOLUMES = frozenset({"configMap", "secret", "emptyDir", "downwardAPI", "projected"})


def has_only_local_volumes(pod: PodInfo) -> bool:
    """The volume plugins skip such a pod: nothing of it is checked against claims, disks or attach limits."""
    for volume in (pod.raw.get("spec") or {}).get("volumes") or ():
        if not isinstance(volume, Mapping) or not any(key in volume for key in _LOCAL_VOLUMES):
            return False
    return True
