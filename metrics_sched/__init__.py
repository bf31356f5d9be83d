"""metrics-sched: a Kubernetes scheduler that places pods by live telemetry."""

from importlib.metadata import PackageNotFoundError, version

try:
    # The installed distribution's version: one source of truth (pyproject.toml), never a second copy here.
    __version__ = version("metrics-sched")
except PackageNotFoundError:  # imported from a checkout that was never installed
    __version__ = "0+unknown"
