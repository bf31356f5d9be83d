"""Runs `metrics-sched run` as a real process against the dev cluster, supervised by it."""

from __future__ import annotations

import json
import os
import secrets
import ssl
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from devcluster import DevCluster
from devcluster.ports import free_port
from devcluster.processes import Managed
from tests.e2e.kube import poll


@dataclass
class SchedulerProcess:
    name: str
    identity: str
    port: int
    managed: Managed
    scheme: str = "http"  # https: a config without server.insecure
    verify: ssl.SSLContext | bool = True  # https: trusts the serving certificate's CA

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    def status(self) -> dict[str, Any]:
        result: dict[str, Any] = httpx.get(f"{self.url}/status", timeout=2, verify=self.verify).json()
        return result

    def alive(self) -> bool:
        return self.managed.alive()


def write_config(cluster: DevCluster, scheduler_name: str, extra: dict[str, Any] | None = None,
                 leader_elect: bool = True) -> str:
    extra = dict(extra or {})
    profile = {"schedulerName": scheduler_name, **extra.pop("profile", {})}
    config: dict[str, Any] = {
        "apiVersion": "metrics-sched.io/v1alpha1",
        "kind": "MetricsSchedulerConfiguration",
        "profiles": [profile],
        "leaderElection": {"leaderElect": leader_elect, "resourceName": scheduler_name,
                           "resourceNamespace": "default"},
        # Plain HTTP on loopback, as for local use: tests read /decisions and /metrics without a token
        # (HTTPS with authentication is tests/e2e/test_serving_auth.py's).
        "server": {"bindAddress": "127.0.0.1", "insecure": True},
        **extra,
    }
    path = cluster.run_dir / f"{scheduler_name}-config.yaml"
    path.write_text(yaml.safe_dump(config))
    return str(path)


def start_scheduler(cluster: DevCluster, scheduler_name: str, config_path: str, replica: int | str = 0,
                    env: Mapping[str, str] | None = None, *, kubeconfig: Path | None = None,
                    log_format: str = "text", ca_file: Path | None = None) -> SchedulerProcess:
    """`kubeconfig`: another way to the API server (e.g. through a proxy); default the cluster's. `ca_file`: the
    config serves HTTPS, with a certificate this CA verifies (readiness is probed anonymously on /readyz)."""
    port = free_port()
    identity = f"{scheduler_name}-{replica}"
    name = f"{scheduler_name}-{replica}"
    managed = cluster.group.start(name, [
        sys.executable, "-m", "metrics_sched.app.cli", "run", "--config", config_path,
        "--kubeconfig", str(kubeconfig or cluster.kubeconfig), "--port", str(port), "--identity", identity,
        "--log-format", log_format,
    ], env=None if env is None else {**os.environ, **env})
    proc = SchedulerProcess(name=name, identity=identity, port=port, managed=managed,
                            scheme="https" if ca_file else "http",
                            verify=ssl.create_default_context(cafile=str(ca_file)) if ca_file else True)

    def ready() -> bool:
        if not managed.alive():
            raise AssertionError(managed.describe_exit())
        try:
            return httpx.get(f"{proc.url}/readyz", timeout=1, verify=proc.verify).status_code == 200
        except httpx.HTTPError:
            return False

    poll(ready, 30, f"scheduler {name} ready")
    return proc


@contextmanager
def schedulers(cluster: DevCluster, replicas: int = 1, extra: dict[str, Any] | None = None,
               leader_elect: bool = True, env: Mapping[str, str] | None = None,
               name: str | None = None) -> Iterator[tuple[str, list[SchedulerProcess]]]:
    """`env` is added to the scheduler processes' environment (e.g. PYTHONPATH for third-party plugins);
    `name` is the schedulerName (default: a fresh one), e.g. for pods created before the scheduler starts."""
    scheduler_name = name or f"ms-{secrets.token_hex(3)}"
    config = write_config(cluster, scheduler_name, extra, leader_elect)
    procs = [start_scheduler(cluster, scheduler_name, config, i, env) for i in range(replicas)]
    try:
        yield scheduler_name, procs
    finally:
        for proc in procs:
            cluster.group.stop(proc.name)


def leader_of(cluster: DevCluster, scheduler_name: str) -> str | None:
    with cluster.api() as api:
        lease = api.request("GET", f"/apis/coordination.k8s.io/v1/namespaces/default/leases/{scheduler_name}",
                            ok=(404,))
    if not lease or lease.get("kind") != "Lease":
        return None
    holder: str | None = lease["spec"].get("holderIdentity")
    return holder


def dump(obj: Any) -> str:
    return json.dumps(obj, indent=1)[:2000]
