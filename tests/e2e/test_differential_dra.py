"""Differential test, Dynamic Resource Allocation: the real kube-scheduler (1.36.3, default feature gates) and
metrics-sched place the same pods with ResourceClaims on the same devices (the method of
tests/e2e/test_differential.py, whose docstring explains it; the cases are tests/e2e/dra_cases.py's, whose
docstring lists what they draw).

Each case is built twice, once per scheduler, isolated by drivers, DeviceClasses and slices of the copy's own and
claims and pods in that scheduler's namespace of the run; the devices sit on SHARED_NODES nodes common to all
cases (a high pod capacity, a taint only the cases' pods tolerate), the pods may go to 1-2 of them. Every object is
created first, the pods behind a scheduling gate; once the resourceclaim controller has made every template's
claim, the schedulers start (so their first lists hold everything) and the gates of every first pod are lifted;
once each has a verdict, those of the second pods (sharing a claim with the first).

metrics-sched runs with `deviceMetric: ""` (DynamicResources then allocates in upstream's first-fit order) and its
telemetry plugins off. For every case:
- feasibility agrees for each pod: bound, unschedulable, or a SchedulerError (a selector that fails to evaluate)
  on both sides (a PodScheduled message saying PostFilter deallocated a claim is not a verdict: the pod is retried);
- a pod kube-scheduler bound is on a node metrics-sched found feasible (its decision record), so where one node is
  feasible the nodes are equal;
- where both bound every pod of the case to the same nodes, every claim of the case ends with the same
  status.allocation (shareID and allocationTimestamp aside, drivers named alike) and the same reservedFor; a
  second pod is compared only when the first went to the same node on both sides;
- every claim of a bound pod is allocated and reserved for it; the API server wrote (so validated) each one.

Then the cases are replayed through an in-process metrics-sched (tests/e2e/dra_replay.py) from the objects metrics-
sched's copies had before scheduling: with the allocator as it is, it must agree with kube-scheduler like the
process did; with its claim constraints disabled (matchAttribute and distinctAttribute accepting every device), some
case must disagree — the comparison bites.

Not generated: extended resources backed by a DeviceClass (extendedResourceName; metrics-sched's DynamicResources
does not serve them yet), device binding conditions (PreBind would wait for a driver), incomplete or invalid pools
(an `All` request fails on any incomplete pool of a node, so one case's would fail other cases' pods), DeviceTaintRules
(off by default in 1.36). Every case comes from (DIFF_SEED, case number) alone:

    DIFF_SEED=7 pytest -m e2e tests/e2e/test_differential_dra.py                 # another seed
    DIFF_SEED=7 DIFF_CASE=17 pytest -m e2e tests/e2e/test_differential_dra.py    # one case of it
    DIFF_CASES=600 pytest -m e2e tests/e2e/test_differential_dra.py              # more cases
"""

from __future__ import annotations

import collections
import datetime
import os
import secrets
import time
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from devcluster import DevCluster, NodeSpec
from devcluster.kubeapi import KubeAPI
from devcluster.nodes import create_nodes, node_ip
from tests.e2e import kube
from tests.e2e.dra_cases import (
    ADMIN_ACCESS_LABEL,
    API,
    RACK,
    SHARED_NODES,
    DraCopy,
    features,
    generate,
    namespace_of,
    pool_of,
    shared_node,
)
from tests.e2e.dra_replay import Outcome, Replayed, Snapshot, constraints_disabled, outcome_of, replay
from tests.e2e.kube_scheduler import kube_scheduler
from tests.e2e.pools import POOL_LABEL
from tests.e2e.scheduler_proc import schedulers
from tests.e2e.test_differential import WITHOUT_TELEMETRY, case_yaml

pytestmark = pytest.mark.e2e

SEED = int(os.environ.get("DIFF_SEED", "20261201"))
CASES = int(os.environ.get("DIFF_CASES", "300"))
ONLY = os.environ.get("DIFF_CASE")

SCHEDULERS = ("kube", "ms")
GATE = "metrics-sched.test/settle"
RESOURCES = f"/apis/{API}"
# kube-scheduler's plugins only, and DynamicResources in upstream's first-fit order (no device telemetry).
MS_PROFILE: dict[str, Any] = {**WITHOUT_TELEMETRY,
                              "pluginConfig": [{"name": "DynamicResources", "args": {"deviceMetric": ""}}]}


