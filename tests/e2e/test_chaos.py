"""Chaos: a burst schedules while pods and nodes churn and the scheduler's dependencies fail.

The churn is a seeded list of operations run one at a time (create, delete, recreate a pod under the same
name, relabel a pod, take a node away and bring it back), so the cluster's final state does not depend on
timing; only the interleaving with the scheduler does. Faults on the way: telemetry garbage and a dead
Prometheus, then a hanging CMDB, then an API server restart after an etcd compaction (every watch gets
410 Gone and relists). Throughout, a sampler checks that no node's bound pods request more than it offers;
at the end nothing is lost, nothing bound twice, and the cache comparer finds the cache equal to the API.
"""

from __future__ import annotations

import collections
import contextlib
import os
import random
import signal
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from devcluster import DevCluster, NodeSpec
from devcluster.kubeapi import KubeAPI, KubeAPIError
from devcluster.nodes import KWOK_ANNOTATION, node_ip
from metrics_sched.model.quantity import to_int, to_milli
from tests.e2e import kube
from tests.e2e.pools import in_pool, node_pool
from tests.e2e.scheduler_proc import SchedulerProcess, schedulers

SEED = 14
BURST = 200
CHURN_OPS = 90
MAX_CHURN_PODS = 15  # live churn pods at most: the spares have room for all of them once all are back
# The churn runs on spare nodes KWOK does not manage: KWOK deletes pods by name, without the UID precondition a
# kubelet uses, so its clean-up of a deleted pod could delete the pod recreated under the same name.
SPARE_LABEL = "metrics-sched.test/spare"
NOT_SPARE = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
    {"matchExpressions": [{"key": SPARE_LABEL, "operator": "DoesNotExist"}]}]}}}


@dataclass
class Sampler:
    """Every half second: per node of the pool, the requests of the pods bound there against its allocatable."""

    cluster: DevCluster
    namespace: str
    pool: str
    violations: list[str] = field(default_factory=list)
    samples: int = 0
    seen_on: dict[str, str] = field(default_factory=dict)  # pod name -> the node it was last seen bound to
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        with self.cluster.api() as api:
            while not self.stop.is_set():
                with contextlib.suppress(httpx.HTTPError, KubeAPIError):  # the API server restarting: no sample
                    self.check(api)
                self.stop.wait(0.5)

    def check(self, api: KubeAPI) -> None:
        nodes = api.get("/api/v1/nodes", labelSelector=f"metrics-sched.test/pool={self.pool}")["items"]
        pods = kube.list_pods(api, self.namespace)
        used: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
        for p in pods:
            if p["spec"].get("nodeName"):
                self.seen_on[p["metadata"]["name"]] = p["spec"]["nodeName"]
            if p["spec"].get("nodeName") and p["status"].get("phase") not in ("Succeeded", "Failed"):
                requests = p["spec"]["containers"][0]["resources"]["requests"]
                used[p["spec"]["nodeName"]].update(cpu=to_milli(requests["cpu"]), memory=to_int(requests["memory"]),
                                                   pods=1)
        for n in nodes:
            name, allocatable = n["metadata"]["name"], n["status"].get("allocatable") or {}
            if not allocatable:
                continue  # created without status a moment ago (devcluster patches it in)
            limit = {"cpu": to_milli(allocatable["cpu"]), "memory": to_int(allocatable["memory"]),
                     "pods": to_int(allocatable["pods"])}
            over = {r: (used[name][r], limit[r]) for r in limit if used[name][r] > limit[r]}
            if over:
                there = sorted(p["metadata"]["name"] for p in pods if p["spec"].get("nodeName") == name)
                self.violations.append(f"{name}: {over} {there}")
        self.samples += 1


