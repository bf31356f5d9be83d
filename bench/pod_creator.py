"""Creates scheduler_perf-shaped pods (100m CPU / 500Mi) as fast as the API server takes them.
A process of its own, so the creating threads never slow down the benchmark's watch.

    python -m bench.pod_creator --kubeconfig K --namespace NS --count N --scheduler NAME
"""

from __future__ import annotations

import argparse
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from devcluster.kubeapi import Credentials, KubeAPI


def pod(name: str, scheduler: str) -> dict[str, object]:
    return {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"schedulerName": scheduler, "terminationGracePeriodSeconds": 0,
                 "containers": [{"name": "c", "image": "registry.local/pause:3.10",
                                 "resources": {"requests": {"cpu": "100m", "memory": "500Mi"}}}]},
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--scheduler", required=True)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--delete", action="store_true",
                        help="delete the pods instead (one call each: a delete-collection of 10,000 pods outlasts "
                             "the API server's 60 s request timeout)")
    args = parser.parse_args()
    with KubeAPI(Credentials.from_kubeconfig(args.kubeconfig), max_connections=args.concurrency) as api, \
            ThreadPoolExecutor(args.concurrency) as pool:
        path = f"/api/v1/namespaces/{args.namespace}/pods"
        if args.delete:
            list(pool.map(lambda i: api.request("DELETE", f"{path}/p-{i:05d}", params={"gracePeriodSeconds": "0"},
                                                ok=(404,)), range(args.count)))
        else:
            list(pool.map(lambda i: api.post(path, pod(f"p-{i:05d}", args.scheduler)), range(args.count)))


if __name__ == "__main__":
    main()
