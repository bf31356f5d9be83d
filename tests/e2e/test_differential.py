"""Differential test: the real kube-scheduler and metrics-sched get the same pod on the same fresh nodes.

Each case is a small random node set (1-6 nodes: cpu, memory, GPUs, pod capacity, zone/hostname/other
labels, NoSchedule/PreferNoSchedule/NoExecute taints, cordons), pods already bound there (created with
spec.nodeName) and one pod to place (requests incl. GPUs, nodeSelector, required/preferred node affinity
with every operator and matchFields on metadata.name, tolerations; host ports once the NodePorts plugin
exists). The case is built twice, once in a private pool per scheduler, and each scheduler gets its copy
of the pod. They must agree on feasibility (bound vs PodScheduled=False/Unschedulable) for every case,
and on the node (by its index in the pool) whenever exactly one node is feasible. metrics-sched's
decision record gives its feasible set; the node kube-scheduler picked must be in it, which covers the
one-feasible-node rule (with a single candidate, kube-scheduler must pick that one). The reverse (metrics-sched
picking a node kube-scheduler finds infeasible while kube-scheduler picks another) is not observable, so a
quarter of the cases size node 0 to fit the pod exactly, or one unit short, and half of those pin the pod to
node 0: boundary verdicts that nothing else can hide.

Not generated: NotReady nodes (metrics-sched's NodeReady filter has no kube-scheduler counterpart, which relies
on the node lifecycle controller's not-ready taint; the dev cluster has no controller-manager) and fields that
UnsupportedFields refuses.

Only resource/constraint plugins decide: metrics-sched runs with no telemetry source and with
GPUTemperature, NodeLoad and Cost disabled. Every case is derived from (DIFF_SEED, case number) alone:

    DIFF_SEED=1234 pytest tests/e2e/test_differential.py                # another seed
    DIFF_SEED=1234 DIFF_CASE=17 pytest tests/e2e/test_differential.py   # re-run one case of it
    DIFF_CASES=1000 pytest tests/e2e/test_differential.py               # more cases
"""

from __future__ import annotations

import collections
import math
import os
import random
import secrets
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import httpx
import pytest
import yaml

from devcluster import DevCluster, NodeSpec
from devcluster.kubeapi import KubeAPI
from devcluster.nodes import GPU_RESOURCE, create_nodes, delete_nodes, node_ip
from metrics_sched.model.quantity import parse_quantity
from metrics_sched.model.resources import pod_requests
from metrics_sched.plugins import BUILTIN
from tests.e2e import kube
from tests.e2e.kube_scheduler import kube_scheduler
from tests.e2e.pools import POOL_LABEL
from tests.e2e.scheduler_proc import schedulers

pytestmark = pytest.mark.e2e

SEED = int(os.environ.get("DIFF_SEED", "20261201"))
CASES = int(os.environ.get("DIFF_CASES", "200"))
ONLY = os.environ.get("DIFF_CASE")
# Host ports are generated only once metrics-sched has a NodePorts plugin (until then it ignores them); they
# are drawn either way, so a case number is the same case with or without them.
HOST_PORTS = "NodePorts" in BUILTIN

ZONE = "topology.kubernetes.io/zone"
HOSTNAME = "kubernetes.io/hostname"
CORDON = "node.kubernetes.io/unschedulable"
# "gen" is compared with Gt/Lt, "03" included (both sides read 3). Values Go's strconv.ParseInt(v, 10, 64)
# reads differently from Python's int() or a float (k8s.io/apimachinery labels.Requirement.Matches): "1_0" (not
# a number), beyond int64, and two numbers a float cannot tell apart.
GT_LT_ODD = ["1_0", "99999999999999999999", "9007199254740993"]
GT_LT_BIG = "9007199254740992"
LABEL_VALUES: dict[str, list[str]] = {
    ZONE: ["zone-0", "zone-1", "zone-2"],
    "gen": ["1", "2", "3", "4", "5", "x", "03"],
    "disk": ["ssd", "hdd", ""]}
TAINT_KEYS = ["a", "b", GPU_RESOURCE]
TAINT_VALUES = ["x", "y", ""]
EFFECTS = ["NoSchedule", "PreferNoSchedule", "NoExecute"]
NODE_REF = "@node-"  # a node of the case by index, rendered as that node's name in each pool

