"""The Kubernetes API adapter: the core's ports (ClusterSource, PodWriter, LeaseStore, Evictor) over raw JSON on
httpx.

Typical wiring:

    kube = load(kubeconfig_path_or_None)  # through the `kubernetes` package's loaders (kube_config_bridge)
    client = KubeClient(kube, max_connections=bind_concurrency, qps=..., burst=...,
                        write_fence=WriteFence(elector.may_bind, bind_timeout))
    source, writer = KubeClusterSource(client), KubePodWriter(client)
    leases = KubeLeaseStore(lease_client(kube, request_timeout=...))  # a client and pool of its own
"""

from adapters.kubernetes.claim_writer import KubeResourceClaimWriter
from adapters.kubernetes.client import Fenced, KubeClient, WatchStream, WatchTimeout, WriteFence, lease_client
from adapters.kubernetes.config import ClientCertificate, KubeConfig, KubeConfigError, PemSource
from adapters.kubernetes.evictor import KubeEvictor
from adapters.kubernetes.kube_config_bridge import LibraryCredentials, load, load_in_cluster, load_kubeconfig
from adapters.kubernetes.lease_store import KubeLeaseStore
from adapters.kubernetes.lister import KubeClusterLister
from adapters.kubernetes.pod_group_writer import KubePodGroupStatusWriter
from adapters.kubernetes.pod_writer import KubePodWriter
from adapters.kubernetes.preemptor import KubePreemptor
from adapters.kubernetes.rate_limit import TokenBucket
from adapters.kubernetes.reflector import Reflector, ReflectorOptions, ReflectorStats
from adapters.kubernetes.source import (
    CORE_RESOURCES,
    NODES,
    PODS,
    KubeClusterSource,
    WatchedResource,
    served_resources,
    watched,
)
from adapters.kubernetes.tokens import FileToken, StaticToken, TokenError, TokenSource
from adapters.kubernetes.volume_writer import KubeVolumeWriter

__all__ = [
    "CORE_RESOURCES",
    "NODES",
    "PODS",
    "ClientCertificate",
    "Fenced",
    "FileToken",
    "KubeClient",
    "KubeClusterLister",
    "KubeClusterSource",
    "KubeConfig",
    "KubeConfigError",
    "KubeEvictor",
    "KubeLeaseStore",
    "KubePodGroupStatusWriter",
    "KubePodWriter",
    "KubePreemptor",
    "KubeResourceClaimWriter",
    "KubeVolumeWriter",
    "LibraryCredentials",
    "PemSource",
    "Reflector",
    "ReflectorOptions",
    "ReflectorStats",
    "StaticToken",
    "TokenBucket",
    "TokenError",
    "TokenSource",
    "WatchStream",
    "WatchTimeout",
    "WatchedResource",
    "WriteFence",
    "lease_client",
    "load",
    "load_in_cluster",
    "load_kubeconfig",
    "served_resources",
    "watched",
]
