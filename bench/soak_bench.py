"""Soak: a simulated week of Job churn and autoscaler taints on 1,000 nodes, 10,000+ decisions, in-process.

The real core (every built-in plugin, bench.core_bench's config), wired as the app wires it (the
/decisions ring, the Auditor, the Prometheus metrics, leader election fencing every bind), with a writer
that only records binds; the watch is played by feeding the events back through the handlers.

The simulated week: 1,008 ticks of 10 simulated minutes (the MetricCache, the in-flight ledger and the
reporter run on the simulated clock; the wall clock is only for the measurements). Each tick:
- the autoscaler (1 % of the nodes a tick): marks unneeded nodes `DeletionCandidateOfClusterAutoscaler=<unix
  time>:PreferNoSchedule`; after 30 min most are needed again (taint removed), one in ten is drained:
  `ToBeDeletedByClusterAutoscaler=<unix time>:NoSchedule`, then 10 min later its pods are deleted (a Job's
  pod is recreated pending, a background pod is re-created bound elsewhere), the node deleted and a new
  node (a new name) added. Every timestamp makes a taint set never seen before: ~10,000 over the week;
- telemetry for every current node (5 metrics), measured 1 s before the tick;
- Jobs whose run time is over finish: each pod Succeeded (MODIFIED), then DELETED;
- new Jobs arrive (2-6 pods each, a fresh Job uid as owner, job-name labels; run 1-23 h), evenly over
  the week so that `decisions` pods are scheduled in all. A Job in five has required hostname
  anti-affinity against its own pods, one in five zone spreading (maxSkew 1, DoNotSchedule), one in ten
  preferred hostname anti-affinity: InterPodAffinity's and PodTopologySpread's indexes churn too;
- every pending pod is scheduled (Scheduler.schedule_one, each call timed), the binder drained, and the
  bound pods fed back (MODIFIED, nodeName set, Running), as the watch delivers them.
5,000 background pods (50 ReplicaSets, not ours) stay bound throughout. Checked at the end: no bind to a
node tainted NoSchedule, nothing left assumed, the state holds exactly the live pods.

Measured per window (a quarter of a simulated day): p50/p99 of schedule_one, RSS (VmRSS) and Python's
allocated blocks after a gc.collect(); then the least-squares slope of each per 1,000 decisions over the
steady windows (after the first simulated day, when the Job population has reached its steady size, once
the decision ring is full, and before the hammering). Flat (not growing): RSS slope < 1 % of the first
steady window's RSS per 1,000 decisions (allocated blocks likewise); p50 slope < 5 % of its first steady
window per 1,000 decisions (timings are noisy on a small shared machine).

The last fifth of the week: 4 client threads (in a child process, as the callers are other pods) GET
/decisions?limit=1000 in a loop against the real HTTPServer on loopback (latency p50/p99 of whole
answers, and decisions/s then vs before). Leader election (the real LeaderElector, renewing every
RENEW_PERIOD against an in-memory Lease) runs all along: renewal latency = when the renewal was done -
when it was due (the previous one + the period), p50/p99 with and without the hammering. Memory at the
end: the sizes of the state's internal tables next to the current cluster's and to what the week went
through. A PNG of RSS and p50 over decisions (bench/results/soak.png) if matplotlib is there.

    python -m bench.soak_bench [--quick] [--decisions N] [--nodes N]
"""

from __future__ import annotations

import argparse
import copy
import gc
import http.client
import itertools
import json
import random
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from bench.core_bench import CORE_CONFIG, make_cluster, replicaset
from bench.scenario import NOW, pod_object
from metrics_sched.audit import DecisionRing
from metrics_sched.audit.auditor import Auditor
from metrics_sched.config import LeaderElectionConfig, parse_config
from metrics_sched.leader import LeaderElector, MemoryLeaseStore, bind_timeout
from metrics_sched.observability import SchedulerMetrics
from metrics_sched.plugins import in_tree_registry
from metrics_sched.ports import (
    EventSeries,
    FetchResult,
    KubeObject,
    LeaseRecord,
    Sample,
    SchedulingEvent,
)
from metrics_sched.scheduler import Scheduler
from metrics_sched.scheduler.binding import BindOutcome
from metrics_sched.scheduler.event_handlers import REPLICA_SETS
from metrics_sched.serving.decisions import decisions as decisions_endpoint
from metrics_sched.serving.http_server import HTTPServer
from metrics_sched.telemetry import MetricCache, SourceHealth
from metrics_sched.telemetry.ledger import InFlightLedgerStore

