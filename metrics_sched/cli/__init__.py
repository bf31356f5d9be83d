"""The `metrics-sched` command. The one place that wires the core to adapters and the dev cluster."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from metrics_sched.cli import config_cmd, demo_cmd, devcluster_cmd, explain_cmd, run_cmd


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="metrics-sched", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    run_cmd.register(sub)
    config_cmd.register(sub)
    explain_cmd.register(sub)
    devcluster_cmd.register(sub)
    demo_cmd.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    code: int = args.handler(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
