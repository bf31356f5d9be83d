"""The SDK's cluster state: the state behind `Handle.cluster` and the nominations it holds, as types for the plugins'
signatures. A plugin's own stores (PodGroups, budgets, volumes) are its cluster indexes, in its folder.

Re-exported from `metrics_sched.framework`, which is where plugins import them from; this module only groups them.
"""

from metrics_sched.state.cluster_state import ClusterState
from metrics_sched.state.nominations import Nomination

__all__ = ["ClusterState", "Nomination"]
