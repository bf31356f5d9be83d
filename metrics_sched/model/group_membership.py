"""Which group a pod belongs to.

Two APIs name a pod's group: scheduler-plugins' Coscheduling through the label
`scheduling.x-k8s.io/pod-group: <PodGroup name>` (a `podgroups.scheduling.x-k8s.io` object in the pod's
namespace), and Kubernetes 1.36's Workload API through `spec.schedulingGroup.podGroupName` (a
`podgroups.scheduling.k8s.io` v1alpha2 object). A pod naming both is refused rather than guessed at: the two
objects could disagree on minMember.

A fact about the pod, so it sits with the model: the PodGroup store (metrics_sched.plugins.coscheduling.pod_groups)
and the gang plugin (metrics_sched.plugins.coscheduling, with its library beside it) both read it.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from metrics_sched.model.podinfo import PodInfo

__all__ = ["POD_GROUP_LABEL", "GroupApi", "GroupKey", "GroupRefError", "group_of"]

POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"


class GroupApi(enum.StrEnum):
    """The API group of a pod's PodGroup (whichever version the cluster serves: a pod names no version)."""

    COSCHEDULING = "scheduling.x-k8s.io"  # PodGroup CRD (v1alpha1), pod label
    WORKLOAD = "scheduling.k8s.io"  # the upstream PodGroup (v1alpha2 in 1.36, v1beta1 in 1.37), spec.schedulingGroup

    @classmethod
    def of(cls, group_version: str) -> GroupApi:
        return cls(group_version.split("/", 1)[0])


@dataclass(frozen=True, order=True)
class GroupKey:
    api: GroupApi
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


class GroupRefError(ValueError):
    """A pod whose group reference cannot be honoured (both APIs at once, an empty name)."""


def group_of(pod: PodInfo) -> GroupKey | None:
    """The pod's group, None for a pod in no group; GroupRefError for a reference that cannot be honoured."""
    return group_of_raw(pod.namespace, pod.labels, pod.raw.get("spec") or {})


def group_of_raw(namespace: str, labels: Mapping[str, str], spec: Mapping[str, Any]) -> GroupKey | None:
    label = labels.get(POD_GROUP_LABEL)
    ref = spec.get("schedulingGroup")
    if ref is not None and not isinstance(ref, Mapping):
        raise GroupRefError("spec.schedulingGroup is not an object")
    workload_name = ref.get("podGroupName") if ref else None
    if label is not None and workload_name is not None:
        raise GroupRefError(f"pod names two groups: label {POD_GROUP_LABEL}={label} and "
                            f"spec.schedulingGroup.podGroupName={workload_name}")
    if label is not None:
        if not label:
            raise GroupRefError(f"label {POD_GROUP_LABEL} is empty")
        return GroupKey(GroupApi.COSCHEDULING, namespace, label)
    if ref:
        if not isinstance(workload_name, str) or not workload_name:
            raise GroupRefError("spec.schedulingGroup has no podGroupName")
        return GroupKey(GroupApi.WORKLOAD, namespace, workload_name)
    return None