def _numbers() -> list[int]:
    return [int(n) for n in ONLY.split(",")] if ONLY is not None else list(range(CASES))


def _concurrently(fn: Callable[[Any], Any], items: list[Any], workers: int = 24) -> list[Any]:
    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(fn, items))


@dataclass
class DraRun:
    run: str
    pairs: list[dict[str, DraCopy]]

    @property
    def copies(self) -> list[DraCopy]:
        return [c for pair in self.pairs for c in pair.values()]


@pytest.fixture
def dra_run(cluster: DevCluster, api: KubeAPI) -> Iterator[DraRun]:
    """The run's shared nodes and one namespace per scheduler (admin access allowed there); everything the run made
    is deleted at the end: nodes, classes and slices by their diff-run label, claims and pods with the namespaces."""
    run = secrets.token_hex(2)
    pairs = [{s: DraCopy(generate(SEED, n), s, run) for s in SCHEDULERS} for n in _numbers()]
    base = 700000 + secrets.randbelow(1500) * 16
    specs = [NodeSpec(name=shared_node(run, i), internal_ip=node_ip(base + i), cpu="256", memory="1Ti", pods=5000,
                      labels={POOL_LABEL: pool_of(run), RACK: f"r{i // 2}", "diff-run": run},
                      taints=({"key": POOL_LABEL, "value": pool_of(run), "effect": "NoSchedule"},))
             for i in range(SHARED_NODES)]
    namespaces = [namespace_of(run, s) for s in SCHEDULERS]
    try:
        create_nodes(api, specs)
        for ns in namespaces:
            api.post("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {
                "name": ns, "labels": {"diff-run": run, ADMIN_ACCESS_LABEL: "true"}}})
        yield DraRun(run, pairs)
    finally:
        cleaning = time.monotonic()
        _concurrently(lambda call: call(), [
            *(lambda path=path: api.request("DELETE", path, params={"labelSelector": f"diff-run={run}"}, timeout=120)
              for path in ("/api/v1/nodes", f"{RESOURCES}/resourceslices", f"{RESOURCES}/deviceclasses")),
            *(lambda ns=ns: kube.delete_namespace(api, ns) for ns in namespaces)])
        print(f"clean-up {time.monotonic() - cleaning:.1f}s")


# -- creating and settling --------------------------------------------------------------------------------------------
def _create(api: KubeAPI, copies: list[DraCopy], names: Mapping[str, str]) -> None:
    """Classes, slices, claims (with the allocations written up front), templates, then the gated pods."""
    def post(item: tuple[str, dict[str, Any]]) -> None:
        api.post(*item)

    def claim(item: tuple[DraCopy, dict[str, Any]]) -> None:
        c, body = item
        created = api.post(f"{RESOURCES}/namespaces/{c.namespace}/resourceclaims", body)
        allocation = c.allocations().get(body["metadata"]["name"])
        if allocation is not None:  # as a 1.36 scheduler writes it: kube-scheduler cannot reserve one without
            created["status"] = {"allocation": {**allocation, "allocationTimestamp": _now()}}
            api.put(f"{RESOURCES}/namespaces/{c.namespace}/resourceclaims/{body['metadata']['name']}/status", created)

    _concurrently(post, [(f"{RESOURCES}/deviceclasses", b) for c in copies for b in c.device_classes()]
                  + [(f"{RESOURCES}/resourceslices", b) for c in copies for b in c.slices()]
                  + [(f"{RESOURCES}/namespaces/{c.namespace}/resourceclaimtemplates", b)
                     for c in copies for b in c.templates()])
    _concurrently(claim, [(c, b) for c in copies for b in c.claims()])
    _concurrently(post, [(f"/api/v1/namespaces/{c.namespace}/pods", b)
                         for c in copies for b in c.pods(names[c.scheduler], GATE)])


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _pods(api: KubeAPI, run: str) -> dict[str, dict[str, Any]]:
    return {f"{p['metadata']['namespace']}/{p['metadata']['name']}": p
            for p in api.get("/api/v1/pods", labelSelector=f"diff-run={run}")["items"]}


