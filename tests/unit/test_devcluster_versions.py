"""Which Kubernetes version the dev cluster builds and runs: one of those versions.toml lists, chosen per run."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from devcluster.build import BuildError, components, ensure_built
from devcluster.versions import KUBERNETES_ENV, load_versions

pytestmark = pytest.mark.unit

TOML = """
go_toolchain = ""
kubernetes = "1.36.3"
kubernetes_matrix = ["1.37.2"]
etcd = "3.6.16"
kwok = "0.8.0"
helm = "3.22.0"
"""


@pytest.fixture
def versions_toml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv(KUBERNETES_ENV, raising=False)
    path = tmp_path / "versions.toml"
    path.write_text(TOML)
    return path


def test_the_default_is_kubernetes_and_the_matrix_follows_it(versions_toml: Path) -> None:
    versions = load_versions(versions_toml)
    assert versions.kubernetes == "1.36.3" and versions.kubernetes_minor == 36
    assert versions.tested_kubernetes == ("1.36.3", "1.37.2")
    assert versions.staging == "0.36.3"


def test_the_environment_or_the_argument_selects_a_listed_version(
    versions_toml: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KUBERNETES_ENV, "v1.37.2")
    from_env = load_versions(versions_toml)
    assert from_env.kubernetes == "1.37.2" and from_env.kubernetes_minor == 37 and from_env.staging == "0.37.2"
    # The argument (`devcluster build --kubernetes`) wins over the environment.
    assert load_versions(versions_toml, kubernetes="1.36.3").kubernetes == "1.36.3"
    # etcd, kwok and helm are shared by every Kubernetes version.
    assert (from_env.etcd, from_env.kwok, from_env.helm) == ("3.6.16", "0.8.0", "3.22.0")


def test_an_unlisted_version_is_refused_naming_the_listed_ones(
    versions_toml: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(KUBERNETES_ENV, "1.38.0")
    listed = re.escape("'1.38.0' (from $METRICS_SCHED_KUBERNETES) is not listed in ") + ".*lists 1.36.3, 1.37.2"
    with pytest.raises(ValueError, match=listed):
        load_versions(versions_toml)
    with pytest.raises(ValueError, match=r"'1\.35\.4' \(from --kubernetes\) is not listed"):
        load_versions(versions_toml, kubernetes="1.35.4")


@pytest.mark.parametrize(
    ("matrix", "error"),
    [
        ('"1.37.2"', "kubernetes_matrix must be a list of version strings"),
        ('["1.37"]', "'1.37' is not 1.<minor>.<patch>"),
        ('["1.36.3"]', "kubernetes_matrix repeats a version"),
    ],
)
def test_a_malformed_matrix_is_refused(versions_toml: Path, matrix: str, error: str) -> None:
    versions_toml.write_text(TOML.replace('["1.37.2"]', matrix))
    with pytest.raises(ValueError, match=re.escape(error)):
        load_versions(versions_toml)


def test_without_a_matrix_only_the_default_is_tested(versions_toml: Path) -> None:
    versions_toml.write_text(TOML.replace('kubernetes_matrix = ["1.37.2"]\n', ""))
    assert load_versions(versions_toml).tested_kubernetes == ("1.36.3",)


def test_each_version_builds_in_a_module_and_bin_dirs_of_its_own(
    versions_toml: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("METRICS_SCHED_CACHE", str(tmp_path / "cache"))
    dirs = {}
    for version in ("1.36.3", "1.37.2"):
        by_name = {c.name: c for c in components(load_versions(versions_toml, kubernetes=version), with_staging=False)}
        k8s, kcm = by_name["k8s"], by_name["kube-controller-manager"]
        assert f"-X k8s.io/component-base/version.gitVersion=v{version}" in k8s.ldflags
        assert f"require k8s.io/kubernetes v{version}" in k8s.go_mod()
        dirs[version] = (k8s.build_dir, k8s.bin_dir, kcm.bin_dir)
        # etcd and kwok do not depend on the Kubernetes version: one build serves all.
        assert by_name["etcd"].bin_dir.name == "etcd-v3.6.16" and by_name["kwok"].bin_dir.name == "kwok-v0.8.0"
    assert not set(dirs["1.36.3"]) & set(dirs["1.37.2"])
    assert [d.name for d in dirs["1.37.2"]] == ["k8s-v1.37.2", "k8s-v1.37.2", "kube-controller-manager-v1.37.2"]


def test_ensure_built_refuses_an_unlisted_version_as_a_build_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KUBERNETES_ENV, "1.99.0")
    with pytest.raises(BuildError, match=r"'1\.99\.0' \(from \$METRICS_SCHED_KUBERNETES\) is not listed"):
        ensure_built(quiet=True)


def test_each_minor_enables_the_workload_api_version_it_serves(versions_toml: Path) -> None:
    # An unknown --runtime-config group version or feature gate stops kube-apiserver: each minor gets its own.
    assert load_versions(versions_toml, kubernetes="1.36.3").workload_api.apiserver_flags() == [
        "--feature-gates=GenericWorkload=true", "--runtime-config=scheduling.k8s.io/v1alpha2=true"]
    assert load_versions(versions_toml, kubernetes="1.37.2").workload_api.apiserver_flags() == [
        "--feature-gates=GenericWorkload=true", "--runtime-config=scheduling.k8s.io/v1beta1=true"]
    versions_toml.write_text(TOML.replace('["1.37.2"]', '["1.99.0"]'))
    with pytest.raises(ValueError, match=r"kubernetes 1\.99\.0: no Workload API version known .* knows 1\.36, 1\.37"):
        load_versions(versions_toml, kubernetes="1.99.0").workload_api  # noqa: B018 - the property raises
