"""GPUBusy: prefer nodes whose GPUs are idle. A telemetry score written against the SDK, nothing else."""

from __future__ import annotations

from metrics_sched.framework import MetricScorePlugin, MetricTerm, Scale


class GPUBusy(MetricScorePlugin):
    name = "GPUBusy"
    TERMS = (MetricTerm("gpu_utilisation", better="lower", scale=Scale("range", 0.0, 100.0)),)
