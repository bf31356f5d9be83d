"""Builds the local control plane (etcd, kube-apiserver, kube-scheduler, kube-controller-manager, KWOK) and helm.

Each component gets a small generated wrapper module in the build cache whose go.mod requires the
upstream module at the version from deploy/local/versions.toml and lists the binaries as `tool`s.
kubernetes needs more: its go.mod points every staging module at ./staging, so the wrapper replaces
each of them with the published v0.<minor>.<patch> tag (the list is read from that go.mod).
Binaries land in <cache>/bin/<name>-v<version>/; a finished build leaves a stamp, so a second call
with everything present only checks files. kube-controller-manager is built in the kubernetes wrapper
module (one module graph, one `go mod tidy`) but lands in a bin dir of its own, so a cache that already
holds kube-apiserver and kube-scheduler only has to compile it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from devcluster.paths import cache_dir, repo_root
from devcluster.progress import Progress
from devcluster.versions import Versions, load_versions

STAMP = ".complete"
KWOK_STAGES = (
    "kustomize/stage/node/fast/node-initialize.yaml",
    "kustomize/stage/pod/fast/pod-ready.yaml",
    "kustomize/stage/pod/fast/pod-complete.yaml",
    "kustomize/stage/pod/fast/pod-delete.yaml",
)


class BuildError(RuntimeError):
    pass


@dataclass(frozen=True)
class Component:
    name: str
    version: str
    upstream: str  # the module required by the wrapper
    tools: tuple[tuple[str, str], ...]  # (package path, binary name)
    ldflags: tuple[str, ...] = ()
    replaces: tuple[tuple[str, str], ...] = field(default_factory=tuple)
    # The wrapper module it is built in (default: its own) and every tool that module lists; components
    # sharing a module must agree on both, or each build would re-tidy the other's go.mod.
    module: str = ""
    module_tools: tuple[str, ...] = ()

    @property
    def bin_dir(self) -> Path:
        return cache_dir() / "bin" / f"{self.name}-v{self.version}"

    @property
    def build_dir(self) -> Path:
        return cache_dir() / "build" / f"{self.module or self.name}-v{self.version}"

    def binary(self, name: str) -> Path:
        return self.bin_dir / name

    def is_built(self) -> bool:
        return (self.bin_dir / STAMP).is_file() and all(
            os.access(self.bin_dir / binary, os.X_OK) for _, binary in self.tools
        )

    def go_mod(self) -> str:
        lines = [f"module metrics-sched.local/{self.module or self.name}", "", "go 1.26.0", ""]
        lines += [f"require {self.upstream} v{self.version}", ""]
        if self.replaces:
            lines.append("replace (")
            lines += [f"\t{old} => {new}" for old, new in self.replaces]
            lines += [")", ""]
        lines.append("tool (")
        lines += [f"\t{package}" for package in self.module_tools or [package for package, _ in self.tools]]
        lines += [")", ""]
        return "\n".join(lines)


@dataclass(frozen=True)
class ControlPlaneBinaries:
    etcd: Path
    kube_apiserver: Path
    kube_scheduler: Path
    kube_controller_manager: Path
    kwok: Path
    kwok_stages: Path
    versions: Versions


def go_env(versions: Versions) -> dict[str, str]:
    env = dict(os.environ)
    env["GOTOOLCHAIN"] = versions.go_toolchain or "local"
    env.setdefault("GOFLAGS", "-buildvcs=false")
    env["CGO_ENABLED"] = "0"
    return env


def go_command() -> str:
    go = shutil.which("go")
    if not go:
        raise BuildError("the `go` command is not on PATH; install Go >= 1.26 to build the control plane")
    return go


def run_go(cmd: Sequence[str], cwd: Path, env: dict[str, str], what: str) -> str:
    proc = subprocess.run(list(cmd), cwd=cwd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise BuildError(f"{what} failed (exit {proc.returncode}): {' '.join(cmd)}\n{proc.stderr[-4000:]}")
    return proc.stdout


def staging_modules(versions: Versions) -> list[str]:
    """The k8s.io staging modules that k8s.io/kubernetes' go.mod points at ./staging."""
    out = run_go(
        [go_command(), "mod", "download", "-json", f"k8s.io/kubernetes@v{versions.kubernetes}"],
        cwd=Path.cwd(),
        env=go_env(versions),
        what="downloading k8s.io/kubernetes' go.mod",
    )
    gomod = Path(json.loads(out)["GoMod"]).read_text()
    modules = re.findall(r"^\s*(k8s\.io/[\w.-]+)\s+=>\s+\./staging/", gomod, flags=re.M)
    if not modules:
        raise BuildError(f"no staging replace lines found in k8s.io/kubernetes@v{versions.kubernetes} go.mod")
    return sorted(set(modules))


