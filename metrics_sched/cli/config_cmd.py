"""`metrics-sched check-config FILE`: exit 0 when valid, 2 with one line naming the field when not."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from metrics_sched.config import ConfigError, SchedulerConfig, load_config
from metrics_sched.framework.registry import Registry

EXIT_INVALID_CONFIG = 2


def register(sub: Any) -> None:
    parser = sub.add_parser("check-config", help="validate a scheduler config file")
    parser.add_argument("file", type=Path)
    parser.set_defaults(handler=_check)


def load_or_exit(path: Path, registry: Registry) -> SchedulerConfig:
    from metrics_sched.cli.sources import build_sources

    try:
        config = load_config(path, registry.catalog())
        for source in build_sources(config, path.resolve().parent, None):
            source.close()
        return config
    except ConfigError as exc:
        print(f"invalid config {path}: {exc}", file=sys.stderr)
        raise SystemExit(EXIT_INVALID_CONFIG) from None


def _check(args: argparse.Namespace) -> int:
    config = load_or_exit(args.file, Registry.default())
    names = ", ".join(p.scheduler_name for p in config.profiles)
    print(f"{args.file}: valid ({len(config.profiles)} profile(s): {names}; config hash {config.config_hash})")
    return 0
