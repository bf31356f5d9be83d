"""The ceiling: the cheapest bind loop we can write, and no scheduling at all.

What makes it a ceiling by construction: the node names are listed once and dealt round-robin (no cache, no
node watch, no filter or score); one watch of only this scheduler's pending pods (field selector
`spec.schedulerName=<name>,spec.nodeName=`, so the API server sends nothing else); binds from a pool of
worker threads, each on its own persistent HTTPS connection (http.client, none of httpx's per-request
machinery), and nothing else — no Event, no status patch, no retry. Every contender does at least this
much work per pod; whatever throughput this gets is what the API server allows on this machine, and its
CPU per pod is the floor for a Python process. bench/e2e_bench.py flags the ceiling invalid if a
contender beats it anyway.

    python -m bench.bare_binder --kubeconfig K --scheduler-name bare --workers 16 [--ready-file F]
"""

from __future__ import annotations

import argparse
import http.client
import itertools
import json
import queue
import sys
import threading
import urllib.parse
from pathlib import Path

from bench.raw_api import Api
from devcluster.kubeapi import Credentials

Job = tuple[str, str, str, str]  # namespace, name, uid, node


def node_names(api: Api) -> list[str]:
    resp = api.request("GET", "/api/v1/nodes?limit=0")
    if resp.status != 200:
        raise RuntimeError(f"listing nodes: HTTP {resp.status}")
    return sorted(item["metadata"]["name"] for item in json.loads(resp.read())["items"])


def binder(creds: Credentials, jobs: queue.SimpleQueue[Job]) -> None:
    api = Api(creds)
    while True:
        namespace, name, uid, node = jobs.get()
        body = json.dumps({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name, "uid": uid},
                           "target": {"apiVersion": "v1", "kind": "Node", "name": node}}).encode()
        try:
            resp = api.request("POST", f"/api/v1/namespaces/{namespace}/pods/{name}/binding", body)
            resp.read()
            if resp.status != 201:
                print(f"bind {namespace}/{name}: HTTP {resp.status}", file=sys.stderr, flush=True)
        except (http.client.HTTPException, OSError) as exc:
            print(f"bind {namespace}/{name}: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)


def watch_pending(creds: Credentials, scheduler: str, nodes: list[str], jobs: queue.SimpleQueue[Job],
                  ready: Path | None) -> None:
    api = Api(creds, timeout=None)
    selector = urllib.parse.quote(f"spec.schedulerName={scheduler},spec.nodeName=")
    path = f"/api/v1/pods?fieldSelector={selector}"
    deal = itertools.cycle(nodes)
    seen: set[str] = set()
    resp = api.request("GET", path)
    listed = json.loads(resp.read())
    for pod in listed["items"]:
        meta = pod["metadata"]
        seen.add(meta["uid"])
        jobs.put((meta["namespace"], meta["name"], meta["uid"], next(deal)))
    rv = listed["metadata"]["resourceVersion"]
    if ready:
        ready.write_text("synced\n")
    while True:
        resp = api.request("GET", f"{path}&watch=1&allowWatchBookmarks=true&timeoutSeconds=3600&resourceVersion={rv}")
        if resp.status != 200:
            raise RuntimeError(f"watching pods: HTTP {resp.status}: {resp.read()[:200]!r}")
        for line in resp:
            event = json.loads(line)
            obj = event["object"]
            if event["type"] == "ERROR":
                raise RuntimeError(f"watch error: {obj}")  # 410 Gone: nothing to resume from; the run fails
            meta = obj["metadata"]
            rv = meta["resourceVersion"]
            if event["type"] == "ADDED" and meta["uid"] not in seen:
                seen.add(meta["uid"])
                jobs.put((meta["namespace"], meta["name"], meta["uid"], next(deal)))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument("--scheduler-name", default="bare")
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--ready-file", type=Path, default=None, help="written once the nodes are listed")
    args = parser.parse_args()
    creds = Credentials.from_kubeconfig(args.kubeconfig)
    nodes = node_names(Api(creds))
    if not nodes:
        sys.exit("bare_binder: no nodes to bind to")
    jobs: queue.SimpleQueue[Job] = queue.SimpleQueue()
    for _ in range(args.workers):
        threading.Thread(target=binder, args=(creds, jobs), daemon=True).start()
    watch_pending(creds, args.scheduler_name, nodes, jobs, args.ready_file)


if __name__ == "__main__":
    main()
