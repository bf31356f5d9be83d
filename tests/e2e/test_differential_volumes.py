"""Differential test, volume cases: the real kube-scheduler and metrics-sched place the same pod with volumes on
the same fresh nodes, with the dev cluster's PV controller, ephemeral-volume controller and test provisioner at
work (the method of tests/e2e/test_differential.py, whose docstring explains it; its verdict, decision record
and comparison helpers are reused).

Each case (1-5 big nodes, so resources never decide; zones and beta zones; CSINodes) draws:
- storage classes: WaitForFirstConsumer without a provisioner (static only), WaitForFirstConsumer with the test
  provisioner (dynamic; 35% with allowedTopologies on zone or hostname), Immediate without a provisioner, and
  sometimes a class whose provisioner is the test CSI driver, which nobody serves: its claims, used only by
  pods already on the nodes, stay Pending and count towards that driver's CSINode limit;
- 0-6 PVs of those classes: capacity, access modes (RWOP too), volumeMode, node affinity on a node's hostname
  or a zone (or none: a CSI volume), labels for claim selectors, zone labels for VolumeZone (matching the
  affinity or not, GA or beta, multi-zone values), a CSI source (driver CSI_DRIVER, a handle per copy), some
  pre-bound to a claim of the case (claimRef, no uid);
- claims: class (or one that does not exist), request, access modes, selector, volumeMode; some never created;
- pods already on the nodes (spec.nodeName) with some claims, generic ephemeral volumes and in-line disks (GCE
  PD, AWS EBS: read-only or not), and CSINodes with allocatable.count 0-3 for CSI_DRIVER;
- the pod to place: 1-3 claims or generic ephemeral volumes (their class drawn among the case's), in-line disks.

Everything is per copy: classes, PVs, CSINodes and handles are named after the copy's pool, claims and pods
live in a namespace of the copy's own, so a claim only ever matches its copy's PVs (PreBind really binds).

Both copies must be the same case when the schedulers look, so nothing is left to the order in which the
controllers act or a scheduler lists:
- The PV controller binds an Immediate claim to a fitting PV whatever the node, and two claims may want the same
  PV: the generator pre-binds (claimRef) the PV it would pick for each (_bind_immediate), so no claim it leaves
  unbound has an unclaimed PV it could take; and the claims are created once the controller has seen every PV
  (it binds at a claim's first sync to the best PV it knows of). A PV pre-bound to a claim gets the claim's class
  and access modes (see _bound_early: otherwise a scheduler could pick it and wait in PreBind forever).
- No two PVs of a case have the same capacity: on a tie, the PV a claim takes is the first a scheduler lists, a
  Go map's order in kube-scheduler.
- The pod to place never uses a claim of the class nobody provisions: PreBind would wait forever.
- The pods to place are created behind a scheduling gate (the ephemeral-volume controller creates their claims
  meanwhile), and the test waits until every ephemeral claim exists, every PV has left phase Pending, every
  claim with a fitting pre-bound PV is Bound, every claim of an Immediate class is Bound or was found unmatched
  by the PV controller (its ProvisioningFailed event: the class has no provisioner), and nothing changed for a
  few claim resyncs (1 s each). Then the gates are lifted.

Compared as in test_differential: feasibility on every case; when kube-scheduler bound the pod, its node must be
in metrics-sched's feasible set (so with one feasible node, the same node). Every case comes from (DIFF_SEED,
case number) alone:

    DIFF_SEED=7 pytest tests/e2e/test_differential_volumes.py -m e2e               # another seed
    DIFF_SEED=7 DIFF_CASE=17 pytest tests/e2e/test_differential_volumes.py -m e2e  # one case of it
    DIFF_CASES=400 pytest tests/e2e/test_differential_volumes.py -m e2e            # more cases
"""

from __future__ import annotations

import collections
import os
import random
import secrets
import statistics
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from devcluster import DevCluster, NodeSpec
from devcluster.kubeapi import KubeAPI
from devcluster.nodes import create_nodes, node_ip
from devcluster.provisioner import PROVISIONER
from metrics_sched.model.volumes import ANN_BIND_COMPLETED, NO_PROVISIONER
from tests.e2e import kube
from tests.e2e.kube_scheduler import kube_scheduler
from tests.e2e.pools import POOL_LABEL, in_pool
from tests.e2e.scheduler_proc import schedulers
from tests.e2e.test_differential import (
    HOSTNAME,
    LOCAL,
    NODE_REF,
    WITHOUT_TELEMETRY,
    ZONE,
    Copy,
    Verdict,
    _said,
    case_yaml,
    disagreement,
    ms_decisions,
    verdict_of,
)

pytestmark = pytest.mark.e2e

SEED = int(os.environ.get("DIFF_SEED", "20261201"))
CASES = int(os.environ.get("DIFF_CASES", "120"))
ONLY = os.environ.get("DIFF_CASE")

