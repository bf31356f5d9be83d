"""Reads deploy/local/versions.toml, the single place where control-plane versions are written."""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

from devcluster.paths import repo_root

# Selects one of the Kubernetes versions versions.toml lists (`kubernetes` or one of `kubernetes_matrix`)
# for everything that builds or starts a dev cluster: `make test-matrix` sets it per version.
KUBERNETES_ENV = "METRICS_SCHED_KUBERNETES"


@dataclass(frozen=True)
class WorkloadAPI:
    """The scheduling.k8s.io version that serves Workload and PodGroup in one Kubernetes minor, and the gates
    the API server needs for it. Both are off by default and differ per minor: an unknown `--runtime-config`
    group version or feature gate stops kube-apiserver from starting, so each minor gets exactly its own."""

    group_version: str
    feature_gates: tuple[str, ...]

    def apiserver_flags(self) -> list[str]:
        gates = ",".join(f"{gate}=true" for gate in self.feature_gates)
        return [f"--feature-gates={gates}", f"--runtime-config={self.group_version}=true"]


# 1.36: v1alpha2 (PodGroup.spec.podGroupTemplateRef.workload.{workloadName,podGroupTemplateName}, disruptionMode
# "Pod"|"PodGroup"). 1.37: v1beta1 (and v1alpha3); PodGroup.spec.workloadRef.{workloadName,templateName},
# disruptionMode {single: {}} | {all: {}}, new preemptionPolicy; no v1alpha2, and no GangScheduling gate.
# Pods join a group the same way in both: spec.schedulingGroup.podGroupName.
WORKLOAD_API: dict[int, WorkloadAPI] = {
    36: WorkloadAPI("scheduling.k8s.io/v1alpha2", ("GenericWorkload",)),
    37: WorkloadAPI("scheduling.k8s.io/v1beta1", ("GenericWorkload",)),
}


@dataclass(frozen=True)
class Versions:
    kubernetes: str
    etcd: str
    kwok: str
    go_toolchain: str
    # helm renders and lints the chart in deploy/helm (its e2e tests); "" leaves it out of the build.
    helm: str = ""
    # Every Kubernetes version the e2e suite is run against: the default `kubernetes` first, then
    # `kubernetes_matrix`. `kubernetes` above is the selected one of these.
    tested_kubernetes: tuple[str, ...] = ()

    @property
    def kubernetes_minor(self) -> int:
        """1.<minor>: what version-specific expectations (API versions, flags) are keyed on."""
        return int(self.kubernetes.split(".")[1])

    @property
    def workload_api(self) -> WorkloadAPI:
        """How the selected Kubernetes serves the Workload and PodGroup API (gang scheduling)."""
        try:
            return WORKLOAD_API[self.kubernetes_minor]
        except KeyError:
            known = ", ".join(f"1.{minor}" for minor in sorted(WORKLOAD_API))
            raise ValueError(f"kubernetes {self.kubernetes}: no Workload API version known for this minor "
                             f"(devcluster.versions.WORKLOAD_API knows {known})") from None

    @property
    def staging(self) -> str:
        """k8s.io staging modules are tagged v0.<minor>.<patch> for kubernetes v1.<minor>.<patch>."""
        major, minor, patch = self.kubernetes.split(".")
        if major != "1":
            raise ValueError(f"unexpected kubernetes version {self.kubernetes!r}")
        return f"0.{minor}.{patch}"


def load_versions(path: Path | None = None, *, kubernetes: str | None = None) -> Versions:
    """The versions to build and run; `kubernetes` (else $METRICS_SCHED_KUBERNETES, else the file's default)
    must be one the file lists, so every version a cluster runs is one docs/dev-cluster.md names as tested."""
    path = path or repo_root() / "deploy" / "local" / "versions.toml"
    data = tomllib.loads(path.read_text())
    tested = _tested_kubernetes(data, path)
    source = "--kubernetes" if kubernetes else f"${KUBERNETES_ENV}"
    wanted = (kubernetes or os.environ.get(KUBERNETES_ENV) or tested[0]).strip().lstrip("v")
    if wanted not in tested:
        raise ValueError(f"kubernetes {wanted!r} (from {source}) is not listed in {path}: it lists "
                         f"{', '.join(tested)} (`kubernetes` and `kubernetes_matrix`)")
    try:
        return Versions(
            kubernetes=wanted,
            tested_kubernetes=tested,
            etcd=str(data["etcd"]).lstrip("v"),
            kwok=str(data["kwok"]).lstrip("v"),
            go_toolchain=str(data.get("go_toolchain", "")),
            helm=str(data["helm"]).lstrip("v"),
        )
    except KeyError as exc:
        raise ValueError(f"{path}: missing field {exc.args[0]!r}") from None


def _tested_kubernetes(data: dict[str, object], path: Path) -> tuple[str, ...]:
    if "kubernetes" not in data:
        raise ValueError(f"{path}: missing field 'kubernetes'")
    matrix = data.get("kubernetes_matrix", [])
    if not isinstance(matrix, list) or not all(isinstance(v, str) for v in matrix):
        raise ValueError(f"{path}: kubernetes_matrix must be a list of version strings, got {matrix!r}")
    tested = tuple(str(v).strip().lstrip("v") for v in [data["kubernetes"], *matrix])
    for version in tested:
        parts = version.split(".")
        if len(parts) != 3 or parts[0] != "1" or not all(p.isdigit() for p in parts):
            raise ValueError(f"{path}: kubernetes version {version!r} is not 1.<minor>.<patch>")
    if len(set(tested)) != len(tested):
        raise ValueError(f"{path}: kubernetes_matrix repeats a version: {', '.join(tested)}")
    return tested
