"""The scheduler's RBAC allowlist, shared by the manifest unit test and the RBAC e2e test, so a change of
permissions is written once."""

from __future__ import annotations

NAMESPACE = "metrics-sched"
SERVICE_ACCOUNT = "metrics-sched"
LEASE = "metrics-sched"

Rule = tuple[str, str, str, str | None]  # (apiGroup, resource, verb, resourceName or None for any)

# What the scheduler may do in every namespace (ClusterRole metrics-sched)...
CLUSTER_RULES: frozenset[Rule] = frozenset({
    *(("", resource, verb, None) for resource in ("pods", "nodes") for verb in ("get", "list", "watch")),
    # namespaceSelector (namespaces) and default topology spreading (the workloads that select pods).
    *(("", resource, verb, None) for resource in ("namespaces", "services", "replicationcontrollers")
      for verb in ("list", "watch")),
    *(("apps", resource, verb, None) for resource in ("replicasets", "statefulsets") for verb in ("list", "watch")),
    # Volume binding: the storage objects the volume plugins read; PreBind patches PVs and claims.
    *(("", resource, verb, None) for resource in ("persistentvolumes", "persistentvolumeclaims")
      for verb in ("list", "watch", "patch")),
    *(("storage.k8s.io", resource, verb, None)
      for resource in ("storageclasses", "csinodes", "csidrivers", "csistoragecapacities", "volumeattachments")
      for verb in ("list", "watch")),
    ("", "pods/binding", "create", None),
    ("", "pods/status", "patch", None),
    # Preemption: victims are deleted (after their DisruptionTarget condition); PodDisruptionBudgets are read.
    ("", "pods", "delete", None),
    ("policy", "poddisruptionbudgets", "list", None), ("policy", "poddisruptionbudgets", "watch", None),
    # Gangs: the PodGroups of both gang APIs are read, and their status patched.
    *((group, "podgroups", verb, None) for group in ("scheduling.x-k8s.io", "scheduling.k8s.io")
      for verb in ("list", "watch")),
    *((group, "podgroups/status", "patch", None) for group in ("scheduling.x-k8s.io", "scheduling.k8s.io")),
    # Dynamic Resource Allocation: slices, classes and taint rules read; claims written (finalizer, allocation and
    # reservation, the scheduler's own extended-resource claims).
    *(("resource.k8s.io", resource, verb, None) for resource in ("resourceslices", "deviceclasses", "devicetaintrules")
      for verb in ("list", "watch")),
    *(("resource.k8s.io", "resourceclaims", verb, None)
      for verb in ("get", "list", "watch", "create", "update", "delete")),
    ("resource.k8s.io", "resourceclaims/status", "update", None),
    ("resource.k8s.io", "resourceclaims/status", "patch", None),
    ("events.k8s.io", "events", "create", None), ("events.k8s.io", "events", "patch", None),
    ("", "events", "create", None), ("", "events", "patch", None),
    ("metrics.k8s.io", "nodes", "get", None), ("metrics.k8s.io", "nodes", "list", None),
    # The HTTPS endpoint's delegated authentication and authorization (adapters/kubernetes/reviews.py).
    ("authentication.k8s.io", "tokenreviews", "create", None),
    ("authorization.k8s.io", "subjectaccessreviews", "create", None),
})
# ... and in its own namespace only (Role metrics-sched-leader-election).
LEASE_RULES: frozenset[Rule] = frozenset({
    ("coordination.k8s.io", "leases", "create", None),
    *(("coordination.k8s.io", "leases", verb, LEASE) for verb in ("get", "update", "patch")),
})
# ... and, only with the rebalancer (ClusterRole metrics-sched-rebalance, the optional rbac-rebalance.yaml): evictions
# through the Eviction API (PodDisruptionBudgets respected), never a delete.
REBALANCE_RULES: frozenset[Rule] = frozenset({("", "pods/eviction", "create", None)})