SCHEDULERS = ("kube", "ms")
WIDGET = "example.com/widget"  # an extended resource (requests = limits), on some nodes only
# Quantities in several spellings: both sides must parse them alike.
POD_CPU: list[str | None] = [None, "100m", "0.5", "500m", "1", "1500m", "2", "100500u", "0.0005"]
POD_MEMORY: list[str | None] = [None, "256Mi", "1G", "1Gi", "1073741824", "2Gi", "1500M", "4Gi"]
# Memory with a fraction of a byte: kube-scheduler adds a pod's containers exactly and rounds the pod's total up
# once (component-helpers PodRequests, then Quantity.Value()), not each container.
FRACTIONAL_BYTES = "536870912500m"
LABEL_VALUES["gen"] += GT_LT_ODD
POD_MEMORY.append(FRACTIONAL_BYTES)
EXISTING_CPU: list[str | None] = [None, "100m", "250m", "0.5", "1", "250500u"]
EXISTING_MEMORY: list[str | None] = [None, "256Mi", "1Gi", "1e9", "2Gi"]


# -- generation ---------------------------------------------------------------------------------------
def _requests(rng: random.Random, cpu: list[str | None], memory: list[str | None],
              gpus: list[int]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if (c := rng.choice(cpu)) is not None:
        out["cpu"] = c
    if (m := rng.choice(memory)) is not None:
        out["memory"] = m
    if g := rng.choice(gpus):
        out["gpus"] = g
    return out


def _init_containers(rng: random.Random) -> list[dict[str, Any]]:
    """Init containers (one at a time) and sidecars (restartPolicy Always: they keep running)."""
    return [{**_requests(rng, POD_CPU, POD_MEMORY, [0, 0, 0, 1]), "sidecar": rng.random() < 0.5}
            for _ in range(rng.randint(1, 2))]


def _pod_level(rng: random.Random, pod: dict[str, Any]) -> dict[str, str]:
    """Pod-level requests (cpu, memory): the API wants them at least what the containers need (init and
    sidecars included; computed here with metrics-sched's helper, which the API server checks)."""
    need = pod_requests({"spec": _pod_spec(pod)})
    cpu, memory = need.get("cpu", 0), need.get("memory", 0)
    out = {}
    if rng.random() < 0.8:
        out["cpu"] = f"{cpu + rng.choice([0, 100, 1000])}m"
    if rng.random() < 0.8 or not out:
        out["memory"] = str(memory + rng.choice([0, 2**20, 2**30]))
    return out


def _host_ports(rng: random.Random, most: int) -> list[dict[str, Any]]:
    ports: dict[tuple[int, str, str], dict[str, Any]] = {}
    for _ in range(rng.randint(1, most)):
        port = {"hostPort": rng.choice([8080, 8081]), "protocol": rng.choice(["TCP", "TCP", "UDP", "SCTP"]),
                "hostIP": rng.choice(["", "", "0.0.0.0", "127.0.0.1", "10.0.0.1"])}
        ports[(port["hostPort"], port["protocol"], port["hostIP"])] = port
    return list(ports.values())


def _ports_on(rng: random.Random, pod: dict[str, Any]) -> None:
    """Host ports sometimes on an init container: a sidecar's count, a plain init container's do not."""
    if pod.get("initContainers") and rng.random() < 0.5:
        pod["portsOnInit"] = rng.randrange(len(pod["initContainers"]))


def _expression(rng: random.Random, count: int) -> dict[str, Any]:
    key = rng.choice([ZONE, "gen", "gen", "disk", HOSTNAME, "missing"])
    op = rng.choice(["Gt", "Lt"] if key == "gen" and rng.random() < 0.5 else
                    ["In", "In", "NotIn", "Exists", "DoesNotExist"])
    expr: dict[str, Any] = {"key": key, "operator": op}
    if op in ("Gt", "Lt"):
        expr["values"] = [rng.choice([str(rng.randint(0, 6)), GT_LT_BIG])]
    elif op in ("In", "NotIn"):
        vocab = ([f"{NODE_REF}{i}" for i in range(count)] if key == HOSTNAME
                 else LABEL_VALUES.get(key, ["v"]))
        expr["values"] = sorted(set(rng.sample(vocab, rng.randint(1, min(2, len(vocab))))))
    return expr


def _term(rng: random.Random, count: int) -> dict[str, Any]:
    term: dict[str, Any] = {}
    if rng.random() < 0.03:
        return term  # an empty term matches no node
    if rng.random() < 0.15:  # the DaemonSet way of naming a node
        term["matchFields"] = [{"key": "metadata.name", "operator": rng.choice(["In", "In", "NotIn"]),
                                "values": [f"{NODE_REF}{rng.randrange(count)}"]}]
        if rng.random() < 0.5:
            return term
    term["matchExpressions"] = [_expression(rng, count) for _ in range(rng.randint(1, 2))]
    return term


def _toleration(rng: random.Random) -> dict[str, Any]:
    tol: dict[str, Any] = {}
    if rng.random() < 0.5:
        tol["operator"] = "Exists"
        if rng.random() < 0.8:
            tol["key"] = rng.choice([*TAINT_KEYS, CORDON])
    else:
        tol.update(key=rng.choice([*TAINT_KEYS, CORDON]), operator=rng.choice(["Equal", ""]),
                   value=rng.choice(TAINT_VALUES))
        if not tol["operator"]:
            del tol["operator"]  # Equal is the default
    if rng.random() < 0.7:
        tol["effect"] = rng.choice(EFFECTS)
    return tol


def generate(seed: int, number: int) -> dict[str, Any]:
    """One case, from (seed, number) alone: nodes, pods bound to them, and the pod to place."""
    rng = random.Random(f"{seed}:{number}")
    count = rng.choices(range(1, 7), weights=[3, 3, 3, 2, 2, 1])[0]
    nodes = []
    for _ in range(count):
        labels = {key: rng.choice(values) for key, values in LABEL_VALUES.items() if rng.random() < 0.7}
        taints: dict[tuple[str, str], dict[str, str]] = {}
        for _ in range(rng.choice([0, 0, 0, 0, 1, 1, 2])):
            taint = {"key": rng.choice(TAINT_KEYS), "value": rng.choice(TAINT_VALUES),
                     "effect": rng.choice([*EFFECTS, "PreferNoSchedule"])}
            taints[(taint["key"], taint["effect"])] = taint  # the API allows one taint per key and effect
        nodes.append({"cpu": rng.choice(["500m", "1", "2", "4", "8"]),
                      "memory": rng.choice(["1Gi", "2Gi", "4Gi", "8Gi", "16Gi"]),
                      "gpus": rng.choice([0, 1, 2, 4, 8]), "pods": rng.choice([1, 2, 3, 110, 110, 110]),
                      "labels": labels, "taints": list(taints.values()), "unschedulable": rng.random() < 0.1})
        if rng.random() < 0.3:
            nodes[-1][WIDGET] = rng.choice([1, 2])
        nodes[-1]["storage"] = rng.choice(["1Ti", "1Ti", "10Gi"])
    existing = []
    for i in range(count):
        for _ in range(rng.choice([0, 0, 1, 1, 2])):
            pod = {"node": i, "containers": [_requests(rng, EXISTING_CPU, EXISTING_MEMORY, [0, 0, 1, 2])]}
            if rng.random() < 0.1:
                pod["containers"][0][WIDGET] = 1
            if rng.random() < 0.15:
                pod["initContainers"] = _init_containers(rng)
            if rng.random() < 0.3 and (ports := _host_ports(rng, 1)) and HOST_PORTS:
                pod["hostPorts"] = ports
                _ports_on(rng, pod)
            existing.append(pod)
    pod: dict[str, Any] = {"containers": [_requests(rng, POD_CPU, POD_MEMORY, [0, 0, 0, 0, 1, 1, 2, 4])
                                          for _ in range(rng.choice([1, 1, 1, 1, 2]))]}
    if rng.random() < 0.12:
        pod["containers"][0][WIDGET] = rng.choice([1, 2, 3])  # an extended resource some nodes lack
    if rng.random() < 0.12:
        pod["containers"][0]["storage"] = rng.choice(["1Gi", "20Gi"])  # ephemeral-storage
    if rng.random() < 0.2:
        pod["initContainers"] = _init_containers(rng)
    if rng.random() < 0.1:
        pod["podRequests"] = _pod_level(rng, pod)
    if rng.random() < 0.25:
        key = rng.choice(list(LABEL_VALUES))
        pod["nodeSelector"] = {key: rng.choice(LABEL_VALUES[key])}
    affinity: dict[str, Any] = {}
    if rng.random() < 0.35:
        affinity["requiredDuringSchedulingIgnoredDuringExecution"] = {
            "nodeSelectorTerms": [_term(rng, count) for _ in range(rng.randint(1, 2))]}
    if rng.random() < 0.3:
        affinity["preferredDuringSchedulingIgnoredDuringExecution"] = [
            {"weight": rng.randint(1, 100), "preference": _term(rng, count)} for _ in range(rng.randint(1, 2))]
    if affinity:
        pod["nodeAffinity"] = affinity
    if rng.random() < 0.6:
        pod["tolerations"] = [_toleration(rng) for _ in range(rng.randint(1, 3))]
    if rng.random() < 0.4 and (ports := _host_ports(rng, 2)) and HOST_PORTS:
        pod["hostPorts"] = ports
        _ports_on(rng, pod)
    tight = rng.random() < 0.25
    if tight:
        _tighten(rng, nodes[0], pod, [e for e in existing if e["node"] == 0])
        if rng.random() < 0.5:  # only node 0 may fit: its verdict alone decides, nothing can hide it
            pod.setdefault("nodeAffinity", {})["requiredDuringSchedulingIgnoredDuringExecution"] = {
                "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In",
                                                        "values": [f"{NODE_REF}0"]}]}]}
    return {"seed": seed, "case": number, "tight": tight, "nodes": nodes, "existing": existing, "pod": pod}


