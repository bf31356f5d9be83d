"""The product wheel carries the core and the adapters only: no dev cluster, no emulator, no demo.

Builds the wheel the way a release would (`python -m build --wheel`; without build isolation, so no
network: hatchling comes with the dev extra) and reads the archive and its metadata.
"""

from __future__ import annotations

import configparser
import subprocess
import sys
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
PRODUCT = ("metrics_sched", "adapters")
DEV = "devcluster"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    out = tmp_path_factory.mktemp("dist")
    done = subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out), str(REPO)],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    [path] = out.glob("*.whl")
    return zipfile.ZipFile(path)


def dist_info(wheel: zipfile.ZipFile, name: str) -> str:
    [member] = [n for n in wheel.namelist() if n.split("/")[0].endswith(".dist-info") and n.endswith(f"/{name}")]
    return wheel.read(member).decode()


def module_in_wheel(wheel: zipfile.ZipFile, module: str) -> bool:
    base = module.replace(".", "/")
    names = set(wheel.namelist())
    return f"{base}.py" in names or f"{base}/__init__.py" in names


def test_the_wheel_holds_the_core_and_the_adapters_and_no_dev_tooling(wheel: zipfile.ZipFile) -> None:
    tops = {n.split("/")[0] for n in wheel.namelist() if not n.split("/")[0].endswith(".dist-info")}
    assert tops == set(PRODUCT)
    assert not [n for n in wheel.namelist() if n.startswith(f"{DEV}/") or f"/{DEV}/" in n]
    for package in PRODUCT:
        assert f"{package}/__init__.py" in wheel.namelist()
        assert f"{package}/py.typed" in wheel.namelist()
    assert module_in_wheel(wheel, "metrics_sched.app.cli")
    assert module_in_wheel(wheel, "adapters.kubernetes")


def test_cryptography_is_a_runtime_requirement(wheel: zipfile.ZipFile) -> None:
    # The scheduler generates its self-signed serving pair with it (metrics_sched/serving/self_signed.py).
    requires = Parser().parsestr(dist_info(wheel, "METADATA")).get_all("Requires-Dist") or []
    crypto = [r for r in requires if r.split(";")[0].strip().lower().startswith("cryptography")]
    assert any(";" not in r for r in crypto), requires


def test_entry_points_name_modules_the_wheel_has_except_the_dev_commands(wheel: zipfile.ZipFile) -> None:
    parser = configparser.ConfigParser(delimiters=("=",))
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(dist_info(wheel, "entry_points.txt"))
    assert parser.has_section("console_scripts")
    # kubectl's plugin lookup runs `kubectl-metrics_sched` for `kubectl metrics-sched`.
    assert dict(parser.items("console_scripts"))["kubectl-metrics_sched"] == "metrics_sched.app.cli:kubectl_main"
    for group in ("console_scripts", "metrics_sched.plugins", "metrics_sched.sources"):
        if not parser.has_section(group):
            continue
        for name, value in parser.items(group):
            module = value.split(":")[0].strip()
            assert module.split(".")[0] in PRODUCT, f"[{group}] {name} = {value}"
            assert module_in_wheel(wheel, module), f"[{group}] {name} = {value}: module not in the wheel"
    # Extra CLI commands: product ones must be in the wheel; the dev ones name the dev package, which a
    # product install does not have (the CLI skips them: see test_cli_commands.py).
    dev_commands = set()
    for name, value in parser.items("metrics_sched.cli") if parser.has_section("metrics_sched.cli") else []:
        module = value.split(":")[0].strip()
        if module.split(".")[0] == DEV:
            dev_commands.add(name)
            assert not module_in_wheel(wheel, module)
        else:
            assert module.split(".")[0] in PRODUCT and module_in_wheel(wheel, module), f"{name} = {value}"
    assert dev_commands == {"demo", "devcluster"}
