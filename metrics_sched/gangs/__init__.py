"""Gang scheduling: pods that bind all together or not at all, and where a whole gang should go.

    placement   the topology domain that holds a whole gang and scores best on the profile's objective
    tracker     the live state of each gang's attempt: reserved members, the domain decision, backoff
    status      the PodGroup status the scheduler reports, and the background writer that sends it
    metrics     the metrics the plugin reports (declared to, and published through, its Handle's events)
The plugin that runs them is metrics_sched.plugins.coscheduling; the groups themselves (the API objects) are
kept in metrics_sched.state.pod_groups, and which group a pod belongs to (the scheduler-plugins label or the 1.36
spec.schedulingGroup) is read by metrics_sched.model.group_membership, below both.
"""

from metrics_sched.model.group_membership import POD_GROUP_LABEL, GroupApi, GroupKey, group_of

__all__ = ["POD_GROUP_LABEL", "GroupApi", "GroupKey", "group_of"]
