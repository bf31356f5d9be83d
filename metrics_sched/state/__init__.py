"""The cluster as the scheduler sees it: nodes in numpy columns, pods and assumed pods."""

from metrics_sched.state.cluster_state import ClusterState
from metrics_sched.state.node_table import NodeTable, Taint
from metrics_sched.state.pod_record import PodRecord

__all__ = ["ClusterState", "NodeTable", "PodRecord", "Taint"]
