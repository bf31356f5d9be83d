"""What a kubelet would do for the dev cluster's KWOK nodes that KWOK does not (`python -m devcluster.node_agent`).

A kubelet derives a node's `status.allocatable` from its `status.capacity`; for an extended resource (one
outside the kubernetes.io domain, e.g. `example.com/beardsecond`) the two are equal, and a resource gone from
capacity leaves allocatable too. Upstream's e2e specs rely on this: they add an extended resource to a node's
capacity and expect the scheduler to count it (the pod-overhead spec of test/e2e/scheduling). KWOK copies
capacity to allocatable only once, when it initialises the node; this agent keeps doing it for every later
change (list + watch of the nodes KWOK manages). Native resources (cpu, memory, pods, hugepages-*, ...) are left
as they are: the dev cluster writes both sides itself.

It also finishes the deletion of pods on those nodes, in place of KWOK's `pod-delete` stage (the dev cluster leaves
that stage out when the agent runs). KWOK deletes a terminating pod by name alone; when a spec deletes a pod and at
once creates another of the same name (test/e2e/scheduling's Get2NodesThatCanRunPod does, within ~10 ms), KWOK's
late delete of the first one deletes the second. A kubelet deletes with the pod's uid as a precondition, and so
does this agent.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Set
from typing import Any

from devcluster.kubeapi import Credentials, KubeAPI
from devcluster.nodes import KWOK_ANNOTATION
from devcluster.provisioner import serve

NODES = "/api/v1/nodes"
PODS = "/api/v1/pods"

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


def is_kwok_node(node: Mapping[str, Any]) -> bool:
    return KWOK_ANNOTATION in (node.get("metadata", {}).get("annotations") or {})


def pod_deletion(pod: Mapping[str, Any], kwok_nodes: Set[str]) -> tuple[str, dict[str, Any]] | None:
    """The DELETE (path, body) that ends a terminating pod on a KWOK node, as its kubelet would once its containers
    stopped: grace period 0, and the pod's uid as a precondition so that a new pod of the same name is never hit."""
    meta = pod.get("metadata") or {}
    node = (pod.get("spec") or {}).get("nodeName")
    if not meta.get("deletionTimestamp") or not node or node not in kwok_nodes:
        return None
    body = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0,
            "preconditions": {"uid": meta["uid"]}}
    return f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}", body


class NodeAgent:
    def __init__(self, nodes_api: KubeAPI, pods_api: KubeAPI) -> None:
        self.nodes_api = nodes_api
        self.pods_api = pods_api
        # Written by the node watch, read by the pod watch: a set swapped whole, never mutated in place.
        self.kwok_nodes: frozenset[str] = frozenset()

    def on_node(self, node: dict[str, Any]) -> None:
        name = node["metadata"]["name"]
        if is_kwok_node(node) and name not in self.kwok_nodes:
            self.kwok_nodes = self.kwok_nodes | {name}
        patch = allocatable_patch(node)
        if patch is None:
            return
        self.nodes_api.merge_patch(f"{NODES}/{name}/status", patch)
        log.info("node %s: allocatable %s", name, patch["status"]["allocatable"])

    def on_pod(self, pod: dict[str, Any]) -> None:
        deletion = pod_deletion(pod, self.kwok_nodes)
        if deletion is None:
            return
        path, body = deletion
        # 404: already gone; 409: the name now belongs to another pod (the precondition did its job).
        self.pods_api.request("DELETE", path, body, ok=(404, 409))
        log.info("deleted terminating pod %s", path.removeprefix("/api/v1/namespaces/"))


def main(argv: list[str] | None = None) -> int:
    def watches(creds: Credentials) -> list[tuple[KubeAPI, str, Callable[[dict[str, Any]], None]]]:
        nodes_api, pods_api = KubeAPI(creds), KubeAPI(creds)
        agent = NodeAgent(nodes_api, pods_api)
        return [(nodes_api, NODES, agent.on_node), (pods_api, PODS, agent.on_pod)]

    return serve(argv, "python -m devcluster.node_agent", __doc__.splitlines()[0], watches,
                 "KWOK nodes: extended resources kept from capacity to allocatable; terminating pods deleted by uid")


__all__ = ["NodeAgent", "allocatable_patch", "is_extended_resource", "is_kwok_node", "main", "pod_deletion"]

if __name__ == "__main__":
    raise SystemExit(main())
