"""Each layer imports on its own, in a fresh interpreter: no import cycle depends on who is imported first."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("module", ["metrics_sched.telemetry", "metrics_sched.config", "metrics_sched.framework"])
def test_a_package_imports_first_in_a_fresh_interpreter(module: str) -> None:
    done = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_the_config_layer_imports_nothing_above_it() -> None:
    # telemetry imports config (the freshness contract is parsed there), never the reverse.
    code = ("import sys, metrics_sched.config, metrics_sched.config.reader; "
            "print(sorted(m for m in sys.modules if m.startswith('metrics_sched.') "
            "and not m.startswith('metrics_sched.config')))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_the_telemetry_layer_imports_no_adapter() -> None:
    code = "import sys, metrics_sched.telemetry; print(sorted(m for m in sys.modules if m.startswith('adapters')))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
