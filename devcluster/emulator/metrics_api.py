"""Keeps metrics.k8s.io/v1beta1 NodeMetrics objects (a test CRD the caller installs) current.

Per node: POST the object (409 = it exists, fine), then merge-PATCH timestamp/window/usage every
interval. Known objects that should no longer exist (node removed, or left out by the metrics-api
`missing_nodes` fault) are DELETEd. Requests run on a pool of `workers` threads sharing one
connection-pooled httpx.Client. Errors are logged, summarised per sync, and never stop the loop.
"""

from __future__ import annotations

import logging
import ssl
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from devcluster.kubeapi import Credentials

API_VERSION = "metrics.k8s.io/v1beta1"
COLLECTION = f"/apis/{API_VERSION}/nodes"
WINDOW = "30s"
MERGE_PATCH = "application/merge-patch+json"
DEFAULT_WORKERS = 16
_LOGGED_ERRORS_PER_SYNC = 3

log = logging.getLogger(__name__)


def rfc3339(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


@dataclass(frozen=True)
class NodeUsage:
    name: str
    timestamp: float
    cpu_nanocores: int
    memory_ki: int

    def fields(self) -> dict[str, Any]:
        return {"timestamp": rfc3339(self.timestamp), "window": WINDOW,
                "usage": {"cpu": f"{self.cpu_nanocores}n", "memory": f"{self.memory_ki}Ki"}}

    def manifest(self) -> dict[str, Any]:
        return {"apiVersion": API_VERSION, "kind": "NodeMetrics", "metadata": {"name": self.name},
                **self.fields()}


def client_from_kubeconfig(path: Path, *, workers: int = DEFAULT_WORKERS,
                           timeout: float = 10.0) -> httpx.Client:
    """A client that verifies the apiserver with the kubeconfig's CA file and sends its bearer token."""
    creds = Credentials.from_kubeconfig(path)
    context = ssl.create_default_context(cafile=str(creds.ca_file))
    return httpx.Client(
        base_url=creds.server,
        verify=context,
        headers={"Authorization": f"Bearer {creds.token}", "Accept": "application/json"},
        timeout=timeout,
        limits=httpx.Limits(max_connections=workers, max_keepalive_connections=workers),
    )


class NodeMetricsSync:
    def __init__(self, client: httpx.Client, usages: Callable[[], Sequence[NodeUsage]], *, interval: float,
                 workers: int = DEFAULT_WORKERS, close_client: bool = False) -> None:
        self.client = client
        self.usages = usages
        self.interval = interval
        self._close_client = close_client
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="node-metrics")
        self._known: set[str] = set()  # objects this process has written and not deleted
        self._sync_lock = threading.Lock()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self.syncs = 0
        self.last_report: dict[str, Any] | None = None

    # -- one pass ----------------------------------------------------------------------------------
    def sync(self) -> dict[str, Any]:
        """One full pass; concurrent callers (loop and control API) take turns."""
        with self._sync_lock:
            started = time.monotonic()
            usages = list(self.usages())
            stale = self._known - {u.name for u in usages}
            jobs = [self._pool.submit(self._upsert, u) for u in usages]
            jobs += [self._pool.submit(self._delete, name) for name in sorted(stale)]
            outcomes = [job.result() for job in jobs]
            report: dict[str, Any] = {"nodes": len(usages), "created": 0, "updated": 0, "deleted": 0,
                                      "errors": 0}
            errors = []
            for name, outcome, error in outcomes:
                report[outcome] += 1
                if outcome in ("created", "updated"):
                    self._known.add(name)
                elif outcome == "deleted":
                    self._known.discard(name)
                if error:
                    errors.append(error)
            report["seconds"] = round(time.monotonic() - started, 3)
            for message in errors[:_LOGGED_ERRORS_PER_SYNC]:
                log.error("metrics-api sync: %s", message)
            if len(errors) > _LOGGED_ERRORS_PER_SYNC:
                log.error("metrics-api sync: %d more errors", len(errors) - _LOGGED_ERRORS_PER_SYNC)
            self.syncs += 1
            self.last_report = report
            return report

    def _upsert(self, usage: NodeUsage) -> tuple[str, str, str | None]:
        path = f"{COLLECTION}/{usage.name}"
        try:
            if usage.name in self._known:
                resp = self.client.patch(path, json=usage.fields(), headers={"Content-Type": MERGE_PATCH})
                if resp.is_success:
                    return usage.name, "updated", None
                if resp.status_code != 404:  # 404: deleted behind our back, so create it again
                    return usage.name, "errors", _describe("PATCH", path, resp)
            resp = self.client.post(COLLECTION, json=usage.manifest())
            if resp.is_success:
                return usage.name, "created", None
            if resp.status_code != 409:
                return usage.name, "errors", _describe("POST", COLLECTION, resp)
            resp = self.client.patch(path, json=usage.fields(), headers={"Content-Type": MERGE_PATCH})
            if resp.is_success:
                return usage.name, "updated", None
            return usage.name, "errors", _describe("PATCH", path, resp)
        except httpx.HTTPError as exc:  # one node's failure must not end the pass
            return usage.name, "errors", f"{usage.name}: {exc!r}"

    def _delete(self, name: str) -> tuple[str, str, str | None]:
        path = f"{COLLECTION}/{name}"
        try:
            resp = self.client.delete(path)
        except httpx.HTTPError as exc:
            return name, "errors", f"DELETE {path}: {exc!r}"
        if resp.is_success or resp.status_code == 404:
            return name, "deleted", None
        return name, "errors", _describe("DELETE", path, resp)

    # -- background loop ---------------------------------------------------------------------------
    def start(self) -> None:
        """Runs sync() every `interval` seconds; interval <= 0 means sync only on request."""
        if self.interval <= 0 or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="node-metrics-sync", daemon=True)
        self._thread.start()

    def wake(self) -> None:
        """Asks the loop for an early pass (e.g. a node was removed and its object should go now)."""
        self._wake.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.sync()
            except Exception:
                log.exception("metrics-api sync failed")
            self._wake.wait(self.interval)
            self._wake.clear()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        self._pool.shutdown(wait=False, cancel_futures=True)
        if self._close_client:
            self.client.close()

    def status(self) -> dict[str, Any]:
        return {"enabled": True, "interval": self.interval, "syncs": self.syncs, "objects": len(self._known),
                "last": self.last_report}


def _describe(method: str, path: str, resp: httpx.Response) -> str:
    try:
        body = resp.json()
    except ValueError:
        body = None
    message = body.get("message", resp.text) if isinstance(body, dict) else resp.text
    return f"{method} {path}: HTTP {resp.status_code}: {str(message)[:300]}"