def components(versions: Versions, *, with_staging: bool = True) -> list[Component]:
    k8s_version = versions.kubernetes
    major, minor, _ = k8s_version.split(".")
    version_pkg = "k8s.io/component-base/version"
    k8s_ldflags = (
        f"-X {version_pkg}.gitVersion=v{k8s_version}",
        f"-X {version_pkg}.gitMajor={major}",
        f"-X {version_pkg}.gitMinor={minor}",
        f"-X {version_pkg}.gitTreeState=clean",
    )
    staging = staging_modules(versions) if with_staging else []
    k8s_replaces = tuple((m, f"{m} v{versions.staging}") for m in staging)
    k8s_servers = (
        ("k8s.io/kubernetes/cmd/kube-apiserver", "kube-apiserver"),
        ("k8s.io/kubernetes/cmd/kube-scheduler", "kube-scheduler"),
    )
    k8s_controllers = (("k8s.io/kubernetes/cmd/kube-controller-manager", "kube-controller-manager"),)
    k8s_tools = tuple(package for package, _ in k8s_servers + k8s_controllers)
    return [
        Component(
            name="etcd",
            version=versions.etcd,
            upstream="go.etcd.io/etcd/server/v3",
            tools=(("go.etcd.io/etcd/server/v3", "etcd"),),
        ),
        Component(
            name="k8s",
            version=k8s_version,
            upstream="k8s.io/kubernetes",
            tools=k8s_servers,
            ldflags=k8s_ldflags,
            replaces=k8s_replaces,
            module="k8s",
            module_tools=k8s_tools,
        ),
        Component(
            name="kube-controller-manager",
            version=k8s_version,
            upstream="k8s.io/kubernetes",
            tools=k8s_controllers,
            ldflags=k8s_ldflags,
            replaces=k8s_replaces,
            module="k8s",
            module_tools=k8s_tools,
        ),
        Component(
            name="kwok",
            version=versions.kwok,
            upstream="sigs.k8s.io/kwok",
            tools=(("sigs.k8s.io/kwok/cmd/kwok", "kwok"),),
            ldflags=(f"-X sigs.k8s.io/kwok/pkg/consts.Version=v{versions.kwok}",),
        ),
        *_helm(versions),
    ]


def _helm(versions: Versions) -> list[Component]:
    """helm, for the chart's e2e tests; its Kubernetes version ldflags are added once its modules resolve."""
    if not versions.helm:
        return []
    module = f"helm.sh/helm/v{versions.helm.split('.')[0]}"
    return [
        Component(
            name="helm",
            version=versions.helm,
            upstream=module,
            tools=((f"{module}/cmd/helm", "helm"),),
            ldflags=(f"-X {module}/internal/version.version=v{versions.helm}",
                     f"-X {module}/internal/version.gitTreeState=clean"),
        )
    ]


def _helm_kube_ldflags(component: Component, build_dir: Path, env: dict[str, str]) -> tuple[str, ...]:
    """The Kubernetes version helm assumes without a cluster (`helm template`, lint), set as helm's Makefile
    does from the k8s.io/client-go it was built with; unset, helm falls back to an old built-in default."""
    out = run_go([go_command(), "list", "-m", "-json", "k8s.io/client-go"], cwd=build_dir, env=env,
               what="locating helm's k8s.io/client-go")
    _, minor, _ = str(json.loads(out)["Version"]).lstrip("v").split(".", 2)
    major = "1"  # client-go v0.<minor> is Kubernetes 1.<minor>
    return tuple(f"-X {component.upstream}/{pkg}.k8sVersion{part}={value}"
                 for pkg in ("pkg/lint/rules", "pkg/chartutil")
                 for part, value in (("Major", major), ("Minor", minor)))


def _build_component(component: Component, versions: Versions, progress: Callable[[str], None]) -> None:
    env = go_env(versions)
    build_dir = component.build_dir
    build_dir.mkdir(parents=True, exist_ok=True)
    gomod = build_dir / "go.mod"
    text = component.go_mod()
    if not gomod.exists() or not (build_dir / ".tidy").exists() or (build_dir / ".tidy").read_text() != text:
        gomod.write_text(text)
        progress(f"{component.name} v{component.version}: resolving modules (go mod tidy)")
        run_go([go_command(), "mod", "tidy"], cwd=build_dir, env=env, what=f"go mod tidy for {component.name}")
        (build_dir / ".tidy").write_text(text)

    out_dir = component.bin_dir.with_name(component.bin_dir.name + ".partial")
    shutil.rmtree(out_dir, ignore_errors=True)
    out_dir.mkdir(parents=True)
    names = ", ".join(binary for _, binary in component.tools)
    progress(f"{component.name} v{component.version}: compiling {names} (go build, cached packages reused)")
    ldflags = component.ldflags
    if component.name == "helm":
        ldflags += _helm_kube_ldflags(component, build_dir, env)
    for package, binary in component.tools:
        # One binary at a time, named explicitly: go would call go.etcd.io/etcd/server/v3 "server".
        cmd = [go_command(), "build", "-trimpath", "-v", "-ldflags", " ".join(("-s", "-w", *ldflags)),
               "-o", str(out_dir / binary), package]
        _stream_build(cmd, build_dir, env, component, progress)

    if component.name == "kwok":
        _write_kwok_stages(build_dir, env, out_dir)
    (out_dir / STAMP).write_text(json.dumps({"version": component.version, "built_at": time.time()}))
    shutil.rmtree(component.bin_dir, ignore_errors=True)
    out_dir.rename(component.bin_dir)