def _claims(api: KubeAPI, run: str) -> dict[str, dict[str, Any]]:
    return {f"{c['metadata']['namespace']}/{c['metadata']['name']}": c
            for s in SCHEDULERS
            for c in api.get(f"{RESOURCES}/namespaces/{namespace_of(run, s)}/resourceclaims")["items"]}


def _settle(api: KubeAPI, run: str, copies: list[DraCopy], timeout: float) -> None:
    """Until the resourceclaim controller has made every template's claim and recorded it in its pod's status."""
    wanted = sum(1 for c in copies for pod in c.case["pods"] for e in pod if "template" in e)
    seen: dict[str, Any] = {"missing": []}

    def made() -> bool:
        pods, claims = _pods(api, run), _claims(api, run)
        missing = [f"{key}: {entry}" for key, pod in pods.items()
                   for entry, name in DraCopy.pod_claims(pod).items()
                   if name is None or f"{pod['metadata']['namespace']}/{name}" not in claims]
        seen["missing"] = missing
        return not missing and sum(1 for p in pods.values() for s in p["status"].get("resourceClaimStatuses") or ()
                                   if s.get("resourceClaimName")) == wanted

    try:
        kube.poll(made, timeout, "the template claims", interval=0.5)
    except AssertionError as exc:
        raise AssertionError(f"{exc}: still missing {seen['missing'][:10]}") from None


def _snapshot(api: KubeAPI, run: str, copies: list[DraCopy]) -> Snapshot:
    """What `copies` (one scheduler's) were made of, as listed now (before any scheduling)."""
    drivers = {d for c in copies for d in c.drivers}
    classes = {c.class_name(i) for c in copies for i in range(len(c.case["classes"]))}
    namespace = copies[0].namespace
    return Snapshot(
        nodes=[api.get(f"/api/v1/nodes/{shared_node(run, i)}") for i in range(SHARED_NODES)],
        slices=[s for s in api.get(f"{RESOURCES}/resourceslices", labelSelector=f"diff-run={run}")["items"]
                if s["spec"]["driver"] in drivers],
        classes=[c for c in api.get(f"{RESOURCES}/deviceclasses", labelSelector=f"diff-run={run}")["items"]
                 if c["metadata"]["name"] in classes],
        claims=api.get(f"{RESOURCES}/namespaces/{namespace}/resourceclaims")["items"],
        pods=api.get(f"/api/v1/namespaces/{namespace}/pods", labelSelector=f"diff-run={run}")["items"])


def _lift(api: KubeAPI, keys: list[str]) -> None:
    _concurrently(lambda key: api.merge_patch(f"/api/v1/namespaces/{key.split('/')[0]}/pods/{key.split('/')[1]}",
                                              {"spec": {"schedulingGates": None}}), keys)


def _await(api: KubeAPI, run: str, keys: list[str], timeout: float,
           final: Callable[[str, Outcome], bool]) -> dict[str, Outcome]:
    """Each pod's verdict, once `final` accepts it."""
    found: dict[str, Outcome] = {}

    def decided() -> bool:
        for key, pod in _pods(api, run).items():
            if key in keys and key not in found and (outcome := outcome_of(pod)) is not None and final(key, outcome):
                found[key] = outcome
        return len(found) == len(keys)

    try:
        kube.poll(decided, timeout, f"DIFF_SEED={SEED}: a verdict for every pod", interval=0.25)
    except AssertionError as exc:
        raise AssertionError(f"{exc}: none yet for {sorted(set(keys) - set(found))[:20]}") from None
    return found


def _ms_final(url: str, namespace: str) -> Callable[[str, Outcome], bool]:
    """metrics-sched's FailedScheduling message keeps the filters' words when its PostFilter deallocated a claim
    (kube-scheduler's adds "deallocation of ResourceClaim completed"): its decision record tells. An unschedulable
    verdict is final once the pod's newest record is an unschedulable one that deallocated nothing."""
    def final(key: str, outcome: Outcome) -> bool:
        if outcome.kind != "unschedulable" or not key.startswith(f"{namespace}/"):
            return True
        records = httpx.get(f"{url}/decisions", params={"pod": key, "limit": "1"}, timeout=30).json()["decisions"]
        return bool(records) and records[0]["result"] == "unschedulable" and not any(
            "deallocated" in note for note in records[0].get("notes") or ())
    return final