def _api(quantity: str) -> Fraction:
    """A quantity as the API server stores it: rounded up to milli units (SetDefaults_ResourceList)."""
    return Fraction(math.ceil(parse_quantity(quantity) * 1000), 1000)


def _exact(pod: dict[str, Any]) -> dict[str, Fraction]:
    """What the pod requests, exactly (no rounding but the API's), the way k8s.io/component-helpers PodRequests
    adds it up:
    containers and sidecars add, an init container needs itself plus the sidecars started before it,
    pod-level requests replace the containers' cpu/memory."""
    def of(c: dict[str, Any]) -> dict[str, Fraction]:
        return {"cpu": _api(c.get("cpu", "0")), "memory": _api(c.get("memory", "0")),
                "gpus": Fraction(c.get("gpus", 0))}

    total = collections.Counter[str]()
    for c in pod["containers"]:
        total.update(of(c))
    sidecars = collections.Counter[str]()
    peak: dict[str, Fraction] = {}
    for c in pod.get("initContainers", []):
        if c["sidecar"]:
            total.update(of(c))
            sidecars.update(of(c))
            need = dict(sidecars)
        else:
            need = dict(collections.Counter(of(c)) + sidecars)
        peak = {k: max(peak.get(k, Fraction(0)), need.get(k, Fraction(0))) for k in set(peak) | set(need)}
    out = {k: max(total.get(k, Fraction(0)), peak.get(k, Fraction(0))) for k in ("cpu", "memory", "gpus")}
    for k, v in pod.get("podRequests", {}).items():
        out[k] = _api(v)
    return out


