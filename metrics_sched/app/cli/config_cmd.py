"""`metrics-sched check-config FILE`: exit 0 when valid, 2 with one line naming the field when not; fields
accepted without effect are listed as warnings. `metrics-sched config schema`: the config's JSON Schema;
`metrics-sched config defaults`: the effective default configuration as a config file."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any

import yaml

from metrics_sched.config import ConfigError, SchedulerConfig, load_config
from metrics_sched.config.defaults import render_defaults
from metrics_sched.config.schema import render, schema_errors
from metrics_sched.framework.registry import Registry
from metrics_sched.plugins import in_tree_registry

EXIT_INVALID_CONFIG = 2

log = logging.getLogger("metrics_sched.config")


def register(sub: Any) -> None:
    parser = sub.add_parser("check-config", help="validate a scheduler config file")
    parser.add_argument("file", type=Path)
    parser.set_defaults(handler=_check)
    config = sub.add_parser("config", help="the config file's format")
    verbs = config.add_subparsers(dest="config_command", required=True, metavar="VERB")
    schema = verbs.add_parser("schema", help="print the config's JSON Schema (for editors and values schemas)")
    schema.set_defaults(handler=_schema)
    defaults = verbs.add_parser("defaults", help="print the effective default configuration as YAML (a config file "
                                                 "that loads back to the defaults)")
    defaults.set_defaults(handler=_defaults)


def load_or_exit(path: Path, registry: Registry, *, log_warnings: bool = True) -> SchedulerConfig:
    """The config, or exit 2 naming the field; its warnings (accepted fields without effect) are logged."""
    from metrics_sched.app.sources import build_sources

    try:
        config = load_config(path, registry.catalog())
        for source in build_sources(config, path.resolve().parent, None):
            source.close()
    except ConfigError as exc:
        print(f"invalid config {path}: {exc}", file=sys.stderr)
        raise SystemExit(EXIT_INVALID_CONFIG) from None
    if log_warnings:
        for warning in config.warnings:
            log.warning("config %s: %s", path, warning, extra={"field": warning.field})
    return config


def _check(args: argparse.Namespace) -> int:
    config = load_or_exit(args.file, in_tree_registry(), log_warnings=False)
    # The loader has the last word on values; the schema must agree with it (editors and Helm validate with it).
    errors = schema_errors(yaml.safe_load(args.file.read_text()) or {})
    if errors:
        print(f"invalid config {args.file}: {errors[0]} (JSON Schema)", file=sys.stderr)
        raise SystemExit(EXIT_INVALID_CONFIG)
    for warning in config.warnings:
        print(f"warning: {warning}")
    names = ", ".join(p.scheduler_name for p in config.profiles)
    print(f"{args.file}: valid ({len(config.profiles)} profile(s): {names}; config hash {config.config_hash})")
    return 0


def _schema(args: argparse.Namespace) -> int:
    sys.stdout.write(render())
    return 0


def _defaults(args: argparse.Namespace) -> int:
    sys.stdout.write(render_defaults())
    return 0
