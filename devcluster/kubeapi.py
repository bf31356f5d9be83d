"""A small JSON client for the dev cluster's own set-up calls (nodes, CRDs, APIServices, RBAC).

It is deliberately tiny and separate from adapters/kubernetes: the dev cluster must work the same
whatever state the scheduler's adapter is in.
"""

from __future__ import annotations

import json
import ssl
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml


def tls_context(ca_file: Path) -> ssl.SSLContext:
    """Verification against the dev cluster's own CA (never disabled)."""
    return ssl.create_default_context(cafile=str(ca_file))


class KubeAPIError(RuntimeError):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status


@dataclass(frozen=True)
class Credentials:
    server: str
    ca_file: Path
    token: str

    @classmethod
    def from_kubeconfig(cls, path: Path) -> Credentials:
        """Reads the kubeconfig the dev cluster writes (token + CA file)."""
        config = yaml.safe_load(path.read_text())
        context_name = config["current-context"]
        context = next(c["context"] for c in config["contexts"] if c["name"] == context_name)
        cluster = next(c["cluster"] for c in config["clusters"] if c["name"] == context["cluster"])
        user = next(u["user"] for u in config["users"] if u["name"] == context["user"])
        return cls(server=cluster["server"], ca_file=Path(cluster["certificate-authority"]), token=user["token"])


CONNECT_RETRIES = 3


class KubeAPI:
    def __init__(self, creds: Credentials, *, timeout: float = 30.0, max_connections: int = 32) -> None:
        self.creds = creds
        # retries: a connection that failed before the request went out is opened again (httpx retries only
        # ConnectError/ConnectTimeout, so nothing is sent twice). Set-up opens up to 32 at once and a busy API server
        # has refused a TLS handshake among them ("tlsv1 alert decode error"), failing a test before it began.
        self.client = httpx.Client(
            base_url=creds.server,
            headers={"Authorization": f"Bearer {creds.token}", "Accept": "application/json"},
            timeout=timeout,
            transport=httpx.HTTPTransport(
                verify=tls_context(creds.ca_file), retries=CONNECT_RETRIES,
                limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)),
        )

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> KubeAPI:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request(self, method: str, path: str, body: Any = None, *, content_type: str | None = None,
                params: dict[str, str] | None = None, ok: tuple[int, ...] = (), timeout: float | None = None) -> Any:
        headers = {"Content-Type": content_type} if content_type else {}
        resp = self.client.request(method, path, json=body, headers=headers, params=params,
                                   timeout=self.client.timeout if timeout is None else timeout)
        if resp.status_code >= 400 and resp.status_code not in ok:
            try:
                message = resp.json().get("message", resp.text)
            except ValueError:
                message = resp.text
            raise KubeAPIError(resp.status_code, f"{method} {path}: {message}")
        if not resp.content:
            return None
        return resp.json()

    def get(self, path: str, **params: str) -> Any:
        return self.request("GET", path, params=params or None)

    def post(self, path: str, body: Any, *, ok: tuple[int, ...] = ()) -> Any:
        return self.request("POST", path, body, ok=ok)

    def put(self, path: str, body: Any) -> Any:
        return self.request("PUT", path, body)

    def merge_patch(self, path: str, body: Any) -> Any:
        return self.request("PATCH", path, body, content_type="application/merge-patch+json")

    def delete(self, path: str, *, ok: tuple[int, ...] = (404,)) -> Any:
        return self.request("DELETE", path, ok=ok)

    def apply_object(self, obj: dict[str, Any], *, field_manager: str = "metrics-sched-devcluster") -> Any:
        """Server-side apply of one object (its path derived from apiVersion/kind)."""
        path = object_path(obj)
        resp = self.client.patch(
            path,
            content=yaml.safe_dump(obj).encode(),
            params={"fieldManager": field_manager, "force": "true"},
            headers={"Content-Type": "application/apply-patch+yaml"},
        )
        if resp.status_code >= 400:
            raise KubeAPIError(resp.status_code, f"apply {path}: {resp.text[:500]}")
        return resp.json()

    def watch(self, path: str, resource_version: str, *, timeout_seconds: int = 30) -> Iterator[dict[str, Any]]:
        """The events of one watch request from resource_version (ADDED/MODIFIED/DELETED/BOOKMARK/ERROR), until
        the server ends it after timeout_seconds. The read timeout outlasts that, so a dead connection raises."""
        params = {"watch": "1", "resourceVersion": resource_version, "allowWatchBookmarks": "true",
                  "timeoutSeconds": str(timeout_seconds)}
        timeout = httpx.Timeout(10.0, read=timeout_seconds + 15.0)
        with self.client.stream("GET", path, params=params, timeout=timeout) as resp:
            if resp.status_code >= 400:
                resp.read()
                raise KubeAPIError(resp.status_code, f"watch {path}: {resp.text[:300]}")
            for line in resp.iter_lines():
                if line:
                    event: dict[str, Any] = json.loads(line)
                    yield event

    def wait_ready(self, timeout: float = 90.0) -> None:
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            try:
                resp = self.client.get("/readyz", timeout=2.0)
                if resp.status_code == 200:
                    return
                last = f"HTTP {resp.status_code}: {resp.text[-300:]}"
            except httpx.HTTPError as exc:
                last = repr(exc)
            time.sleep(0.2)
        raise TimeoutError(f"kube-apiserver /readyz not ready after {timeout:.0f}s: {last}")


_CLUSTER_SCOPED = {
    "Namespace", "Node", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition",
    "PriorityClass", "NodeMetrics", "APIService", "StorageClass",
}
_PLURALS = {"NodeMetrics": "nodes", "Ingress": "ingresses", "NetworkPolicy": "networkpolicies",
            "PriorityClass": "priorityclasses", "StorageClass": "storageclasses"}


def object_path(obj: dict[str, Any]) -> str:
    api_version: str = obj["apiVersion"]
    kind: str = obj["kind"]
    name: str = obj["metadata"]["name"]
    prefix = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    plural = _PLURALS.get(kind, kind.lower() + "s")
    if kind in _CLUSTER_SCOPED:
        return f"{prefix}/{plural}/{name}"
    namespace = obj["metadata"].get("namespace", "default")
    return f"{prefix}/namespaces/{namespace}/{plural}/{name}"


def install_crd(api: KubeAPI, crd: dict[str, Any], served: str, timeout: float = 30.0) -> None:
    """Creates `crd` (if absent) and returns once it is Established and `served` (a list path of its resource)
    answers: Established can precede serving by a moment."""
    name = crd["metadata"]["name"]
    api.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd, ok=(409,))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = api.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}").get("status") or {}
        conditions = {c["type"]: c["status"] for c in status.get("conditions") or []}
        if conditions.get("Established") == "True":
            try:
                api.get(served)
                return
            except KubeAPIError:  # served a moment after Established; retried until the deadline
                pass
        time.sleep(0.1)
    raise TimeoutError(f"CRD {name} not established after {timeout:.0f}s")
