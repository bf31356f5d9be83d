"""Builds the configured telemetry sources through the source registry (entry points), by `type`, and renders
their series-to-node matching for `metrics-sched sources`.

No adapter is named here: the built-in types are registered in pyproject.toml like any other.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
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


def render_series_matching(body: Mapping[str, Any]) -> str:
    """The coverage self-check of `metrics-sched sources`, from the /sources JSON: per source and metric, how
    many series matched a node by which rule, and the label sets of (a few of) those that matched none."""
    lines: list[str] = []
    for name, health in sorted(body.items()):
        for metric, matching in sorted((health.get("series_matching") or {}).items()):
            matched = matching["matched"]
            rules = ", ".join(f"{rule}={count}" for rule, count in sorted(matched.items(), key=lambda kv: -kv[1]))
            lines.append(f"{name}/{metric}: {sum(matched.values())} series matched ({rules or 'none'}), "
                         f"{matching['unmatched']} unmatched")
            for labels in matching["unmatched_examples"]:
                lines.append("  unmatched {" + ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}")
    return "\n".join(lines)