RESULTS = Path(__file__).parent / "results"
ROOT = Path(__file__).resolve().parent.parent
DAYS = 7.0  # a simulated week
TICK = 600.0  # simulated seconds per tick
WINDOW_TICKS = 36  # a quarter of a simulated day
WARMUP_SECONDS = 24 * 3600.0  # the Job population grows for ~23 h (the longest run), then holds steady
HAMMER_FROM = 0.8  # share of the week after which /decisions is hammered
HAMMER_CLIENTS = 4
HAMMER_LIMIT = 1000
RENEW_PERIOD = 0.2  # wall seconds between lease renewals (short: enough samples for a p99)
RSS_FLAT = 0.01  # |slope| per 1,000 decisions, as a share of the first steady window
CYCLE_FLAT = 0.05
BACKGROUND_PER_NODE = 5
BACKGROUND_REPLICASETS = 50
SOURCE = "soak"
CANDIDATE = "DeletionCandidateOfClusterAutoscaler"
TO_BE_DELETED = "ToBeDeletedByClusterAutoscaler"
NAMESPACES = ("team-a", "team-b", "team-c", "ml")
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


def say(message: str) -> None:
    print(f"[soak] {message}", file=sys.stderr, flush=True)


# -- the harness ---------------------------------------------------------------------------------
class SimClock:
    """The simulated clock of the week: moved by the soak, read by the cache, the ledger and the reporter."""

    def __init__(self, now: float = NOW) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class RecordingWriter:
    """A PodWriter that records binds (fed back as the watch would) and does nothing else."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.binds: list[tuple[str, str]] = []  # (uid, node), taken by the soak after each drain

    def bind(self, namespace: str, name: str, uid: str, node: str,
             annotations: Mapping[str, str] | None = None) -> None:
        with self.lock:
            self.binds.append((uid, node))

    def take(self) -> list[tuple[str, str]]:
        with self.lock:
            taken, self.binds = self.binds, []
        return taken

    def get_pod(self, namespace: str, name: str) -> KubeObject | None:
        return None

    def record_event(self, event: SchedulingEvent, series: EventSeries | None = None) -> str:
        return f"{event.pod_name}.soak"

    def update_event_series(self, event: SchedulingEvent, name: str, series: EventSeries) -> None:
        pass

    def set_pod_scheduled_condition(self, namespace: str, name: str, *, status: Literal["True", "False"],
                                    reason: str, message: str, resource_version: str | None = None) -> None:
        pass


class TimedLeaseStore(MemoryLeaseStore):
    """The in-memory Lease, noting when each renewal is done (from its GET to its write)."""

    def __init__(self) -> None:
        super().__init__()
        self.done: list[tuple[float, float]] = []  # (GET started, write done), wall perf_counter
        self._started = 0.0

    def get(self, namespace: str, name: str) -> LeaseRecord | None:
        self._started = time.perf_counter()
        return super().get(namespace, name)

    def _store(self, record: LeaseRecord) -> LeaseRecord:
        stored = super()._store(record)
        self.done.append((self._started, time.perf_counter()))
        return stored


@dataclass
class Wiring:
    scheduler: Scheduler
    cache: MetricCache
    ledger: InFlightLedgerStore
    writer: RecordingWriter
    clock: SimClock
    ring: DecisionRing
    metrics: SchedulerMetrics
    server: HTTPServer
    elector: LeaderElector
    lease: TimedLeaseStore
    stop: threading.Event
    outcomes: Counter[str] = field(default_factory=Counter)

    def close(self) -> None:
        self.stop.set()
        self.scheduler.stop(drain_timeout=60)
        self.server.stop()


def wire(ring_size: int, seed: int) -> Wiring:
    """The core as app/scheduler_app.py's build() wires it, minus the adapters: a recording writer, an in-memory
    Lease."""
    registry = in_tree_registry(third_party=False)
    config = parse_config(copy.deepcopy(CORE_CONFIG), registry.catalog())
    clock = SimClock()
    cache = MetricCache(config.metrics, clock=clock)
    ledger = InFlightLedgerStore(clock=clock)
    writer = RecordingWriter()
    le = LeaderElectionConfig(retry_period=RENEW_PERIOD)
    lease = TimedLeaseStore()
    elector = LeaderElector(lease, le, "soak", fence_margin=bind_timeout(le))
    scheduler = Scheduler(config, registry.plugins, writer, metrics=cache, ledger=ledger, is_leader=elector.may_bind,
                          instance="soak")
    scheduler.reporter.clock = clock  # series age on the simulated week
    cache.health[SOURCE] = SourceHealth(SOURCE, 5.0, [])
    for framework in scheduler.frameworks.values():
        framework.random.seed(seed)
    ring = DecisionRing(ring_size)
    auditor = Auditor(scheduler.state, ring, config_hash=config.config_hash)
    scheduler.cycle_observers.append(auditor.on_cycle)
    scheduler.bind_observers.append(auditor.on_bind)
    metrics = SchedulerMetrics(scheduler)
    auditor.record_observers.append(metrics.on_record)
    auditor.bind_observers.append(metrics.on_bind)
    server = HTTPServer("127.0.0.1", 0)
    server.route("/decisions", lambda query: decisions_endpoint(ring, query))
    server.route("/metrics", lambda _: (200, "text/plain", metrics.exposition()))
    wiring = Wiring(scheduler, cache, ledger, writer, clock, ring, metrics, server, elector, lease,
                    threading.Event())

    def count(outcome: BindOutcome, _: object) -> None:
        wiring.outcomes[str(outcome.result)] += 1

    scheduler.bind_observers.append(count)
    server.start()
    threading.Thread(target=elector.run, args=(wiring.stop, lambda: None, lambda: None), name="leader-election",
                     daemon=True).start()
    if not elector.acquired.wait(10):
        raise RuntimeError("the elector did not acquire the in-memory lease")
    return wiring


# -- the cluster ---------------------------------------------------------------------------------
@dataclass
class Job:
    name: str
    uid: str
    namespace: str
    ends: float  # simulated time
    shape: str  # plain | anti | spread | soft-anti
    pods: dict[str, dict[str, Any]] = field(default_factory=dict)  # uid -> the pod as last fed
    next_index: int = 0


def job_pod(job: Job, index: int) -> dict[str, Any]:
    name = f"{job.name}-{index}"
    labels = {"job-name": job.name, "batch.kubernetes.io/job-name": job.name, "controller-uid": job.uid,
              "team": job.namespace}
    selector = {"matchLabels": {"job-name": job.name}}
    spec: dict[str, Any] = {"restartPolicy": "Never"}
    if job.shape == "anti":
        spec["affinity"] = {"podAntiAffinity": {REQUIRED: [
            {"labelSelector": selector, "topologyKey": "kubernetes.io/hostname"}]}}
    elif job.shape == "spread":
        spec["topologySpreadConstraints"] = [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                                              "whenUnsatisfiable": "DoNotSchedule", "labelSelector": selector}]
    elif job.shape == "soft-anti":
        spec["affinity"] = {"podAntiAffinity": {PREFERRED: [{"weight": 50, "podAffinityTerm": {
            "labelSelector": selector, "topologyKey": "kubernetes.io/hostname"}}]}}
    gpu = (int(job.uid[:8], 16) + index) % 10 in (1, 4, 7)
    body = pod_object(name, cpu="1" if gpu else "100m", memory="4Gi" if gpu else "500Mi", gpus=1 if gpu else 0,
                      uid=f"{job.uid}-{index}", namespace=job.namespace, labels=labels, **spec)
    body["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": job.name,
                                            "uid": job.uid, "controller": True}]
    return body


class Week:
    """The simulated cluster: nodes with autoscaler taints, background pods, Jobs; every change fed to the handlers."""

    def __init__(self, wiring: Wiring, n_nodes: int, decisions: int, seed: int, days: float = DAYS) -> None:
        self.w = wiring
        self.handlers = wiring.scheduler.handlers
        self.rng = random.Random(seed)
        self.ticks = int(days * 86400 / TICK)
        self.decisions_target = decisions
        nodes, values = make_cluster(n_nodes, seed)
        self.nodes: dict[str, dict[str, Any]] = {n["metadata"]["name"]: n for n in nodes}
        self.base_taints = {name: list(n["spec"]["taints"]) for name, n in self.nodes.items()}
        self.values: dict[str, dict[str, float]] = {}  # node -> metric -> value
        for metric, per in values.items():
            for node, value in per.items():
                self.values.setdefault(node, {})[metric] = value
        self.candidates: dict[str, float] = {}  # node -> when it was marked
        self.doomed: dict[str, float] = {}  # node -> when ToBeDeleted was set
        self.generation = 0
        self.jobs: dict[str, Job] = {}
        self.job_count = 0
        self.pod_job: dict[str, Job] = {}  # pod uid -> its Job
        self.pods_made = 0
        self.background: dict[str, dict[str, Any]] = {}  # uid -> bound pod
        self.background_count = 0
        # What the week went through (memory must follow the current cluster, not this).
        self.timestamped_taints = 0  # taints set with a new timestamp (counted: a set of them would be a leak)
        self.nodes_added = 0
        self.nodes_deleted = 0
        self.jobs_finished = 0
        self.evicted = 0
        self.tainted_binds = 0  # binds to a node tainted NoSchedule when decided: must stay 0
        self.unscheduled = 0

    # -- setup -----------------------------------------------------------------------------------
    def start(self) -> None:
        for node in self.nodes.values():
            self.handlers.on_node_event("ADDED", node)
        for i in range(BACKGROUND_REPLICASETS):
            self.handlers.on_object_event(REPLICA_SETS, "ADDED", replicaset(f"bg-{i:02d}", "default"))
        names = list(self.nodes)
        for i in range(BACKGROUND_PER_NODE * len(names)):
            self._background_pod(names[i % len(names)])
        self.feed_telemetry()

    def _background_pod(self, node: str) -> None:
        i = self.background_count
        self.background_count += 1
        owner = f"bg-{i % BACKGROUND_REPLICASETS:02d}"
        body = pod_object(f"bg-{i:06d}", cpu="500m", memory="1Gi", owner=owner, labels={"app": owner},
                          namespace="default", node_name=node, scheduler="default-scheduler")
        body["status"]["phase"] = "Running"
        self.background[body["metadata"]["uid"]] = body
        self.handlers.on_pod_event("ADDED", body)

    # -- a tick ----------------------------------------------------------------------------------
    def advance(self, tick: int) -> None:
        self.w.clock.now = NOW + (tick + 1) * TICK
        self.autoscaler()
        self.feed_telemetry()
        self.finish_jobs()
        self.arrive(tick)

    def _set_taints(self, name: str, extra: list[dict[str, str]]) -> None:
        node = copy.deepcopy(self.nodes[name])
        node["spec"]["taints"] = self.base_taints[name] + extra
        self.nodes[name] = node
        self.handlers.on_node_event("MODIFIED", node)

    def autoscaler(self) -> None:
        now = self.w.clock.now
        for name, since in list(self.doomed.items()):
            if now - since >= 600:
                self.delete_node(name)
        for name, since in list(self.candidates.items()):
            if now - since < 1800:
                continue
            del self.candidates[name]
            candidate = {"key": CANDIDATE, "value": str(int(since)), "effect": "PreferNoSchedule"}
            if self.rng.random() < 0.1:
                self.doomed[name] = now
                self._set_taints(name, [candidate, {"key": TO_BE_DELETED, "value": self._stamp(),
                                                    "effect": "NoSchedule"}])
            else:
                self._set_taints(name, [])
        quiet = [n for n in self.nodes if n not in self.candidates and n not in self.doomed]
        for name in self.rng.sample(quiet, max(1, len(self.nodes) // 100)):
            self.candidates[name] = now
            self._set_taints(name, [{"key": CANDIDATE, "value": self._stamp(), "effect": "PreferNoSchedule"}])

    def _stamp(self) -> str:
        """The second within the last tick at which the autoscaler's loop got to this node."""
        self.timestamped_taints += 1
        return str(int(self.w.clock.now - self.rng.uniform(0, TICK)))

    def delete_node(self, name: str) -> None:
        """Drained: its pods go (a Job's is recreated pending, a background one bound elsewhere), then the node,
        and a new node with a new name joins."""
        del self.doomed[name]
        for job in list(self.jobs.values()):
            for uid, body in list(job.pods.items()):
                if body["spec"].get("nodeName") == name:
                    self.handlers.on_pod_event("DELETED", body)
                    del job.pods[uid]
                    self.pod_job.pop(uid, None)
                    self.evicted += 1
                    self._new_job_pod(job)
        moved = [uid for uid, body in self.background.items() if body["spec"]["nodeName"] == name]
        others = [n for n in self.nodes if n != name and n not in self.doomed]
        for uid in moved:
            self.handlers.on_pod_event("DELETED", self.background.pop(uid))
            self._background_pod(self.rng.choice(others))
        template = self.nodes.pop(name)
        self.handlers.on_node_event("DELETED", template)
        self.nodes_deleted += 1
        base = self.base_taints.pop(name)
        values = self.values.pop(name)
        self.generation += 1
        new = f"node-g{self.generation:05d}"
        node = copy.deepcopy(template)
        node["metadata"]["name"] = new
        node["metadata"]["labels"]["kubernetes.io/hostname"] = new
        node["spec"]["taints"] = list(base)
        self.nodes[new], self.base_taints[new], self.values[new] = node, base, values
        self.handlers.on_node_event("ADDED", node)
        self.nodes_added += 1

    def feed_telemetry(self) -> None:
        now = self.w.clock.now
        samples = [Sample(metric, node, value, now - 1.0) for node, per in self.values.items()
                   for metric, value in per.items()]
        # With the node directory, as a real refresh (PolledSource) ingests: the values of deleted nodes go.
        # Without it the cache kept every replaced node's values: the soak's memory growth after the ring filled.
        self.w.cache.ingest(SOURCE, FetchResult(samples, {}, {}), fetched_at=now,
                            directory=self.w.scheduler.node_directory())

    def finish_jobs(self) -> None:
        now = self.w.clock.now
        for key, job in list(self.jobs.items()):
            if job.ends > now or any(not body["spec"].get("nodeName") for body in job.pods.values()):
                continue  # still running, or a pod still pending (it must run before the Job can finish)
            for uid, body in job.pods.items():
                done = copy.deepcopy(body)
                done["status"]["phase"] = "Succeeded"
                self.handlers.on_pod_event("MODIFIED", done)
                self.handlers.on_pod_event("DELETED", done)
                self.pod_job.pop(uid, None)
            del self.jobs[key]
            self.jobs_finished += 1

    def arrive(self, tick: int) -> None:
        due = self.decisions_target * (tick + 1) // self.ticks
        while self.pods_made < due:
            self.job_count += 1
            k = self.job_count
            shape = "anti" if k % 5 == 1 else "spread" if k % 5 == 3 else "soft-anti" if k % 10 == 4 else "plain"
            job = Job(name=f"job-{k:06d}", uid=f"{k:08x}-{self.rng.getrandbits(64):016x}",
                      namespace=NAMESPACES[k % len(NAMESPACES)],
                      ends=self.w.clock.now + self.rng.uniform(3600, 23 * 3600), shape=shape)
            self.jobs[job.name] = job
            for _ in range(self.rng.randint(2, 6)):
                self._new_job_pod(job)

    def _new_job_pod(self, job: Job) -> None:
        body = job_pod(job, job.next_index)
        job.next_index += 1
        uid = body["metadata"]["uid"]
        job.pods[uid] = body
        self.pod_job[uid] = job
        self.pods_made += 1
        self.handlers.on_pod_event("ADDED", body)

    def doomed_rows(self) -> set[str]:
        return set(self.doomed)

    def bound(self, binds: Sequence[tuple[str, str]]) -> None:
        """The watch delivers the binds: each pod MODIFIED with its node, Running."""
        for uid, node in binds:
            job = self.pod_job.get(uid)
            if job is None or uid not in job.pods:
                continue  # deleted meanwhile
            body = copy.deepcopy(job.pods[uid])
            body["spec"]["nodeName"] = node
            body["status"]["phase"] = "Running"
            job.pods[uid] = body
            self.handlers.on_pod_event("MODIFIED", body)

    def live_pods(self) -> int:
        return len(self.background) + sum(1 for job in self.jobs.values() for body in job.pods.values()
                                          if body["spec"].get("nodeName"))


