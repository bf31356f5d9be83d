"""`metrics-sched rebalance --config FILE [--dry-run | --no-dry-run] [--once] [--kubeconfig FILE]`.

The rebalancer on its own: the scheduler's watches and telemetry sources (app/core.py's build_core, the same
config file), no scheduling loop and no lease. Every tick prints its plan, one line per verdict. A dry run
(the default) evicts nothing and writes nothing to the cluster. `--once` runs one tick as soon as the caches
are synced and every telemetry source has answered once (or failed: stale or missing data never evicts),
then exits.

It does not coordinate with a scheduler running the rebalancer in-process (`rebalance.enabled`): run one or
the other with --no-dry-run, not both.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from metrics_sched.app.cli.config_cmd import EXIT_INVALID_CONFIG, load_or_exit
from metrics_sched.app.cli.explain_cmd import table
from metrics_sched.app.cli.logging_setup import LEVELS, log_level, setup_logging
from metrics_sched.audit import DecisionRing
from metrics_sched.plugins import in_tree_registry
from metrics_sched.rebalance.model import EvictionVerdict

EXIT_INTERRUPTED = 130
PLAN_HEADERS = ["POD", "NODE", "RULE", "VERDICT", "TARGET", "GAIN", "REASON"]


def register(sub: Any) -> None:
    parser = sub.add_parser("rebalance", help="evict pods from persistently hot, expensive or overloaded nodes "
                                              "(dry run by default: prints the plan)")
    parser.add_argument("--config", type=Path, required=True, help="scheduler config (YAML) with a rebalance: section")
    parser.add_argument("--dry-run", action=argparse.BooleanOptionalAction, default=True,
                        help="only print the plan (default); --no-dry-run evicts through the Eviction API")
    parser.add_argument("--once", action="store_true",
                        help="one tick, once the caches are synced and the telemetry answered, then exit")
    parser.add_argument("--kubeconfig", type=Path, default=None,
                        help="kubeconfig file; without it the in-cluster service account is used")
    parser.add_argument("--log-format", choices=("json", "text"), default="text")
    parser.add_argument("--log-level", type=log_level, default="warning", help=f"one of {', '.join(LEVELS)}")
    parser.set_defaults(handler=_rebalance)


def plan_lines(verdicts: Sequence[EvictionVerdict]) -> str:
    """The plan of one tick: a table, one line per verdict."""
    rows = [[v.pod, v.node, v.rule, v.verdict.value, v.target or "-", "-" if v.gain is None else f"{v.gain:+.1f}",
             v.reason] for v in verdicts]
    return "\n".join(line.rstrip() for line in table(PLAN_HEADERS, rows).splitlines())


def print_plan(verdicts: Sequence[EvictionVerdict], *, candidates: int, dry_run: bool, out: TextIO) -> None:
    when = time.strftime("%Y-%m-%d %H:%M:%S")
    mode = "dry run" if dry_run else "evicting"
    out.write(f"# {when} ({mode}): {candidates} candidate pod(s) on bad nodes, {len(verdicts)} verdict(s)\n")
    if verdicts:
        out.write(plan_lines(verdicts) + "\n")
    out.flush()


def _rebalance(args: argparse.Namespace) -> int:
    registry = in_tree_registry()
    config = load_or_exit(args.config, registry)
    if not config.rebalance.rules:
        print(f"invalid config {args.config}: rebalance.rules: at least one rule is needed to rebalance",
              file=sys.stderr)
        return EXIT_INVALID_CONFIG
    setup_logging(args.log_format, args.log_level)
    from metrics_sched.app.core import build_core, build_rebalancer, start_caches
    from metrics_sched.app.signals import stop_on_termination

    core = build_core(config, registry, args.kubeconfig, config_dir=args.config.resolve().parent,
                          leader_election=False)
    ring = DecisionRing(config.audit.ring_size)
    runner = build_rebalancer(config, core, ring, None, dry_run=args.dry_run)
    scheduler = core.scheduler
    stop = threading.Event()
    stop_on_termination(stop)
    # Each source's first answer (values or a failure) before the first plan, as for the scheduler; a plan is
    # printed once, so a slow source is waited for longer: a few of its intervals.
    intervals = [h.interval for h in scheduler.metrics.health.values()]
    try:
        if not start_caches(scheduler, core.source, stop, first_answer_timeout=3 * max(intervals, default=0.0) + 30.0):
            return EXIT_INTERRUPTED
        late = scheduler.metrics.first_answers.unanswered()
        if late:
            print(f"# telemetry source(s) not answered yet: {', '.join(late)}; their metrics count as missing",
                  file=sys.stderr)
        while True:
            verdicts = runner.tick()
            print_plan(verdicts, candidates=runner.rebalancer.candidates, dry_run=args.dry_run, out=sys.stdout)
            if args.once or stop.wait(config.rebalance.interval_seconds):
                break
    finally:
        stop.set()
        scheduler.metrics.stop()
        core.source.stop()
    return 0
