"""Renders the telemetry sources' series-to-node matching for `metrics-sched sources` (the sources themselves are
built by app/sources.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


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


__all__ = ["render_series_matching"]
