"""Installs scheduler-plugins' PodGroup CRD (deploy/crds/podgroups.scheduling.x-k8s.io.yaml) in the dev cluster,
so Coscheduling gangs (pods labelled scheduling.x-k8s.io/pod-group) can be tested against the real API."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from devcluster.kubeapi import KubeAPI, install_crd

CRD_NAME = "podgroups.scheduling.x-k8s.io"
MANIFEST = Path(__file__).resolve().parent.parent / "deploy" / "crds" / f"{CRD_NAME}.yaml"


def manifest() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(MANIFEST.read_text())
    return loaded


def install(api: KubeAPI, timeout: float = 30.0) -> None:
    install_crd(api, manifest(), "/apis/scheduling.x-k8s.io/v1alpha1/podgroups", timeout)
