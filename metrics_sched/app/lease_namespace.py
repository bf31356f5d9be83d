"""The Lease's namespace when the config does not name one: the pod's own namespace in a cluster (where the
deploy/ manifests grant the Lease Role), kube-system outside one (upstream kube-scheduler's default).

Like client-go's in-cluster namespace: POD_NAMESPACE (the downward API) first, then the service account's
namespace file. The choice and its reason are logged: a Lease in an unexpected namespace is a silent split brain.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Mapping
from pathlib import Path

from metrics_sched.config.model import LEASE_NAMESPACE_UNSET, LeaderElectionConfig

OUTSIDE_CLUSTER_NAMESPACE = "kube-system"
NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")

log = logging.getLogger("metrics_sched.leader")


def default_lease_namespace(*, environ: Mapping[str, str] | None = None,
                            namespace_file: Path = NAMESPACE_FILE) -> tuple[str, str]:
    """(namespace, why) for a config without leaderElection.resourceNamespace."""
    env = os.environ if environ is None else environ
    if env.get("POD_NAMESPACE", "").strip():
        return env["POD_NAMESPACE"].strip(), "the pod's namespace (POD_NAMESPACE)"
    try:
        namespace = namespace_file.read_text().strip()
    except OSError:
        namespace = ""
    if namespace:
        return namespace, f"the pod's namespace (service account, {namespace_file})"
    return OUTSIDE_CLUSTER_NAMESPACE, "not in a cluster (no POD_NAMESPACE, no service account namespace file)"


def resolve_lease_namespace(config: LeaderElectionConfig, *, environ: Mapping[str, str] | None = None,
                            namespace_file: Path = NAMESPACE_FILE) -> LeaderElectionConfig:
    """The config with its Lease namespace decided: as configured (or built in code), else
    default_lease_namespace()."""
    if config.resource_namespace != LEASE_NAMESPACE_UNSET:
        log.info("lease %s/%s: namespace from leaderElection.resourceNamespace", config.resource_namespace,
                 config.resource_name)
        return config
    namespace, why = default_lease_namespace(environ=environ, namespace_file=namespace_file)
    log.info("lease %s/%s: leaderElection.resourceNamespace not set; using %s", namespace, config.resource_name,
             why)
    return dataclasses.replace(config, resource_namespace=namespace)


__all__ = ["NAMESPACE_FILE", "OUTSIDE_CLUSTER_NAMESPACE", "default_lease_namespace", "resolve_lease_namespace"]
