"""`metrics-sched sources --history NODE --config FILE`: a node's recent values of the Prometheus source's metrics,
plotted in the terminal (one sparkline per metric) or, with --png, as a PNG (matplotlib, when installed).

It reads the scheduler's config file for the Prometheus source (URL, auth, TLS, the metrics and their queries) and
asks that Prometheus itself (range queries, adapters.prometheus.history): no running scheduler is needed. A
history-aware metric shows its window ("predict_linear over 10m, 30m ahead"), so a forecast can be read beside the
temperatures it was made from, e.g. next to `metrics-sched explain` of the decision it fed.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from adapters.prometheus import TYPE as PROMETHEUS
from adapters.prometheus import parse_config
from adapters.prometheus.history import Series, node_history
from adapters.prometheus.windows import duration_seconds
from metrics_sched.app.errors import UserError
from metrics_sched.config import ConfigError

__all__ = ["add_flags", "history", "sparkline"]

_BARS = "▁▂▃▄▅▆▇█"
WIDTH = 60


def add_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--history", metavar="NODE", default=None,
                        help="plot NODE's recent values of the Prometheus source's metrics (needs --config)")
    parser.add_argument("--config", type=Path, default=None, help="the scheduler's config file (its prometheus source)")
    parser.add_argument("--source", default=None, help="which prometheus source (default: the first)")
    parser.add_argument("--metric", action="append", default=[], help="only this metric (repeatable)")
    parser.add_argument("--since", default="1h", help="how far back, a duration like 30m or 2h (default 1h)")
    parser.add_argument("--png", type=Path, default=None, help="write a PNG there instead of printing sparklines")


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


def _png(path: Path, node: str, series: Sequence[Series]) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise UserError("--png needs matplotlib (pip install matplotlib), or leave it out for the terminal") from None
    shown = [s for s in series if s.points]
    figure, axes = plt.subplots(max(1, len(shown)), 1, figsize=(9, 2.2 * max(1, len(shown))), squeeze=False)
    for ax, s in zip(axes[:, 0], shown, strict=False):
        start = s.points[0][0]
        ax.plot([(t - start) / 60 for t, _ in s.points], [v for _, v in s.points])
        ax.set_title(f"{s.metric}" + (f" ({s.window})" if s.window else ""), fontsize=9)
        ax.set_xlabel("minutes")
    figure.suptitle(node)
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)


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
    if args.png is not None:
        _png(args.png, args.history, series)
        print(f"wrote {args.png}")
    else:
        print(render(args.history, series, args.since))
    return 0
