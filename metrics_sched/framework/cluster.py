"""The SDK's cluster stores: the cluster state behind `Handle.cluster` and the feature stores plugins read off it
(disruption budgets, nominations, PodGroups, volumes), as types for the plugins' signatures.

Re-exported from `metrics_sched.framework`, which is where plugins import them from; this module only groups them.
"""

from metrics_sched.state.cluster_state import ClusterState
from metrics_sched.state.disruption_budgets import Budget
from metrics_sched.state.nominations import Nomination
from metrics_sched.state.pod_groups import PodGroup, PodGroupStore
from metrics_sched.state.volumes import AssumeConflict, VolumeStore

__all__ = [
    "AssumeConflict",
    "Budget",
    "ClusterState",
    "Nomination",
    "PodGroup",
    "PodGroupStore",
    "VolumeStore",
]
