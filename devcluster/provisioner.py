"""A tiny dynamic provisioner for the dev cluster's test StorageClasses (`python -m devcluster.provisioner`).

It plays an external provisioner's part for classes whose provisioner is PROVISIONER: once a scheduler has
picked a node for an unbound claim (PreBind sets `volume.kubernetes.io/selected-node`) and the PV controller
has handed the claim to an external provisioner (it sets `volume.kubernetes.io/storage-provisioner` to the
class's provisioner, as sig-storage's provisioners require before they act), it creates a local PV on that
node, pre-bound to the claim; the PV controller then binds the claim. PVs it made are deleted once Released
when their reclaim policy is Delete, so they do not pile up across tests.

Claims and PVs are followed by list + watch (a relist after any error or a 410 Gone): a watch reacts within
milliseconds, which a scheduler's PreBind timeout needs, and a relist re-handles everything, as the
handlers only compare the current state with what should be.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any

import httpx

from devcluster.kubeapi import Credentials, KubeAPI, KubeAPIError

PROVISIONER = "dev.metrics-sched.io/local"
SELECTED_NODE = "volume.kubernetes.io/selected-node"
STORAGE_PROVISIONER = ("volume.kubernetes.io/storage-provisioner", "volume.beta.kubernetes.io/storage-provisioner")
PROVISIONED_BY = "pv.kubernetes.io/provisioned-by"
HOSTNAME = "kubernetes.io/hostname"
MOUNT_ROOT = "/mnt/dev"
CLAIMS = "/api/v1/persistentvolumeclaims"
VOLUMES = "/api/v1/persistentvolumes"

log = logging.getLogger("devcluster.provisioner")


def wants_volume(claim: Mapping[str, Any]) -> bool:
    """Unbound, a node selected, and handed to this provisioner by the PV controller."""
    annotations = claim.get("metadata", {}).get("annotations") or {}
    return (not claim.get("spec", {}).get("volumeName")
            and bool(annotations.get(SELECTED_NODE))
            and any(annotations.get(key) == PROVISIONER for key in STORAGE_PROVISIONER)
            and not claim.get("metadata", {}).get("deletionTimestamp"))


def topology_refusal(storage_class: Mapping[str, Any], node: Mapping[str, Any]) -> str | None:
    """Why the class's allowedTopologies exclude the node (terms ORed, a term's expressions ANDed), or None."""
    terms = storage_class.get("allowedTopologies") or []
    if not terms:
        return None
    labels = node.get("metadata", {}).get("labels") or {}
    for term in terms:
        if all(labels.get(e["key"]) in e.get("values", ()) for e in term.get("matchLabelExpressions") or ()):
            return None
    node_name, class_name = node["metadata"]["name"], storage_class["metadata"]["name"]
    return f"node {node_name} is outside the allowedTopologies of class {class_name}"


def volume_for(claim: Mapping[str, Any], storage_class: Mapping[str, Any], node: Mapping[str, Any]) -> dict[str, Any]:
    """The PV for the claim: a local volume on the node, pre-bound to the claim (uid included)."""
    meta, spec = claim["metadata"], claim["spec"]
    name = f"pvc-{meta['uid']}"
    hostname = (node["metadata"].get("labels") or {}).get(HOSTNAME) or node["metadata"]["name"]
    volume: dict[str, Any] = {
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": name, "annotations": {PROVISIONED_BY: PROVISIONER}},
        "spec": {
            "capacity": {"storage": spec["resources"]["requests"]["storage"]},
            "accessModes": list(spec.get("accessModes") or ["ReadWriteOnce"]),
            "storageClassName": storage_class["metadata"]["name"],
            "persistentVolumeReclaimPolicy": storage_class.get("reclaimPolicy") or "Delete",
            "volumeMode": spec.get("volumeMode") or "Filesystem",
            "local": {"path": f"{MOUNT_ROOT}/{name}"},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": HOSTNAME, "operator": "In", "values": [hostname]}]}]}},
            "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "namespace": meta["namespace"],
                         "name": meta["name"], "uid": meta["uid"]},
        },
    }
    if storage_class.get("mountOptions"):
        volume["spec"]["mountOptions"] = list(storage_class["mountOptions"])
    return volume


def released_by_us(volume: Mapping[str, Any]) -> bool:
    """A PV this provisioner made whose claim is gone and whose reclaim policy says delete it."""
    annotations = volume.get("metadata", {}).get("annotations") or {}
    return (annotations.get(PROVISIONED_BY) == PROVISIONER
            and volume.get("status", {}).get("phase") == "Released"
            and volume.get("spec", {}).get("persistentVolumeReclaimPolicy", "Delete") == "Delete"
            and not volume.get("metadata", {}).get("deletionTimestamp"))


class Provisioner:
    def __init__(self, api: KubeAPI) -> None:
        self.api = api
        self._refused: set[tuple[str, str]] = set()  # (claim uid, reason): one Event each, not one per update

    def on_claim(self, claim: dict[str, Any]) -> None:
        if not wants_volume(claim):
            return
        meta = claim["metadata"]
        class_name = claim["spec"].get("storageClassName") or ""
        storage_class = self.api.request("GET", f"/apis/storage.k8s.io/v1/storageclasses/{class_name}", ok=(404,))
        if not storage_class or storage_class.get("provisioner") != PROVISIONER:
            return
        node_name = meta["annotations"][SELECTED_NODE]
        node = self.api.request("GET", f"/api/v1/nodes/{node_name}", ok=(404,))
        if not node or node.get("kind") != "Node":
            self._refuse(claim, f"selected node {node_name} does not exist")
            return
        reason = topology_refusal(storage_class, node)
        if reason:
            self._refuse(claim, reason)
            return
        volume = volume_for(claim, storage_class, node)
        created = self.api.post(VOLUMES, volume, ok=(409,))
        if created.get("kind") == "PersistentVolume":
            log.info("provisioned %s for %s/%s on %s", volume["metadata"]["name"], meta["namespace"], meta["name"],
                     node_name)

    def on_volume(self, volume: dict[str, Any]) -> None:
        if not released_by_us(volume):
            return
        meta = volume["metadata"]
        # The uid precondition: never delete a PV re-created under the same name since this event.
        self.api.request("DELETE", f"{VOLUMES}/{meta['name']}",
                         {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": meta["uid"]}},
                         ok=(404, 409))
        log.info("deleted released %s", meta["name"])

    def _refuse(self, claim: Mapping[str, Any], reason: str) -> None:
        meta = claim["metadata"]
        if (meta["uid"], reason) in self._refused:
            return
        self._refused.add((meta["uid"], reason))
        log.warning("not provisioning %s/%s: %s", meta["namespace"], meta["name"], reason)
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        self.api.post(f"/api/v1/namespaces/{meta['namespace']}/events", {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
            "involvedObject": {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "namespace": meta["namespace"],
                               "name": meta["name"], "uid": meta["uid"]},
            "type": "Warning", "reason": "ProvisioningFailed", "message": reason,
            "source": {"component": PROVISIONER}, "reportingComponent": PROVISIONER,
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
        })


def list_and_watch(api: KubeAPI, path: str, handle: Callable[[dict[str, Any]], None], stop: threading.Event) -> None:
    """Lists, handles every item, then watches from the list's resourceVersion; any error (410 Gone included)
    relists after a second, which also retries whatever a handler failed on."""
    while not stop.is_set():
        try:
            listed = api.get(path)
            for item in listed["items"]:
                handle(item)
            version = listed["metadata"]["resourceVersion"]
            while not stop.is_set():
                for event in api.watch(path, version):
                    if event["type"] == "ERROR":
                        raise KubeAPIError(int(event["object"].get("code") or 500),
                                           f"watch {path}: {event['object'].get('message')}")
                    version = event["object"]["metadata"]["resourceVersion"]
                    if event["type"] in ("ADDED", "MODIFIED"):
                        handle(event["object"])
        except (httpx.HTTPError, KubeAPIError, KeyError, ValueError) as exc:
            if stop.is_set():
                return
            log.warning("%s: %s: %s; relisting", path, type(exc).__name__, exc)
            stop.wait(1.0)


def serve(argv: list[str] | None, prog: str, description: str,
          watches: Callable[[Credentials], list[tuple[KubeAPI, str, Callable[[dict[str, Any]], None]]]],
          started: str) -> int:
    """A dev-cluster agent's process: `--kubeconfig`, logging, SIGTERM/SIGINT, one daemon thread per watch (each
    with its own client: a streaming watch holds its connection for its whole length; the threads block in a read,
    and the process ends without waiting for them), until a signal."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
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
    for api, path, handle in watches(Credentials.from_kubeconfig(args.kubeconfig)):
        threading.Thread(target=list_and_watch, args=(api, path, handle, stop), name=path.rsplit("/", 1)[-1],
                         daemon=True).start()
    log.info("%s", started)
    stop.wait()
    return 0


def main(argv: list[str] | None = None) -> int:
    def watches(creds: Credentials) -> list[tuple[KubeAPI, str, Callable[[dict[str, Any]], None]]]:
        claims_api, volumes_api = KubeAPI(creds), KubeAPI(creds)
        return [(claims_api, CLAIMS, Provisioner(claims_api).on_claim),
                (volumes_api, VOLUMES, Provisioner(volumes_api).on_volume)]

    return serve(argv, "python -m devcluster.provisioner", __doc__.splitlines()[0], watches,
                 f"provisioning for class provisioner {PROVISIONER}")


if __name__ == "__main__":
    raise SystemExit(main())
