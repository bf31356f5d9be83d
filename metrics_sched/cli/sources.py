"""Builds the configured telemetry sources from the adapters (the CLI is where core meets adapters)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import httpx

from metrics_sched.config import ConfigError, SchedulerConfig
from metrics_sched.ports import MetricSource

SOURCE_TYPES = ("prometheus", "metrics-server", "cmdb")


def build_sources(config: SchedulerConfig, base_dir: Path,
                  kube_client_factory: Callable[[], httpx.Client] | None) -> list[MetricSource]:
    """Validates and builds every source; ConfigError names the field as `sources[i].<field>`."""
    from adapters import cmdb, metrics_server, prometheus

    sources: list[MetricSource] = []
    for i, spec in enumerate(config.sources):
        kind, name = spec["type"], spec["name"]
        try:
            if kind == "prometheus":
                sources.append(prometheus.from_config(name, spec, base_dir=base_dir))
            elif kind == "cmdb":
                sources.append(cmdb.from_config(name, spec, base_dir=base_dir))
            elif kind == "metrics-server":
                factory = kube_client_factory or _unavailable
                sources.append(metrics_server.from_config(name, spec, base_dir=base_dir, kube_client_factory=factory))
            else:
                raise ConfigError("type", f"unknown source type {kind!r} (expected {', '.join(SOURCE_TYPES)})")
        except ConfigError as exc:
            raise ConfigError(f"sources[{i}].{exc.field}" if exc.field else f"sources[{i}]", exc.message) from None
    return sources


def _unavailable() -> httpx.Client:
    # check-config validates without a cluster; the client is only made when the scheduler runs.
    return httpx.Client(base_url="https://kubernetes.invalid")
