"""`metrics-sched explain NAMESPACE/POD` and `metrics-sched sources`: read a running scheduler's
/decisions and /sources endpoints and print them for humans (or, with -o json|yaml, for programs).

Over HTTPS (the default) they send the kubeconfig's bearer token (the scheduler reviews it with the API server:
the user needs `get` on the path, e.g. the metrics-sched-reader ClusterRole) and verify the serving certificate
with --ca-file, else the kubeconfig cluster's CA. A plain http:// URL (a scheduler run with `server.insecure` on
loopback) gets no credentials. Given the Service (--service, or --url https://NAME.NAMESPACE.svc:PORT) they ask
the replica holding the leader Lease, never a standby, through the API server's pod proxy unless --direct. The
client that does so is the app's (app/scheduler_client.py); here are the flags and the rendering.

For a pod the rebalancer evicted, explain shows why it was moved and where the scheduler then put its
replacement: the first placement, after the eviction, of a pod with the same owner (its controller)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from metrics_sched.app.cli import history_cmd
from metrics_sched.app.cli.output import output_flag, print_as
from metrics_sched.app.cli.sources import render_series_matching
from metrics_sched.app.errors import UserError
from metrics_sched.app.scheduler_client import DEFAULT_LEASE_NAME, DEFAULT_URL, Endpoint, connect


def target_flags(parser: argparse.ArgumentParser) -> None:
    """The flags that say which scheduler to ask and how (explain, sources, decisions)."""
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--url", default=None,
                       help=f"the scheduler's endpoint (default $METRICS_SCHED_URL or {DEFAULT_URL}); "
                            "https://NAME.NAMESPACE.svc:PORT means --service NAMESPACE/NAME")
    where.add_argument("--service", metavar="NAMESPACE/NAME", default=None,
                       help="ask the leader behind this Service (the pod holding the Lease); as `kubectl "
                            "metrics-sched` the default is $METRICS_SCHED_SERVICE or metrics-sched/metrics-sched")
    parser.add_argument("--lease", metavar="NAMESPACE/NAME", default=None,
                        help=f"the leader-election Lease (default: the Service's namespace/{DEFAULT_LEASE_NAME})")
    parser.add_argument("--direct", action="store_true",
                        help="with --service: connect to the leader pod's address (from inside the cluster) instead "
                             "of through the API server's pod proxy (the default: needs pods/proxy get)")
    parser.add_argument("--kubeconfig", type=Path, default=None,
                        help="whose credentials to send (default: $KUBECONFIG, ~/.kube/config, in-cluster)")
    parser.add_argument("--ca-file", type=Path, default=None,
                        help="CA of the scheduler's serving certificate (default: the kubeconfig cluster's CA); "
                             "for a self-signed pair, ca.crt in its server.certDir. Not used through the API server "
                             "(which checks nothing of the pod's certificate: its proxy never does)")


def register(sub: Any) -> None:
    explain = sub.add_parser("explain", help="why a pod went where it went (from a running scheduler)")
    explain.add_argument("pod", help="NAMESPACE/POD")
    target_flags(explain)
    explain.add_argument("--all", action="store_true", help="every recorded attempt, not only the latest")
    output_flag(explain)
    explain.set_defaults(handler=_explain)
    sources = sub.add_parser("sources", help="health, coverage and freshness of every telemetry source; with "
                                             "--history NODE, that node's recent series")
    target_flags(sources)
    output_flag(sources)
    history_cmd.add_flags(sources)
    sources.set_defaults(handler=_sources)


def get(endpoint: Endpoint, path: str, **params: str) -> Any:
    """GET a path of the scheduler as JSON; every failure is a UserError naming it."""
    url = endpoint.url
    extensions = {"sni_hostname": endpoint.server_name} if endpoint.server_name else None
    try:
        for attempt in range(5):
            resp = endpoint.client.get(f"{url.rstrip('/')}{path}", params=params, extensions=extensions)
            if resp.status_code != 503 or attempt == 4:
                break
            time.sleep(0.2 * (attempt + 1))  # /decisions renders one answer at a time: another client's is under way
        if resp.status_code in (401, 403):
            hint = ("the credentials were not accepted" if resp.status_code == 401 else
                    "the user may not read it: bind the metrics-sched-reader ClusterRole, and through the API server "
                    "the metrics-sched-find-leader Role (pods/proxy), deploy/clusterrole-reader.yaml")
            raise UserError(f"cannot read {path} from {url}: {resp.status_code} ({hint}): "
                            f"{resp.text.strip()[:200]}")
        resp.raise_for_status()
        return resp.json()
    except httpx.HTTPError as exc:
        raise UserError(f"cannot read {path} from {url}: {exc}") from None
    except ValueError:  # an answer that is not JSON: something else listens there
        raise UserError(f"cannot read {path} from {url}: the answer is not JSON (is it metrics-sched?)") from None


def table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(out)


def _fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def render_decision(d: dict[str, Any]) -> str:
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(d["time"]))
    lines = [f"pod {d['pod']}  decision #{d['id']} at {when}  profile {d['profile']}  config {d['config_hash']}",
             f"result: {d['result']}" + (f" -> {d['node']}" if d["node"] else "") +
             (f"  (bind: {d['bind']}, {_fmt(d['bind_ms'])} ms)" if d.get("bind") else "") +
             f"  attempt {d['attempts']}, {d['feasible']}/{d['nodes_total']} nodes feasible, "
             f"decided in {_fmt(d['duration_ms'], 2)} ms"]
    if d["result"] != "scheduled":
        lines.append(f"why: {d['message']}")
    if d.get("nominated_node"):
        lines.append(f"nominated by PostFilter: {d['nominated_node']}")
    lines += [f"  - {note}" for note in d.get("notes") or ()]
    candidates = d["candidates"]
    if candidates:
        plugins = [t["plugin"] for t in candidates[0]["terms"]]
        weights = {t["plugin"]: t["weight"] for t in candidates[0]["terms"]}
        headers = ["rank", "node", "total"] + [f"{p} (w{weights[p]})" for p in plugins]
        rows = []
        for c in candidates:
            cells = ["winner" if c["rank"] == 0 and d["node"] == c["node"] else str(c["rank"] + 1), c["node"],
                     _fmt(c["total"])]
            for t in c["terms"]:
                raw = ", ".join(
                    f"{m['metric']}={_fmt(m['value'], 2)}"
                    + (f"+{_fmt(m['in_flight'], 2)} in flight" if m.get("in_flight") else "")
                    + f" ({_fmt(m['age_seconds'])}s, {'/'.join(m['sources'])})"
                    for m in t["metrics"] if m["value"] is not None)
                cells.append(f"{_fmt(t['normalized'])}" + (f" [{raw}]" if raw else ""))
            rows.append(cells)
        lines += ["", "candidates (normalised 0-100 per term; raw value, age, source in brackets):",
                  table(headers, rows)]
        if len(candidates) > 1 and d["node"]:
            best, second = candidates[0], candidates[1]
            gaps = sorted(
                ((bt["weight"] * ((bt["normalized"] or 0) - (st["normalized"] or 0)), bt["plugin"])
                 for bt, st in zip(best["terms"], second["terms"], strict=True)), reverse=True)
            lead = ", ".join(f"{p} +{g:.0f}" for g, p in gaps if g > 0) or "a tie broken at random"
            lines.append(f"\n{best['node']} beat {second['node']} by {d['margin']:.1f} points; "
                         f"weighted lead from: {lead}")
    if d["rejections"]:
        lines += ["", "nodes filtered out:", table(["count", "reason"],
                                                   [[str(n), r] for r, n in sorted(d["rejections"].items())])]
    return "\n".join(lines)


def render_eviction(d: dict[str, Any], replacement: dict[str, Any] | None) -> str:
    """An eviction record (the rebalancer's verdict on the pod) and, when it was evicted, where its replacement
    went: `replacement` is that placement record, or None when none is recorded (yet)."""
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(d["time"]))
    target = ""
    if d.get("target"):
        target = f" (best other node {d['target']}" + (f", {d['gain']:+.1f} points" if d.get("gain") is not None
                                                          else "") + ")"
    lines = [f"pod {d['pod']}  rebalancer verdict #{d['id']} at {when}  rule {d['rule']}",
             f"result: {d['verdict']} on node {d['node']}{target}",
             f"why: {d['reason']}"]
    if d["verdict"] != "evicted":
        return "\n".join(lines)
    if not d.get("owner"):
        lines.append("then: the pod has no controller; nothing re-creates it")
    elif replacement is None:
        lines.append(f"then: no placement of a pod of its owner ({d['owner']}) recorded since the eviction (yet)")
    else:
        placed = time.strftime("%H:%M:%S", time.localtime(replacement["time"]))
        where = replacement["node"] or "nowhere"
        lines.append(f"then: its replacement {replacement['pod']} went to {where} at {placed} "
                     f"({replacement['result']}, decision #{replacement['id']}; "
                     f"`metrics-sched explain {replacement['pod']}` for why)")
    return "\n".join(lines)


def _replacement(url: Endpoint, eviction: dict[str, Any]) -> dict[str, Any] | None:
    """The first placement after the eviction of a pod with the evicted pod's owner, or None."""
    if not eviction.get("owner") or eviction["verdict"] != "evicted":
        return None
    body = get(url, "/decisions", kind="placement", owner=eviction["owner"], since=repr(eviction["time"]),
                limit="1000")
    # By time, not id: the record is stamped before the eviction call, but its id is taken after it returns, and
    # the replacement may be placed (its id taken) meanwhile.
    after = [d for d in body["decisions"] if d["time"] >= eviction["time"] and d["uid"] != eviction["uid"]]
    placed = [d for d in after if d["node"]] or after
    return min(placed, key=lambda d: d["id"]) if placed else None


def _render(url: Endpoint, d: dict[str, Any]) -> str:
    if d.get("kind", "placement") == "eviction":
        return render_eviction(d, _replacement(url, d))
    return render_decision(d)


def _explain(args: argparse.Namespace) -> int:
    if "/" not in args.pod:
        print("error: give the pod as NAMESPACE/POD", file=sys.stderr)
        return 2
    endpoint = connect(args)
    body = get(endpoint, "/decisions", pod=args.pod, limit="50")
    decisions = body["decisions"]
    if not decisions:
        print(f"no decision recorded for {args.pod} (the ring keeps the last {body['ring_size']})", file=sys.stderr)
        return 1
    shown = decisions if args.all else decisions[:1]
    latest = decisions[0]
    if not args.all and latest.get("kind") == "eviction" and latest["verdict"] != "evicted":
        # The rebalancer looked at the pod and left it: where it is still comes from its placement.
        placement = next((d for d in decisions if d.get("kind", "placement") == "placement"), None)
        shown = [latest] + ([placement] if placement else [])
    if args.output != "text":
        # The records as the API gives them; an eviction's record carries where its replacement went.
        records = [{**d, "replacement": _replacement(endpoint, d)} if d.get("kind") == "eviction" else d
                   for d in shown]
        print_as(args.output, {"pod": args.pod, "decisions": records})
        return 0
    for d in shown:
        print(_render(endpoint, d))
        print()
    return 0


def _sources(args: argparse.Namespace) -> int:
    if args.history is not None:
        return history_cmd.history(args)
    body = get(connect(args), "/sources")
    if args.output != "text":
        print_as(args.output, body)
        return 0
    rows = []
    for name, h in sorted(body.items()):
        coverage = ", ".join(f"{m} {v:.0%}" for m, v in sorted(h["coverage"].items())) or "-"
        dropped = ", ".join(f"{r}={n}" for r, n in sorted(h["dropped"].items())) or "-"
        rows.append([name, "up" if h["up"] else "DOWN", f"{h['interval']:g}s",
                     _fmt(h.get("last_success_age")) + "s ago" if h.get("last_success_age") is not None else "never",
                     str(h["consecutive_failures"]), f"{h['last_duration'] * 1000:.0f} ms", coverage, dropped,
                     (h.get("last_error") or "")[:60]])
    print(table(["source", "state", "every", "last success", "fails", "took", "coverage (fresh)", "dropped",
                 "last error"], rows))
    matching = render_series_matching(body)
    if matching:
        print("\nseries -> nodes, by rule:\n" + matching)
    return 0
