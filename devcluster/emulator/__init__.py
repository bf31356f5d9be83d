"""The telemetry + CMDB emulator: one HTTP process speaking for every fake node of the dev cluster.

Serves DCGM-exporter, node-exporter and OpenCost metrics with the real names and labels, a
NetBox-shaped CMDB and OpenCost's assets API, metrics.k8s.io and the Custom Metrics APIs (behind the
apiserver's aggregation layer), and has a /control API for tests (nodes, exact value overrides, injected
faults, counters).
Values are seeded per node: the same seed gives the same fleet in every run.
"""

from devcluster.emulator.control import EmulatorControl, EmulatorError
from devcluster.emulator.profiles import NodeRegistration
from devcluster.emulator.scenario import Scenario
from devcluster.emulator.server import EmulatorServer, serve

__all__ = ["EmulatorControl", "EmulatorError", "EmulatorServer", "NodeRegistration", "Scenario", "serve"]
