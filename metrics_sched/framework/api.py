"""The SDK's API-server ports: the writes a plugin makes through its Handle (binding, events, preemption, PodGroup
status), the error they raise, and the raw object shape they take.

Re-exported from `metrics_sched.framework`, which is where plugins import them from; this module only groups them.
"""

from metrics_sched.ports import (
    ApiError,
    KubeObject,
    PodGroupApi,
    PodGroupStatus,
    PodGroupStatusWriter,
    PodWriter,
    Preemptor,
    ResourceClaimWriter,
    SchedulingEvent,
)

__all__ = [
    "ApiError",
    "KubeObject",
    "PodGroupApi",
    "PodGroupStatus",
    "PodGroupStatusWriter",
    "PodWriter",
    "Preemptor",
    "ResourceClaimWriter",
    "SchedulingEvent",
]
