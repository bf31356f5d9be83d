"""End-to-end throughput, latency, CPU and memory on the dev cluster, every contender on the same API server.

Contenders (CONTENDERS):
- kube-default: kube-scheduler as shipped (client QPS 50 / burst 100, adaptive percentageOfNodesToScore);
- kube-tuned: QPS/burst 5000 and the *default* adaptive sampling (at 5,000 nodes it scores ~10 %: what large
  clusters run, and the one to beat);
- kube-tuned-100: QPS/burst 5000 scoring 100 % of the nodes (what metrics-sched does);
- ms-resources: metrics-sched with the resource plugins only; ms-all: every metric plugin, live telemetry (the
  Prometheus source reads the per-node recording rules the dev cluster loads, `recordingRules: true`, as the Helm
  chart deploys them: at 5,000 nodes the raw GPU presets make Prometheus aggregate 40,000 series at every refresh,
  past the source's timeout on this machine);
- ceiling: bench/bare_binder.py, the cheapest bind loop (no scheduling, nodes dealt round-robin, concurrent
  binds). If a contender's median pods/s beats it, the report says the ceiling is invalid.

Method:
- Repetitions (REPS, default 3) interleave the contenders: repetition r runs them all, in an order rotated by
  r, so drift of the shared machine hits each alike. Each figure is reported as the median and the min-max
  over the repetitions that completed; a run that fails or times out is recorded with its status and error
  and left out of the medians (never dropped silently).
- A run has two parts. The backlog (run_size(backlog=): half its pods by default) is created while the
  contender stands by: kube-scheduler and metrics-sched started with leader election on a Lease the bench holds
  in the run's namespace (hold_lease: both elect by client-go's rule, so neither takes it for the hour it says),
  their informers synced and, for ms-all, every telemetry source up; the ceiling not yet started. The bench then
  deletes the Lease (the ceiling: starts it), and `backlog_pods_per_second` is the backlog's pods bound per
  second from its first bind to its last: the scheduler and the API server alone, no creator competing for the
  cores and no creation rate setting the pace (the paced part's pods/s was within 10 % of the creator's rate for
  every contender at both sizes on this machine: the creator's figure, not the scheduler's). While it drains, the
  dev cluster's Prometheus is stopped (SIGSTOP, then SIGCONT: `paused`): its scrape of the DCGM exporter's page
  (~49 MB at 5,000 nodes, every 15 s) took 0.15 to 4.5 CPU-seconds of a 3-5 s drain depending on when it fell,
  and moved one contender's figure between 186 and 305 pods/s; on a cluster it runs on other machines than the
  API server. A metrics-sched refresh due meanwhile waits (its decisions read the values already cached, fresh for
  their maxAge). Its other pods are then created paced, with Prometheus running, and the other figures are theirs.
  The drain's CPU is recorded too (drain_cpu: the contender's per backlog pod, `backlog_cpu_ms_per_pod`, and the API
  server's and etcd's). kube-scheduler and metrics-sched send the same requests (a bind and an event per pod:
  `apiserver_request_total` around drains, 2026-12-05); a drain's pods/s went with the API server's CPU per pod,
  2.2 to 5.9 ms from one drain to the next for every contender, not with the scheduler's own (ms-all 1.3-1.5 ms per
  pod in the drain, kube-tuned 1.8-2.7). The API server's figure includes what it does meanwhile for everyone
  (KWOK's Lease renewals and pod status patches), so a slower drain also shows more of it per pod.
- The primary figure is the scheduler's CPU-ms per bound pod: utime+stime of its process (/proc/<pid>/stat)
  over the paced part only (from the pod creator's start, once the contender is ready, to the moment
  the last bind is seen; start-up, initial sync and clean-up excluded), divided by the pods bound. It is
  stable under contention where pods/s is not. Next to it, in the same run: the backlog's pods/s, the paced
  pods/s (pods bound / (last bind - first creation)), p50/p99 latency (creation to bind) and peak RSS (VmHWM).
  Ratios compare each contender with the best kube-scheduler contender by each figure (highest median pods/s,
  from a backlog and paced; lowest median CPU-ms/pod) and with kube-tuned. Each run also records the API
  server's and etcd's CPU-ms per bound pod over the paced part (`control_plane_cpu_ms_per_pod`): on a shared
  2-core machine what a contender makes them spend is CPU it does not have, and requests it sends beyond one
  bind and one event per pod would show there.
- Timestamps come from watch-event arrival in this process (not the API's 1-second timestamps): a pod's
  creation is its ADDED event, its bind the first event that shows spec.nodeName.
- Pods are created by bench/pod_creator.py at a paced CREATION_RATE (500 pods/s): a third above the best
  throughput measured so far on this machine kind (kube-tuned at 500 nodes, ~380 pods/s), without the
  thousands of queued POSTs of an unpaced creator that made the API server the thing measured. The rate the
  creator reached is recorded with each run; a contender within 10 % of it is marked creation-bound (on a
  machine shared with other work the creator falls short of the pace, and pods/s says less than CPU-ms/pod).
- KWOK node heartbeats as kubelets on a real cluster of that size (devcluster.heartbeats.NodeHeartbeats):
  node Leases of 40 s renewed every 10 s (the kubelet's nodeLeaseDurationSeconds and its quarter renew
  interval: 500 Lease updates/s at 5,000 nodes, on the API server and etcd), and a node status update about
  every 5 min (nodeStatusReportFrequency: ~17 node updates/s at 5,000 nodes, which every contender's node
  watch receives). No controller manager: nothing here needs controllers, and node lifecycle would only add
  a reader of those Leases.
- Prometheus scrapes every SCRAPE_INTERVAL (15 s: dcgm-exporter's chart and most ServiceMonitors set it, and DCGM
  itself collects every 30 s) and evaluates the recording rules as often. It shares the 2 cores with every
  contender: at 5,000 nodes the DCGM exporter's page is ~49 MB (40,000 GPUs), and scraping it every 5 s, as the
  bench did until 2026-12-04, kept most of a core busy ingesting for all contenders (load average 5-6).
- ms-all refreshes its telemetry sources at the intervals the Helm chart deploys (CHART_INTERVALS, read from its
  values.yaml: Prometheus 10 s, the metrics API 15 s, the CMDB 60 s).
- metrics.k8s.io is the emulator's, behind the API server's aggregation layer as metrics-server is (until
  2026-12-04 it PATCHed one NodeMetrics object per node every 15 s through a test CRD: ~300 writes/s at 5,000
  nodes on the API server and etcd during every contender's runs; devcluster/emulator/metrics_api.py).
- Each size writes its own JSON (`<out>/e2e-<nodes>.json`) after every run (`complete: false`) and when the
  size is done (`complete: true`); bench.run assembles latest.json from the sizes of one run.

Duration. A run costs its contender's start-up (kube-scheduler ~1 s; metrics-sched 9-20 s: initial sync and,
for ms-all, every telemetry source up), pods / (pods/s), and the clean-up (a delete-collection per 250-pod
chunk label). Clean-up is slower than binding at 5,000 nodes: the API server deleted 2,000 bound pods in 27-90 s
there (2026-12-03; 22-75 pods/s, 10-20 ms of its CPU per pod while KWOK's Lease renewals and pod status patches
go on; with KWOK stopped 9-17 s, but its renewals then burst into the next run, so it is left running). So a
5,000-node run has 1,000 pods (10,000 made 3 repetitions of 6 contenders take over an hour, 2,000 ~45 min), and
the memory figures at 10,000 and 50,000 pods come from one run after the repetitions (`memory_run`, not cleaned
up: the cluster goes with it). On an idle 2-core machine, a repetition at 500 nodes / 2,000 pods takes ~3 min,
one at 5,000 nodes / 1,000 pods ~7 min (kube-default alone ~30 s, clean-ups ~4 min), the memory run ~15 min:
the full e2e part ~50 min, the quick one (500 nodes / 500 pods) ~3 min. On a busy machine it is several times
that (see the report): bench.run gives each size a time budget (`run_size(budget=)`: 16 and 30 min, quick 6)
past which no further repetition starts, and the report says how many ran; it runs 5 repetitions at 500 nodes
(bench/run.py's E2E_FULL: a drain there is ~3 s, and one slow drain moved a median of three), 3 at 5,000.

    python -m bench.e2e_bench [--nodes 500] [--pods 2000] [--reps 3] [--contenders ...] [--out DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import yaml

from bench import pod_creator
from devcluster import DevCluster
from devcluster.cluster import wait_until
from devcluster.heartbeats import NodeHeartbeats
from devcluster.kubeapi import Credentials, KubeAPIError, tls_context
from devcluster.ports import free_port
from metrics_sched.config.durations import parse_duration

TELEMETRY_PLUGINS = ("GPUTemperature", "NodeLoad", "Cost")
RESULTS = Path(__file__).parent / "results"
ROOT = Path(__file__).resolve().parent.parent
REPS = 3
CREATION_RATE = 500.0  # pods/s, see the docstring
CREATION_BOUND = 0.9  # a contender reaching this share of the creation rate is limited by the creator
HEARTBEATS = NodeHeartbeats(lease_duration_seconds=40, status_report_seconds=300.0)
SCRAPE_INTERVAL = 15.0  # seconds, Prometheus' scrapes and rule evaluations: see the docstring
# The figures aggregated over repetitions (median, min, max); for each, whether lower is better.
FIGURES = {"cpu_ms_per_pod": True, "backlog_pods_per_second": False, "pods_per_second": False,
           "latency_p50_ms": True, "latency_p99_ms": True, "peak_rss_mb": True,
           "backlog_cpu_ms_per_pod": True, "backlog_apiserver_cpu_ms_per_pod": True}
THROUGHPUT = ("backlog_pods_per_second", "pods_per_second")  # the figures compared with the ceiling's
# Stopped while a backlog drains (see the docstring): the dev cluster's Prometheus, whose scrape of the DCGM page
# (~49 MB at 5,000 nodes, every SCRAPE_INTERVAL) took 0.15-4.5 CPU-seconds of a 3-5 s drain at random.
PAUSED_DURING_BACKLOG = ("prometheus",)
BACKLOG_LEASE = "bench-backlog"  # the Lease a contender stands by on while a run's backlog is created


def say(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Contender:
    key: str
    label: str
    scheduler_name: str

    @property
    def is_kube(self) -> bool:
        return self.key.startswith("kube-")


CONTENDERS = (
    Contender("kube-default", "kube-scheduler default (QPS 50, adaptive sampling)", "default-scheduler"),
    Contender("kube-tuned", "kube-scheduler QPS 5000, adaptive sampling", "default-scheduler"),
    Contender("kube-tuned-100", "kube-scheduler QPS 5000, 100 % of nodes", "default-scheduler"),
    Contender("ms-resources", "metrics-sched, resource plugins", "ms-resources"),
    Contender("ms-all", "metrics-sched, every metric plugin", "ms-all"),
    Contender("ceiling", "bare bind loop (ceiling)", "bare"),
)
# kube-scheduler's client settings per contender: (qps, burst, percentageOfNodesToScore; None: adaptive).
KUBE_SETTINGS: dict[str, tuple[float, int, int | None]] = {
    "kube-default": (50, 100, None), "kube-tuned": (5000, 5000, None), "kube-tuned-100": (5000, 5000, 100),
}


def proc_stats(pid: int) -> tuple[float, int]:
    """(CPU seconds, peak RSS bytes) of a live process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    peak = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            peak = int(line.split()[1]) * 1024
    return cpu, peak


