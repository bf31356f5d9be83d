"""The Kubernetes API adapter: the core's ports (ClusterSource, PodWriter, LeaseStore) over raw JSON on httpx.

Typical wiring:

    client = KubeClient(load(kubeconfig_path_or_None), max_connections=bind_concurrency, qps=..., burst=...)
    source, writer, leases = KubeClusterSource(client), KubePodWriter(client), KubeLeaseStore(client)
"""

from adapters.kubernetes.client import KubeClient, WatchStream, WatchTimeout
from adapters.kubernetes.config import (
    ClientCertificate,
    KubeConfig,
    KubeConfigError,
    PemSource,
    load,
    load_in_cluster,
    load_kubeconfig,
)
from adapters.kubernetes.lease_store import KubeLeaseStore
from adapters.kubernetes.pod_writer import KubePodWriter
from adapters.kubernetes.rate_limit import TokenBucket
from adapters.kubernetes.reflector import Reflector, ReflectorOptions, ReflectorStats
from adapters.kubernetes.source import DEFAULT_RESOURCES, NODES, PODS, KubeClusterSource, WatchedResource
from adapters.kubernetes.tokens import FileToken, StaticToken, TokenError, TokenSource

__all__ = [
    "DEFAULT_RESOURCES",
    "NODES",
    "PODS",
    "ClientCertificate",
    "FileToken",
    "KubeClient",
    "KubeClusterSource",
    "KubeConfig",
    "KubeConfigError",
    "KubeLeaseStore",
    "KubePodWriter",
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
    "load",
    "load_in_cluster",
    "load_kubeconfig",
]