# -- /decisions hammering ------------------------------------------------------------------------
class Hammer:
    """Client threads requesting /decisions?limit=N in a loop, each answer read whole, in a child process (as
    the pods that would call the endpoint are: their own work does not take the scheduler's GIL)."""

    def __init__(self, port: int, clients: int, limit: int) -> None:
        self.port, self.clients, self.limit = port, clients, limit
        self.started = self.stopped = 0.0
        self._child: subprocess.Popen[str] | None = None

    def start(self) -> None:
        command = [sys.executable, "-m", "bench.soak_bench", "--hammer-child", str(self.port), str(self.clients),
                   str(self.limit)]
        self._child = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                       cwd=ROOT)
        self.started = time.perf_counter()

    def finish(self) -> dict[str, Any]:
        """Stops the clients (their stdin closes) and returns their summary."""
        assert self._child is not None
        self.stopped = time.perf_counter()
        out, _ = self._child.communicate(timeout=120)
        if self._child.returncode != 0:
            return {"error": f"hammer exited {self._child.returncode}"}
        summary: dict[str, Any] = json.loads(out)
        return summary


def hammer_child(port: int, clients: int, limit: int) -> dict[str, Any]:
    """The client side: `clients` threads until stdin closes."""
    stop = threading.Event()
    lock = threading.Lock()
    latencies: list[float] = []
    statuses: Counter[int] = Counter()
    errors: Counter[str] = Counter()
    received = [0]
    checked: dict[str, Any] = {}

    def loop() -> None:
        while True:  # at least one request each, however short the hammering
            t0 = time.perf_counter()
            try:
                connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
                connection.request("GET", f"/decisions?limit={limit}")
                response = connection.getresponse()
                body = response.read()
                connection.close()
            except OSError as exc:
                with lock:
                    errors[type(exc).__name__] += 1
                if stop.is_set():
                    return
                continue
            elapsed = time.perf_counter() - t0
            with lock:
                latencies.append(elapsed)
                statuses[response.status] += 1
                received[0] += len(body)
                if not checked and response.status == 200:
                    answer = json.loads(body)
                    ids = [d["id"] for d in answer["decisions"]]
                    checked.update(count=answer["count"], held=answer["held"],
                                   newest_first=all(a > b for a, b in itertools.pairwise(ids)))
            if stop.is_set():
                return

    threads = [threading.Thread(target=loop, daemon=True) for _ in range(clients)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    sys.stdin.read()  # until the soak closes it
    stop.set()
    for thread in threads:
        thread.join(timeout=60)
    seconds = time.perf_counter() - started
    ms = np.asarray(latencies) * 1000.0
    return {"clients": clients, "limit": limit, "requests": int(ms.size),
            "statuses": {str(k): v for k, v in sorted(statuses.items())}, "errors": dict(errors),
            "requests_per_second": round(ms.size / seconds, 1),
            "mb_per_request": round(received[0] / max(1, ms.size) / 2**20, 2),
            "latency_p50_ms": _pct(ms, 50), "latency_p99_ms": _pct(ms, 99), "latency_max_ms": _max(ms),
            "first_answer": checked, "seconds": round(seconds, 1)}


# -- measuring -----------------------------------------------------------------------------------
def _pct(values: np.ndarray[Any, Any], q: float) -> float | None:
    return round(float(np.percentile(values, q)), 3) if values.size else None


def _max(values: np.ndarray[Any, Any]) -> float | None:
    return round(float(values.max()), 3) if values.size else None


def vm_rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024.0, 2)
    return 0.0


