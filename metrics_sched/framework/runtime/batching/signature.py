"""Pod signatures (kube-scheduler's SignPod, KEP-5598): the template two pods must share for one to reuse the other's
cycle.

Two pods with equal signatures get the same verdict and the same scores from every plugin wherever the cluster is
the same. The signature is the pod's template (namespace, priority, owner, labels, annotations and the spec without
the fields that name one pod), which holds everything any plugin reads from a pod; each enabled plugin then says,
through Batchable.batch_scope, what of the cluster its verdict for one node reads. A whole-template signature
batches fewer pods than upstream's per-plugin fragments, never wrongly: a plugin added later that reads a new pod
field is covered without knowing about batching.
"""

from __future__ import annotations

from collections.abc import Hashable

from metrics_sched.model.json_key import JsonKey
from metrics_sched.model.podinfo import PodInfo

__all__ = ["template_of"]

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
