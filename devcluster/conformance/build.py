"""Builds upstream's e2e test binary with only test/e2e/scheduling, once, into the build cache.

The wrapper module sits beside the control plane's (<cache>/build/e2e-scheduling-v<version>/): it requires the same
k8s.io/kubernetes and pins the staging modules the same way (devcluster.build), so the specs are the ones of the
Kubernetes the dev cluster runs. Its only source, e2e_test.go (from e2e_test.go.tmpl beside this file), is
upstream's test/e2e/e2e_test.go reduced to the scheduling package: the harness (RunE2ETests, the suite setup, the
JUnit reporting) is upstream's package test/e2e, unchanged. `go test -c` runs under `nice` (a cold build compiles
~1,500 packages; the machine is usually shared). The binary lands in <cache>/bin/e2e-scheduling-v<version>/.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from devcluster.build import STAMP, BuildError, build_lock, go_command, go_env, run_go, staging_modules
from devcluster.paths import cache_dir
from devcluster.versions import Versions

BINARY = "e2e-scheduling.test"
TEMPLATE = Path(__file__).with_name("e2e_test.go.tmpl")


def bin_dir(versions: Versions) -> Path:
    return cache_dir() / "bin" / f"e2e-scheduling-v{versions.kubernetes}"


def build_dir(versions: Versions) -> Path:
    return cache_dir() / "build" / f"e2e-scheduling-v{versions.kubernetes}"


def go_mod(versions: Versions, staging: list[str]) -> str:
    lines = ["module metrics-sched.local/e2e-scheduling", "", "go 1.26.0", "",
             f"require k8s.io/kubernetes v{versions.kubernetes}", "", "replace ("]
    lines += [f"\t{module} => {module} v{versions.staging}" for module in staging]
    lines += [")", ""]
    return "\n".join(lines)


def ldflags(versions: Versions) -> str:
    """The version the binary reports (`--version`, and the log line comparing it with the API server's)."""
    major, minor, _ = versions.kubernetes.split(".")
    pkg = "k8s.io/component-base/version"
    return " ".join(("-s", "-w", f"-X {pkg}.gitVersion=v{versions.kubernetes}", f"-X {pkg}.gitMajor={major}",
                     f"-X {pkg}.gitMinor={minor}", f"-X {pkg}.gitTreeState=clean"))


def is_built(versions: Versions) -> bool:
    directory = bin_dir(versions)
    return (directory / STAMP).is_file() and os.access(directory / BINARY, os.X_OK)


def ensure_e2e_binary(versions: Versions, progress: Callable[[str], None]) -> Path:
    """The cached binary; built first if missing (a second call only checks two files)."""
    if is_built(versions):
        return bin_dir(versions) / BINARY
    with build_lock(progress):
        if not is_built(versions):
            _build(versions, progress)
    return bin_dir(versions) / BINARY


def _build(versions: Versions, progress: Callable[[str], None]) -> None:
    env = go_env(versions)
    directory = build_dir(versions)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "e2e_test.go").write_text(TEMPLATE.read_text())
    text = go_mod(versions, staging_modules(versions))
    tidy = directory / ".tidy"
    if not tidy.is_file() or tidy.read_text() != text:
        (directory / "go.mod").write_text(text)
        progress(f"e2e-scheduling v{versions.kubernetes}: resolving modules (go mod tidy)")
        run_go([go_command(), "mod", "tidy"], directory, env, "go mod tidy for the e2e binary")
        tidy.write_text(text)
    out_dir = bin_dir(versions).with_name(bin_dir(versions).name + ".partial")
    shutil.rmtree(out_dir, ignore_errors=True)
    out_dir.mkdir(parents=True)
    progress(f"e2e-scheduling v{versions.kubernetes}: compiling test/e2e/scheduling (go test -c, niced; "
             "a cold build takes ~15 min on 2 cores)")
    started = time.monotonic()
    cmd = ["nice", "-n", "19", go_command(), "test", "-c", "-vet=off", "-trimpath", "-ldflags", ldflags(versions),
           "-o", str(out_dir / BINARY), "."]
    proc = subprocess.run(cmd, cwd=directory, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise BuildError(f"go test -c of the e2e binary failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    (out_dir / STAMP).write_text(json.dumps({"version": versions.kubernetes, "built_at": time.time()}))
    shutil.rmtree(bin_dir(versions), ignore_errors=True)
    out_dir.rename(bin_dir(versions))
    progress(f"e2e-scheduling v{versions.kubernetes}: built in {time.monotonic() - started:.0f}s, "
             f"{bin_dir(versions) / BINARY}")


__all__ = ["BINARY", "bin_dir", "build_dir", "ensure_e2e_binary", "go_mod", "is_built", "ldflags"]
