"""`metrics-sched run --config FILE [--kubeconfig FILE]`: the scheduler itself."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from metrics_sched.cli.config_cmd import load_or_exit
from metrics_sched.cli.logging_setup import setup_logging
from metrics_sched.framework.registry import Registry


def register(sub: Any) -> None:
    parser = sub.add_parser("run", help="run the scheduler")
    parser.add_argument("--config", type=Path, required=True, help="scheduler config (YAML)")
    parser.add_argument("--kubeconfig", type=Path, default=None,
                        help="kubeconfig file; without it the in-cluster service account is used")
    parser.add_argument("--port", type=int, default=None, help="override server.port (0 = any free port)")
    parser.add_argument("--identity", default=None, help="leader-election identity (default: host + random)")
    parser.add_argument("--log-format", choices=("json", "text"), default="json")
    parser.add_argument("--log-level", default="info")
    parser.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    setup_logging(args.log_format, args.log_level)
    registry = Registry.default()
    config = load_or_exit(args.config, registry)
    from metrics_sched.cli import app

    return app.run(app.build(config, registry, args.kubeconfig, port=args.port, identity=args.identity,
                             config_dir=args.config.resolve().parent))
