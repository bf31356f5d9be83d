"""Helpers the e2e tests share: pods, polling, namespace clean-up."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml

from devcluster.cluster import Endpoints
from devcluster.kubeapi import KubeAPI
from tests.polling import poll as poll  # the e2e tests' kube.poll, shared with the unit tests


def pod_manifest(name: str, *, scheduler: str | None = None, cpu: str = "100m", memory: str = "500Mi",
                 gpus: int = 0, **spec: Any) -> dict[str, Any]:
    requests: dict[str, str] = {"cpu": cpu, "memory": memory}
    if gpus:
        requests["nvidia.com/gpu"] = str(gpus)
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else {}
    body: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": "test"}},
        "spec": {
            "containers": [{"name": "main", "image": "registry.local/pause:3.10",
                            "resources": {"requests": requests, "limits": limits}}],
            "terminationGracePeriodSeconds": 0,
            **spec,
        },
    }
    if scheduler:
        body["spec"]["schedulerName"] = scheduler
    return body


def list_pods(api: KubeAPI, namespace: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = api.get(f"/api/v1/namespaces/{namespace}/pods")["items"]
    return items


def delete_namespace(api: KubeAPI, name: str) -> None:
    """Deletes the namespace's pods at once (grace 0: the schedulers under test see them go now, and their
    nodes free), then the namespace; the namespace controller finalizes it in the background, unwaited for."""
    api.request("DELETE", f"/api/v1/namespaces/{name}/pods", params={"gracePeriodSeconds": "0"}, ok=(404,))
    api.delete(f"/api/v1/namespaces/{name}")


def release_pod_groups(api: KubeAPI, version: str, namespaces: list[str]) -> None:
    """Takes the protection finalizer off the Workload API's PodGroups in `namespaces` (what kube-controller-manager's
    podgroup-protection-controller does once no pod uses a group; the dev cluster does not run it). Left on, their
    namespaces never finish terminating, and the namespace controller retries them for the rest of the session:
    40 of them kept the API server at ~40% of a core."""
    for ns in namespaces:
        for group in api.get(f"/apis/{version}/namespaces/{ns}/podgroups")["items"]:
            if group["metadata"].get("finalizers"):
                api.request("PATCH", f"/apis/{version}/namespaces/{ns}/podgroups/{group['metadata']['name']}",
                            {"metadata": {"finalizers": None}}, content_type="application/merge-patch+json",
                            ok=(404,))


def concurrently(calls: list[Callable[[], Any]]) -> None:
    """Runs clean-up calls at once (each one is a wait on the API server: a collection deleted, a namespace's pods);
    the first failure is raised once all are done."""
    if calls:
        with ThreadPoolExecutor(min(len(calls), 32)) as pool:
            for future in [pool.submit(call) for call in calls]:
                future.result()


def token_kubeconfig(endpoints: Endpoints, token: str, namespace: str, directory: Path, *, user: str) -> Path:
    """A kubeconfig for the dev cluster that authenticates as a service account with a token file (0600), as the
    scheduler does in a pod; written to `directory`."""
    token_file = directory / "token"
    token_file.write_text(token)
    token_file.chmod(0o600)
    kubeconfig = directory / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": user,
        "clusters": [{"name": "dev", "cluster": {"server": endpoints.apiserver,
                                                 "certificate-authority": endpoints.ca_file}}],
        "users": [{"name": user, "user": {"tokenFile": str(token_file)}}],
        "contexts": [{"name": user, "context": {"cluster": "dev", "user": user, "namespace": namespace}}],
    }))
    return kubeconfig