CONTROL_PLANE = ("kube-apiserver", "etcd")


def control_plane_cpu(pids: Mapping[str, int]) -> dict[str, float]:
    """CPU seconds so far of the API server and etcd among `pids` (process name -> pid of those running)."""
    return {name: proc_stats(pids[name])[0] for name in CONTROL_PLANE if name in pids}


def running(cluster: DevCluster) -> dict[str, int]:
    return {name: managed.pid for name, managed in cluster.group.processes.items() if managed.alive()}


class PodWatch:
    """Watch-event arrival times of one namespace's pods."""

    def __init__(self, creds: Credentials, namespace: str) -> None:
        self.creds = creds
        self.namespace = namespace
        self.created: dict[str, float] = {}
        self.bound: dict[str, float] = {}
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.error: Exception | None = None
        self.reconnects = 0

    def start(self) -> None:
        self._thread.start()
        self._ready.wait(30)

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        try:
            self._watch()
        except Exception as exc:  # noqa: BLE001 - reported, and the run then times out visibly
            say(f"pod watch failed: {type(exc).__name__}: {exc}")
            self.error = exc

    def _watch(self) -> None:
        client = httpx.Client(base_url=self.creds.server, verify=tls_context(self.creds.ca_file),
                              headers={"Authorization": f"Bearer {self.creds.token}"},
                              timeout=httpx.Timeout(10, read=None))
        rv = client.get(f"/api/v1/namespaces/{self.namespace}/pods").json()["metadata"]["resourceVersion"]
        # The API server closes a watcher that reads too slowly; resume from the last resourceVersion.
        while not self._stop.is_set():
            params = {"watch": "1", "resourceVersion": rv, "allowWatchBookmarks": "true", "timeoutSeconds": "3600"}
            with client.stream("GET", f"/api/v1/namespaces/{self.namespace}/pods", params=params) as resp:
                self._ready.set()
                for line in resp.iter_lines():
                    if self._stop.is_set():
                        break
                    now = time.monotonic()
                    event = json.loads(line)
                    obj = event.get("object") or {}
                    if event.get("type") == "ERROR":
                        raise RuntimeError(f"watch error: {obj}")
                    rv = (obj.get("metadata") or {}).get("resourceVersion", rv)
                    name = (obj.get("metadata") or {}).get("name")
                    if not name or event.get("type") not in ("ADDED", "MODIFIED"):
                        continue
                    self.created.setdefault(name, now)
                    if (obj.get("spec") or {}).get("nodeName") and name not in self.bound:
                        self.bound[name] = now
            self.reconnects += 1
        client.close()


