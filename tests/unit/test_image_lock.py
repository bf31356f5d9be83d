"""The image's Python dependencies are locked with hashes (deploy/image/*.lock, made by deploy/image/lock.sh) and
the Containerfile installs nothing else: every runtime dependency of pyproject is in the lock at a version its
specifier allows, every locked version carries hashes, and the base image is pinned by digest."""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
IMAGE = ROOT / "deploy" / "image"
CONTAINERFILE = ROOT / "deploy" / "Containerfile"
# The image's Python (deploy/Containerfile's base): markers in dependencies are evaluated for it.
IMAGE_PYTHON = "3.11"
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)")
_HASH = re.compile(r"--hash=sha256:[0-9a-f]{64}")


def locked(path: Path) -> dict[str, tuple[str, int]]:
    """{canonical name: (version, number of hashes)} of a pip-compile --generate-hashes file."""
    out: dict[str, tuple[str, int]] = {}
    name = ""
    for line in path.read_text().splitlines():
        pin = _PIN.match(line)
        if pin:
            name = canonicalize_name(pin.group(1))
            assert name not in out, f"{path.name}: {name} pinned twice"
            out[name] = (pin.group(2), 0)
        if name and _HASH.search(line):
            version, hashes = out[name]
            out[name] = (version, hashes + len(_HASH.findall(line)))
    return out


def image_environment() -> dict[str, str]:
    env = {str(k): str(v) for k, v in default_environment().items()}
    env.update(python_version=IMAGE_PYTHON, python_full_version=f"{IMAGE_PYTHON}.0", sys_platform="linux",
               platform_system="Linux", os_name="posix", implementation_name="cpython")
    return env


def runtime_requirements() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    env = image_environment()
    reqs = [Requirement(text) for text in project["dependencies"]]
    return [r for r in reqs if r.marker is None or r.marker.evaluate(env)]


def test_every_runtime_dependency_of_pyproject_is_locked_at_an_allowed_version() -> None:
    lock = locked(IMAGE / "requirements.lock")
    missing, outside = [], []
    for req in runtime_requirements():
        name = canonicalize_name(req.name)
        if name not in lock:
            missing.append(req.name)
        elif not req.specifier.contains(lock[name][0], prereleases=True):
            outside.append(f"{req.name}=={lock[name][0]} (pyproject: {req.specifier})")
    assert not missing, f"not in deploy/image/requirements.lock (run deploy/image/lock.sh): {missing}"
    assert not outside, f"locked outside pyproject's range (run deploy/image/lock.sh): {outside}"


@pytest.mark.parametrize("name", ["requirements.lock", "build-requirements.lock"])
def test_every_locked_version_has_hashes(name: str) -> None:
    lock = locked(IMAGE / name)
    assert lock, f"{name} pins nothing"
    assert not [n for n, (_, hashes) in lock.items() if hashes == 0]


def test_the_lock_is_closed_under_the_dependencies_of_what_it_locks() -> None:
    # A locked package's own requirements must be locked too (pip --require-hashes refuses anything unpinned).
    # Read from the installed metadata of the locked packages this environment has at the same version.
    lock = locked(IMAGE / "requirements.lock")
    env = image_environment()
    checked, unlocked = 0, []
    for name, (version, _) in lock.items():
        try:
            dist = distribution(name)
        except PackageNotFoundError:
            continue
        if dist.version != version:
            continue
        checked += 1
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker is not None and not req.marker.evaluate({**env, "extra": ""}):
                continue
            if canonicalize_name(req.name) not in lock:
                unlocked.append(f"{name} needs {req.name}")
    assert checked >= len(lock) // 2, "too few locked packages installed here at their locked version to check"
    assert not unlocked


def test_the_build_backend_is_locked() -> None:
    backend = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]["requires"]
    lock = locked(IMAGE / "build-requirements.lock")
    for text in backend:
        req = Requirement(text)
        assert canonicalize_name(req.name) in lock
        assert req.specifier.contains(lock[canonicalize_name(req.name)][0])


def test_the_containerfile_pins_its_base_and_installs_only_hashed_packages() -> None:
    text = CONTAINERFILE.read_text()
    base = re.search(r"^ARG BASE=(\S+)$", text, re.M)
    assert base and re.fullmatch(r"[\w./-]+:[\w.-]+@sha256:[0-9a-f]{64}", base.group(1)), "base not pinned by digest"
    assert re.findall(r"^FROM (\S+)", text, re.M) == ["${BASE}", "${BASE}"]
    installs = [line for line in re.sub(r"\\\n", " ", text).splitlines() if "pip install" in line]
    for line in installs:
        for command in line.split("&&"):
            if "pip install" not in command:
                continue
            # Either from a lock with hashes, or the project's own wheel without resolving anything.
            assert "--require-hashes" in command or ("--no-deps" in command and ".whl" in command), command
    assert "requirements.lock" in text and "build-requirements.lock" in text


def _tools_only(tmp_path: Path, names: tuple[str, ...]) -> str:
    """A PATH holding only these commands (no container engine)."""
    for name in names:
        found = shutil.which(name)
        assert found, name
        (tmp_path / name).symlink_to(found)
    return str(tmp_path)


def test_make_image_without_a_container_engine_says_so_and_exits_2(tmp_path: Path) -> None:
    path = _tools_only(tmp_path, ("bash", "sed", "head", "dirname"))
    done = subprocess.run(["bash", str(IMAGE / "build.sh")], env={"PATH": path}, capture_output=True, text=True,
                          timeout=30)
    assert done.returncode == 2
    assert "no container engine" in done.stderr and "podman" in done.stderr
    forced = subprocess.run(["bash", str(IMAGE / "build.sh")], env={"PATH": path, "ENGINE": "podman"},
                            capture_output=True, text=True, timeout=30)
    assert forced.returncode == 2 and "ENGINE=podman cannot build here" in forced.stderr