@dataclass
class Churn:
    """The seeded operations, applied one at a time; `live` is what the test expects to exist."""

    api: KubeAPI
    namespace: str
    scheduler: str
    pool: str
    spares: list[NodeSpec]
    rng: random.Random = field(default_factory=lambda: random.Random(SEED))
    live: set[str] = field(default_factory=set)
    down: list[NodeSpec] = field(default_factory=list)
    created: int = 0
    history: list[str] = field(default_factory=list)  # what each step did, for the failure message

    def create(self, name: str) -> None:
        spec = in_pool(self.pool)
        spec["nodeSelector"] = {**spec["nodeSelector"], SPARE_LABEL: "true"}
        body = kube.pod_manifest(name, scheduler=self.scheduler, cpu="100m", memory="100Mi", **spec)
        # The same name may still be on its way out: wait until the API takes the new pod.
        kube.poll(lambda: self.api.post(f"/api/v1/namespaces/{self.namespace}/pods", body, ok=(409,)).get("kind")
                  == "Pod", 10, f"pod {name} created", interval=0.05)
        self.live.add(name)

    def delete(self, name: str) -> None:
        self.api.request("DELETE", f"/api/v1/namespaces/{self.namespace}/pods/{name}",
                         params={"gracePeriodSeconds": "0"}, ok=(404,))
        self.live.discard(name)

    def step(self, i: int) -> None:
        ours = sorted(self.live)
        op = self.rng.choice(["create", "create", "delete", "recreate", "relabel", "node"])
        if not ours:
            op = "create"
        elif op == "create" and len(ours) >= MAX_CHURN_PODS:
            op = "delete"
        if op == "create":
            self.created += 1
            target = f"c{self.created:03d}"
            self.create(target)
        elif op == "delete":
            target = self.rng.choice(ours)
            self.delete(target)
        elif op == "recreate":
            target = self.rng.choice(ours)
            self.delete(target)
            self.create(target)
        elif op == "relabel":
            target = self.rng.choice(ours)
            self.api.merge_patch(f"/api/v1/namespaces/{self.namespace}/pods/{target}",
                                 {"metadata": {"labels": {"churn": str(i)}}})
        elif self.down and (self.rng.random() < 0.5 or len(self.down) == len(self.spares)):
            op, target = "node-up", self.down[0].name
            add_spares(self.api, [self.down.pop(0)])
        else:
            spec = self.rng.choice([s for s in self.spares if s not in self.down])
            op, target = "node-down", spec.name
            self.api.delete(f"/api/v1/nodes/{spec.name}")  # its bound pods stay bound to it (no node controller)
            self.down.append(spec)
        self.history.append(f"{i}:{op}:{target}")

    def restore_nodes(self) -> None:
        if self.down:
            add_spares(self.api, self.down)
            self.down = []


def add_spares(api: KubeAPI, specs: list[NodeSpec]) -> None:
    """Creates spare nodes without KWOK's annotation (Ready as created: nothing manages them)."""
    for spec in specs:
        body = spec.manifest()
        del body["metadata"]["annotations"][KWOK_ANNOTATION]
        created = api.post("/api/v1/nodes", body)
        if not created.get("status", {}).get("allocatable"):  # some apiserver versions drop status on create
            api.merge_patch(f"/api/v1/nodes/{spec.name}/status", {"status": body["status"]})


def spare_nodes(pool: list[NodeSpec], count: int) -> list[NodeSpec]:
    """Small nodes of the pool (its labels and taint) that come and go. node_pool numbers its nodes from a
    multiple of 16, so the addresses after its last node are free."""
    _, b, c, d = (int(x) for x in pool[-1].internal_ip.split("."))
    last = ((b - 240) << 16) | (c << 8) | d
    return [NodeSpec(name=f"{pool[0].name.rsplit('-', 1)[0]}-x{i}", internal_ip=node_ip(last + 1 + i), cpu="1",
                     memory="8Gi", labels={**pool[0].labels, SPARE_LABEL: "true"}, taints=pool[0].taints)
            for i in range(count)]


def all_bound(api: KubeAPI, namespace: str) -> list[dict[str, Any]] | None:
    pods = kube.list_pods(api, namespace)
    return pods if all(p["spec"].get("nodeName") for p in pods) else None


def metric(proc: SchedulerProcess, name: str) -> dict[str, float]:
    text = httpx.get(f"{proc.url}/metrics", timeout=5).text
    return {next(iter(s.labels.values()), ""): s.value for f in text_string_to_metric_families(text)
            for s in f.samples if s.name == name}


def compacted_restart(cluster: DevCluster) -> None:
    """Compacts etcd to its current revision, then restarts the API server: every watch resumes on a
    compacted resourceVersion, gets 410 Gone and relists."""
    assert cluster.endpoints is not None
    etcd = cluster.endpoints.etcd
    revision = int(httpx.post(f"{etcd}/v3/kv/range", json={"key": "Lw=="}, timeout=5).json()["header"]["revision"])
    cluster.restart_apiserver(down_for=1.0)
    httpx.post(f"{etcd}/v3/kv/compaction", json={"revision": revision, "physical": True}, timeout=10)