def _stream_build(
    cmd: list[str], cwd: Path, env: dict[str, str], component: Component, progress: Callable[[str], None]
) -> None:
    """Runs go build -v, reporting every 15 s how many packages it has compiled."""
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    done = threading.Event()

    def report() -> None:
        while not done.wait(15):
            progress(f"{component.name}: still compiling, {len(lines)} packages so far")

    reporter = threading.Thread(target=report, daemon=True)
    reporter.start()
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line.rstrip())
    code = proc.wait()
    done.set()
    if code != 0:
        errors = [line for line in lines if not re.fullmatch(r"[\w./~-]+", line)]
        raise BuildError(f"go build of {component.name} failed (exit {code}):\n" + "\n".join(errors[-60:]))


def _write_kwok_stages(build_dir: Path, env: dict[str, str], out_dir: Path) -> None:
    out = run_go([go_command(), "list", "-m", "-json", "sigs.k8s.io/kwok"], cwd=build_dir, env=env,
                 what="locating kwok")
    module_dir = Path(json.loads(out)["Dir"])
    docs = [(module_dir / stage).read_text().strip() for stage in KWOK_STAGES]
    (out_dir / "stages.yaml").write_text("\n---\n".join(docs) + "\n")


def binaries(versions: Versions | None = None) -> ControlPlaneBinaries:
    versions = versions or load_versions()
    by_name = {c.name: c for c in components(versions, with_staging=False)}
    return ControlPlaneBinaries(
        etcd=by_name["etcd"].binary("etcd"),
        kube_apiserver=by_name["k8s"].binary("kube-apiserver"),
        kube_scheduler=by_name["k8s"].binary("kube-scheduler"),
        kube_controller_manager=by_name["kube-controller-manager"].binary("kube-controller-manager"),
        kwok=by_name["kwok"].binary("kwok"),
        kwok_stages=by_name["kwok"].bin_dir / "stages.yaml",
        versions=versions,
    )


def helm_binary(versions: Versions | None = None) -> Path:
    """Where `ensure_built` puts helm (the version in deploy/local/versions.toml)."""
    versions = versions or load_versions()
    found = _helm(versions)
    if not found:
        raise BuildError("no helm version in deploy/local/versions.toml")
    return found[0].binary("helm")


def ensure_built(*, quiet: bool = False, force: bool = False, kubernetes: str | None = None) -> ControlPlaneBinaries:
    """Builds whatever is missing; with everything present it only checks a few files.

    `kubernetes` picks one of the versions deploy/local/versions.toml lists (default: $METRICS_SCHED_KUBERNETES,
    else its `kubernetes`); each version has its own wrapper module and bin dir, so switching rebuilds nothing.
    """
    progress = Progress("control-plane", quiet=quiet)
    try:
        versions = load_versions(kubernetes=kubernetes)
    except ValueError as exc:
        raise BuildError(str(exc)) from None
    if not force and all(c.is_built() for c in components(versions, with_staging=False)):
        progress(f"all present in {cache_dir() / 'bin'} (kubernetes v{versions.kubernetes}, "
                 f"etcd v{versions.etcd}, kwok v{versions.kwok}, helm v{versions.helm})")
        return binaries(versions)
    # Two builds at once (`make test` beside an e2e run of another checkout, both sharing this cache) would
    # rename each other's `.partial` dirs away: one builds, the other waits and then finds it all built.
    with build_lock(progress):
        _build_missing(versions, force, progress)
    return binaries(versions)


@contextlib.contextmanager
def build_lock(progress: Callable[[str], None]) -> Iterator[None]:
    path = cache_dir() / "build.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            progress("another build of the control plane is running: waiting for it")
            fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _build_missing(versions: Versions, force: bool, progress: Callable[[str], None]) -> None:
    missing = [c for c in components(versions, with_staging=False) if force or not c.is_built()]
    if not missing:
        return
    go_command()
    needed = {c.name for c in missing}
    with_staging = any(c.upstream == "k8s.io/kubernetes" for c in missing)
    for component in components(versions, with_staging=with_staging):
        if component.name in needed:
            _build_component(component, versions, progress)
            progress(f"{component.name} v{component.version}: ready in {component.bin_dir}")


__all__ = [
    "STAMP", "BuildError", "ControlPlaneBinaries", "binaries", "build_lock", "ensure_built", "go_command", "go_env",
    "helm_binary", "repo_root", "run_go", "staging_modules",
]
