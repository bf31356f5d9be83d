"""Installs scheduler-plugins' PodGroup CRD (deploy/crds/podgroups.scheduling.x-k8s.io.yaml) in the dev cluster,
so Coscheduling gangs (pods labelled scheduling.x-k8s.io/pod-group) can be tested against the real API."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import yaml

from devcluster.kubeapi import KubeAPI, KubeAPIError

CRD_NAME = "podgroups.scheduling.x-k8s.io"
MANIFEST = Path(__file__).resolve().parent.parent / "deploy" / "crds" / f"{CRD_NAME}.yaml"


def manifest() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(MANIFEST.read_text())
    return loaded


def install(api: KubeAPI, timeout: float = 30.0) -> None:
    api.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", manifest(), ok=(409,))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        crd = api.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{CRD_NAME}")
        conditions = {c["type"]: c["status"] for c in (crd.get("status") or {}).get("conditions") or []}
        if conditions.get("Established") == "True":
            try:
                api.get("/apis/scheduling.x-k8s.io/v1alpha1/podgroups")
                return
            except KubeAPIError:  # served a moment after Established; retried until the deadline
                pass
        time.sleep(0.1)
    raise TimeoutError(f"CRD {CRD_NAME} not established after {timeout:.0f}s")
