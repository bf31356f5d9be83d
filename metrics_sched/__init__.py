"""metrics-sched: a Kubernetes scheduler that places pods by live telemetry."""

__version__ = "0.1.0"
