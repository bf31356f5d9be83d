"""Runs the real kube-scheduler (the dev cluster's build) with a profile whose schedulerName the test picks."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import yaml

from devcluster import DevCluster
from devcluster.kubeapi import tls_context
from devcluster.ports import free_port
from tests.e2e.kube import poll

DEFAULT_SCHEDULER = "default-scheduler"


@contextmanager
def kube_scheduler(cluster: DevCluster, scheduler_name: str = DEFAULT_SCHEDULER, *, qps: float = 50,
                   burst: int = 100, percentage_of_nodes_to_score: int | None = None,
                   profile: dict[str, Any] | None = None) -> Iterator[str]:
    """kube-scheduler serving pods with `spec.schedulerName: scheduler_name` (its default plugins unless
    `profile` adds to the profile); yields its process name. QPS 50 / burst 100 are kube-scheduler's
    defaults. Stopped on exit."""
    if scheduler_name == DEFAULT_SCHEDULER and profile is None:
        # The dev cluster's own starter: the default profile, as test_smoke has always run it.
        name = "kube-scheduler"
        cluster.start_kube_scheduler(qps=qps, burst=burst, percentage_of_nodes_to_score=percentage_of_nodes_to_score)
        try:
            yield name
        finally:
            cluster.stop_kube_scheduler()
        return
    # The dev cluster keeps its binaries and PKI private; the starter above cannot take a profile.
    bins, pki, endpoints = cluster._bins, cluster._pki, cluster.endpoints
    assert bins is not None and pki is not None and endpoints is not None, "the dev cluster is not started"
    name = f"kube-scheduler-{secrets.token_hex(3)}"
    port = free_port()
    config: dict[str, Any] = {
        "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": endpoints.kubeconfig, "qps": qps, "burst": burst},
        "leaderElection": {"leaderElect": False},
        "profiles": [{"schedulerName": scheduler_name, **(profile or {})}],
    }
    if percentage_of_nodes_to_score is not None:
        config["percentageOfNodesToScore"] = percentage_of_nodes_to_score
    path = cluster.run_dir / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    managed = cluster.group.start(name, [
        str(bins.kube_scheduler), f"--config={path}", "--bind-address=127.0.0.1", f"--secure-port={port}",
        f"--tls-cert-file={pki.serving_cert}", f"--tls-private-key-file={pki.serving_key}"])
    try:
        verify = tls_context(pki.ca_cert)

        def healthy() -> bool:
            if not managed.alive():
                raise AssertionError(managed.describe_exit())
            try:
                return httpx.get(f"https://127.0.0.1:{port}/healthz", verify=verify, timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        poll(healthy, 60, f"{name} healthy", interval=0.1)
        yield name
    finally:
        cluster.group.stop(name)
