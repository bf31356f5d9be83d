"""Extra `metrics-sched` commands come from the entry-point group `metrics_sched.cli`.

A product install has no dev package: its commands are skipped quietly. A broken command is logged as an
error and never hides the built-in commands or the other extra ones.
"""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
from importlib.metadata import EntryPoint
from typing import Any

import pytest

from metrics_sched.app import cli

pytestmark = pytest.mark.unit

BUILT_IN = {"run", "check-config", "explain", "sources", "decisions", "config"}
HERE = __name__


def register_hello(sub: Any) -> None:
    parser = sub.add_parser("hello", help="a command from an entry point")
    parser.set_defaults(handler=lambda args: 7)


def register_broken(sub: Any) -> None:
    raise RuntimeError("this command is broken")


def ep(name: str, value: str) -> EntryPoint:
    return EntryPoint(name=name, value=value, group=cli.CLI_GROUP)


def commands(parser: Any) -> set[str]:
    [action] = [a for a in parser._actions if a.dest == "command"]
    return set(action.choices)


class MissingDevPackage(EntryPoint):
    """An entry point whose module is not installed: what a product install sees for the dev commands."""

    def load(self) -> Any:
        module = self.value.split(":")[0]
        raise ModuleNotFoundError(f"No module named {module.split('.')[0]!r}", name=module.split(".")[0])


def test_entry_point_commands_are_added_to_the_built_in_ones() -> None:
    parser = cli.build_parser([ep("hello", f"{HERE}:register_hello")])
    assert commands(parser) >= BUILT_IN | {"hello"}
    args = parser.parse_args(["hello"])
    assert args.handler(args) == 7


def test_a_command_whose_module_is_not_installed_is_skipped_at_debug(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="metrics_sched.cli")
    parser = cli.build_parser([
        MissingDevPackage(name="devcluster", value="devcluster.cli:register", group=cli.CLI_GROUP),
        ep("gone", "no_such_package_metrics_sched_test.commands:register"),
        ep("hello", f"{HERE}:register_hello"),
    ])
    assert commands(parser) >= BUILT_IN | {"hello"}
    assert not {"devcluster", "gone"} & commands(parser)
    skipped = [r for r in caplog.records if "skipped" in r.getMessage()]
    assert {r.levelno for r in skipped} == {logging.DEBUG} and len(skipped) == 2
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_broken_command_logs_an_error_and_hides_nothing(caplog: pytest.LogCaptureFixture) -> None:
    parser = cli.build_parser([
        ep("broken", f"{HERE}:register_broken"),
        ep("typo", f"{HERE}:no_such_function"),
        ep("hello", f"{HERE}:register_hello"),
    ])
    assert commands(parser) >= BUILT_IN | {"hello"}
    errors = {r.getMessage().split("'")[1] for r in caplog.records if r.levelno == logging.ERROR}
    assert errors == {"broken", "typo"}


def test_a_missing_dependency_inside_a_command_module_is_an_error(caplog: pytest.LogCaptureFixture,
                                                                  tmp_path: Any,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "cmdpkg_metrics_sched_test.py").write_text("import no_such_dependency_xyz\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    parser = cli.build_parser([ep("needsdep", "cmdpkg_metrics_sched_test:register"),
                               ep("hello", f"{HERE}:register_hello")])
    assert "hello" in commands(parser) and "needsdep" not in commands(parser)
    [error] = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert "needsdep" in error.getMessage() and "no_such_dependency_xyz" in error.getMessage()


def test_help_works_without_the_dev_package() -> None:
    """A fresh interpreter where `devcluster` cannot be imported, with the installed entry points."""
    code = textwrap.dedent("""
        import sys
        sys.modules["devcluster"] = None  # import devcluster -> ModuleNotFoundError
        from metrics_sched.app.cli import main
        main(["--help"])
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert "run" in done.stdout and "explain" in done.stdout
    assert "devcluster" not in done.stdout and "demo" not in done.stdout
    assert done.stderr == ""


def test_the_checkout_has_the_dev_commands() -> None:
    """From a checkout (editable install with the dev extra) `demo` and `devcluster` are there."""
    assert commands(cli.build_parser()) >= BUILT_IN | {"demo", "devcluster"}
