"""The local development cluster: dev tooling shared by `metrics-sched demo`, the e2e tests and the benchmarks.

It builds (from Go modules) and starts etcd, kube-apiserver, kube-controller-manager, KWOK, optionally
kube-scheduler, Debian's Prometheus, the project's telemetry/CMDB emulator and a test volume provisioner,
all on free loopback ports.

Not part of the product: it is not in the wheel or the image, only importable from a checkout (the editable
install of the `dev` extra). Its CLI verbs (`demo`, `devcluster`) register through the entry-point group
`metrics_sched.cli`. It may import the core (the demo runs the scheduler); the core and the adapters never
import it (import-linter contracts in pyproject.toml, checked by `make lint`).
"""

from devcluster.cluster import DevCluster, DevClusterError, Endpoints
from devcluster.nodes import NodeSpec

__all__ = ["DevCluster", "DevClusterError", "Endpoints", "NodeSpec"]
