"""Client CPU per write: KubeClient.send on its WriteLane (stdlib http.client keep-alive connections) vs the
same client's httpx path (`write_lane=False`), on a small dev cluster. Each write is an events.k8s.io/v1 Event
POST like the Scheduled event of a bound pod (a Binding needs a fresh pending pod per write, an Event does
not), sent by `--threads` threads; the two clients alternate in one process, so both share the machine's load.

    python -m bench.http_write_bench [--writes 1500] [--reps 3] [--threads 8]

Prints process CPU-ms per write (orjson encoding and the thread pool included, equal on both sides) and
writes per second, per repetition.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from adapters.kubernetes import KubeClient, load_kubeconfig
from devcluster import DevCluster

NAMESPACE = "write-bench"
PATH = f"/apis/events.k8s.io/v1/namespaces/{NAMESPACE}/events"


def event(i: int) -> dict[str, Any]:
    return {"apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": f"p-{i:06d}.{time.time_ns():x}", "namespace": NAMESPACE},
            "eventTime": "2026-12-01T18:00:00.000000Z", "reportingController": "ms-all",
            "reportingInstance": "ms-all-bench", "action": "Binding", "reason": "Scheduled", "type": "Normal",
            "note": f"Successfully assigned {NAMESPACE}/p-{i:06d} to kwok-node-0001: score 71.2; NodeLoad 63",
            "regarding": {"apiVersion": "v1", "kind": "Pod", "namespace": NAMESPACE, "name": f"p-{i:06d}",
                          "uid": f"5f0c3c1e-2b1d-4f7e-9a53-{i:012d}"}}


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def measure(write: Callable[[int], None], writes: int, threads: int) -> tuple[float, float]:
    """(CPU-ms per write, writes per second)."""
    cpu0, wall0 = cpu_seconds(), time.monotonic()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(write, range(writes)))
    return (cpu_seconds() - cpu0) * 1000 / writes, writes / (time.monotonic() - wall0)


def writer(client: KubeClient) -> Callable[[int], None]:
    def write(i: int) -> None:
        client.send("POST", PATH, event(i))

    return write


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--writes", type=int, default=1500)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=8)
    args = parser.parse_args()
    with DevCluster(nodes=5, with_controller_manager=False) as cluster:
        config = load_kubeconfig(cluster.kubeconfig)
        clients = {"lane": KubeClient(config, max_connections=16),
                   "httpx": KubeClient(config, max_connections=16, write_lane=False)}
        clients["lane"].send("POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                            "metadata": {"name": NAMESPACE}})
        results: dict[str, list[tuple[float, float]]] = {name: [] for name in clients}
        for _ in range(args.reps):
            for name, client in clients.items():
                results[name].append(measure(writer(client), args.writes, args.threads))
        summary = {name: {"cpu_ms_per_write": [round(c, 3) for c, _ in runs],
                          "median_cpu_ms_per_write": round(statistics.median(c for c, _ in runs), 3),
                          "writes_per_second": [round(w) for _, w in runs]} for name, runs in results.items()}
        print(json.dumps(summary, indent=2))
        for client in clients.values():
            client.close()


if __name__ == "__main__":
    main()
