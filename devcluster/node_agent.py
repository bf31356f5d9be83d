"""What a kubelet would do for the dev cluster's KWOK nodes that KWOK does not (`python -m devcluster.node_agent`).

A kubelet derives a node's `status.allocatable` from its `status.capacity`; for an extended resource (one
outside the kubernetes.io domain, e.g. `example.com/beardsecond`) the two are equal, and a resource gone from
capacity leaves allocatable too. Upstream's e2e specs rely on this: they add an extended resource to a node's
capacity and expect the scheduler to count it (the pod-overhead spec of test/e2e/scheduling). KWOK copies
capacity to allocatable only once, when it initialises the node; this agent keeps doing it for every later
change (list + watch of the nodes KWOK manages). Native resources (cpu, memory, pods, hugepages-*, ...) are left
as they are: the dev cluster writes both sides itself.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from types import FrameType
from typing import Any

from devcluster.kubeapi import Credentials, KubeAPI
from devcluster.nodes import KWOK_ANNOTATION
from devcluster.provisioner import list_and_watch

NODES = "/api/v1/nodes"

log = logging.getLogger("devcluster.node_agent")


def is_extended_resource(name: str) -> bool:
    """As upstream's IsExtendedResourceName: fully qualified, outside kubernetes.io, not a quota `requests.` name."""
    if "/" not in name or name.startswith("requests."):
        return False
    domain = name.split("/", 1)[0]
    return domain != "kubernetes.io" and not domain.endswith(".kubernetes.io")


def allocatable_patch(node: Mapping[str, Any]) -> dict[str, Any] | None:
    """The merge patch of status that makes the node's extended allocatable equal its capacity, or None.

    Only nodes KWOK manages (the ones without a kubelet); a removed resource is patched to null (deleted)."""
    annotations = node.get("metadata", {}).get("annotations") or {}
    if KWOK_ANNOTATION not in annotations:
        return None
    status = node.get("status") or {}
    capacity: Mapping[str, str] = status.get("capacity") or {}
    allocatable: Mapping[str, str] = status.get("allocatable") or {}
    changes: dict[str, str | None] = {
        name: value for name, value in capacity.items()
        if is_extended_resource(name) and allocatable.get(name) != value
    }
    changes.update({name: None for name in allocatable if is_extended_resource(name) and name not in capacity})
    if not changes:
        return None
    return {"status": {"allocatable": changes}}


class NodeAgent:
    def __init__(self, api: KubeAPI) -> None:
        self.api = api

    def on_node(self, node: dict[str, Any]) -> None:
        patch = allocatable_patch(node)
        if patch is None:
            return
        name = node["metadata"]["name"]
        self.api.merge_patch(f"{NODES}/{name}/status", patch)
        log.info("node %s: allocatable %s", name, patch["status"]["allocatable"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m devcluster.node_agent", description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", type=Path, required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(stream=sys.stderr, level=logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for noisy in ("httpx", "httpcore"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    api = KubeAPI(Credentials.from_kubeconfig(args.kubeconfig))
    # A daemon thread blocked in the watch's read: the process ends without waiting for it.
    threading.Thread(target=list_and_watch, args=(api, NODES, NodeAgent(api).on_node, stop), name="nodes",
                     daemon=True).start()
    log.info("keeping the extended resources of KWOK nodes' allocatable equal to their capacity")
    stop.wait()
    return 0


__all__ = ["NodeAgent", "allocatable_patch", "is_extended_resource", "main"]

if __name__ == "__main__":
    raise SystemExit(main())
