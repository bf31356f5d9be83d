"""The local development cluster: product code shared by the CLI demo, the e2e tests and the benchmarks.

It builds (from Go modules) and starts etcd, kube-apiserver, KWOK, optionally kube-scheduler, Debian's
Prometheus and the project's telemetry/CMDB emulator, all on free loopback ports. The scheduling core
never imports this package.
"""

from metrics_sched.devcluster.cluster import DevCluster, DevClusterError, Endpoints
from metrics_sched.devcluster.nodes import NodeSpec

__all__ = ["DevCluster", "DevClusterError", "Endpoints", "NodeSpec"]
