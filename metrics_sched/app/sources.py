"""Builds the configured telemetry sources through the source registry (entry points), by `type`.

No adapter is named here: the built-in types are registered in pyproject.toml like any other.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from metrics_sched.config import SchedulerConfig
from metrics_sched.telemetry import PolledSource, SourceContext, SourceRegistry, default_registry


def build_sources(config: SchedulerConfig, base_dir: Path, kube_client_factory: Callable[[], Any] | None, *,
                  registry: SourceRegistry | None = None) -> list[PolledSource]:
    """Validates and builds every source; ConfigError names the field as `sources[i].<field>`.
    kube_client_factory is None when only validating (check-config): no cluster is needed then."""
    ctx = SourceContext(base_dir=base_dir, kube_client_factory=kube_client_factory)
    return (registry or default_registry()).build_all(config.sources, ctx)


__all__ = ["build_sources"]
