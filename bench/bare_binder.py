"""The ceiling: a bare loop that binds pods to precomputed nodes, with the scheduler's own client stack
(adapters.kubernetes: reflector + KubePodWriter on httpx) and bind concurrency. No scheduling at all:
whatever throughput this gets is what the API server allows on this machine.

    python -m bench.bare_binder --kubeconfig K --scheduler-name bare --workers 16
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from adapters.kubernetes import KubeClient, KubeClusterSource, KubePodWriter, load
from metrics_sched.ports import ApiError, EventType, KubeObject, StorageKind, SyncedResource, WorkloadKind


class _Sink:
    def __init__(self, name: str, writer: KubePodWriter, workers: int) -> None:
        self.name = name
        self.writer = writer
        self.pool = ThreadPoolExecutor(max_workers=workers)
        self.nodes: list[str] = []
        self.cycle: Any = None
        self.lock = threading.Lock()
        self.seen: set[str] = set()
        self.synced: set[str] = set()

    def on_node_event(self, kind: EventType, node: KubeObject) -> None:
        if kind == "ADDED":
            with self.lock:
                self.nodes.append(node["metadata"]["name"])
                self.cycle = None

    def on_pod_event(self, kind: EventType, pod: KubeObject) -> None:
        spec, meta = pod.get("spec") or {}, pod.get("metadata") or {}
        if kind == "DELETED" or spec.get("nodeName") or spec.get("schedulerName") != self.name:
            return
        with self.lock:
            if meta["uid"] in self.seen or not self.nodes:
                return
            self.seen.add(meta["uid"])
            if self.cycle is None:
                self.cycle = itertools.cycle(sorted(self.nodes))
            node = next(self.cycle)
        self.pool.submit(self._bind, meta["namespace"], meta["name"], meta["uid"], node)

    def _bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        with contextlib.suppress(ApiError):  # a lost race is the API's answer, not ours to retry here
            self.writer.bind(namespace, name, uid, node)

    def on_namespace_event(self, kind: EventType, namespace: KubeObject) -> None:
        pass  # binds to precomputed nodes: no constraint to honour

    def on_workload_event(self, kind: WorkloadKind, event: EventType, obj: KubeObject) -> None:
        pass

    def on_storage_event(self, kind: StorageKind, event: EventType, obj: KubeObject) -> None:
        pass

    def on_synced(self, resource: SyncedResource) -> None:
        self.synced.add(resource)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument("--scheduler-name", default="bare")
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--ready-file", type=Path, default=None, help="written once the caches are synced")
    args = parser.parse_args()
    client = KubeClient(load(args.kubeconfig), max_connections=args.workers + 8)
    sink = _Sink(args.scheduler_name, KubePodWriter(client), args.workers)
    source = KubeClusterSource(client)
    source.start(sink)
    source.wait_synced(60)
    if args.ready_file:
        args.ready_file.write_text("synced\n")
    threading.Event().wait()


if __name__ == "__main__":
    main()
