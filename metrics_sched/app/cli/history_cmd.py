"""`metrics-sched sources --history NODE --config FILE`: a node's recent values of the Prometheus source's metrics,
plotted in the terminal (one sparkline per metric) or, with --svg, as a chart file (SVG, written here: no plotting
library among the product's dependencies).

It reads the scheduler's config file for the Prometheus source (URL, auth, TLS, the metrics and their queries) and
asks that Prometheus itself (range queries, adapters.prometheus.history): no running scheduler is needed. A
history-aware metric shows its window ("predict_linear over 10m, 30m ahead"), so a forecast can be read beside the
temperatures it was made from, e.g. next to `metrics-sched explain` of the decision it fed.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from html import escape
from pathlib import Path
from typing import Any

import yaml

from adapters.prometheus import TYPE as PROMETHEUS
from adapters.prometheus import parse_config
from adapters.prometheus.history import Series, node_history
from adapters.prometheus.windows import duration_seconds
from metrics_sched.app.errors import UserError
from metrics_sched.config import ConfigError

__all__ = ["add_flags", "history", "sparkline", "svg"]

_BARS = "▁▂▃▄▅▆▇█"
WIDTH = 60


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--history", metavar="NODE", default=None,
                        help="plot NODE's recent values of the Prometheus source's metrics (needs --config)")
    parser.add_argument("--config", type=Path, default=None, help="the scheduler's config file (its prometheus source)")
    parser.add_argument("--source", default=None, help="which prometheus source (default: the first)")
    parser.add_argument("--metric", action="append", default=[], help="only this metric (repeatable)")
    parser.add_argument("--since", default="1h", help="how far back, a duration like 30m or 2h (default 1h)")
    parser.add_argument("--svg", type=Path, default=None, help="write a chart there (SVG) instead of printing "
                                                               "sparklines")


def sparkline(values: Sequence[float], width: int = WIDTH) -> str:
    """`values` resampled to at most `width` columns (each the mean of its slice), as block characters."""
    if not values:
        return ""
    step = max(1, -(-len(values) // width))
    columns = [sum(values[i:i + step]) / len(values[i:i + step]) for i in range(0, len(values), step)]
    low, high = min(columns), max(columns)
    span = high - low or 1.0
    return "".join(_BARS[min(len(_BARS) - 1, int((v - low) / span * len(_BARS)))] for v in columns)


def _prometheus_spec(config_file: Path, source: str | None) -> dict[str, Any]:
    try:
        data = yaml.safe_load(config_file.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise UserError(f"cannot read {config_file}: {exc}") from None
    for spec in (data or {}).get("sources") or ():
        if isinstance(spec, dict) and spec.get("type") == PROMETHEUS and source in (None, spec.get("name")):
            return spec
    raise UserError(f"{config_file} has no prometheus source" + (f" named {source!r}" if source else ""))


def render(node: str, series: Sequence[Series], since: str) -> str:
    lines = [f"{node}, the last {since}:"]
    width = max((len(s.metric) for s in series), default=0)
    for s in series:
        values = [v for _, v in s.points]
        if not values:
            lines.append(f"  {s.metric.ljust(width)}  no series for this node")
            continue
        window = f"  [{s.window}]" if s.window else ""
        lines.append(f"  {s.metric.ljust(width)}  {sparkline(values)}  min {min(values):.4g}  max {max(values):.4g}  "
                     f"last {values[-1]:.4g}{window}")
    return "\n".join(lines)


def svg(node: str, series: Sequence[Series]) -> str:
    """One line chart per metric, stacked, as a standalone SVG: no plotting library in the product's dependencies
    (matplotlib stays a bench extra), and any browser shows it."""
    width, height, pad = 720, 140, 36
    shown = [s for s in series if s.points]
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height * max(1, len(shown)) + 30}" '
             f'font-family="sans-serif" font-size="11">',
             f'<text x="{pad}" y="18" font-size="14">{escape(node)}</text>']
    for i, s in enumerate(shown):
        top = 30 + i * height
        times, values = [t for t, _ in s.points], [v for _, v in s.points]
        t0, t1 = times[0], max(times[-1], times[0] + 1)
        low, high = min(values), max(values)
        span = high - low or 1.0
        points = " ".join(f"{pad + (t - t0) / (t1 - t0) * (width - 2 * pad):.1f},"
                          f"{top + 20 + (1 - (v - low) / span) * (height - 50):.1f}" for t, v in s.points)
        title = s.metric + (f" ({s.window})" if s.window else "")
        parts += [f'<text x="{pad}" y="{top + 12}">{escape(title)}: min {low:.4g}, max {high:.4g}, '
                  f'last {values[-1]:.4g}, over {(t1 - t0) / 60:.0f} min</text>',
                  f'<rect x="{pad}" y="{top + 20}" width="{width - 2 * pad}" height="{height - 50}" fill="none" '
                  f'stroke="#ccc"/>',
                  f'<polyline points="{points}" fill="none" stroke="#1f77b4" stroke-width="1.5"/>']
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def history(args: argparse.Namespace) -> int:
    if args.config is None:
        raise UserError("--history needs --config: the scheduler's config file, for its prometheus source")
    spec = _prometheus_spec(args.config, args.source)
    try:
        config = parse_config(spec, base_dir=args.config.parent)
        since = duration_seconds(args.since)
    except ConfigError as exc:
        raise UserError(f"{args.config}: {exc}") from None
    except ValueError as exc:
        raise UserError(f"--since: {exc}") from None
    unknown = set(args.metric) - {m.name for m in config.metrics}
    if unknown:
        raise UserError(f"no metric {sorted(unknown)} in that source; it has {[m.name for m in config.metrics]}")
    end = time.time()
    series = node_history(config, args.history, end - since, end, max(1.0, since / 240), args.metric)
    if args.svg is not None:
        args.svg.write_text(svg(args.history, series))
        print(f"wrote {args.svg}")
    else:
        print(render(args.history, series, args.since))
    return 0
