"""The control plane's build plan: kube-controller-manager shares the kubernetes wrapper module, not its bin dir."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from devcluster import build
from devcluster.build import CLUSTER_BINARIES, STAMP, Component, binaries, components, remaining
from devcluster.versions import Versions

pytestmark = pytest.mark.unit

VERSIONS = Versions(kubernetes="1.36.3", etcd="3.6.16", kwok="0.8.0", go_toolchain="")


def test_kube_controller_manager_is_built_in_the_kubernetes_module_into_its_own_bin_dir() -> None:
    by_name = {c.name: c for c in components(VERSIONS, with_staging=False)}
    k8s, kcm = by_name["k8s"], by_name["kube-controller-manager"]
    assert k8s.build_dir == kcm.build_dir and k8s.build_dir.name == "k8s-v1.36.3"
    # One go.mod for both, whichever builds: neither re-tidies the module for the other.
    assert k8s.go_mod() == kcm.go_mod()
    assert "\tk8s.io/kubernetes/cmd/kube-controller-manager\n" in k8s.go_mod()
    # A cache holding kube-apiserver and kube-scheduler stays valid; only the new binary is compiled.
    assert k8s.bin_dir.name == "k8s-v1.36.3" and kcm.bin_dir.name == "kube-controller-manager-v1.36.3"
    assert [binary for _, binary in k8s.tools] == ["kube-apiserver", "kube-scheduler"]
    assert [binary for _, binary in kcm.tools] == ["kube-controller-manager"]
    assert binaries(VERSIONS).kube_controller_manager == kcm.bin_dir / "kube-controller-manager"


def test_a_module_of_its_own_lists_only_its_tools() -> None:
    etcd = next(c for c in components(VERSIONS, with_staging=False) if c.name == "etcd")
    assert etcd.build_dir.name == "etcd-v3.6.16"
    assert "tool (\n\tgo.etcd.io/etcd/server/v3\n)" in etcd.go_mod()


def test_a_binary_counts_as_built_only_with_the_stamp_of_a_finished_build(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("METRICS_SCHED_CACHE", str(tmp_path))
    k8s = next(c for c in components(VERSIONS, with_staging=False) if c.name == "k8s")
    k8s.bin_dir.mkdir(parents=True)
    (k8s.bin_dir / "kube-apiserver").write_text("#!/bin/sh\n")
    (k8s.bin_dir / "kube-apiserver").chmod(0o755)
    assert [b for _, b in k8s.missing({"kube-apiserver"})] == ["kube-apiserver"]  # no stamp: an unfinished build
    (k8s.bin_dir / STAMP).write_text("{}")
    assert k8s.is_built({"kube-apiserver"}) and not k8s.is_built()
    assert [b for _, b in k8s.missing()] == ["kube-scheduler"]
    assert k8s.missing({"etcd"}) == []  # not one of its binaries


def test_only_the_binaries_asked_for_are_built_one_module_after_the_other(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The demo's cluster needs neither kube-scheduler nor helm; kube-controller-manager and kube-apiserver share
    the kubernetes wrapper module, so they build in turn, while etcd and kwok build beside them."""
    monkeypatch.setenv("METRICS_SCHED_CACHE", str(tmp_path))
    monkeypatch.setattr(build, "go_command", lambda: "go")
    monkeypatch.setattr(build, "staging_modules", lambda versions: [])
    built: list[tuple[str, list[str]]] = []
    lock = threading.Lock()

    def fake_build(component: Component, versions: Versions, progress: Any, tools: Any = None) -> None:
        with lock:
            built.append((component.name, [b for _, b in tools]))

    monkeypatch.setattr(build, "_build_component", fake_build)
    versions = Versions(kubernetes="1.36.3", etcd="3.6.16", kwok="0.8.0", go_toolchain="", helm="3.22.0")
    build._build_missing(versions, False, lambda message: None, CLUSTER_BINARIES)
    assert sorted(built) == [("etcd", ["etcd"]), ("k8s", ["kube-apiserver"]),
                             ("kube-controller-manager", ["kube-controller-manager"]), ("kwok", ["kwok"])]
    k8s_order = [name for name, _ in built if name in ("k8s", "kube-controller-manager")]
    assert k8s_order == ["k8s", "kube-controller-manager"]  # one module: one after the other, in order


def test_the_progress_line_says_how_many_packages_are_left_and_for_how_long() -> None:
    assert remaining(0, 1843, 5.0) == "0 of 1,843 packages"
    assert remaining(300, 1200, 60.0) == "300 of 1,200 packages, ~3m00s left"
    assert remaining(40, None, 60.0) == "40 packages so far"
    assert remaining(1300, 1200, 60.0) == "1,200 of 1,200 packages, ~0.0s left"