BETA_ZONE = "failure-domain.beta.kubernetes.io/zone"
CSI_DRIVER = "csi.diff.metrics-sched.io"
GATE = "metrics-sched.test/settle"  # the pods to place wait behind it until the cluster has settled
SCHEDULERS = ("kube", "ms")
CLASSES = "/apis/storage.k8s.io/v1/storageclasses"
CSINODES = "/apis/storage.k8s.io/v1/csinodes"
VOLUMES = "/api/v1/persistentvolumes"
GHOST = "ghost"  # a class reference whose StorageClass never exists
RWO, ROX, RWX, RWOP = "ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany", "ReadWriteOncePod"
CLAIM_MODES = [[RWO], [RWO], [RWO], [RWO], [RWO], [ROX], [RWX], [RWO, ROX], [RWOP]]
PV_MODES = [[RWO], [RWO], [RWO], [RWO, ROX, RWX], [RWO, ROX, RWX], [RWX], [ROX], [RWOP], [RWOP]]
CLAIM_GI = [1, 2, 5, 8, 10, 15]
PV_GI = [1, 2, 5, 10, 15, 20]
TIERS = ["gold", "silver"]
# The class kinds (see the module docstring): (provisioner, WaitForFirstConsumer?).
KINDS = {"static": (NO_PROVISIONER, True), "dynamic": (PROVISIONER, True), "immediate": (NO_PROVISIONER, False),
         "csi": (CSI_DRIVER, True)}
# Reasons in kube-scheduler's messages (infeasible cases) or metrics-sched's rejections (any case) that show a
# feature at work, by the name the report gives it.
REASONS = {
    "zone conflict": "had no available volume zone",
    "node-affinity conflict": "didn't match PersistentVolume's node affinity",
    "bind conflict (no PV, no provisioning)": "didn't find available persistent volumes to bind",
    "immediate claim unbound": "pod has unbound immediate PersistentVolumeClaims",
    "missing claim": "persistentvolumeclaim \"",
    "missing class": "storageclass.storage.k8s.io \"",
    "RWOP conflict": "ReadWriteOncePod access mode already in-use",
    "disk conflict": "had no available disk",
    "CSI limit reached": "exceed max volume count",
}


# -- generation ---------------------------------------------------------------------------------------
def _zone(rng: random.Random, zones: int) -> str:
    return f"{LOCAL}zone-{rng.randrange(zones)}"


def _selector(rng: random.Random) -> dict[str, Any]:
    """A claim's selector on the PVs' tier label."""
    if rng.random() < 0.5:
        return {"matchLabels": {"tier": rng.choice(TIERS)}}
    op = rng.choice(["In", "NotIn", "Exists", "DoesNotExist"])
    req: dict[str, Any] = {"key": "tier", "operator": op}
    if op in ("In", "NotIn"):
        req["values"] = [rng.choice(TIERS)]
    return {"matchExpressions": [req]}


def _disks(rng: random.Random) -> list[dict[str, Any]]:
    """In-line disks: a GCE PD (conflicts unless both read-only) or an AWS EBS volume (always conflicts)."""
    out = []
    for _ in range(rng.randint(1, 2)):
        if rng.random() < 0.6:
            out.append({"gce": rng.choice(["pd-a", "pd-a", "pd-b"]), "readOnly": rng.random() < 0.5})
        else:
            out.append({"ebs": rng.choice(["vol-a", "vol-b"]), "readOnly": rng.random() < 0.3})
    return out


def _ephemeral(rng: random.Random, classes: list[int | str]) -> dict[str, Any]:
    eph: dict[str, Any] = {"class": rng.choice(classes), "size": f"{rng.choice(CLAIM_GI)}Gi",
                           "modes": list(rng.choice(CLAIM_MODES))}
    if rng.random() < 0.1:
        eph["block"] = True
    return eph


def _meets(rng: random.Random, selector: dict[str, Any] | None) -> dict[str, str]:
    """PV labels: some tier, or one the claim's selector accepts."""
    if selector is None:
        return {"tier": rng.choice(TIERS)} if rng.random() < 0.7 else {}
    if "matchLabels" in selector:
        return dict(selector["matchLabels"])
    req = selector["matchExpressions"][0]
    if req["operator"] == "DoesNotExist":
        return {}
    if req["operator"] == "NotIn":
        return {"tier": next(t for t in TIERS if t not in req["values"])}
    return {"tier": req["values"][0] if "values" in req else rng.choice(TIERS)}


def _pv(rng: random.Random, cls: int, count: int, zones: int, csi_heavy: bool,
        claim: dict[str, Any] | None = None) -> dict[str, Any]:
    """A PV of the class; made to match `claim` (size, access modes, volume mode, selector) when given."""
    if claim is None:
        pv: dict[str, Any] = {"class": cls, "size": f"{rng.choice(PV_GI)}Gi", "modes": list(rng.choice(PV_MODES)),
                              "block": rng.random() < 0.12}
        pv["labels"] = _meets(rng, None)
    else:
        modes = [m for m in PV_MODES if set(claim["modes"]) <= set(m)]
        pv = {"class": cls, "size": f"{rng.choice([g for g in PV_GI if g >= _gi(claim['size'])])}Gi",
              "modes": list(rng.choice(modes)), "block": claim.get("block", False),
              "labels": _meets(rng, claim.get("selector"))}
    if not pv["block"]:
        del pv["block"]
    if not pv["labels"]:
        del pv["labels"]
    draw = rng.random() * (1.7 if csi_heavy else 1)  # CSI-heavy cases: mostly CSI volumes without affinity
    if draw < 0.45:
        pv["node"] = f"{NODE_REF}{rng.randrange(count)}"
    elif draw < 0.7:
        pv["zone"] = _zone(rng, zones) if rng.random() < 0.95 else f"{LOCAL}zone-9"  # 9: no node's zone
    pv["csi"] = ("node" not in pv and "zone" not in pv) or rng.random() < (0.8 if csi_heavy else 0.25)
    if rng.random() < 0.5:  # VolumeZone's labels: the affinity's zone, another, several, or the beta key
        zone = pv["zone"] if "zone" in pv and rng.random() < 0.5 else _zone(rng, zones)
        if rng.random() < 0.15:
            zone = f"{zone}__{_zone(rng, zones)}"
        pv["zoneLabel"] = {"key": BETA_ZONE if rng.random() < 0.2 else ZONE, "value": zone}
    return pv


