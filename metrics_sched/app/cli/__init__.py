"""The `metrics-sched` command.

Built-in commands (`run`, `check-config`, `explain`, `decisions`, `rebalance`, ...) are registered here; further
commands come from the entry-point group `metrics_sched.cli` (the dev tooling's `demo` and `devcluster` verbs, which a
product install does not have). Each entry point names a callable `register(subparsers)`.

The commands parse flags and print; what they build and run is the wiring of the app around them
(metrics_sched/app/, the composition root).

Installed as `kubectl-metrics_sched` too (kubectl_main): kubectl runs an executable of that name on PATH for
`kubectl metrics-sched ...`, and then explain, sources and decisions ask the leader behind the Service
metrics-sched/metrics-sched ($METRICS_SCHED_SERVICE to name another) through the API server unless told otherwise.

Every user error (a bad flag value, a missing or invalid kubeconfig, an unreachable API server) ends as one
line on stderr and exit 2 (app/errors.py), never a traceback.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from importlib.metadata import EntryPoint, entry_points
from typing import Any, NoReturn

from metrics_sched import __version__
from metrics_sched.app.cli import config_cmd, decisions_cmd, explain_cmd, rebalance_cmd, replay_cmd, run_cmd
from metrics_sched.app.errors import EXIT_USER_ERROR, UserError

CLI_GROUP = "metrics_sched.cli"

log = logging.getLogger("metrics_sched.cli")


class Parser(argparse.ArgumentParser):
    """argparse with a one-line error: the usage block it prints by default is what `--help` is for.
    Subcommand parsers are of this class too (add_subparsers uses the parent's class)."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USER_ERROR, f"{self.prog}: error: {' '.join(message.split())} (see {self.prog} --help)\n")


KUBECTL_PROG = "kubectl metrics-sched"
DEFAULT_SERVICE = "metrics-sched/metrics-sched"  # deploy/service.yaml


def build_parser(commands: Iterable[EntryPoint] | None = None, *, prog: str = "metrics-sched",
                 default_service: str | None = None) -> argparse.ArgumentParser:
    """`commands` defaults to the installed entry points of the group `metrics_sched.cli`. `default_service`: the
    Service whose leader explain, sources and decisions ask when no --url or --service is given."""
    parser = Parser(prog=prog, description=__doc__.splitlines()[0])
    parser.set_defaults(default_service=default_service)
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    run_cmd.register(sub)
    config_cmd.register(sub)
    explain_cmd.register(sub)
    decisions_cmd.register(sub)
    rebalance_cmd.register(sub)
    replay_cmd.register(sub)
    load_commands(sub, entry_points(group=CLI_GROUP) if commands is None else commands)
    return parser


def _not_installed(ep: EntryPoint, exc: ModuleNotFoundError) -> bool:
    """True when the module the entry point names (or a parent package of it) is itself absent."""
    module = ep.value.split(":", 1)[0].strip()
    return exc.name is not None and (module == exc.name or module.startswith(exc.name + "."))


def load_commands(sub: Any, commands: Iterable[EntryPoint]) -> list[str]:
    """Registers every command entry point; returns the names registered.

    An entry point whose module is not installed (a product install has no dev tooling) is skipped with
    a debug message; any other failure is logged as an error and skipped, never hiding the other commands.
    """
    registered: list[str] = []
    seen: set[str] = set()
    for ep in sorted(commands, key=lambda e: e.name):
        if ep.name in seen:
            continue
        seen.add(ep.name)
        try:
            register: Callable[[Any], None] = ep.load()
        except ModuleNotFoundError as exc:
            if _not_installed(ep, exc):
                log.debug("command %r skipped: %s is not installed", ep.name, exc.name)
            else:
                log.error("command %r (%s) failed to load: %s", ep.name, ep.value, exc, exc_info=True)
            continue
        except Exception as exc:
            log.error("command %r (%s) failed to load: %s", ep.name, ep.value, exc, exc_info=True)
            continue
        try:
            register(sub)
        except Exception as exc:
            log.error("command %r (%s) failed to register: %s", ep.name, ep.value, exc, exc_info=True)
            continue
        registered.append(ep.name)
    return registered


def main(argv: Sequence[str] | None = None, *, prog: str = "metrics-sched", default_service: str | None = None,
         ) -> int:
    parser = build_parser(prog=prog, default_service=default_service)
    args = parser.parse_args(argv)
    try:
        code: int = args.handler(args)
    except UserError as exc:
        print(f"{prog} {args.command}: error: {exc.one_line()}", file=sys.stderr)
        return EXIT_USER_ERROR
    return code


def kubectl_main() -> int:
    """The `kubectl-metrics_sched` executable: `kubectl metrics-sched explain NAMESPACE/POD` from a laptop."""
    return main(prog=KUBECTL_PROG, default_service=os.environ.get("METRICS_SCHED_SERVICE", DEFAULT_SERVICE))


if __name__ == "__main__":
    sys.exit(main())
