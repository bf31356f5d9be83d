"""node_cpu_seconds_total state: counters that only grow, at the rate the node's cpu_util implies.

Size: a 5000-node fleet with 32+ cores would emit hundreds of thousands of cpu series, so a node emits
at most MAX_CPU_SERIES `cpu` labels and each one stands for cores/series real CPUs: summed over all
cpus and modes the counters grow by `cores` seconds per second, as on the real node. Hence
`sum by (instance) (rate(...{mode!="idle"}))` is busy cores and `sum(rate(idle)) / sum(rate(all))` is
the idle fraction; `count(...{mode="idle"})` is NOT the core count and `avg(rate(idle))` exceeds 1 on
nodes with more than MAX_CPU_SERIES cores.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

MAX_CPU_SERIES = 4
USER_SHARE = 0.8  # of busy time; the rest is "system"


@dataclass(frozen=True, slots=True)
class CpuSample:
    """Counter values (seconds) of each emitted cpu series; all series of a node are equal."""

    cpus: int
    idle: float
    user: float
    system: float


def series_count(cores: float) -> int:
    return min(MAX_CPU_SERIES, max(1, math.ceil(cores)))


class CpuCounters:
    def __init__(self, cores: float, uptime_s: float, cpu_util: float, t: float) -> None:
        self.cpus = series_count(cores)
        self.share = cores / self.cpus  # real CPUs behind one emitted series
        self.idle = 0.0
        self.user = 0.0
        self.system = 0.0
        self.last_t = t - uptime_s
        self.advance(t, cpu_util)

    def advance(self, t: float, cpu_util: float) -> None:
        """Accrues time since the last call at `cpu_util`; a clock step backwards accrues nothing."""
        dt = t - self.last_t
        if dt <= 0:
            return
        busy = min(1.0, max(0.0, cpu_util)) if math.isfinite(cpu_util) else 0.0
        seconds = dt * self.share
        self.idle += seconds * (1 - busy)
        self.user += seconds * busy * USER_SHARE
        self.system += seconds * busy * (1 - USER_SHARE)
        self.last_t = t

    def sample(self) -> CpuSample:
        return CpuSample(self.cpus, round(self.idle, 2), round(self.user, 2), round(self.system, 2))