def generate(seed: int, number: int) -> dict[str, Any]:
    """One case, from (seed, number) alone."""
    rng = random.Random(f"{seed}:{number}:volumes")
    count = rng.choices(range(1, 6), weights=[3, 3, 3, 2, 2])[0]
    zones = rng.randint(1, 3)
    csi_heavy = rng.random() < 0.25  # CSINodes on most nodes, mostly CSI volumes: limits decide
    nodes: list[dict[str, Any]] = []
    for i in range(count):
        node: dict[str, Any] = {}
        if rng.random() < 0.85:
            node["zone"] = f"{LOCAL}zone-{i % zones}" if rng.random() < 0.7 else _zone(rng, zones)
        if rng.random() < 0.1:
            node["betaZone"] = node.get("zone") or _zone(rng, zones)
        if rng.random() < (0.85 if csi_heavy else 0.3):
            node["csiNode"] = {"count": rng.randint(0, 3)} if rng.random() < 0.9 else {}
        nodes.append(node)
    classes: list[dict[str, Any]] = []
    for _ in range(rng.randint(1, 3)):
        kind = rng.choices(["static", "dynamic", "immediate"], weights=[35, 30, 35])[0]
        cls: dict[str, Any] = {"kind": kind}
        if kind == "dynamic" and rng.random() < 0.35:
            if rng.random() < 0.5:
                key, vocab = ZONE, [f"{LOCAL}zone-{z}" for z in range(zones)]
            else:
                key, vocab = HOSTNAME, [f"{NODE_REF}{i}" for i in range(count)]
            values = sorted(rng.sample(vocab, rng.randint(1, len(vocab))))
            cls["allowedTopologies"] = [{"matchLabelExpressions": [{"key": key, "values": values}]}]
        classes.append(cls)
    if csi_heavy and not any(c["kind"] == "immediate" for c in classes):
        classes.append({"kind": "immediate"})  # CSI PVs bound before any pod: their claims count at once
    if rng.random() < (0.5 if csi_heavy else 0.12):
        classes.append({"kind": "csi"})
    placeable: list[int | str] = [i for i, c in enumerate(classes) if c["kind"] != "csi"]

    claims: list[dict[str, Any]] = []
    for _ in range(rng.randint(1, 5)):
        ref: int | str = GHOST if rng.random() < 0.03 else rng.randrange(len(classes))
        claim: dict[str, Any] = {"class": ref, "size": f"{rng.choice(CLAIM_GI)}Gi",
                                 "modes": list(rng.choice(CLAIM_MODES))}
        if rng.random() < 0.12:
            claim["block"] = True
        if rng.random() < 0.2:
            claim["selector"] = _selector(rng)
        if rng.random() < 0.03:
            claim["missing"] = True
        claims.append(claim)

    pvs: list[dict[str, Any]] = []
    for claim in claims:  # a PV meant for the claim, more often than chance would make one
        kind = classes[int(claim["class"])]["kind"] if claim["class"] in placeable else "csi"
        if rng.random() < {"static": 0.55, "immediate": 0.8}.get(kind, 0):
            pvs.append(_pv(rng, int(claim["class"]), count, zones, csi_heavy, claim))
    for _ in range(rng.choice([0, 1, 1, 2, 2, 3, 4])):
        pvs.append(_pv(rng, rng.choice([i for i in placeable if isinstance(i, int)]), count, zones, csi_heavy))
    rng.shuffle(pvs)
    targets: set[int] = set()
    for pv in pvs:
        free = [j for j, c in enumerate(claims) if j not in targets and c["class"] in placeable]
        if free and rng.random() < 0.15:  # pre-bound to a claim: of its class and access modes (see _bound_early)
            j = rng.choice(free)
            targets.add(j)
            pv["claim"], pv["class"] = f"c{j}", claims[j]["class"]
            if not set(claims[j]["modes"]) <= set(pv["modes"]):
                pv["modes"] = list(claims[j]["modes"])

    existing: list[dict[str, Any]] = []
    for _ in range(rng.choice([0, 1, 1, 2, 3, 4])):
        e: dict[str, Any] = {"node": rng.randrange(count),
                             "claims": sorted(rng.sample(range(len(claims)), rng.randint(0, min(2, len(claims)))))}
        if rng.random() < 0.1:
            e["ephemeral"] = [_ephemeral(rng, list(range(len(classes))))]
        if rng.random() < 0.35:
            e["disks"] = _disks(rng)
        existing.append(e)

    # The pod to place never uses a claim of the "csi" class: nobody provisions it, PreBind would wait forever.
    usable = [j for j, c in enumerate(claims) if c["class"] in placeable or c["class"] == GHOST]
    pod: dict[str, Any] = {"claims": [], "ephemeral": []}
    for _ in range(rng.randint(1, 3)):
        left = [j for j in usable if j not in pod["claims"]]
        if left and rng.random() > 0.15:
            pod["claims"].append(rng.choice(left))
        else:
            pod["ephemeral"].append(_ephemeral(rng, placeable if rng.random() < 0.96 else [GHOST]))
    if rng.random() < 0.35:
        pod["disks"] = _disks(rng)
    case = {"seed": seed, "case": number, "csi_heavy": csi_heavy, "nodes": nodes, "classes": classes,
            "claims": claims, "pvs": pvs, "existing": existing, "pod": pod}
    _bind_immediate(case)
    return case