def test_churn_and_faults_during_a_burst_lose_nothing(cluster: DevCluster, api: KubeAPI, namespace: str,
                                                      request: pytest.FixtureRequest) -> None:
    # No leader election: an API server down longer than renewDeadline would (rightly) end a leader, and this
    # test is about the cache. Comparisons every 5 s run during the churn too: none may report a mismatch.
    extra = {"sources": cluster.telemetry_sources(interval=1.0), "cacheCompareInterval": "5s"}
    with node_pool(cluster, 10, cpu="2", memory="16Gi") as (pool, specs), \
            schedulers(cluster, leader_elect=False, extra=extra) as (name, procs):
        proc = procs[0]
        spares = spare_nodes(specs, 3)
        add_spares(api, spares)
        request.addfinalizer(lambda: [api.delete(f"/api/v1/nodes/{s.name}") for s in spares])
        churn = Churn(api, namespace, name, pool, spares)
        sampler = Sampler(cluster, namespace, pool)
        sampling = threading.Thread(target=sampler.run, name="chaos-sampler")
        sampling.start()
        emulator = cluster.emulator()
        try:
            burst = [f"b{i:03d}" for i in range(BURST)]
            with ThreadPoolExecutor(16) as creators:
                created = creators.map(lambda n: api.post(
                    f"/api/v1/namespaces/{namespace}/pods",
                    kube.pod_manifest(n, scheduler=name, cpu="100m", memory="100Mi", affinity=NOT_SPARE,
                                      **in_pool(pool))), burst)
                for i in range(CHURN_OPS // 3):
                    churn.step(i)
                list(created)
            # Telemetry garbage and a dead Prometheus: scheduling must carry on without them.
            emulator.set_fault("cmdb", malformed=True)
            cluster.stop_prometheus()
            for i in range(CHURN_OPS // 3, 2 * CHURN_OPS // 3):
                churn.step(i)
            cluster.start_prometheus()
            emulator.set_fault("cmdb", delay=30.0)  # a hanging CMDB
            compacted_restart(cluster)
            for i in range(2 * CHURN_OPS // 3, CHURN_OPS):
                churn.step(i)
        finally:
            emulator.clear_faults()
            emulator.close()
            churn.restore_nodes()
        during_churn = sampler.samples

        expected = set(burst) | churn.live
        try:
            pods = kube.poll(lambda: all_bound(api, namespace), 60, "every pod bound")
            # The final placement sampled too (the sampler skips a round when the API server is away).
            at_bound = sampler.samples
            kube.poll(lambda: sampler.samples > at_bound, 10, "a sample of the final placement")
        except AssertionError as exc:
            pending = {p["metadata"]["name"]: p["status"].get("conditions") for p in kube.list_pods(api, namespace)
                       if not p["spec"].get("nodeName")}
            raise AssertionError(f"{exc}: {len(pending)} pending, e.g. {list(pending.items())[:3]}\n"
                                 f"{cluster.log_tail(proc.name, 40)}") from None
        finally:
            sampler.stop.set()
            sampling.join()
        # The comparer, on demand: the cache equals a fresh LIST (and no periodic run during the churn differed).
        runs = metric(proc, "metrics_sched_cache_compare_runs_total").get("ok", 0)
        os.kill(proc.managed.pid, signal.SIGUSR2)
        kube.poll(lambda: metric(proc, "metrics_sched_cache_compare_runs_total").get("ok", 0) > runs, 30,
                  "a comparer run after SIGUSR2")
        mismatches = metric(proc, "metrics_sched_cache_mismatch_total")
        compared = f"comparer: {mismatches}\n{_mismatch_lines(cluster, proc)}"

        names = {p["metadata"]["name"] for p in pods}
        assert names == expected, (f"lost {sorted(expected - names)}, appeared {sorted(names - expected)}; last "
                                   f"seen on {({n: sampler.seen_on.get(n) for n in expected ^ names})}; "
                                   f"churn: {churn.history}; {compared}")
        # The churn restarts the API server twice and lasts several seconds: samples every 0.5 s span it.
        assert during_churn >= 2, f"the sampler barely ran during the churn ({during_churn} samples)"
        assert not sampler.violations, (f"requests above allocatable: {sampler.violations[:3]}; churn: "
                                        f"{churn.history}; {compared}")

        # Bound at most once: one Scheduled event per pod UID (a recreated pod has a new UID).
        def scheduled() -> collections.Counter[str] | None:
            events = api.get(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")["items"]
            counts = collections.Counter(e["regarding"].get("uid") for e in events
                                         if e.get("reason") == "Scheduled" and e.get("reportingController") == name)
            return counts if set(counts) >= {p["metadata"]["uid"] for p in pods} else None

        counts = kube.poll(scheduled, 30, "a Scheduled event for every pod")
        assert max(counts.values()) == 1, f"bound twice: {[uid for uid, n in counts.items() if n > 1]}"
        kube.poll(lambda: proc.status()["assumed"] == 0, 10, "no assumed pods left")
        assert mismatches == {"missed": 0, "redundant": 0, "stale": 0}, compared
        assert proc.alive()


def _mismatch_lines(cluster: DevCluster, proc: SchedulerProcess) -> str:
    return "\n".join(line for line in cluster.log_tail(proc.name, 400).splitlines() if "cache mismatch" in line)
