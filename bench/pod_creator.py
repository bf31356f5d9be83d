"""Creates scheduler_perf-shaped pods (100m CPU / 500Mi) at a paced rate (`--rate` pods/s; 0: as fast as
the API server takes them). A process of its own, so the creating threads never slow down the benchmark's
watch.

Paced, because a creator that floods the API server makes the API server the thing measured: every
contender's watch and binds then queue behind thousands of creations. The pace is a schedule (pod i is
queued at start + i/rate for one of `--concurrency` threads, each on its own keep-alive connection
(bench.raw_api)), so a slow answer delays no later pod.

    python -m bench.pod_creator --kubeconfig K --namespace NS --count N --scheduler NAME [--rate 400]
"""

from __future__ import annotations

import argparse
import http.client
import json
import queue
import sys
import threading
import time
from pathlib import Path

from bench.raw_api import Api
from devcluster.kubeapi import Credentials

CHUNK = 250  # pods per `bench-chunk` label value: one delete-collection call ends inside 60 s on a busy machine
CHUNK_LABEL = "bench-chunk"


def name_of(index: int) -> str:
    return f"p-{index:05d}"


def pod(name: str, scheduler: str, index: int = 0) -> dict[str, object]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {CHUNK_LABEL: str(index // CHUNK)}},
        "spec": {"schedulerName": scheduler, "terminationGracePeriodSeconds": 0,
                 "containers": [{"name": "c", "image": "registry.local/pause:3.10",
                                 "resources": {"requests": {"cpu": "100m", "memory": "500Mi"}}}]},
    }


def _worker(creds: Credentials, jobs: queue.SimpleQueue[tuple[str, str, bytes | None] | None],
            failures: list[str], connected: threading.Barrier) -> None:
    api = Api(creds)
    api.conn.connect()  # the TLS handshake before the paced schedule starts, not inside it
    connected.wait()
    while (job := jobs.get()) is not None:
        method, path, body = job
        try:
            resp = api.request(method, path, body)
            resp.read()
            if resp.status not in (200, 201, 202, 404):  # 404: a pod never created (the run failed early)
                failures.append(f"{method} {path}: HTTP {resp.status}")
        except (http.client.HTTPException, OSError) as exc:
            failures.append(f"{method} {path}: {type(exc).__name__}: {exc}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--first", type=int, default=0,
                        help="index of the first pod (p-<index>): a run's later pods after its backlog")
    parser.add_argument("--scheduler", required=True)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--rate", type=float, default=0.0, help="pods created per second (0: unpaced)")
    parser.add_argument("--delete", action="store_true",
                        help="delete the pods one call each (bench.e2e_bench deletes them by chunk label: faster)")
    args = parser.parse_args()
    creds = Credentials.from_kubeconfig(args.kubeconfig)
    jobs: queue.SimpleQueue[tuple[str, str, bytes | None] | None] = queue.SimpleQueue()
    failures: list[str] = []
    connected = threading.Barrier(args.concurrency + 1)
    workers = [threading.Thread(target=_worker, args=(creds, jobs, failures, connected))
               for _ in range(args.concurrency)]
    for worker in workers:
        worker.start()
    connected.wait(timeout=60)
    path = f"/api/v1/namespaces/{args.namespace}/pods"
    start = time.monotonic()
    for n in range(args.count):
        i = args.first + n
        if args.delete:
            jobs.put(("DELETE", f"{path}/{name_of(i)}?gracePeriodSeconds=0", None))
            continue
        if args.rate > 0 and (delay := start + n / args.rate - time.monotonic()) > 0:
            time.sleep(delay)
        jobs.put(("POST", path, json.dumps(pod(name_of(i), args.scheduler, i)).encode()))
    for _ in workers:
        jobs.put(None)
    for worker in workers:
        worker.join()
    if failures:
        sys.exit(f"pod_creator: {len(failures)} requests failed, e.g. {failures[0]}")


if __name__ == "__main__":
    main()