def lease_config(namespace: str) -> dict[str, Any]:
    """The leaderElection section kube-scheduler and metrics-sched both read (the same fields): a standby on the
    run's Lease (BACKLOG_LEASE) until the bench deletes it, then the leader at its next retry."""
    return {"leaderElect": True, "resourceLock": "leases", "resourceNamespace": namespace,
            "resourceName": BACKLOG_LEASE, "leaseDuration": "15s", "renewDeadline": "10s", "retryPeriod": "1s"}


def hold_lease(cluster: DevCluster, namespace: str) -> None:
    """Creates the run's Lease held by the bench for an hour: a contender told to elect on it (lease_config) stands
    by, its caches and telemetry warm, until release_lease(). Both elect with client-go's rule: another holder's
    lease counts for its leaseDurationSeconds from when they first saw it."""
    now = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
    with cluster.api() as api:
        api.post(f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases", {
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": BACKLOG_LEASE},
            "spec": {"holderIdentity": "bench", "leaseDurationSeconds": 3600, "acquireTime": now, "renewTime": now}})


def release_lease(cluster: DevCluster, namespace: str) -> None:
    """Deletes the run's Lease: the standby creates it for itself at its next retry and starts scheduling."""
    with cluster.api() as api:
        api.delete(f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{BACKLOG_LEASE}")


def metrics_sched_config(contender: Contender, cluster: DevCluster, port: int,
                         lease_namespace: str | None = None) -> dict[str, Any]:
    config: dict[str, Any] = {
        "apiVersion": "metrics-sched.io/v1alpha1", "kind": "MetricsSchedulerConfiguration",
        "leaderElection": lease_config(lease_namespace) if lease_namespace else {"leaderElect": False},
        "server": {"bindAddress": "127.0.0.1", "port": port, "insecure": True},  # local: plain HTTP on loopback
        "audit": {"logDecisions": False},
    }
    if contender.key == "ms-resources":
        config["profiles"] = [{"schedulerName": contender.scheduler_name, "plugins": {
            "filter": {"disabled": [{"name": "GPUTemperature"}]},
            "score": {"disabled": [{"name": p} for p in TELEMETRY_PLUGINS]},
            "reserve": {"disabled": [{"name": "InFlightLedger"}]},
        }}]
    else:
        config["profiles"] = [{"schedulerName": contender.scheduler_name}]
        config["sources"] = [{**source, "interval": CHART_INTERVALS[source["name"]]}
                             for source in cluster.telemetry_sources()]
    return config


def chart_intervals(values: Path = ROOT / "deploy" / "helm" / "metrics-sched" / "values.yaml") -> dict[str, float]:
    """Each telemetry source's refresh interval as the Helm chart deploys it (its values.yaml), in seconds, by the
    name devcluster's telemetry_sources() gives the source."""
    sources = yaml.safe_load(values.read_text())["sources"]
    return {name: parse_duration(sources[key]["interval"], f"sources.{key}.interval")
            for name, key in (("prometheus", "prometheus"), ("metrics-server", "metricsServer"), ("cmdb", "cmdb"))}


# ms-all refreshes each source as the chart has it (Prometheus 10 s, metrics API 15 s, CMDB 60 s): what a deployment
# runs, each near its data's own cadence (scrapes every SCRAPE_INTERVAL, metrics-server's 15 s resolution, cost data
# that changes by the hour). Until 2026-12-05 the bench refreshed all three every 5 s: two Prometheus refreshes in
# three read what the last had read, and the refreshes' CPU (Prometheus', the emulator's, the scheduler's) was taken
# from the API server and the pod creator on this 2-core machine.
CHART_INTERVALS = chart_intervals()


def start_contender(cluster: DevCluster, contender: Contender, lease_namespace: str | None = None
                    ) -> tuple[str, int, Callable[[], None], str | None]:
    """Starts it and waits until it is ready; returns (process name, pid, stop, url). With `lease_namespace` a
    scheduler stands by on that namespace's BACKLOG_LEASE (lease_config); the ceiling has no leader election."""
    if contender.is_kube:
        qps, burst, percentage = KUBE_SETTINGS[contender.key]
        cluster.start_kube_scheduler(qps=qps, burst=burst, percentage_of_nodes_to_score=percentage,
                                     name=contender.key,
                                     leader_election=lease_config(lease_namespace) if lease_namespace else None)
        return contender.key, cluster.group.processes[contender.key].pid, \
            lambda: cluster.stop_kube_scheduler(contender.key), None
    if contender.key == "ceiling":
        ready = cluster.run_dir / f"bare-{secrets.token_hex(3)}.ready"
        managed = cluster.group.start("bare", [sys.executable, "-m", "bench.bare_binder", "--kubeconfig",
                                               str(cluster.kubeconfig), "--scheduler-name", contender.scheduler_name,
                                               "--workers", "16", "--ready-file", str(ready)])
        wait_until(lambda: ready.exists(), 60, "the bare binder", lambda: cluster.group.check("bare"))
        return "bare", managed.pid, lambda: cluster.group.stop("bare"), None
    port = free_port()
    path = cluster.run_dir / f"{contender.key}.yaml"
    path.write_text(yaml.safe_dump(metrics_sched_config(contender, cluster, port, lease_namespace)))
    managed = cluster.group.start(contender.key, [sys.executable, "-m", "metrics_sched.app.cli", "run", "--config",
                                                  str(path), "--kubeconfig", str(cluster.kubeconfig),
                                                  "--log-format", "text", "--log-level", "warning"])
    url = f"http://127.0.0.1:{port}"
    # Generous: at 5,000 nodes on a busy machine the initial sync and the first telemetry rounds take minutes.
    wait_until(lambda: httpx.get(f"{url}/readyz", timeout=1).status_code == 200, 300, contender.key,
         lambda: cluster.group.check(contender.key))
    if contender.key == "ms-all":
        def telemetry() -> bool:
            sources = httpx.get(f"{url}/sources", timeout=5).json()
            return all(s["up"] for s in sources.values())
        wait_until(telemetry, 300, "every telemetry source up", lambda: cluster.group.check(contender.key))
    return contender.key, managed.pid, lambda: cluster.group.stop(contender.key), url


def _delete_pods(cluster: DevCluster, namespace: str, pods: int) -> None:
    """Deletes the run's pods: a delete-collection per chunk label (half the API server's work of one DELETE per
    pod), then one DELETE per pod for any left (a chunk's call that timed out on a busy API server)."""
    chunks = [str(c) for c in range(-(-pods // pod_creator.CHUNK))]
    path = f"/api/v1/namespaces/{namespace}/pods"

    def delete_chunk(chunk: str) -> None:
        try:
            api.request("DELETE", path, params={"labelSelector": f"{pod_creator.CHUNK_LABEL}={chunk}",
                                                "gracePeriodSeconds": "0"}, timeout=90)
        except (KubeAPIError, httpx.HTTPError) as exc:
            say(f"deleting chunk {chunk} of {namespace}: {type(exc).__name__}: {exc}; one DELETE per pod follows")

    with cluster.api() as api, ThreadPoolExecutor(2) as pool:
        list(pool.map(delete_chunk, chunks))
        left = api.get(path, limit="1")["items"]
    if left:
        subprocess.run([sys.executable, "-m", "bench.pod_creator", "--kubeconfig", str(cluster.kubeconfig),
                        "--namespace", namespace, "--count", str(pods), "--scheduler", "-", "--delete"],
                       check=False, timeout=1800)


def run_once(cluster: DevCluster, contender: Contender, pods: int, *, timeout: float,
             rate: float = CREATION_RATE, rss_at: Sequence[int] = (), cleanup: bool = True,
             backlog: int = 0) -> dict[str, Any]:
    """One run of one contender: start it, create `pods` paced pods, measure until all are bound (or the
    timeout), stop it, delete the pods (unless `cleanup` is False: the cluster's last run, torn down with it).
    With a `backlog`, that many of the pods come first, created while the contender stands by (a scheduler on the
    run's Lease, the ceiling not yet started): released at once, they give `backlog_pods_per_second` (drain_figures),
    and the other pods are the paced ones the run's other figures are of.
    rss_at: bound-pod counts at which the contender's peak RSS so far is read (`peak_rss_mb_at`), e.g. its
    peak at 10,000 pods on the way to 50,000. Never raises for the contender's sake: a failure is the result."""
    namespace = f"bench-{contender.key}-{secrets.token_hex(2)}"
    result: dict[str, Any] = {"contender": contender.key, "pods": pods, "status": "failed", "error": None}
    stop: Callable[[], None] | None = None
    creator: subprocess.Popen[bytes] | None = None
    watch: PodWatch | None = None
    phases: dict[str, float] = {}  # wall seconds of start-up, measurement and clean-up (for the duration budget)
    began = time.monotonic()
    # The ceiling has no leader election: it starts once the backlog is there (it has nothing to warm up).
    held = backlog > 0 and contender.key != "ceiling"
    try:
        with cluster.api() as api:
            api.post("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                            "metadata": {"name": namespace}})
        if held:
            hold_lease(cluster, namespace)
        watch = PodWatch(Credentials.from_kubeconfig(cluster.kubeconfig), namespace)
        watch.start()
        name, pid, url = contender.key, 0, None
        if not backlog or held:
            name, pid, stop, url = start_contender(cluster, contender, namespace if held else None)
            phases["start"] = round(time.monotonic() - began, 1)
        if backlog:
            say(f"{contender.key}: a backlog of {backlog} pods, created while it stands by")
            backlog_began = time.monotonic()
            create_pods(cluster, namespace, contender, backlog, rate=rate, first=0, wait=True)
            seen = watch
            wait_until(lambda: len(seen.created) >= backlog, 120, "the backlog's pods in the watch")
            if watch.bound:
                raise RuntimeError(f"{len(watch.bound)} backlog pods were bound before the contender was released")
            released = time.monotonic()
            with paused(cluster, PAUSED_DURING_BACKLOG):
                plane0 = control_plane_cpu(running(cluster))
                if held:
                    cpu0 = proc_stats(pid)[0]
                    release_lease(cluster, namespace)
                else:
                    name, pid, stop, url = start_contender(cluster, contender)
                    phases["start"] = round(time.monotonic() - released, 1)
                    cpu0 = proc_stats(pid)[0]  # from its readiness on (its imports and node list before are not)
                await_bound(cluster, name, watch, backlog, released + timeout)
                cpu1 = proc_stats(pid)[0]
                plane1 = control_plane_cpu(running(cluster))
            if len(watch.bound) < backlog:
                raise RuntimeError(f"{len(watch.bound)} of the backlog's {backlog} pods bound after {timeout:.0f}s")
            result.update(drain_figures(dict(watch.bound)))
            result.update(drain_cpu(cpu1 - cpu0, {k: plane1[k] - plane0[k] for k in plane0 if k in plane1}, backlog))
            phases["backlog"] = round(time.monotonic() - backlog_began, 1)
        paced = pods - backlog
        say(f"{contender.key}: creating {paced} pods at {rate:.0f}/s")
        cpu0, _ = proc_stats(pid)
        plane0 = control_plane_cpu(running(cluster))
        started = time.monotonic()
        creator = create_pods(cluster, namespace, contender, paced, rate=rate, first=backlog)
        last_report = started
        marks = sorted(n for n in rss_at if n < pods)

        def each_poll() -> None:
            nonlocal last_report
            while marks and len(watch.bound) >= marks[0]:
                result.setdefault("peak_rss_mb_at", {})[marks.pop(0)] = round(proc_stats(pid)[1] / 2**20, 1)
            if time.monotonic() - last_report > 10:
                last_report = time.monotonic()
                say(f"{contender.key}: {len(watch.created)} created, {len(watch.bound)} bound "
                    f"({last_report - started:.0f}s)")

        await_bound(cluster, name, watch, pods, started + timeout, each_poll)
        cpu1, peak = proc_stats(pid)
        plane1 = control_plane_cpu(running(cluster))
        phases["measure"] = round(time.monotonic() - started, 1)
        result["status"] = "ok" if len(watch.bound) >= pods else "timeout"
        if result["status"] == "timeout":
            result["error"] = f"{len(watch.bound)} of {pods} pods bound after {timeout:.0f}s"
        if url and contender.key == "ms-all":
            sources = httpx.get(f"{url}/sources", timeout=5).json()
            result["sources"] = {k: {"last_duration_s": v["last_duration"], "queries": v["queries"],
                                     "coverage": v["coverage"]} for k, v in sources.items()}
        mine = {pod_creator.name_of(i) for i in range(backlog, pods)}  # the paced pods
        bound = {n: t for n, t in watch.bound.items() if n in mine}
        result.update(figures({n: t for n, t in watch.created.items() if n in mine}, bound, cpu1 - cpu0, peak))
        if bound:
            # What the contender costs the API server and etcd per pod (its writes, and every watcher's copy of
            # what it writes): on a shared 2-core machine that CPU is not the scheduler's to spend.
            result["control_plane_cpu_ms_per_pod"] = ms_per_pod(
                {name: plane1[name] - plane0[name] for name in plane0 if name in plane1}, len(bound))
        result["watch_reconnects"] = watch.reconnects
    except Exception as exc:  # noqa: BLE001 - recorded as this run's outcome; the other runs go on
        result["status"], result["error"] = "failed", f"{type(exc).__name__}: {exc}"
    finally:
        if stop is not None:
            try:
                stop()
            except Exception as exc:  # noqa: BLE001 - the run's figures stand; say why the stop failed
                say(f"{contender.key}: stopping it failed: {type(exc).__name__}: {exc}")
        if watch is not None:
            watch.stop()
        if creator is not None:
            try:
                creator.wait(timeout=120)
            except subprocess.TimeoutExpired:
                creator.kill()
                creator.wait()
            if creator.returncode:
                result["creator_exit"] = creator.returncode  # its stderr (in this log) says which requests failed
        if cleanup:
            cleanup_began = time.monotonic()
            try:
                _delete_pods(cluster, namespace, pods)
            except Exception as exc:  # noqa: BLE001 - the run's figures stand; the next run says if pods were left
                result["cleanup_error"] = f"{type(exc).__name__}: {exc}"
                say(f"{contender.key}: deleting its pods failed: {result['cleanup_error']}")
            phases["cleanup"] = round(time.monotonic() - cleanup_began, 1)
        result["phase_seconds"] = phases
    say(f"{contender.key}: {result['status']}" + (f" ({result['error']})" if result["error"] else "") + ": "
        + ", ".join(f"{k} {result.get(k)}" for k in FIGURES))
    return result


@contextlib.contextmanager
def paused(cluster: DevCluster, names: Sequence[str]) -> Iterator[None]:
    """The dev cluster's processes `names` stopped (SIGSTOP) meanwhile, then continued (SIGCONT), whatever happens."""
    pids = [managed.pid for name, managed in cluster.group.processes.items() if name in names and managed.alive()]
    stopped: list[int] = []
    try:
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
            stopped.append(pid)
        yield
    finally:
        for pid in stopped:
            os.kill(pid, signal.SIGCONT)


def await_bound(cluster: DevCluster, name: str, watch: PodWatch, count: int, deadline: float,
                each_poll: Callable[[], None] | None = None) -> None:
    """Until the watch has seen `count` pods bound or the monotonic `deadline` passes; raises if the watch failed
    or the contender `name` died meanwhile. `each_poll` runs after every poll (20 a second)."""
    while len(watch.bound) < count and time.monotonic() < deadline:
        if watch.error is not None:
            raise RuntimeError(f"the benchmark's pod watch failed: {watch.error}")
        cluster.group.check(name)  # raises if the contender died
        time.sleep(0.05)
        if each_poll is not None:
            each_poll()


def create_pods(cluster: DevCluster, namespace: str, contender: Contender, count: int, *, rate: float, first: int,
                wait: bool = False) -> subprocess.Popen[bytes]:
    """bench/pod_creator.py for pods p-<first>... at the paced `rate`; with `wait`, returns once it is done
    (raises if any creation failed)."""
    creator = subprocess.Popen([sys.executable, "-m", "bench.pod_creator", "--kubeconfig", str(cluster.kubeconfig),
                                "--namespace", namespace, "--count", str(count), "--first", str(first),
                                "--scheduler", contender.scheduler_name, "--rate", str(rate)])
    if wait:
        try:
            failed = creator.wait(timeout=600)
        except subprocess.TimeoutExpired:
            creator.kill()
            creator.wait()
            raise RuntimeError(f"the pod creator did not create {count} pods in 600 s") from None
        if failed:
            raise RuntimeError(f"the pod creator failed (exit {failed}): its stderr is in this log")
    return creator


def drain_figures(bound: dict[str, float]) -> dict[str, Any]:
    """The backlog's drain: pods bound per second from its first bind to its last (the contender's start-up and
    election are before the first; no pod is created meanwhile, so neither the creator nor its POSTs on the API
    server set the pace: the scheduler and its binds do)."""
    if len(bound) < 2:
        return {"backlog_pods": len(bound), "backlog_pods_per_second": None}
    span = max(bound.values()) - min(bound.values())
    return {"backlog_pods": len(bound), "backlog_seconds": round(span, 3),
            "backlog_pods_per_second": round((len(bound) - 1) / span, 1) if span > 0 else None}


def ms_per_pod(seconds_by_name: Mapping[str, float], pods: int) -> dict[str, float]:
    """CPU seconds per process as milliseconds per pod."""
    return {name: round(seconds * 1000 / pods, 3) for name, seconds in seconds_by_name.items()}


def drain_cpu(cpu_seconds: float, plane_seconds: Mapping[str, float], pods: int) -> dict[str, Any]:
    """What the backlog's drain cost per pod, from the release to the last bind seen: the contender's CPU (its share
    of the two cores the API server paces the drain on) and the API server's and etcd's (theirs for everyone meanwhile
    included: see the module's Method)."""
    plane = ms_per_pod(plane_seconds, pods)
    # The API server's also flat (summarize aggregates top-level figures only).
    return {"backlog_cpu_ms_per_pod": round(cpu_seconds * 1000 / pods, 3),
            "backlog_control_plane_cpu_ms_per_pod": plane,
            "backlog_apiserver_cpu_ms_per_pod": plane.get("kube-apiserver")}


def figures(created: dict[str, float], bound: dict[str, float], cpu_seconds: float, peak_rss: int) -> dict[str, Any]:
    """The run's figures from watch arrival times, the CPU seconds of the window and the peak RSS."""
    latencies = np.array([bound[n] - created[n] for n in bound if n in created])
    out: dict[str, Any] = {
        "bound": len(bound), "scheduler_cpu_seconds": round(cpu_seconds, 3),
        "cpu_ms_per_pod": round(cpu_seconds * 1000 / len(bound), 3) if bound else None,
        "peak_rss_mb": round(peak_rss / 2**20, 1),
        "pods_per_second": None, "latency_p50_ms": None, "latency_p99_ms": None, "creation_rate": None,
    }
    if created and bound:
        first = min(created.values())
        out["seconds"] = round(max(bound.values()) - first, 3)
        out["pods_per_second"] = round(len(bound) / out["seconds"], 1) if out["seconds"] > 0 else None
        span = max(created.values()) - first
        out["creation_rate"] = round(len(created) / span, 1) if span > 0 else None
    if latencies.size:
        out["latency_p50_ms"] = round(float(np.percentile(latencies, 50)) * 1000, 1)
        out["latency_p99_ms"] = round(float(np.percentile(latencies, 99)) * 1000, 1)
    return out


def spread(values: Sequence[float]) -> dict[str, float] | None:
    if not values:
        return None
    return {"median": round(statistics.median(values), 3), "min": min(values), "max": max(values)}


def summarize(contender: Contender, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median and min-max of every figure over the runs that completed; every run is kept as measured."""
    ok = [r for r in runs if r["status"] == "ok"]
    out: dict[str, Any] = {"contender": contender.key, "label": contender.label, "reps": len(runs),
                           "reps_ok": len(ok), "runs": runs}
    for figure in FIGURES:
        out[figure] = spread([r[figure] for r in ok if r.get(figure) is not None])
    rates = [r["creation_rate"] for r in ok if r.get("creation_rate")]
    out["creation_bound"] = bool(rates and out["pods_per_second"]
                                 and out["pods_per_second"]["median"] >= CREATION_BOUND * statistics.median(rates))
    return out


def _median(summary: dict[str, Any] | None, figure: str) -> float | None:
    value = (summary or {}).get(figure)
    return value["median"] if value else None


def compare(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Adds each contender's ratios to the best kube-scheduler contender (by each figure) and to kube-tuned; says
    whether the ceiling held (no contender's median pods/s, from a backlog or paced, above the ceiling's). Returns
    the comparison's summary."""
    by_key = {r["contender"]: r for r in results}
    kube = [r for r in results if r["contender"].startswith("kube-")]

    def best(figure: str) -> dict[str, Any] | None:
        measured = [r for r in kube if _median(r, figure)]
        pick = min if FIGURES[figure] else max
        return pick(measured, key=lambda r: _median(r, figure) or 0.0, default=None)

    ratios = ("backlog_pods_per_second", "pods_per_second", "cpu_ms_per_pod", "backlog_cpu_ms_per_pod")
    bests = {figure: best(figure) for figure in ratios}
    tuned = by_key.get("kube-tuned")
    ceiling = by_key.get("ceiling")

    def ratio(r: dict[str, Any], base: dict[str, Any] | None, figure: str) -> float | None:
        mine, theirs = _median(r, figure), _median(base, figure)
        return round(mine / theirs, 3) if mine is not None and theirs else None

    for r in results:
        r["vs_best_kube"] = {figure: ratio(r, bests[figure], figure) for figure in ratios}
        r["vs_kube_tuned"] = {figure: ratio(r, tuned, figure) for figure in ratios}
        r["throughput_vs_ceiling"] = ratio(r, ceiling, "pods_per_second")
        r["backlog_vs_ceiling"] = ratio(r, ceiling, "backlog_pods_per_second")
    if _median(ceiling, "pods_per_second") is None:
        validity: dict[str, Any] = {"valid": None, "reason": "the ceiling did not complete a run"}
    else:
        beaten = [r["contender"] for r in results if r["contender"] != "ceiling" and any(
            (_median(r, figure) or 0.0) > (_median(ceiling, figure) or float("inf")) for figure in THROUGHPUT)]
        validity = {"valid": not beaten, "beaten_by": beaten,
                    "reason": None if not beaten else f"{', '.join(beaten)} bound pods faster than the bare bind "
                                                      "loop: its pods/s is no ceiling on this run"}
    return {"best_kube_backlog": (bests["backlog_pods_per_second"] or {}).get("contender"),
            "best_kube_throughput": (bests["pods_per_second"] or {}).get("contender"),
            "best_kube_cpu": (bests["cpu_ms_per_pod"] or {}).get("contender"), "ceiling": validity}


def another_rep_fits(done: int, elapsed: float, longest: float, budget: float | None) -> bool:
    """Whether repetition `done + 1` may start: the first always does; a later one if, as long as the longest
    so far, it ends inside the budget."""
    return done == 0 or budget is None or elapsed + longest <= budget


MEMORY_CONTENDER = "ms-all"


def memory_run(cluster: DevCluster, pods: int, marks: Sequence[int], *, rate: float = CREATION_RATE
               ) -> dict[str, Any]:
    """One run of every-metric metrics-sched with `pods` pods (issue 18, item 5: its peak RSS at 10,000 and at
    50,000 pods on 5,000 nodes); the peak is read as the bound pods pass each mark. Not cleaned up: it is the
    cluster's last run (deleting 50,000 pods would take longer than binding them)."""
    contender = next(c for c in CONTENDERS if c.key == MEMORY_CONTENDER)
    say(f"memory: {contender.key} with {pods} pods (peak RSS at {', '.join(map(str, marks))} bound and at the end)")
    run = run_once(cluster, contender, pods, timeout=120.0 + pods / 20, rate=rate, rss_at=marks, cleanup=False)
    at = {int(k): v for k, v in (run.get("peak_rss_mb_at") or {}).items()}
    if run["status"] == "ok":
        at[pods] = run["peak_rss_mb"]
    return {"contender": contender.key, "label": contender.label, "pods": pods, "status": run["status"],
            "error": run.get("error"), "peak_rss_mb_at": at, "pods_per_second": run.get("pods_per_second"),
            "cpu_ms_per_pod": run.get("cpu_ms_per_pod"), "latency_p50_ms": run.get("latency_p50_ms"),
            "latency_p99_ms": run.get("latency_p99_ms"), "creation_rate": run.get("creation_rate")}


def run_size(nodes: int, pods: int, *, reps: int = REPS, timeout: float | None = None,
             contenders: Sequence[Contender] = CONTENDERS, rate: float = CREATION_RATE,
             out_dir: Path = RESULTS, with_sources: bool = True, budget: float | None = None,
             memory_pods: int | None = None, memory_marks: Sequence[int] = (),
             backlog: int | None = None) -> dict[str, Any]:
    """Every contender `reps` times on one dev cluster of `nodes` KWOK nodes; writes <out_dir>/e2e-<nodes>.json
    after each run and when done, and returns what it wrote. With a `budget` (seconds), a repetition after the
    first is not started when it would end past it (judged by the longest one so far): `make bench` stays in
    CI's 90 minutes on a busy machine, and the report says how many repetitions ran and why.
    memory_pods: then one run of ms-all with that many pods on the same nodes (`report["memory"]`), its peak RSS
    read as the bound pods pass each of `memory_marks` and at the end; the cluster's last run, not cleaned up.
    backlog: the pods of each run created before its contender is released (run_once; default half of them)."""
    backlog = pods // 2 if backlog is None else backlog
    timeout = timeout if timeout is not None else 120.0 + pods / 20  # kube-default binds ~50 pods/s
    path = out_dir / f"e2e-{nodes}.json"
    out_dir.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()
    report: dict[str, Any] = {
        "nodes": nodes, "pods": pods, "reps": reps, "complete": False, "budget_s": budget, "cut_short": None,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "method": {"creation_rate": rate, "timeout_s": timeout, "order": "contenders rotated by one each repetition",
                   "backlog": backlog, "paused_during_backlog": list(PAUSED_DURING_BACKLOG),
                   "backlog_pods_per_second": "a backlog's pods, created while the contender stood by, bound per "
                                              "second from its first bind to its last",
                   "cpu": "utime+stime from the paced creator's start to the last bind",
                   "spread": "median, min-max over ok runs",
                   "source_intervals_s": CHART_INTERVALS,
                   "heartbeats": {"lease_duration_s": HEARTBEATS.lease_duration_seconds,
                                  "lease_renew_interval_s": HEARTBEATS.lease_duration_seconds / 4,
                                  "status_report_s": HEARTBEATS.status_report_seconds,
                                  "lease_updates_per_s": round(nodes * HEARTBEATS.lease_renewals_per_node_per_second),
                                  "status_updates_per_s": round(nodes / HEARTBEATS.status_report_seconds, 1)}},
    }
    runs: dict[str, list[dict[str, Any]]] = {c.key: [] for c in contenders}

    def write(complete: bool) -> None:
        report["results"] = [summarize(c, runs[c.key]) for c in contenders]
        report["comparison"] = compare(report["results"])
        report["complete"] = complete
        report["seconds"] = round(time.monotonic() - began, 1)
        path.write_text(json.dumps(report, indent=2, default=str) + "\n")

    say(f"dev cluster with {nodes} nodes")
    with DevCluster(nodes=nodes, gpus_per_node=8, scrape_interval=SCRAPE_INTERVAL,
                    with_controller_manager=False, node_heartbeats=HEARTBEATS, recording_rules=True) as cluster:
        report["versions"] = dict(cluster.endpoints.versions) if cluster.endpoints else {}
        longest = 0.0
        for rep in range(reps):
            if not another_rep_fits(rep, time.monotonic() - began, longest, budget):
                report["cut_short"] = (f"{rep} of {reps} repetitions: another (the longest so far took "
                                       f"{longest:.0f}s) would end past this size's time budget of {budget:.0f}s")
                say(f"{nodes} nodes: {report['cut_short']}")
                break
            rep_began = time.monotonic()
            order = list(contenders[rep % len(contenders):]) + list(contenders[:rep % len(contenders)])
            for contender in order:
                say(f"{nodes} nodes, repetition {rep + 1}/{reps}: {contender.key}")
                run = run_once(cluster, contender, pods, timeout=timeout, rate=rate, backlog=backlog)
                run["rep"] = rep + 1
                runs[contender.key].append(run)
                write(complete=False)
            longest = max(longest, time.monotonic() - rep_began)
        if with_sources:
            from bench.sources_bench import sources_cost

            report["sources"] = sources_cost(cluster)
        if memory_pods:
            report["memory"] = memory_run(cluster, memory_pods, memory_marks, rate=rate)
    write(complete=True)
    say(f"{nodes} nodes done in {report['seconds']:.0f}s: {path}")
    return report


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--pods", type=int, default=2000)
    parser.add_argument("--reps", type=int, default=REPS)
    parser.add_argument("--rate", type=float, default=CREATION_RATE, help="pods created per second")
    parser.add_argument("--timeout", type=float, default=None, help="seconds per run (default 120 + pods/20)")
    parser.add_argument("--backlog", type=int, default=None,
                        help="pods of each run created before its contender is released (default half)")
    parser.add_argument("--contenders", nargs="+", choices=[c.key for c in CONTENDERS], default=None)
    parser.add_argument("--no-sources", action="store_true", help="skip the sources' refresh cost")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where e2e-<nodes>.json goes")
    parser.add_argument("--budget", type=float, default=None, help="seconds: no repetition past them (see run_size)")
    parser.add_argument("--memory-pods", type=int, default=None,
                        help=f"then one {MEMORY_CONTENDER} run with this many pods, its peak RSS (see memory_run)")
    parser.add_argument("--memory-marks", type=int, nargs="*", default=[10_000],
                        help="bound-pod counts at which the memory run's peak RSS is read")
    args = parser.parse_args(argv)
    chosen = tuple(c for c in CONTENDERS if args.contenders is None or c.key in args.contenders)
    report = run_size(args.nodes, args.pods, reps=args.reps, timeout=args.timeout, contenders=chosen,
                      rate=args.rate, out_dir=args.out, with_sources=not args.no_sources, budget=args.budget,
                      memory_pods=args.memory_pods, memory_marks=args.memory_marks, backlog=args.backlog)
    print(json.dumps({k: v for k, v in report.items() if k != "results"}, indent=2, default=str))


if __name__ == "__main__":
    main()
