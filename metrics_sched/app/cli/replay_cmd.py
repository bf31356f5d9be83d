"""`metrics-sched replay --decisions FILE|URL --config NEW.yaml`: what the recorded decisions would have been
with another config's weights and plugin args (metrics_sched.audit.replay says what can be replayed).

FILE is a JSONL export (the scheduler's `/decisions?format=jsonl`, or the audit's file sink); a URL is read as
that export (an http(s) URL without `format` gets `format=jsonl`), over HTTPS with the kubeconfig's token and
the serving certificate verified, as `explain` reads it."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from metrics_sched.app.errors import UserError
from metrics_sched.audit.replay import ReplayReport, plans_of, read_jsonl, replay
from metrics_sched.config import ConfigError, load_config
from metrics_sched.plugins import in_tree_registry

EXIT_INVALID_CONFIG = 2
EXIT_BAD_INPUT = 1


def register(sub: Any) -> None:
    parser = sub.add_parser("replay", help="re-score recorded decisions with another config (what-if)")
    parser.add_argument("--decisions", required=True, metavar="FILE|URL",
                        help="a JSONL export of /decisions (a file, or the scheduler's /decisions URL)")
    parser.add_argument("--config", required=True, type=Path, metavar="NEW.yaml", help="the config to replay with")
    parser.add_argument("--json", action="store_true", help="print the report as one JSON document")
    parser.add_argument("--changed-only", action="store_true", help="list only the decisions whose winner changes")
    parser.add_argument("--kubeconfig", type=Path, default=None,
                        help="whose credentials to send to an https URL (default: $KUBECONFIG, ~/.kube/config)")
    parser.add_argument("--ca-file", type=Path, default=None,
                        help="CA of the scheduler's serving certificate (default: the kubeconfig cluster's CA)")
    parser.set_defaults(handler=_replay)


def export_url(url: str) -> str:
    """The JSONL export's URL: `format=jsonl` added to a /decisions URL that names no format."""
    parts = urlsplit(url)
    query = parse_qsl(parts.query)
    if not any(k == "format" for k, _ in query):
        query.append(("format", "jsonl"))
    path = parts.path if parts.path.rstrip("/").endswith("/decisions") else parts.path.rstrip("/") + "/decisions"
    return urlunsplit((parts.scheme, parts.netloc, path, urlencode(query), ""))


def _lines(source: str, args: argparse.Namespace) -> list[str]:
    if source.startswith(("http://", "https://")):
        import httpx

        from metrics_sched.app.scheduler_client import connect

        # The same client as explain's: plain HTTP on loopback as is, HTTPS with the token and verified TLS, a
        # Service's URL through the API server's proxy to its leader.
        endpoint = connect(argparse.Namespace(url=source, service=None, lease=None, direct=False,
                                              kubeconfig=args.kubeconfig, ca_file=args.ca_file))
        wanted = urlsplit(export_url(source))
        # A Service's URL was resolved to its leader (the API server's proxy to it; SNI only for a pod's address).
        base = endpoint.url if endpoint.url != source else f"{wanted.scheme}://{wanted.netloc}"
        extensions = {"sni_hostname": endpoint.server_name} if endpoint.server_name else None
        try:
            resp = endpoint.client.get(f"{base.rstrip('/')}{wanted.path}?{wanted.query}", timeout=60,
                                       extensions=extensions)
            resp.raise_for_status()
        except httpx.HTTPError as exc:
            raise UserError(f"cannot read decisions from {source}: {exc}") from None
        return resp.text.splitlines()
    try:
        return Path(source).read_text().splitlines()
    except OSError as exc:
        raise UserError(f"cannot read {source}: {exc.strerror or exc}") from None


def _replay(args: argparse.Namespace) -> int:
    registry = in_tree_registry()
    try:
        config = load_config(args.config, registry.catalog())
    except ConfigError as exc:
        print(f"invalid config {args.config}: {exc}", file=sys.stderr)
        return EXIT_INVALID_CONFIG
    try:
        records = list(read_jsonl(_lines(args.decisions, args)))
    except ValueError as exc:
        print(f"error: {args.decisions}: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    report = replay(records, plans_of(config, registry.plugins))
    if args.json:
        print(json.dumps(report.as_dict(), indent=2))
    else:
        print(render(report, changed_only=args.changed_only))
    return 0


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def render(report: ReplayReport, *, changed_only: bool = False) -> str:
    lines = []
    for d in report.decisions:
        if changed_only and not d.changed:
            continue
        verdict = f"CHANGED {d.before} -> {d.after}" if d.changed else f"same    {d.before}"
        lines.append(f"#{d.id} {d.pod}: {verdict} (score {d.before_total:.1f} -> {d.after_total:.1f})")
    lines.append("")
    lines.append(f"replayed {len(report.decisions)} decision(s), skipped {report.skipped} without candidates; "
                 f"winner changed in {report.changed} ({report.changed_share:.1%})")
    if report.unreplayable:
        missing = ", ".join(f"{p} ({n})" for p, n in sorted(report.unreplayable.items()))
        lines.append(f"not replayable (scored by the new config, absent from the records): {missing}")
    metrics = report.metrics()
    if metrics:
        lines.append("mean of the winners' recorded values:")
        width = max(len(m) for m in metrics)
        lines.append(f"  {'metric'.ljust(width)}  {'before':>10}  {'after':>10}")
        for metric in metrics:
            lines.append(f"  {metric.ljust(width)}  {_fmt(report.mean(metric, 'before')):>10}  "
                         f"{_fmt(report.mean(metric, 'after')):>10}")
    lines.append("filters are not re-run and only the recorded candidates (audit.topCandidates) compete")
    return "\n".join(lines)
