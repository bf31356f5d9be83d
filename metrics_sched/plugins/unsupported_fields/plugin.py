"""UnsupportedFields: refuse, never ignore, a pod that uses a field metrics-sched does not honour yet.

Placing such a pod as if the field were absent would silently break the pod's own constraints (a pod with a
device claim on a node without the device). Instead the pod gets
`UnschedulableAndUnresolvable` naming the first offending field, e.g.

    pod uses spec.<field>, which metrics-sched does not support yet

so the framework reports `FailedScheduling` with that text and `PodScheduled=False` (`Unschedulable`),
and parks the pod. No cluster event can help (the plugin registers none): only an update of the pod
moves it, or the periodic flush of parked pods, which finds the same field again.

`ignore` lists field paths (as in FIELDS below, `[*]` for any index) an operator accepts to be ignored.
That is a risk the operator takes on: such pods are placed as if the field did not exist, so their
device claims or gangs are NOT honoured; keep those pods on the default scheduler unless that is really
acceptable. Every field it once refused is honoured now: volumes (VolumeBinding, VolumeZone, VolumeRestrictions,
NodeVolumeLimits), gangs (Coscheduling: spec.schedulingGroup and the scheduling.x-k8s.io/pod-group label) and device
claims (DynamicResources: spec.resourceClaims), so FIELDS is empty until kube-scheduler honours a field this
scheduler does not; the paths it once refused are still accepted in `ignore`, as no-ops, so older configs keep
loading.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from metrics_sched.framework import (
    SUCCESS,
    ArgsError,
    Batchable,
    BatchScope,
    ClusterEvent,
    Code,
    CycleState,
    PodInfo,
    PreFilterPlugin,
    Reads,
    Status,
)

RESOURCE_CLAIMS = "spec.resourceClaims"  # honoured by DynamicResources now
# A gang member of the 1.36 Workload API: honoured by Coscheduling now (refused before it existed).
SCHEDULING_GROUP = "spec.schedulingGroup"
# Paths refused before the plugins honouring them existed (volumes, gangs): still accepted in `ignore`, where
# they do nothing.
SUPPORTED_NOW: tuple[str, ...] = (*(
    f"spec.volumes[*].{kind}"
    for kind in ("persistentVolumeClaim", "ephemeral", "gcePersistentDisk", "awsElasticBlockStore", "rbd", "iscsi",
                 "csi")), SCHEDULING_GROUP, RESOURCE_CLAIMS)

# Every field this plugin refuses, in the order they are checked.
FIELDS: tuple[str, ...] = ()


def unsupported_fields(spec: Mapping[str, Any], ignore: frozenset[str] = frozenset()) -> list[str]:
    """The unsupported fields the pod spec uses, each named with its index where it has one, in FIELDS order."""
    return []


class UnsupportedFields(PreFilterPlugin, Batchable):
    name = "UnsupportedFields"
    events: ClassVar[frozenset[ClusterEvent]] = frozenset()  # no cluster event helps: only the pod's update

    def batch_scope(self, pod: PodInfo) -> BatchScope | None:
        """Opportunistic batching: reads pod-only: it reads the pod's fields."""
        return BatchScope(Reads.NONE)

    @dataclass(frozen=True)
    class Args:
        # Field paths (from FIELDS) whose pods are placed as if the field were absent: the field is NOT honoured
        # (SUPPORTED_NOW paths are accepted and do nothing).
        ignore: tuple[str, ...] = ()

        def validate(self) -> None:
            for i, path in enumerate(self.ignore):
                if path not in FIELDS and path not in SUPPORTED_NOW:
                    raise ArgsError(f"ignore[{i}]", f"unknown field {path!r} (known: {', '.join(FIELDS)})")

    args: Args

    def pre_filter(self, cycle: CycleState, pod: PodInfo) -> Status:
        found = unsupported_fields(pod.raw.get("spec") or {}, frozenset(self.args.ignore))
        if not found:
            return SUCCESS
        return Status(Code.UNRESOLVABLE, f"pod uses {found[0]}, which metrics-sched does not support yet")