def _feasible(url: str, namespace: str) -> dict[str, set[str]]:
    """metrics-sched's feasible nodes for each pod it bound in `namespace` (its newest scheduled record)."""
    out: dict[str, set[str]] = {}
    params = {"limit": "1000"}
    while True:
        body = httpx.get(f"{url}/decisions", params=params, timeout=30).json()
        for record in body["decisions"]:
            if record["result"] == "scheduled" and record["pod"].startswith(f"{namespace}/") \
                    and record["pod"] not in out:
                out[record["pod"]] = {c["node"] for c in record["candidates"]}
                if len(out[record["pod"]]) != record["feasible"]:
                    raise AssertionError(f"{record['pod']}: {record['feasible']} feasible nodes but "
                                         f"{len(out[record['pod']])} candidates recorded")
        if not body.get("next"):
            return out
        params = {"limit": "1000", "before": str(body["next"])}


# -- comparing --------------------------------------------------------------------------------------------------------
@dataclass
class CopyResult:
    """One copy's verdict per pod and how it left each claim of the case (normalized), by claim key: "x0",
    "pre", ... for the claims the test made, "p<k>/<entry>" for a template's."""

    outcomes: list[Outcome]
    claims: dict[str, Any] = field(default_factory=dict)
    invalid: list[str] = field(default_factory=list)  # bound pods' claims not allocated or not reserved for them


def copy_result(c: DraCopy, outcomes: Mapping[str, Outcome], pods: Mapping[str, dict[str, Any]],
                claims: Mapping[str, dict[str, Any]]) -> CopyResult:
    result = CopyResult([outcomes[f"{c.namespace}/{c.pod_name(k)}"] for k in range(len(c.case["pods"]))])

    def left(claim: Mapping[str, Any] | None) -> dict[str, Any]:
        status = (claim or {}).get("status") or {}
        return {"allocation": c.normalized(status.get("allocation")),
                "reservedFor": [r.get("name") for r in status.get("reservedFor") or ()]}

    for k in range(len(c.case["pods"])):
        pod = pods[f"{c.namespace}/{c.pod_name(k)}"]
        bound = result.outcomes[k].kind == "bound"
        direct = {e["name"] for e in pod["spec"].get("resourceClaims") or () if e.get("resourceClaimName")}
        for entry, name in c.pod_claims(pod).items():
            key = name.removeprefix(f"c{c.number:04d}-") if entry in direct and name else f"p{k}/{entry}"
            result.claims[key] = left(claims.get(f"{c.namespace}/{name}") if name else None)
            got = result.claims[key]
            if bound and (not got["allocation"] or c.pod_name(k) not in got["reservedFor"]):
                result.invalid.append(f"pod {c.pod_name(k)} bound, but its claim {entry} ({name}) is "
                                      f"{result.claims[key]}")
        if k == 0 and c.case["extended"]:
            ext = (pod.get("status") or {}).get("extendedResourceClaimStatus")
            claim = claims.get(f"{c.namespace}/{ext['resourceClaimName']}") if ext else None
            result.claims["p0/extended"] = {**left(claim),
                                            "spec": c.normalized((claim or {}).get("spec")),
                                            "requestMappings": c.normalized((ext or {}).get("requestMappings"))}
            if bound and (claim is None or c.pod_name(0) not in result.claims["p0/extended"]["reservedFor"]):
                result.invalid.append(f"pod {c.pod_name(0)} bound, but its extended resource claim is {ext}: "
                                      f"{result.claims['p0/extended']}")
    for key in c.case["claims"].keys() | c.case["allocated"].keys():
        if key not in result.claims:  # a claim no pod of this copy uses (the pre-allocated one)
            result.claims[key] = left(claims.get(f"{c.namespace}/{c.claim_name(key)}"))
    return result


