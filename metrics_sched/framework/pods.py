"""The SDK's pod types: a placed pod as the cluster state holds it, queries over the placed pods, and what a pod's
spec says that plugins read (affinity terms, label selectors, host ports, gang membership).

Re-exported from `metrics_sched.framework`, which is where plugins import them from; this module only groups them.
"""

from metrics_sched.model.affinity import AffinityTerm, PodAffinityTerms, TermKind, parse_affinity
from metrics_sched.model.group_membership import GroupApi, GroupKey, GroupRefError, group_of
from metrics_sched.model.quantity import QuantityError
from metrics_sched.model.resources import Resources, parse_resource_list
from metrics_sched.model.selectors import NOTHING, LabelSelector, Requirement, SelectorError
from metrics_sched.state.pod_index import PodQuery, QueryTerm
from metrics_sched.state.pod_record import PodRecord
from metrics_sched.state.pod_shape import WILDCARD_IP, HostPort, host_ports

__all__ = [
    "NOTHING",
    "WILDCARD_IP",
    "AffinityTerm",
    "GroupApi",
    "GroupKey",
    "GroupRefError",
    "HostPort",
    "LabelSelector",
    "PodAffinityTerms",
    "PodQuery",
    "PodRecord",
    "QuantityError",
    "QueryTerm",
    "Requirement",
    "Resources",
    "SelectorError",
    "TermKind",
    "group_of",
    "host_ports",
    "parse_affinity",
    "parse_resource_list",
]