def _tighten(rng: random.Random, node: dict[str, Any], pod: dict[str, Any], existing: list[dict[str, Any]]) -> None:
    """Sizes the node to what its pods and the new pod need, give or take one unit: fits exactly, or just not.
    Each pod is rounded up on its own (Quantity.MilliValue()/Value() of the pod's sum)."""
    pods = [*existing, pod]
    cpu = sum(math.ceil(_exact(p)["cpu"] * 1000) for p in pods) + rng.choice([0, 0, 0, -1, 1])
    memory = sum(math.ceil(_exact(p)["memory"]) for p in pods) + rng.choice([0, 0, 0, -1, 1])
    node["cpu"], node["memory"] = f"{max(cpu, 1)}m", str(max(memory, 1))
    node["gpus"] = sum(int(_exact(p)["gpus"]) for p in pods)
    node["pods"] = max(node["pods"], len(pods))


# -- rendering: one copy of a case in one pool ------------------------------------------------------
def _render(value: Any, names: list[str]) -> Any:
    if isinstance(value, str) and value.startswith(NODE_REF):
        return names[int(value[len(NODE_REF):])]
    if isinstance(value, list):
        return [_render(v, names) for v in value]
    if isinstance(value, dict):
        return {k: _render(v, names) for k, v in value.items()}
    return value