def slope(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """Least-squares slope of ys over xs (None with fewer than 3 points)."""
    if len(xs) < 3:
        return None
    return float(np.polyfit(np.asarray(xs, dtype=np.float64), np.asarray(ys, dtype=np.float64), 1)[0])


def trend(windows: Sequence[dict[str, Any]], key: str, flat_share: float) -> dict[str, Any]:
    """The slope of `key` per 1,000 decisions (x: cumulative decisions at the window's end) and whether it is flat."""
    points = [(w["decisions_total"] / 1000.0, w[key]) for w in windows if w.get(key) is not None]
    if len(points) < 3:
        return {"windows": len(points), "slope_per_1000_decisions": None, "flat": None}
    first = points[0][1]
    per_1000 = slope([x for x, _ in points], [y for _, y in points])
    assert per_1000 is not None
    share = per_1000 / first if first else 0.0
    return {"windows": len(points), "first": first, "last": points[-1][1],
            "slope_per_1000_decisions": round(per_1000, 4), "slope_share_of_first": round(share, 5),
            "threshold_share": flat_share, "flat": share < flat_share}  # falling is flat enough


def renewals(lease: TimedLeaseStore, hammer_window: tuple[float, float] | None,
             pauses: Sequence[tuple[float, float]]) -> dict[str, Any]:
    """Renewal latency: done - due, due = the previous renewal done + the period. Split by the hammering; a
    renewal waiting across one of the bench's own pauses (the setup, a window's gc.collect()) counted apart."""
    done = list(lease.done)
    quiet: list[float] = []
    hammered: list[float] = []
    paused: list[float] = []
    calls: list[float] = []
    for (_, previous), (started, finished) in itertools.pairwise(done):
        late = finished - (previous + RENEW_PERIOD)
        calls.append(finished - started)
        if any(start < finished and previous < end for start, end in pauses):
            paused.append(late)
        elif hammer_window is not None and hammer_window[0] <= finished <= hammer_window[1]:
            hammered.append(late)
        else:
            quiet.append(late)

    def stats(values: list[float]) -> dict[str, Any]:
        ms = np.asarray(values) * 1000.0
        return {"renewals": int(ms.size), "p50_ms": _pct(ms, 50), "p99_ms": _pct(ms, 99), "max_ms": _max(ms)}

    call_ms = np.asarray(calls) * 1000.0
    return {"period_s": RENEW_PERIOD, "while_hammered": stats(hammered), "quiet": stats(quiet),
            "across_bench_pauses": stats(paused), "call_p99_ms": _pct(call_ms, 99),
            "note": "latency = renewal written - renewal due (previous renewal + period): the elector thread's "
                    "wake-up under the GIL plus its GET and PUT on an in-memory Lease"}


def internal_sizes(w: Wiring, week: Week) -> dict[str, Any]:
    """The state's internal tables at the end, next to the current cluster and to what the week went through."""
    state = w.scheduler.state
    index = state.pod_index
    table = state.table
    live_owners = {f"Job/{j.uid}" for j in week.jobs.values()} | {f"ReplicaSet/rs-bg-{i:02d}"
                                                                   for i in range(BACKGROUND_REPLICASETS)}
    in_use_sets = {table.taint_sets[int(table.taint_set[row])] for row in table.rows()}
    metric_store: dict[str, dict[str, Any]] = getattr(w.cache, "_store", {})
    bindings = next(iter(w.metrics.bindings.collect())).samples
    return {
        "current": {"nodes": len(table), "pods": len(state.pods), "jobs": len(week.jobs),
                    "owners_with_placed_pods": len({p.owner_key for p in state.pods.values() if p.owner_key}),
                    "distinct_taint_sets_in_use": len(in_use_sets)},
        "history": {"jobs": week.job_count, "pods_created": week.pods_made + week.background_count,
                    "nodes_added": week.nodes_added, "nodes_deleted": week.nodes_deleted,
                    "timestamped_taints": week.timestamped_taints},
        "held": {"owner_counts": len(state._owner_counts), "owner_totals": len(state._owner_totals),
                 "port_counts": len(state._port_counts), "waiting_for_node": len(state._waiting),
                 "node_table_capacity": table.capacity, "taint_sets": len(table.taint_sets),
                 "pod_index_queries": len(index), "pod_index_guarded": len(index._guarded),
                 "pod_index_carried_terms": sum(len(by_term) for by_term in index._carried.values()),
                 "decision_ring": len(w.ring), "decision_ring_size": w.ring.size,
                 "ledger_entries": len(w.ledger), "queue": w.scheduler.queue.lengths(),
                 "reporter_open_series": w.scheduler.reporter.open_series(),
                 "metric_cache_entries": sum(len(per) for per in metric_store.values()),
                 "prometheus_bindings_series": len(bindings)},
        "owners_known_but_not_live": len(set(state._owner_counts) - live_owners),
    }


# -- the run -------------------------------------------------------------------------------------
def run(quick: bool, *, decisions: int | None = None, n_nodes: int = 1_000, ring_size: int | None = None,
        seed: int = 0, days: float = DAYS, plot: Path | None = RESULTS / "soak.png") -> dict[str, Any]:
    """The soak (see the module's docstring); `days` shorter than a week only for a smoke test."""
    decisions = decisions or (3_000 if quick else 10_500)
    ring_size = ring_size or (1_000 if quick else 2_000)
    started = time.perf_counter()
    gc.collect()
    rss_at_start = vm_rss_mb()
    w = wire(ring_size, seed)
    week = Week(w, n_nodes, decisions, seed, days)
    try:
        pauses = [(time.perf_counter(), 0.0)]
        week.start()
        pauses[0] = (pauses[0][0], time.perf_counter())
        windows: list[dict[str, Any]] = []
        hammer: Hammer | None = None
        hammer_tick = int(week.ticks * HAMMER_FROM)
        warmup_ticks = int(WARMUP_SECONDS / TICK)
        latencies: list[float] = []
        wall0 = time.perf_counter()
        total = 0
        say(f"{n_nodes} nodes, {week.ticks} ticks of {TICK:.0f} s, ~{decisions} decisions, ring {ring_size}")
        for tick in range(week.ticks):
            if tick == hammer_tick:
                hammer = Hammer(w.server.port, HAMMER_CLIENTS, HAMMER_LIMIT)
                hammer.start()
                say(f"tick {tick}: hammering /decisions with {HAMMER_CLIENTS} clients")
            week.advance(tick)
            doomed = week.doomed_rows()
            while True:
                t0 = time.perf_counter()
                cycle = w.scheduler.schedule_one(timeout=0)
                elapsed = time.perf_counter() - t0
                if cycle is None:
                    break
                latencies.append(elapsed)
                if cycle.node is None:
                    week.unscheduled += 1
                elif cycle.node in doomed:
                    week.tainted_binds += 1
            w.scheduler.binder.drain(60)
            week.bound(w.writer.take())
            if (tick + 1) % WINDOW_TICKS == 0 or tick == week.ticks - 1:
                total += len(latencies)
                ms = np.asarray(latencies) * 1000.0
                wall = time.perf_counter() - wall0
                paused = time.perf_counter()
                gc.collect()
                pauses.append((paused, time.perf_counter()))
                windows.append({
                    "index": len(windows), "day": round((tick + 1) * TICK / 86400, 2), "decisions": int(ms.size),
                    "decisions_total": total, "p50_ms": _pct(ms, 50), "p99_ms": _pct(ms, 99),
                    "decisions_per_second": round(ms.size / (ms.sum() / 1000.0), 1) if ms.size else None,
                    "wall_seconds": round(wall, 2), "rss_mb": vm_rss_mb(), "allocated_blocks": sys.getallocatedblocks(),
                    "live_pods": len(w.scheduler.state.pods), "warmup": tick < warmup_ticks or total < ring_size,
                    "hammered": tick >= hammer_tick})
                last = windows[-1]
                say(f"day {last['day']:.2f}: {total} decisions, p50 {last['p50_ms']} ms, RSS {last['rss_mb']} MB, "
                    f"{last['live_pods']} pods placed{' (hammered)' if last['hammered'] else ''}")
                latencies = []
                wall0 = time.perf_counter()
        hammer_span = None
        hammered_by: dict[str, Any] | None = None
        if hammer is not None:
            hammered_by = hammer.finish()
            hammer_span = (hammer.started, hammer.stopped)
        w.scheduler.binder.drain(60)
        w.scheduler.reporter.wait_idle(60)
        week.bound(w.writer.take())
        steady = [x for x in windows if not x["warmup"] and not x["hammered"]]
        hammered = [x for x in windows if x["hammered"]]
        quiet_rate = [x["decisions_per_second"] for x in steady if x["decisions_per_second"]]
        hammer_rate = [x["decisions_per_second"] for x in hammered if x["decisions_per_second"]]
        sizes = internal_sizes(w, week)
        result: dict[str, Any] = {
            "quick": quick, "nodes": n_nodes, "seed": seed, "ticks": week.ticks, "tick_seconds": TICK,
            "simulated_days": days, "decisions": total, "ring_size": ring_size,
            "flat_thresholds": {"rss_and_blocks": f"slope < {RSS_FLAT:.0%} of the first steady window per 1,000 "
                                                  "decisions",
                                "cycle_p50": f"slope < {CYCLE_FLAT:.0%} of the first steady window per 1,000 "
                                             "decisions",
                                "steady_windows": "after the first simulated day and once the decision ring is "
                                                  "full, before the hammering"},
            "trend": {"rss_mb": trend(steady, "rss_mb", RSS_FLAT),
                      "allocated_blocks": trend(steady, "allocated_blocks", RSS_FLAT),
                      "cycle_p50_ms": trend(steady, "p50_ms", CYCLE_FLAT),
                      "cycle_p99_ms": trend(steady, "p99_ms", CYCLE_FLAT)},
            "decisions_per_second": {"quiet_median": _median(quiet_rate), "hammered_median": _median(hammer_rate)},
            "hammer": hammered_by,
            "lease_renewal": renewals(w.lease, hammer_span, pauses),
            "binds": dict(w.outcomes),
            "checks": {"tainted_binds": week.tainted_binds, "unscheduled": week.unscheduled,
                       "assumed_left": w.scheduler.state.assumed_count(),
                       "pods_in_state": len(w.scheduler.state.pods), "live_pods": week.live_pods(),
                       "supervisor_problems": w.scheduler.supervisor.problems()},
            "churn": {"jobs_finished": week.jobs_finished, "pods_evicted_by_scale_down": week.evicted},
            "memory": sizes,
            "rss_mb": {"before_setup": rss_at_start, "end": windows[-1]["rss_mb"] if windows else None},
            "windows": windows,
        }
        checks = result["checks"]
        checks["ok"] = (checks["tainted_binds"] == 0 and checks["assumed_left"] == 0
                        and checks["pods_in_state"] == checks["live_pods"] and not checks["supervisor_problems"])
    finally:
        w.close()
    result["plot"] = draw(result, plot) if plot is not None else None
    result["seconds"] = round(time.perf_counter() - started, 1)
    return result


def _median(values: Sequence[float]) -> float | None:
    return round(float(np.median(values)), 1) if values else None


def draw(result: dict[str, Any], path: Path) -> str:
    """RSS and p50 over decisions (steady, warm-up and hammered windows marked); or why there is no plot."""
    try:
        import matplotlib
    except ImportError:
        return "skipped: matplotlib is not installed"
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    windows = result["windows"]
    x = [w["decisions_total"] for w in windows]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    top.plot(x, [w["rss_mb"] for w in windows], marker="o", color="#1f5fa8")
    top.set_ylabel("RSS MB")
    bottom.plot(x, [w["p50_ms"] for w in windows], marker="o", color="#d9822b", label="p50")
    bottom.plot(x, [w["p99_ms"] for w in windows], marker=".", color="#bbb", label="p99")
    bottom.set_ylabel("schedule_one ms (log)")
    bottom.set_yscale("log")  # the hammered windows are 10-50x the quiet ones
    bottom.set_xlabel("decisions")
    bottom.legend()
    for ax in (top, bottom):
        warm = [w["decisions_total"] for w in windows if w["warmup"]]
        if warm:
            ax.axvspan(0, warm[-1], color="#eee", label="first day")
        before = [w["decisions_total"] for w in windows if not w["hammered"]]
        if len(before) < len(windows):
            ax.axvspan(before[-1] if before else 0, x[-1], color="#fde2c8")
    rss = result["trend"]["rss_mb"]
    fig.suptitle(f"soak: {result['nodes']} nodes, a simulated week, {result['decisions']} decisions; RSS slope "
                 f"{rss.get('slope_per_1000_decisions')} MB/1k (shaded: first day; /decisions hammered)", fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return str(path)


def markdown(result: dict[str, Any]) -> str:
    """A few lines for bench/results/latest.md."""
    t = result["trend"]
    hammer = result.get("hammer") or {}
    lease = result["lease_renewal"]
    held = result["memory"]["held"]
    history = result["memory"]["history"]

    def flat(entry: dict[str, Any]) -> str:
        return "flat" if entry.get("flat") else "NOT flat" if entry.get("flat") is False else "?"

    return "\n".join([
        f"**Soak** ({result['nodes']} nodes, a simulated week: {history['jobs']} Jobs, "
        f"{history['timestamped_taints']} timestamped taints, {history['nodes_deleted']} nodes replaced; "
        f"{result['decisions']} decisions)", "",
        "| | first steady window | last | slope per 1,000 decisions | |", "|---|---|---|---|---|",
        f"| RSS MB | {t['rss_mb'].get('first')} | {t['rss_mb'].get('last')} | "
        f"{t['rss_mb'].get('slope_per_1000_decisions')} | {flat(t['rss_mb'])} |",
        f"| schedule_one p50 ms | {t['cycle_p50_ms'].get('first')} | {t['cycle_p50_ms'].get('last')} | "
        f"{t['cycle_p50_ms'].get('slope_per_1000_decisions')} | {flat(t['cycle_p50_ms'])} |", "",
        f"/decisions?limit={hammer.get('limit')} x {hammer.get('clients')} clients: "
        f"p50 {hammer.get('latency_p50_ms')} ms, "
        f"p99 {hammer.get('latency_p99_ms')} ms; decisions/s {result['decisions_per_second']['quiet_median']} quiet, "
        f"{result['decisions_per_second']['hammered_median']} hammered. Lease renewal p99 "
        f"{lease['quiet']['p99_ms']} ms quiet, {lease['while_hammered']['p99_ms']} ms hammered. "
        f"Held at the end: {held['owner_counts']} owner arrays, {held['taint_sets']} taint sets, "
        f"{held['pod_index_queries']} pod queries, {held['metric_cache_entries']} telemetry entries, "
        f"{held['prometheus_bindings_series']} bindings series for {result['memory']['current']['nodes']} nodes.",
    ])


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="3,000 decisions instead of 10,500")
    parser.add_argument("--decisions", type=int)
    parser.add_argument("--nodes", type=int, default=1_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--hammer-child", type=int, nargs=3, metavar=("PORT", "CLIENTS", "LIMIT"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.hammer_child:
        print(json.dumps(hammer_child(*args.hammer_child)))
        return
    result = run(args.quick, decisions=args.decisions, n_nodes=args.nodes, seed=args.seed)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "soak.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    print(markdown(result))
    if not result["checks"]["ok"]:
        say(f"checks failed: {result['checks']}")
        sys.exit(1)


if __name__ == "__main__":
    main()