def _gi(size: str) -> int:
    return int(size.removesuffix("Gi"))


POD = "{pod}"  # in a claim key: the pod to place's name, which differs per copy


def _all_claims(case: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Every claim of the case that exists, by key ("c<j>"; ephemeral ones "<pod>-eph<i>", the pod to place's
    as POD + "-eph<i>"), in a fixed order."""
    out = [(f"c{j}", c) for j, c in enumerate(case["claims"]) if not c.get("missing")]
    out += [(f"e{k}-eph{i}", v) for k, e in enumerate(case["existing"]) for i, v in enumerate(e.get("ephemeral", []))]
    return out + [(f"{POD}-eph{i}", v) for i, v in enumerate(case["pod"]["ephemeral"])]


def _selects(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    if selector is None:
        return True
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for req in selector.get("matchExpressions", []):
        value, op = labels.get(req["key"]), req["operator"]
        if ((op == "In" and value not in req["values"]) or (op == "NotIn" and value in req["values"])
                or (op == "Exists" and value is None) or (op == "DoesNotExist" and value is not None)):
            return False
    return True


def _fits(pv: dict[str, Any], claim: dict[str, Any]) -> bool:
    """What the PV controller's FindMatchingVolume asks of a PV pre-bound to the claim (capacity, volume mode) and
    its access-mode index (the claim's modes among the PV's)."""
    return (_gi(pv["size"]) >= _gi(claim["size"]) and pv.get("block", False) == claim.get("block", False)
            and set(claim["modes"]) <= set(pv["modes"]))


def _bind_immediate(case: dict[str, Any]) -> None:
    """Pre-binds (claimRef) the PV the PV controller would bind each Immediate claim to, so that what it binds
    does not depend on the order it syncs claims in (two claims may want the same PV): each copy settles alike.
    Claim by claim, in a fixed order: a fitting PV pre-bound to it wins, else the smallest unclaimed PV of its
    class that fits and that its selector accepts (the controller's FindMatchingVolume, without a node). A claim
    left without one has no unclaimed PV it could take."""
    pvs = case["pvs"]
    for key, claim in _all_claims(case):
        if claim["class"] == GHOST or case["classes"][claim["class"]]["kind"] != "immediate":
            continue
        if any(pv.get("claim") == key and _fits(pv, claim) for pv in pvs):
            continue
        fitting = [(_gi(pv["size"]), k) for k, pv in enumerate(pvs)
                   if "claim" not in pv and pv["class"] == claim["class"] and _fits(pv, claim)
                   and _selects(claim.get("selector"), pv.get("labels", {}))]
        if fitting:
            pvs[min(fitting)[1]]["claim"] = key


def _bound_early(case: dict[str, Any]) -> set[str]:
    """The claims the PV controller binds before any pod: those a fitting PV is pre-bound to.

    The generator gives a pre-bound PV the claim's class and access modes: the controller looks at neither class
    nor selector for it, and the schedulers' FindMatchingVolume (among the class's PVs) takes it without looking
    at access modes, while the controller looks up PVs by access modes. With modes the claim lacks, a scheduler
    would pick the PV and wait in PreBind for a binding the controller never makes (10 minutes upstream)."""
    claims = dict(_all_claims(case))
    return {pv["claim"] for pv in case["pvs"] if pv.get("claim") in claims and _fits(pv, claims[pv["claim"]])}


# -- rendering: one copy of a case ----------------------------------------------------------------------
def _claim_spec(want: dict[str, Any], class_name: str) -> dict[str, Any]:
    spec: dict[str, Any] = {"accessModes": want["modes"], "storageClassName": class_name,
                            "resources": {"requests": {"storage": want["size"]}},
                            "volumeMode": "Block" if want.get("block") else "Filesystem"}
    if "selector" in want:
        spec["selector"] = want["selector"]
    return spec


def _disk_volume(name: str, disk: dict[str, Any]) -> dict[str, Any]:
    if "gce" in disk:
        return {"name": name, "gcePersistentDisk": {"pdName": disk["gce"], "readOnly": disk["readOnly"]}}
    return {"name": name, "awsElasticBlockStore": {"volumeID": disk["ebs"], "readOnly": disk["readOnly"]}}


@dataclass
class VolumeCopy(Copy):
    """One case's copy for one scheduler: its pool, and a namespace named after the pool."""

    @property
    def namespace(self) -> str:
        return self.pool

    def class_name(self, ref: int | str) -> str:
        return f"{self.pool}-{ref}" if ref == GHOST else f"{self.pool}-sc{ref}"

    def pv_name(self, k: int) -> str:
        return f"{self.pool}-pv{k}"

    def node_specs(self, base: int) -> list[NodeSpec]:
        specs = []
        for j, (name, n) in enumerate(zip(self.names, self.case["nodes"], strict=True)):
            labels = {POOL_LABEL: self.pool, "diff-run": self.run}
            if "zone" in n:
                labels[ZONE] = self.render(n["zone"])
            if "betaZone" in n:
                labels[BETA_ZONE] = self.render(n["betaZone"])
            specs.append(NodeSpec(name=name, internal_ip=node_ip(base + j), cpu="16", memory="64Gi", pods=110,
                                  labels=labels, taints=({"key": POOL_LABEL, "value": self.pool,
                                                          "effect": "NoSchedule"},)))
        return specs

    def storage_classes(self) -> list[dict[str, Any]]:
        out = []
        for i, c in enumerate(self.case["classes"]):
            provisioner, wffc = KINDS[c["kind"]]
            body: dict[str, Any] = {
                "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
                "metadata": {"name": self.class_name(i), "labels": {"diff-run": self.run}},
                "provisioner": provisioner, "reclaimPolicy": "Delete",
                "volumeBindingMode": "WaitForFirstConsumer" if wffc else "Immediate"}
            if "allowedTopologies" in c:
                body["allowedTopologies"] = self.render(c["allowedTopologies"])
            out.append(body)
        return out

    def csi_nodes(self) -> list[dict[str, Any]]:
        out = []
        for name, n in zip(self.names, self.case["nodes"], strict=True):
            if "csiNode" in n:
                driver: dict[str, Any] = {"name": CSI_DRIVER, "nodeID": name}
                if "count" in n["csiNode"]:
                    driver["allocatable"] = {"count": n["csiNode"]["count"]}
                out.append({"apiVersion": "storage.k8s.io/v1", "kind": "CSINode",
                            "metadata": {"name": name, "labels": {"diff-run": self.run}},
                            "spec": {"drivers": [driver]}})
        return out

    def volumes(self) -> list[dict[str, Any]]:
        out = []
        for k, want in enumerate(self.case["pvs"]):
            name = self.pv_name(k)
            # k MiB more than its size: no two PVs of a case have the same capacity. On a tie, the PV a scheduler
            # takes for a claim is the first in its list, which is a Go map's order in kube-scheduler (random),
            # and which PV a claim takes can decide whether another claim of the pod finds one.
            capacity = f"{_gi(want['size']) * 1024 + k}Mi"
            spec: dict[str, Any] = {"capacity": {"storage": capacity}, "accessModes": want["modes"],
                                    "storageClassName": self.class_name(want["class"]),
                                    "persistentVolumeReclaimPolicy": "Retain",
                                    "volumeMode": "Block" if want.get("block") else "Filesystem"}
            if want["csi"]:
                spec["csi"] = {"driver": CSI_DRIVER, "volumeHandle": f"{name}-handle"}
            else:
                spec["local"] = {"path": f"/mnt/{name}"}
            if "node" in want or "zone" in want:
                key, value = (HOSTNAME, want["node"]) if "node" in want else (ZONE, want["zone"])
                spec["nodeAffinity"] = {"required": {"nodeSelectorTerms": [
                    {"matchExpressions": [{"key": key, "operator": "In", "values": [self.render(value)]}]}]}}
            if "claim" in want:
                spec["claimRef"] = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "namespace": self.namespace,
                                    "name": want["claim"].replace(POD, self.pod_name)}
            labels = {**want.get("labels", {}), "diff-run": self.run}
            if "zoneLabel" in want:
                labels[want["zoneLabel"]["key"]] = "__".join(
                    self.render(z) for z in want["zoneLabel"]["value"].split("__"))
            out.append({"apiVersion": "v1", "kind": "PersistentVolume",
                        "metadata": {"name": name, "labels": labels}, "spec": spec})
        return out

    def claims(self) -> list[dict[str, Any]]:
        return [{"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                 "metadata": {"name": f"c{j}", "namespace": self.namespace},
                 "spec": _claim_spec(want, self.class_name(want["class"]))}
                for j, want in enumerate(self.case["claims"]) if not want.get("missing")]

    def _volumes(self, want: dict[str, Any]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = [{"name": f"v{j}", "persistentVolumeClaim": {"claimName": f"c{j}"}}
                                     for j in want["claims"]]
        out += [{"name": f"eph{k}", "ephemeral": {"volumeClaimTemplate": {
                    "spec": _claim_spec(e, self.class_name(e["class"]))}}}
                for k, e in enumerate(want.get("ephemeral", []))]
        out += [_disk_volume(f"d{k}", d) for k, d in enumerate(want.get("disks", []))]
        return out

    def _pod(self, name: str, role: str, want: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
        body = kube.pod_manifest(name, memory="128Mi", volumes=self._volumes(want), **spec)
        body["metadata"].update(namespace=self.namespace, labels={"diff": role, "diff-run": self.run})
        return body

    def existing_pods(self) -> list[dict[str, Any]]:
        return [self._pod(f"e{k}", "existing", e, {"nodeName": self.names[e["node"]], "schedulerName": "nobody",
                                                      "tolerations": [{"operator": "Exists"}]})
                for k, e in enumerate(self.case["existing"])]

    def pod(self, scheduler_name: str) -> dict[str, Any]:
        return self._pod(self.pod_name, "probe", self.case["pod"],
                         {"schedulerName": scheduler_name, "schedulingGates": [{"name": GATE}],
                          **in_pool(self.pool)})

    def all_claims(self) -> list[tuple[str, dict[str, Any]]]:
        """This copy's claims by name, ephemeral ones (made by the ephemeral-volume controller) included."""
        return [(key.replace(POD, self.pod_name), claim) for key, claim in _all_claims(self.case)]


def build_copies(cases: list[dict[str, Any]], run: str) -> list[dict[str, VolumeCopy]]:
    return [{s: VolumeCopy(case, s, f"v{run}-{case['case']:04d}-{s}", run) for s in SCHEDULERS} for case in cases]


# -- set-up, settling, clean-up -----------------------------------------------------------------------
def _concurrently(fn: Callable[[Any], Any], items: list[Any]) -> None:
    with ThreadPoolExecutor(32) as pool:
        list(pool.map(fn, items))


def _post(api: KubeAPI) -> Callable[[tuple[str, dict[str, Any]]], Any]:
    return lambda item: api.post(item[0], item[1])


def _claims_path(namespace: str) -> str:
    return f"/api/v1/namespaces/{namespace}/persistentvolumeclaims"


def _settle(api: KubeAPI, copies: list[VolumeCopy], timeout: float) -> dict[tuple[str, str], str]:
    """Waits until the PV controller and the ephemeral-volume controller are done with the cases (see the module
    docstring); returns each claim's volumeName then."""
    namespaces = {c.namespace for c in copies}
    pv_names = {c.pv_name(k) for c in copies for k in range(len(c.case["pvs"]))}
    ephemeral = {(c.namespace, name) for c in copies for name, _ in c.all_claims() if "-eph" in name}
    must_bind = {(c.namespace, key.replace(POD, c.pod_name)) for c in copies for key in _bound_early(c.case)}
    immediate = {(c.namespace, name) for c in copies for name, claim in c.all_claims()
                 if claim["class"] != GHOST and c.case["classes"][claim["class"]]["kind"] == "immediate"}
    seen: dict[str, Any] = {"state": None, "since": 0.0, "why": "nothing listed yet"}

    def settled() -> dict[tuple[str, str], str] | None:
        claims = {(c["metadata"]["namespace"], c["metadata"]["name"]): c
                  for c in api.get("/api/v1/persistentvolumeclaims")["items"]
                  if c["metadata"]["namespace"] in namespaces}
        pvs = {v["metadata"]["name"]: v for v in api.get(VOLUMES, labelSelector=f"diff-run={copies[0].run}")["items"]
               if v["metadata"]["name"] in pv_names}
        bound = {key for key, c in claims.items()
                 if c["spec"].get("volumeName") and ANN_BIND_COMPLETED in (c["metadata"].get("annotations") or {})}
        failed = {(e["involvedObject"]["namespace"], e["involvedObject"]["name"])
                  for e in api.get("/api/v1/events", fieldSelector="reason=ProvisioningFailed,"
                                   "involvedObject.kind=PersistentVolumeClaim")["items"]}
        waiting: dict[str, set[Any]] = {
            "ephemeral claims not created": ephemeral - set(claims),
            "PVs still Pending": {n for n in pv_names if pvs.get(n, {}).get("status", {}).get("phase", "Pending")
                                  == "Pending"},
            "pre-bound claims not bound": must_bind - bound,
            "immediate claims neither bound nor refused": immediate - bound - failed,
        }
        if any(waiting.values()):
            seen["why"] = {k: sorted(v)[:5] for k, v in waiting.items() if v}
            return None
        seen.setdefault("met", time.monotonic())
        state = ({k: (c["status"].get("phase"), c["spec"].get("volumeName"), k in bound) for k, c in claims.items()},
                 {n: (v["status"].get("phase"), (v["spec"].get("claimRef") or {}).get("name")) for n, v in pvs.items()})
        now = time.monotonic()
        if state != seen["state"]:
            seen.update(state=state, since=now, why="changes within the last resyncs")
            return None
        if now - seen["since"] < 2.5:  # two and a half claim resyncs of the PV controller with nothing new
            return None
        return {k: c["spec"].get("volumeName") or "" for k, c in claims.items()}

    started = time.monotonic()
    try:
        result: dict[tuple[str, str], str] = kube.poll(settled, timeout, "the controllers to settle", interval=0.5)
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {seen['why']}") from None
    print(f"settling: conditions met after {seen['met'] - started:.1f}s, then "
          f"{time.monotonic() - seen['met']:.1f}s without a change")
    return result


@pytest.fixture
def volume_cases(cluster: DevCluster, api: KubeAPI) -> Iterator[list[dict[str, VolumeCopy]]]:
    """Every case's two copies and their namespaces (the test creates the rest: see _create); everything the
    run made is deleted at the end, whatever happened: cluster-scoped objects by their diff-run label, the PVs
    the provisioner made by their claims' namespaces."""
    numbers = [int(n) for n in ONLY.split(",")] if ONLY is not None else list(range(CASES))
    run = secrets.token_hex(2)
    pairs = build_copies([generate(SEED, n) for n in numbers], run)
    copies = [c for pair in pairs for c in pair.values()]
    namespaces = {c.namespace for c in copies}
    try:
        _concurrently(_post(api), [("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                           "metadata": {"name": ns, "labels": {"diff-run": run}}})
                                   for ns in namespaces])
        yield pairs
    finally:
        cleaning = time.monotonic()
        provisioned = [v["metadata"]["name"] for v in api.get(VOLUMES)["items"]
                       if (v["spec"].get("claimRef") or {}).get("namespace") in namespaces]
        # All at once: a collection is deleted one object after the other by the API server. Bound PVs and
        # claims in use wait for their protection controllers; nothing needs waiting for here.
        _concurrently(lambda call: call(), [
            *(lambda path=path: api.request("DELETE", path, params={"labelSelector": f"diff-run={run}"},
                                                     timeout=120)
              for path in ("/api/v1/nodes", VOLUMES, CLASSES, CSINODES)),
            *(lambda ns=ns: kube.delete_namespace(api, ns) for ns in sorted(namespaces)),
            *(lambda name=name: api.delete(f"{VOLUMES}/{name}") for name in provisioned)])
        print(f"clean-up {time.monotonic() - cleaning:.1f}s")


def _create(api: KubeAPI, copies: list[VolumeCopy], names: dict[str, str]) -> None:
    """Nodes, classes, CSINodes and PVs at once (a PV may name a class not there yet); once the PV controller has
    seen every PV (phase Available), the claims: it binds an Immediate claim at its first sync to the best PV it
    knows of, which must be the one the case pre-binds for it. Then the pods already on the nodes, and the pods
    to place behind their gate."""
    base = 600000 + secrets.randbelow(1500) * 256
    specs = [spec for i, c in enumerate(copies) for spec in c.node_specs(base + 8 * i)]
    with ThreadPoolExecutor(1) as side:
        nodes = side.submit(create_nodes, api, specs, concurrency=16)
        _concurrently(_post(api), [
            *((CLASSES, body) for c in copies for body in c.storage_classes()),
            *((CSINODES, body) for c in copies for body in c.csi_nodes()),
            *((VOLUMES, body) for c in copies for body in c.volumes())])
        nodes.result()
    count = sum(len(c.case["pvs"]) for c in copies)
    kube.poll(lambda: sum(v["status"].get("phase") == "Available" for v in api.get(
        VOLUMES, labelSelector=f"diff-run={copies[0].run}")["items"]) == count, 60, f"{count} PVs Available",
        interval=0.25)
    _concurrently(_post(api), [(_claims_path(c.namespace), body) for c in copies for body in c.claims()])
    _concurrently(_post(api), [(f"/api/v1/namespaces/{c.namespace}/pods", body)
                               for c in copies for body in [*c.existing_pods(), c.pod(names[c.scheduler])]])


# -- the test -----------------------------------------------------------------------------------------
def _verdict(pod: dict[str, Any], copy: VolumeCopy) -> Verdict | None:
    """As verdict_of, but a pod still carrying the API server's SchedulingGated condition has no verdict yet."""
    for cond in pod.get("status", {}).get("conditions") or []:
        if cond["type"] == "PodScheduled" and cond.get("reason") == "SchedulingGated":
            return None
    return verdict_of(pod, copy)


def _ms_rejections(url: str, copies: dict[str, VolumeCopy]) -> dict[str, set[str]]:
    """The reasons metrics-sched rejected nodes for, in every record of each pod to place."""
    def of(name: str) -> set[str]:
        body = httpx.get(f"{url}/decisions", params={"pod": f"{copies[name].namespace}/{name}"}, timeout=30).json()
        return {reason for record in body["decisions"] for reason in record.get("rejections") or {}}

    with ThreadPoolExecutor(16) as pool:
        return dict(zip(copies, pool.map(of, copies), strict=True))


def _features(case: dict[str, Any], said: str, claims_then: dict[str, str], claims_now: dict[str, str]) -> set[str]:
    """What the case exercised: reasons either scheduler gave (`said`), claims bound by the placement (static
    PV or provisioned), and what the generator put in the pod."""
    out = {name for name, text in REASONS.items() if text in said}
    for name, volume in claims_now.items():
        if volume and not claims_then.get(name):
            out.add("static PV bound by the placement" if not volume.startswith("pvc-")
                    else "volume provisioned for the placement")
    pod, classes = case["pod"], case["classes"]
    refs = [case["claims"][j]["class"] for j in pod["claims"]] + [e["class"] for e in pod["ephemeral"]]
    used = [classes[r] for r in refs if r != GHOST]
    if any("allowedTopologies" in c for c in used):
        out.add("pod uses a class with allowedTopologies")
    if pod["ephemeral"]:
        out.add("pod has a generic ephemeral volume")
    if pod.get("disks"):
        out.add("pod has in-line disks")
    if any(case["claims"][j]["modes"] == [RWOP] for j in pod["claims"]):
        out.add("pod has a ReadWriteOncePod claim")
    if {f"c{j}" for j in pod["claims"]} & _bound_early(case):
        out.add("pod uses a claim bound to a pre-bound PV")
    if any(n.get("csiNode", {}).get("count") is not None for n in case["nodes"]):
        out.add("a node has a CSINode limit")
    return out


def test_kube_scheduler_and_metrics_sched_agree_on_volumes(cluster: DevCluster, api: KubeAPI,
                                                           volume_cases: list[dict[str, VolumeCopy]]) -> None:
    started = time.monotonic()
    copies = [c for pair in volume_cases for c in pair.values()]
    run = copies[0].run
    print(f"\nDIFF_SEED={SEED} volume cases={len(volume_cases)}")
    kube_name = f"kube-vol-{secrets.token_hex(3)}"
    ms_extra = {
        "profile": WITHOUT_TELEMETRY,
        "audit": {"topCandidates": 10},  # more than a case's nodes: the record lists every feasible node
    }
    names = {"kube": kube_name, "ms": ""}
    by_pod = {c.pod_name: c for c in copies}
    with kube_scheduler(cluster, kube_name, qps=5000, burst=5000, percentage_of_nodes_to_score=100), \
            schedulers(cluster, extra=ms_extra, leader_elect=False) as (ms_name, (ms_proc,)):
        names["ms"] = ms_name
        # The controllers create the ephemeral claims and bind what they bind before either scheduler may place
        # anything.
        _create(api, copies, names)
        created = time.monotonic() - started
        claims_then = _settle(api, copies, timeout=60 + 0.1 * len(copies))
        settled = time.monotonic() - started
        _concurrently(lambda c: api.merge_patch(f"/api/v1/namespaces/{c.namespace}/pods/{c.pod_name}",
                                                {"spec": {"schedulingGates": None}}), copies)
        verdicts: dict[str, Verdict] = {}
        times: dict[str, list[float]] = collections.defaultdict(list)  # when each scheduler's verdicts came

        def all_decided() -> bool:
            for pod in api.get("/api/v1/pods", labelSelector=f"diff=probe,diff-run={run}")["items"]:
                name = pod["metadata"]["name"]
                if name not in verdicts and (v := _verdict(pod, by_pod[name])) is not None:
                    verdicts[name] = v
                    times[by_pod[name].scheduler].append(time.monotonic() - started)
            return len(verdicts) == len(by_pod)

        try:
            kube.poll(all_decided, 60 + 0.2 * len(by_pod), f"DIFF_SEED={SEED}: a verdict for every pod to place",
                      interval=0.25)
        finally:
            if undecided := sorted(set(by_pod) - set(verdicts)):
                print(f"no verdict for {len(undecided)} pods: {undecided[:20]}")
        decisions = ms_decisions(ms_proc.url, dict(by_pod))
        rejections = _ms_rejections(ms_proc.url, {c.pod_name: c for c in copies if c.scheduler == "ms"})
    claims_now = {(c["metadata"]["namespace"], c["metadata"]["name"]): c["spec"].get("volumeName") or ""
                  for c in api.get("/api/v1/persistentvolumeclaims")["items"]}

    failures = []
    stats: collections.Counter[str] = collections.Counter()
    for pair in volume_cases:
        kube_copy, ms_copy = pair["kube"], pair["ms"]
        case = kube_copy.case
        kube_v, ms_v = verdicts[kube_copy.pod_name], verdicts[ms_copy.pod_name]
        decision = decisions.get(ms_copy.pod_name)
        stats["feasible" if kube_v.feasible else "infeasible"] += 1
        stats[f"{len(case['nodes'])} nodes"] += 1
        if decision is not None and decision.feasible == 1:
            stats["exactly one feasible node"] += 1
        pod_claims = [f"c{j}" for j in case["pod"]["claims"]] + [
            f"{kube_copy.pod_name}-eph{i}" for i in range(len(case["pod"]["ephemeral"]))]
        said = " ".join([kube_v.message, ms_v.message, *rejections.get(ms_copy.pod_name, ())])
        features = _features(case, said, {n: claims_then.get((kube_copy.namespace, n), "") for n in pod_claims},
                             {n: claims_now.get((kube_copy.namespace, n), "") for n in pod_claims})
        for feature in features:
            stats[feature] += 1
            stats[f"{feature}, feasible"] += kube_v.feasible
        problem = disagreement(kube_v, ms_v, decision)
        if ONLY is not None:
            print(f"--- case {case['case']}: kube-scheduler {_said(kube_v)}; metrics-sched {_said(ms_v)}"
                  f"{'' if decision is None else f' (feasible nodes {sorted(decision.candidates)})'}\n"
                  + case_yaml(case))
        if problem:
            failures.append(f"--- DIFF_SEED={SEED} DIFF_CASE={case['case']}: {problem}\n"
                            f"kube-scheduler {_said(kube_v)}\nmetrics-sched {_said(ms_v)}\n{case_yaml(case)}")
    print(f"created {created:.1f}s, settled {settled:.1f}s, verdicts (median, last): "
          + ", ".join(f"{s} {statistics.median(t):.1f}s, {max(t):.1f}s" for s, t in sorted(times.items()))
          + f"; compared after {time.monotonic() - started:.1f}s;"
          + "".join(f"\n  {k}: {v}" for k, v in sorted(stats.items())))
    assert not failures, (f"{len(failures)} of {len(volume_cases)} cases disagree (re-run one with "
                          f"DIFF_SEED={SEED} DIFF_CASE=n):\n" + "\n".join(failures))