def compare(kube_r: CopyResult, other: CopyResult, feasible: Mapping[int, set[str]] | None,
            stats: collections.Counter[str]) -> list[str]:
    """What `other` (metrics-sched's copy, or a replay) disagrees with kube-scheduler's on. `feasible`: metrics-
    sched's feasible nodes per pod it bound (None: not known, for a replay)."""
    problems = []
    same_nodes = True
    for k, (kv, ov) in enumerate(zip(kube_r.outcomes, other.outcomes, strict=True)):
        if not same_nodes:
            stats["second pod not compared (the first went to different nodes)"] += 1
            break
        if kv.kind != ov.kind:
            problems.append(f"pod p{k}: kube-scheduler {kv}; metrics-sched {ov}")
            same_nodes = False
            continue
        stats[f"p{k} {kv.kind}"] += 1
        if kv.kind == "bound" and feasible is not None and kv.node not in feasible.get(k, set()):
            problems.append(f"pod p{k}: kube-scheduler bound it to {kv.node}, which metrics-sched found infeasible "
                            f"(its feasible nodes: {sorted(feasible.get(k, set()))}, it chose {ov.node})")
        same_nodes = kv.node == ov.node
    problems += other.invalid + [f"kube-scheduler: {p}" for p in kube_r.invalid]
    if not same_nodes:
        stats["cases whose claims were not compared (pods on different nodes)"] += 1
    elif not problems:
        stats["claims compared"] += len(kube_r.claims)
        for key in sorted(kube_r.claims.keys() | other.claims.keys()):
            kc, oc = kube_r.claims.get(key), other.claims.get(key)
            if kc != oc:
                problems.append(f"claim {key}: kube-scheduler left {kc}\n    metrics-sched left {oc}")
            elif kc is not None and kc["allocation"]:
                stats["allocations identical"] += 1
    return problems


# -- the test ---------------------------------------------------------------------------------------------------------
@pytest.mark.timeout(900)
def test_kube_scheduler_and_metrics_sched_allocate_devices_alike(cluster: DevCluster, api: KubeAPI,
                                                                 dra_run: DraRun) -> None:
    started = time.monotonic()
    run, copies = dra_run.run, dra_run.copies
    print(f"\nDIFF_SEED={SEED} DRA cases={len(dra_run.pairs)}")
    names = {"kube": f"kube-dra-{secrets.token_hex(3)}", "ms": f"ms-dra-{secrets.token_hex(3)}"}
    _create(api, copies, names)
    created = time.monotonic() - started
    _settle(api, run, copies, timeout=60 + 0.1 * len(copies))
    snapshot = _snapshot(api, run, [c for c in copies if c.scheduler == "ms"])
    settled = time.monotonic() - started
    waves = [[f"{c.namespace}/{c.pod_name(k)}" for c in copies if len(c.case["pods"]) > k] for k in range(2)]
    outcomes: dict[str, Outcome] = {}
    ms_extra = {"profile": MS_PROFILE, "audit": {"topCandidates": 10}}  # a record lists every feasible node
    with kube_scheduler(cluster, names["kube"], qps=5000, burst=5000, percentage_of_nodes_to_score=100), \
            schedulers(cluster, extra=ms_extra, leader_elect=False, name=names["ms"]) as (_, (ms_proc,)):
        up = time.monotonic() - started
        for wave in waves:
            _lift(api, wave)
            outcomes |= _await(api, run, wave, 90 + 0.3 * len(wave), _ms_final(ms_proc.url, namespace_of(run, "ms")))
        decided = time.monotonic() - started
        feasible = _feasible(ms_proc.url, namespace_of(run, "ms"))
    pods, claims = _pods(api, run), _claims(api, run)

    failures = []
    stats: collections.Counter[str] = collections.Counter()
    kube_results: dict[int, CopyResult] = {}
    for pair in dra_run.pairs:
        kube_c, ms_c = pair["kube"], pair["ms"]
        case = kube_c.case
        kube_r = kube_results[kube_c.number] = copy_result(kube_c, outcomes, pods, claims)
        ms_r = copy_result(ms_c, outcomes, pods, claims)
        ms_feasible = {k: feasible.get(f"{ms_c.namespace}/{ms_c.pod_name(k)}", set())
                       for k in range(len(case["pods"]))}
        for feature in features(case):
            stats[feature] += 1
            stats[f"{feature}, first pod bound"] += kube_r.outcomes[0].kind == "bound"
        problems = compare(kube_r, ms_r, ms_feasible, stats)
        if ONLY is not None:
            print(f"--- case {case['case']}: kube-scheduler {[str(o) for o in kube_r.outcomes]}; metrics-sched "
                  f"{[str(o) for o in ms_r.outcomes]}\n{case_yaml(case)}")
        if problems:
            failures.append(f"--- DIFF_SEED={SEED} DIFF_CASE={case['case']}:\n  " + "\n  ".join(problems)
                            + f"\n{case_yaml(case)}")
    compared = time.monotonic() - started

    # The replays: metrics-sched in-process on its copies' objects, as they were before scheduling.
    config = {"profiles": [{"schedulerName": names["ms"], **MS_PROFILE}]}
    ms_waves = [[key for key in wave if key.startswith(f"{namespace_of(run, 'ms')}/")] for wave in waves]
    replayed = replay(snapshot, ms_waves, config)
    replay_failures = _replay_problems(dra_run, replayed, kube_results, pods, collections.Counter())
    constrained = [p for p in dra_run.pairs if _has_constraints(p["ms"].case)]
    with constraints_disabled():
        loose = replay(_only(snapshot, constrained), [[f"{p['ms'].namespace}/{p['ms'].pod_name(k)}"
                                                       for p in constrained if len(p["ms"].case["pods"]) > k]
                                                      for k in range(2)], config)
    bitten = _replay_problems(DraRun(run, constrained), loose, kube_results, pods, collections.Counter())
    replays = time.monotonic() - started

    print(f"created {created:.1f}s, settled {settled:.1f}s, schedulers up {up:.1f}s, verdicts {decided:.1f}s, "
          f"compared {compared:.1f}s, replays {replays:.1f}s; with constraints disabled {len(bitten)} of "
          f"{len(constrained)} cases with constraints disagree"
          + "".join(f"\n  {k}: {v}" for k, v in sorted(stats.items())))
    assert not failures, (f"{len(failures)} of {len(dra_run.pairs)} cases disagree (re-run one with "
                          f"DIFF_SEED={SEED} DIFF_CASE=n):\n" + "\n".join(failures))
    assert not replay_failures, ("the in-process replay disagrees with kube-scheduler where metrics-sched's process "
                                 "did not:\n" + "\n".join(replay_failures))
    if ONLY is None:  # a harness that compares next to nothing would pass as well
        assert stats["allocations identical"] >= len(dra_run.pairs) // 4, stats
        assert bitten, "with the allocator's constraints disabled every case still agrees: the comparison does not bite"


