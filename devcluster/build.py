"""Builds the local control plane (etcd, kube-apiserver, kube-scheduler, kube-controller-manager, KWOK) and helm.

Each component gets a small generated wrapper module in the build cache whose go.mod requires the
upstream module at the version from deploy/local/versions.toml and lists the binaries as `tool`s.
kubernetes needs more: its go.mod points every staging module at ./staging, so the wrapper replaces
each of them with the published v0.<minor>.<patch> tag (the list is read from that go.mod).
Binaries land in <cache>/bin/<name>-v<version>/; a finished build leaves a stamp, so a second call
with everything present only checks files. kube-controller-manager is built in the kubernetes wrapper
module (one module graph, one `go mod tidy`) but lands in a bin dir of its own, so a cache that already
holds kube-apiserver and kube-scheduler only has to compile it.

A caller names the binaries it needs (`ensure_built(need=...)`): the dev cluster builds what it starts (the demo
needs neither kube-scheduler nor helm, which took minutes of a cold first run), `make control-plane` builds
everything. Wrapper modules build side by side, two at a time on a machine with two cores or more: `go build`
compiles a module's packages in parallel already, but each binary's link is one long single-threaded step that
the other build's compiling overlaps. Progress lines count the packages still to compile and the time left.
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
from collections.abc import Callable, Collection, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from devcluster.paths import cache_dir, repo_root
from devcluster.progress import Progress, format_seconds
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

    def is_built(self, need: Collection[str] | None = None) -> bool:
        """Whether the binaries in `need` (default: all of its tools) are built."""
        return not self.missing(need)

    def missing(self, need: Collection[str] | None = None) -> list[tuple[str, str]]:
        """Its tools (package, binary) in `need` (default: all) that a finished build has not left in bin_dir."""
        wanted = [(package, binary) for package, binary in self.tools if need is None or binary in need]
        if not (self.bin_dir / STAMP).is_file():
            return wanted
        return [(package, binary) for package, binary in wanted if not os.access(self.bin_dir / binary, os.X_OK)]

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


def _build_component(component: Component, versions: Versions, progress: Callable[[str], None],
                     tools: Sequence[tuple[str, str]] | None = None) -> None:
    """Builds `tools` (default: all of the component's) into its bin dir, keeping the binaries already there."""
    tools = list(component.tools if tools is None else tools)
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
    building = {binary for _, binary in tools}
    if (component.bin_dir / STAMP).is_file():  # an earlier build's other binaries stay
        for _, binary in component.tools:
            if binary not in building and (component.bin_dir / binary).is_file():
                shutil.copy2(component.bin_dir / binary, out_dir / binary)
    names = ", ".join(binary for _, binary in tools)
    progress(f"{component.name} v{component.version}: compiling {names} (go build, cached packages reused)")
    ldflags = component.ldflags
    if component.name == "helm":
        ldflags += _helm_kube_ldflags(component, build_dir, env)
    for package, binary in tools:
        # One binary at a time, named explicitly: go would call go.etcd.io/etcd/server/v3 "server".
        cmd = [go_command(), "build", "-trimpath", "-v", "-ldflags", " ".join(("-s", "-w", *ldflags)),
               "-o", str(out_dir / binary), package]
        _stream_build(cmd, build_dir, env, binary, _stale(package, build_dir, env), progress)

    if component.name == "kwok":
        _write_kwok_stages(build_dir, env, out_dir)
    (out_dir / STAMP).write_text(json.dumps({"version": component.version, "built_at": time.time()}))
    shutil.rmtree(component.bin_dir, ignore_errors=True)
    out_dir.rename(component.bin_dir)


def _stale(package: str, cwd: Path, env: dict[str, str]) -> int | None:
    """How many packages `go build` of `package` will compile (those the build cache does not hold), or None when
    go cannot say: the denominator of the progress lines."""
    # -trimpath as the build has it: the cache keys differ with it, and go list would call every package stale.
    proc = subprocess.run([go_command(), "list", "-trimpath", "-deps", "-f", "{{if .Stale}}{{.ImportPath}}{{end}}",
                           package], cwd=cwd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        return None
    return sum(1 for line in proc.stdout.splitlines() if line.strip())


def remaining(done: int, total: int | None, elapsed: float) -> str:
    """"120 of 1,843 packages, ~6m10s left" (the rate so far), or "120 packages so far" without a total."""
    if not total:
        return f"{done} packages so far"
    done = min(done, total)
    if done == 0 or elapsed <= 0:
        return f"{done} of {total:,} packages"
    left = (total - done) * elapsed / done
    return f"{done:,} of {total:,} packages, ~{format_seconds(left)} left"


def _stream_build(cmd: list[str], cwd: Path, env: dict[str, str], what: str, total: int | None,
                  progress: Callable[[str], None]) -> None:
    """Runs go build -v, reporting every 15 s how many of its packages it has compiled and the time left."""
    started = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: list[str] = []
    done = threading.Event()

    def report() -> None:
        while not done.wait(15):
            progress(f"{what}: compiling, {remaining(len(lines), total, time.monotonic() - started)}")

    reporter = threading.Thread(target=report, daemon=True)
    reporter.start()
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line.rstrip())
    code = proc.wait()
    done.set()
    if code != 0:
        errors = [line for line in lines if not re.fullmatch(r"[\w./~-]+", line)]
        raise BuildError(f"go build of {what} failed (exit {code}):\n" + "\n".join(errors[-60:]))


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


def ensure_built(*, quiet: bool = False, force: bool = False, kubernetes: str | None = None,
                 need: Collection[str] | None = None) -> ControlPlaneBinaries:
    """Builds whatever is missing of `need` (binary names; default: every binary, helm included); with them
    present it only checks a few files.

    `kubernetes` picks one of the versions deploy/local/versions.toml lists (default: $METRICS_SCHED_KUBERNETES,
    else its `kubernetes`); each version has its own wrapper module and bin dir, so switching rebuilds nothing.
    """
    progress = Progress("control-plane", quiet=quiet)
    try:
        versions = load_versions(kubernetes=kubernetes)
    except ValueError as exc:
        raise BuildError(str(exc)) from None
    if not force and all(c.is_built(need) for c in components(versions, with_staging=False)):
        if need is None:
            progress(f"all present in {cache_dir() / 'bin'} (kubernetes v{versions.kubernetes}, "
                     f"etcd v{versions.etcd}, kwok v{versions.kwok}, helm v{versions.helm})")
        return binaries(versions)
    # Two builds at once (`make test` beside an e2e run of another checkout, both sharing this cache) would
    # rename each other's `.partial` dirs away: one builds, the other waits and then finds it all built.
    with build_lock(progress):
        _build_missing(versions, force, progress, need)
    return binaries(versions)


# What the dev cluster starts without kube-scheduler (the demo's and most tests' clusters).
CLUSTER_BINARIES = frozenset({"etcd", "kube-apiserver", "kube-controller-manager", "kwok"})


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


def _build_missing(versions: Versions, force: bool, progress: Callable[[str], None],
                   need: Collection[str] | None = None) -> None:
    plan = [(c, list(c.tools) if force else c.missing(need)) for c in components(versions, with_staging=False)]
    needed = {c.name: tools for c, tools in plan if tools}
    if not needed:
        return
    go_command()
    with_staging = any(c.upstream == "k8s.io/kubernetes" for c, tools in plan if tools)
    # Components sharing a wrapper module build one after the other (one go.mod, one tidy); modules in parallel.
    by_module: dict[Path, list[Component]] = {}
    for component in components(versions, with_staging=with_staging):
        if component.name in needed:
            by_module.setdefault(component.build_dir, []).append(component)

    def build(group: list[Component]) -> None:
        for component in group:
            _build_component(component, versions, progress, needed[component.name])
            progress(f"{component.name} v{component.version}: ready in {component.bin_dir}")

    groups = sorted(by_module.values(), key=lambda g: -sum(len(needed[c.name]) for c in g))
    with ThreadPoolExecutor(max_workers=max(1, min(2, os.cpu_count() or 1, len(groups)))) as pool:
        for future in [pool.submit(build, group) for group in groups]:
            future.result()  # the first failure raises (the other build still finishes first)


__all__ = [
    "CLUSTER_BINARIES", "STAMP", "BuildError", "ControlPlaneBinaries", "binaries", "build_lock", "ensure_built",
    "go_command", "go_env", "helm_binary", "remaining", "repo_root", "run_go", "staging_modules",
]
