"""The control plane's build plan: kube-controller-manager shares the kubernetes wrapper module, not its bin dir."""

from __future__ import annotations

import pytest

from devcluster.build import binaries, components
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