def _has_constraints(case: dict[str, Any]) -> bool:
    return any(s["devices"].get("constraints") for s in [*case["claims"].values(), *case["templates"].values()])


def _only(snapshot: Snapshot, pairs: list[dict[str, DraCopy]]) -> Snapshot:
    """The snapshot's objects of these cases' metrics-sched copies."""
    drivers = {d for p in pairs for d in p["ms"].drivers}
    prefixes = tuple(f"c{p['ms'].number:04d}-" for p in pairs)
    classes = {p["ms"].class_name(i) for p in pairs for i in range(len(p["ms"].case["classes"]))}
    return Snapshot(nodes=snapshot.nodes,
                    slices=[s for s in snapshot.slices if s["spec"]["driver"] in drivers],
                    classes=[c for c in snapshot.classes if c["metadata"]["name"] in classes],
                    claims=[c for c in snapshot.claims if c["metadata"]["name"].startswith(prefixes)],
                    pods=[p for p in snapshot.pods if p["metadata"]["name"].startswith(prefixes)])


def _replay_problems(dra_run: DraRun, replayed: Replayed, kube_results: Mapping[int, CopyResult],
                     pods: Mapping[str, dict[str, Any]], stats: collections.Counter[str]) -> list[str]:
    out = []
    claims = replayed.claims
    for pair in dra_run.pairs:
        c = pair["ms"]
        if f"{c.namespace}/{c.pod_name(0)}" not in replayed.outcomes:
            continue
        result = copy_result(c, replayed.outcomes, {**pods, **replayed.pods}, claims)
        problems = compare(kube_results[c.number], result, None, stats)
        if problems:
            out.append(f"--- DIFF_SEED={SEED} DIFF_CASE={c.number} (replayed):\n  " + "\n  ".join(problems))
    return out