def _container(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    requests = {k: spec[k] for k in ("cpu", "memory") if k in spec}
    limits = {}
    if spec.get("gpus"):
        requests[GPU_RESOURCE] = limits[GPU_RESOURCE] = str(spec["gpus"])
    if spec.get(WIDGET):
        requests[WIDGET] = limits[WIDGET] = str(spec[WIDGET])
    if spec.get("storage"):
        requests["ephemeral-storage"] = spec["storage"]
    container: dict[str, Any] = {"name": name, "image": "registry.local/pause:3.10",
                                 "resources": {"requests": requests, "limits": limits}}
    if spec.get("sidecar"):
        container["restartPolicy"] = "Always"
    return container


def _pod_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """containers, initContainers and pod-level resources of a generated pod; host ports on the first container
    or on the init container `portsOnInit`."""
    containers = [_container(f"c{j}", c) for j, c in enumerate(spec["containers"])]
    out: dict[str, Any] = {"containers": containers, "terminationGracePeriodSeconds": 0}
    if spec.get("initContainers"):
        out["initContainers"] = [_container(f"i{j}", c) for j, c in enumerate(spec["initContainers"])]
    if spec.get("hostPorts"):
        target = out["initContainers"][spec["portsOnInit"]] if "portsOnInit" in spec else containers[0]
        target["ports"] = [
            {"containerPort": 9000 + j, "hostPort": p["hostPort"], "protocol": p["protocol"],
             **({"hostIP": p["hostIP"]} if p["hostIP"] else {})} for j, p in enumerate(spec["hostPorts"])]
    if spec.get("podRequests"):
        out["resources"] = {"requests": spec["podRequests"]}
    return out


@dataclass
class Copy:
    """One case's copy in one scheduler's pool."""

    case: dict[str, Any]
    scheduler: str  # "kube" | "ms"
    pool: str
    nodes: list[NodeSpec] = field(default_factory=list)

    @property
    def names(self) -> list[str]:
        return [n.name for n in self.nodes]

    @property
    def pod_name(self) -> str:
        return f"c{self.case['case']:04d}-{self.scheduler}"

    def existing_pods(self) -> list[dict[str, Any]]:
        return [{"apiVersion": "v1", "kind": "Pod",
                 "metadata": {"name": f"{self.pod_name}-e{j}", "labels": {"diff": "existing"}},
                 "spec": {**_pod_spec(p), "nodeName": self.names[p["node"]], "schedulerName": "nobody",
                          "tolerations": [{"operator": "Exists"}]}}
                for j, p in enumerate(self.case["existing"])]

    def pod(self, scheduler_name: str) -> dict[str, Any]:
        want = self.case["pod"]
        spec: dict[str, Any] = {
            **_pod_spec(want), "schedulerName": scheduler_name,
            "nodeSelector": {**want.get("nodeSelector", {}), POOL_LABEL: self.pool},
            "tolerations": [*want.get("tolerations", []),
                            {"key": POOL_LABEL, "operator": "Equal", "value": self.pool, "effect": "NoSchedule"}],
        }
        if "nodeAffinity" in want:
            spec["affinity"] = {"nodeAffinity": _render(want["nodeAffinity"], self.names)}
        return {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": self.pod_name, "labels": {"diff": "probe"}}, "spec": spec}


def build_copies(cases: list[dict[str, Any]]) -> list[dict[str, Copy]]:
    run = secrets.token_hex(2)
    base = 200000 + secrets.randbelow(4000) * 256
    serial = 0
    copies: list[dict[str, Copy]] = []
    for case in cases:
        pair = {}
        for scheduler in SCHEDULERS:
            copy = Copy(case, scheduler, f"d{run}-{case['case']:04d}-{scheduler}")
            for j, n in enumerate(case["nodes"]):
                serial += 1
                copy.nodes.append(NodeSpec(
                    name=f"{copy.pool}-{j}", internal_ip=node_ip(base + serial), cpu=n["cpu"], memory=n["memory"],
                    pods=n["pods"], gpus=n["gpus"], labels={**n["labels"], POOL_LABEL: copy.pool},
                    ephemeral_storage=n["storage"], extended={WIDGET: str(n[WIDGET])} if WIDGET in n else {},
                    taints=(*n["taints"], {"key": POOL_LABEL, "value": copy.pool, "effect": "NoSchedule"}),
                    unschedulable=n["unschedulable"]))
            pair[scheduler] = copy
        copies.append(pair)
    return copies


# -- outcomes -----------------------------------------------------------------------------------------
class SchedulerFailed(RuntimeError):
    """A scheduler answered neither bound nor Unschedulable (e.g. SchedulerError)."""


@dataclass(frozen=True)
class Verdict:
    node: int | None  # index in the pool when bound
    message: str = ""

    @property
    def feasible(self) -> bool:
        return self.node is not None


def verdict_of(pod: dict[str, Any], copy: Copy) -> Verdict | None:
    """Bound, or PodScheduled=False from its scheduler; None while neither."""
    node = pod["spec"].get("nodeName")
    if node:
        return Verdict(copy.names.index(node))
    for cond in pod.get("status", {}).get("conditions") or []:
        if cond["type"] == "PodScheduled" and cond["status"] == "False":
            if cond.get("reason") != "Unschedulable":
                raise SchedulerFailed(f"{copy.pod_name}: PodScheduled=False with reason {cond.get('reason')}: "
                                     f"{cond.get('message')}")
            return Verdict(None, cond.get("message", ""))
    return None


@dataclass
class Decision:
    """metrics-sched's decision record for a bound pod: its feasible nodes (indices in the pool)."""

    feasible: int
    candidates: list[int]


def ms_decisions(url: str, copies: dict[str, Copy], namespace: str) -> dict[str, Decision]:
    body = httpx.get(f"{url}/decisions", params={"limit": "100000"}, timeout=30).json()
    out: dict[str, Decision] = {}
    for record in body["decisions"]:  # newest first: keep the newest scheduled record per pod
        name = record["pod"].removeprefix(f"{namespace}/")
        copy = copies.get(name)
        if copy is None or record["result"] != "scheduled" or name in out:
            continue
        out[name] = Decision(record["feasible"], [copy.names.index(c["node"]) for c in record["candidates"]])
    return out


def _said(v: Verdict) -> str:
    return f"bound it to node {v.node}" if v.feasible else f"found it unschedulable ({v.message})"


def disagreement(kube_v: Verdict, ms_v: Verdict, decision: Decision | None) -> str | None:
    if kube_v.feasible != ms_v.feasible:
        return f"feasibility differs: kube-scheduler {_said(kube_v)}; metrics-sched {_said(ms_v)}"
    if not kube_v.feasible:
        return None
    if decision is None:
        return "metrics-sched bound the pod but has no decision record for it"
    if len(decision.candidates) != decision.feasible:
        return f"metrics-sched recorded {len(decision.candidates)} candidates of {decision.feasible} feasible nodes"
    if kube_v.node not in decision.candidates:
        return (f"kube-scheduler bound it to node {kube_v.node}, which metrics-sched found infeasible "
                f"(metrics-sched's feasible nodes: {sorted(decision.candidates)}, it chose {ms_v.node})")
    return None


def case_yaml(case: dict[str, Any]) -> str:
    return yaml.safe_dump(case, sort_keys=False, default_flow_style=None, width=120)


# -- the test -----------------------------------------------------------------------------------------
def _case_numbers() -> list[int]:
    if ONLY is not None:
        return [int(n) for n in ONLY.split(",")]
    return list(range(CASES))


@pytest.fixture
def diff_nodes(cluster: DevCluster, api: KubeAPI) -> Iterator[list[dict[str, Copy]]]:
    """Every case's two pools, created together and deleted at the end (KWOK nodes must not pile up)."""
    cases = [generate(SEED, n) for n in _case_numbers()]
    copies = build_copies(cases)
    specs = [spec for pair in copies for copy in pair.values() for spec in copy.nodes]
    try:
        create_nodes(api, specs, concurrency=32)
        yield copies
    finally:
        delete_nodes(api, [s.name for s in specs], concurrency=32)


def _post_all(api: KubeAPI, namespace: str, bodies: list[dict[str, Any]]) -> None:
    with ThreadPoolExecutor(32) as pool:
        list(pool.map(lambda body: api.post(f"/api/v1/namespaces/{namespace}/pods", body), bodies))


def test_kube_scheduler_and_metrics_sched_agree(cluster: DevCluster, api: KubeAPI, namespace: str,
                                                 diff_nodes: list[dict[str, Copy]]) -> None:
    started = time.monotonic()
    print(f"\nDIFF_SEED={SEED} cases={len(diff_nodes)} hostPorts={'on' if HOST_PORTS else 'off (no NodePorts yet)'}")
    # Pods already on the nodes exist before either scheduler starts: both see them in their first LIST.
    _post_all(api, namespace, [p for pair in diff_nodes for copy in pair.values() for p in copy.existing_pods()])
    kube_name = f"kube-diff-{secrets.token_hex(3)}"
    ms_extra = {
        "profile": {"plugins": {"filter": {"disabled": [{"name": "GPUTemperature"}]},
                                "score": {"disabled": [{"name": "GPUTemperature"}, {"name": "NodeLoad"},
                                                       {"name": "Cost"}]}}},
        "audit": {"topCandidates": 10},  # more than a case's nodes: the record lists every feasible node
    }
    with kube_scheduler(cluster, kube_name, qps=5000, burst=5000, percentage_of_nodes_to_score=100), \
            schedulers(cluster, extra=ms_extra, leader_elect=False) as (ms_name, (ms_proc,)):
        setup = time.monotonic() - started
        names = {"kube": kube_name, "ms": ms_name}
        by_pod = {copy.pod_name: copy for pair in diff_nodes for copy in pair.values()}
        _post_all(api, namespace, [copy.pod(names[copy.scheduler]) for copy in by_pod.values()])

        verdicts: dict[str, Verdict] = {}

        def all_decided() -> bool:
            pods = api.get(f"/api/v1/namespaces/{namespace}/pods", labelSelector="diff=probe")["items"]
            for pod in pods:
                name = pod["metadata"]["name"]
                if name not in verdicts and (v := verdict_of(pod, by_pod[name])) is not None:
                    verdicts[name] = v
            return len(verdicts) == len(by_pod)

        try:
            kube.poll(all_decided, 90, "a verdict from each scheduler for every case", interval=0.25)
        except AssertionError:
            missing = sorted(set(by_pod) - set(verdicts))
            raise AssertionError(f"DIFF_SEED={SEED}: no verdict for {len(missing)} pods: {missing[:20]}") from None
        decided = time.monotonic() - started
        decisions = ms_decisions(ms_proc.url, by_pod, namespace)

    failures = []
    stats: collections.Counter[str] = collections.Counter()
    for pair in diff_nodes:
        case = pair["kube"].case
        kube_v, ms_v = verdicts[pair["kube"].pod_name], verdicts[pair["ms"].pod_name]
        decision = decisions.get(pair["ms"].pod_name)
        stats[f"{len(case['nodes'])} nodes"] += 1
        stats["feasible" if kube_v.feasible else "infeasible"] += 1
        if decision is not None and decision.feasible == 1:
            stats["exactly one feasible node"] += 1
        for feature in ("nodeSelector", "nodeAffinity", "tolerations", "hostPorts", "initContainers", "podRequests"):
            stats[f"pod uses {feature}"] += feature in case["pod"]
        for resource in ("gpus", WIDGET, "storage"):
            stats[f"pod requests {resource}"] += any(c.get(resource) for c in case["pod"]["containers"])
        stats["node 0 sized to fit exactly, or be 1 unit short"] += case.get("tight", False)
        stats["existing pods"] += len(case["existing"])
        problem = disagreement(kube_v, ms_v, decision)
        if ONLY is not None:
            print(f"--- case {case['case']}: kube-scheduler {_said(kube_v)}; metrics-sched {_said(ms_v)}"
                  f"{'' if decision is None else f' (feasible nodes {sorted(decision.candidates)})'}\n"
                  + case_yaml(case))
        if problem:
            failures.append(f"--- DIFF_SEED={SEED} DIFF_CASE={case['case']}: {problem}\n{case_yaml(case)}")
    print(f"setup {setup:.1f}s, verdicts after {decided:.1f}s; "
          + "".join(f"\n  {k}: {v}" for k, v in sorted(stats.items())))
    assert not failures, (f"{len(failures)} of {len(diff_nodes)} cases disagree (re-run one with "
                          f"DIFF_SEED={SEED} DIFF_CASE=n):\n" + "\n".join(failures))
