"""Reads deploy/local/versions.toml, the single place where control-plane versions are written."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

from devcluster.paths import repo_root


@dataclass(frozen=True)
class Versions:
    kubernetes: str
    etcd: str
    kwok: str
    go_toolchain: str

    @property
    def staging(self) -> str:
        """k8s.io staging modules are tagged v0.<minor>.<patch> for kubernetes v1.<minor>.<patch>."""
        major, minor, patch = self.kubernetes.split(".")
        if major != "1":
            raise ValueError(f"unexpected kubernetes version {self.kubernetes!r}")
        return f"0.{minor}.{patch}"


def load_versions(path: Path | None = None) -> Versions:
    path = path or repo_root() / "deploy" / "local" / "versions.toml"
    data = tomllib.loads(path.read_text())
    try:
        return Versions(
            kubernetes=str(data["kubernetes"]).lstrip("v"),
            etcd=str(data["etcd"]).lstrip("v"),
            kwok=str(data["kwok"]).lstrip("v"),
            go_toolchain=str(data.get("go_toolchain", "")),
        )
    except KeyError as exc:
        raise ValueError(f"{path}: missing field {exc.args[0]!r}") from None
