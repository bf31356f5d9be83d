"""`metrics-sched decisions`: the running scheduler's recent decisions (/decisions), newest first, one line each:
placements and the rebalancer's verdicts, filtered by pod, node, owner and kind. `-o json|yaml` prints the API's
answer as it is (with `next`, the id to pass as --before for the following page)."""

from __future__ import annotations

import argparse
import time
from typing import Any

from metrics_sched.app.cli.explain_cmd import get, table, target_flags
from metrics_sched.app.cli.output import output_flag, print_as
from metrics_sched.app.scheduler_client import connect

__all__ = ["register", "rows"]

MAX_MESSAGE = 60  # characters of a decision's message in the table


def register(sub: Any) -> None:
    parser = sub.add_parser("decisions", help="the recent decisions of a running scheduler, newest first")
    parser.add_argument("--pod", metavar="NAMESPACE/POD", default=None, help="only this pod's")
    parser.add_argument("--node", default=None, help="only those that chose this node")
    parser.add_argument("--owner", metavar="KIND/NAMESPACE/NAME", default=None,
                        help="only pods of this controller (as the records name it)")
    parser.add_argument("--kind", choices=("placement", "eviction"), default=None,
                        help="placements or the rebalancer's verdicts (default: both)")
    parser.add_argument("--limit", type=int, default=50, help="at most this many (default 50, at most 1000)")
    parser.add_argument("--before", type=int, default=None, metavar="ID", help="older than this id (paging)")
    target_flags(parser)
    output_flag(parser)
    parser.set_defaults(handler=_decisions)


def rows(decisions: list[dict[str, Any]]) -> list[list[str]]:
    """One table row per record: id, time, kind, pod, result or verdict, node, why (placements: the message of
    one that was not scheduled; evictions: the rule)."""
    out = []
    for d in decisions:
        when = time.strftime("%H:%M:%S", time.localtime(d["time"]))
        if d.get("kind", "placement") == "eviction":
            out.append([str(d["id"]), when, "eviction", d["pod"], d["verdict"], d.get("node") or "-",
                        f"rule {d['rule']}: {d['reason']}"[:MAX_MESSAGE]])
        else:
            why = "" if d["result"] == "scheduled" else (d.get("message") or "")
            out.append([str(d["id"]), when, "placement", d["pod"], d["result"], d.get("node") or "-",
                        " ".join(why.split())[:MAX_MESSAGE]])
    return out


def _decisions(args: argparse.Namespace) -> int:
    params = {"limit": str(args.limit)}
    for name in ("pod", "node", "owner", "kind", "before"):
        value = getattr(args, name)
        if value is not None:
            params[name] = str(value)
    body = get(connect(args), "/decisions", **params)
    if args.output != "text":
        print_as(args.output, body)
        return 0
    print(table(["id", "time", "kind", "pod", "result", "node", "why"], rows(body["decisions"])))
    if body.get("next") is not None:
        print(f"(more: --before {body['next']})")
    return 0
