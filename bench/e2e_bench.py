"""End-to-end throughput and latency on the dev cluster, every contender on the same API server:
kube-scheduler default (QPS 50 / burst 100), kube-scheduler tuned (QPS/burst 5000, score all nodes),
metrics-sched with resource plugins only, metrics-sched with every metric plugin and live telemetry,
and the ceiling (a bare bind loop with our client stack).

Timestamps come from watch-event arrival in this process (not the API's 1-second timestamps):
a pod's creation is its ADDED event, its bind the first event that shows spec.nodeName.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import yaml

from devcluster import DevCluster
from devcluster.cluster import wait_until
from devcluster.kubeapi import Credentials, tls_context
from devcluster.ports import free_port

TELEMETRY_PLUGINS = ("GPUTemperature", "NodeLoad", "Cost")


def say(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Contender:
    key: str
    label: str
    scheduler_name: str


CONTENDERS = (
    Contender("kube-default", "kube-scheduler default (QPS 50)", "default-scheduler"),
    Contender("kube-tuned", "kube-scheduler tuned (QPS 5000, 100% nodes)", "default-scheduler"),
    Contender("ms-resources", "metrics-sched, resource plugins", "ms-resources"),
    Contender("ms-all", "metrics-sched, every metric plugin", "ms-all"),
    Contender("ceiling", "bare bind loop (ceiling)", "bare"),
)


def proc_stats(pid: int) -> tuple[float, int]:
    """(CPU seconds, peak RSS bytes) of a live process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    peak = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            peak = int(line.split()[1]) * 1024
    return cpu, peak


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


def metrics_sched_config(contender: Contender, cluster: DevCluster, port: int) -> dict[str, Any]:
    config: dict[str, Any] = {
        "apiVersion": "metrics-sched.io/v1alpha1", "kind": "MetricsSchedulerConfiguration",
        "leaderElection": {"leaderElect": False},
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
        config["sources"] = cluster.telemetry_sources(interval=5.0)
    return config


def start_contender(cluster: DevCluster, contender: Contender) -> tuple[str, int, Callable[[], None], str | None]:
    """Starts it and waits until it is ready; returns (process name, pid, stop, url)."""
    if contender.key == "kube-default":
        cluster.start_kube_scheduler(qps=50, burst=100, name="kube-default")
        return "kube-default", cluster.group.processes["kube-default"].pid, \
            lambda: cluster.stop_kube_scheduler("kube-default"), None
    if contender.key == "kube-tuned":
        cluster.start_kube_scheduler(qps=5000, burst=5000, percentage_of_nodes_to_score=100, name="kube-tuned")
        return "kube-tuned", cluster.group.processes["kube-tuned"].pid, \
            lambda: cluster.stop_kube_scheduler("kube-tuned"), None
    if contender.key == "ceiling":
        ready = cluster.run_dir / f"bare-{secrets.token_hex(3)}.ready"
        managed = cluster.group.start("bare", [sys.executable, "-m", "bench.bare_binder", "--kubeconfig",
                                               str(cluster.kubeconfig), "--scheduler-name", contender.scheduler_name,
                                               "--workers", "16", "--ready-file", str(ready)])
        wait_until(lambda: ready.exists(), 60, "the bare binder", lambda: cluster.group.check("bare"))
        return "bare", managed.pid, lambda: cluster.group.stop("bare"), None
    port = free_port()
    path = cluster.run_dir / f"{contender.key}.yaml"
    path.write_text(yaml.safe_dump(metrics_sched_config(contender, cluster, port)))
    managed = cluster.group.start(contender.key, [sys.executable, "-m", "metrics_sched.cli", "run", "--config",
                                                  str(path), "--kubeconfig", str(cluster.kubeconfig),
                                                  "--log-format", "text", "--log-level", "warning"])
    url = f"http://127.0.0.1:{port}"
    wait_until(lambda: httpx.get(f"{url}/readyz", timeout=1).status_code == 200, 120, contender.key,
         lambda: cluster.group.check(contender.key))
    if contender.key == "ms-all":
        def telemetry() -> bool:
            sources = httpx.get(f"{url}/sources", timeout=5).json()
            return all(s["up"] for s in sources.values())
        wait_until(telemetry, 120, "every telemetry source up", lambda: cluster.group.check(contender.key))
    return contender.key, managed.pid, lambda: cluster.group.stop(contender.key), url


def run_contender(cluster: DevCluster, contender: Contender, pods: int, timeout: float) -> dict[str, Any]:
    namespace = f"bench-{contender.key}-{secrets.token_hex(2)}"
    with cluster.api() as api:
        api.post("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
        name, pid, stop, url = start_contender(cluster, contender)
        cpu0, _ = proc_stats(pid)
        watch = PodWatch(Credentials.from_kubeconfig(cluster.kubeconfig), namespace)
        watch.start()
        say(f"{contender.label}: creating {pods} pods")
        started = time.monotonic()
        creator = subprocess.Popen([sys.executable, "-m", "bench.pod_creator", "--kubeconfig", str(cluster.kubeconfig),
                                    "--namespace", namespace, "--count", str(pods),
                                    "--scheduler", contender.scheduler_name])
        last_report = 0.0
        while len(watch.bound) < pods and time.monotonic() - started < timeout:
            time.sleep(0.2)
            if time.monotonic() - last_report > 5:
                last_report = time.monotonic()
                say(f"{contender.label}: {len(watch.created)} created, {len(watch.bound)} bound "
                    f"({time.monotonic() - started:.0f}s)")
        creator.wait(timeout=60)
        cpu1, peak = proc_stats(pid)
        sources = httpx.get(f"{url}/sources", timeout=5).json() if url and contender.key == "ms-all" else None
        stop()
        watch.stop()
        created, bound = dict(watch.created), dict(watch.bound)
        say(f"{contender.label}: deleting its pods")
        subprocess.run([sys.executable, "-m", "bench.pod_creator", "--kubeconfig", str(cluster.kubeconfig),
                        "--namespace", namespace, "--count", str(pods), "--scheduler", "-", "--delete"],
                       check=False, timeout=900)
    latencies = np.array([bound[n] - created[n] for n in bound if n in created])
    first, last = min(created.values()), max(bound.values()) if bound else float("nan")
    result = {
        "contender": contender.key, "label": contender.label, "pods": pods, "bound": len(bound),
        "seconds": round(last - first, 3),
        "pods_per_second": round(len(bound) / (last - first), 1) if bound else 0.0,
        "latency_p50_ms": round(float(np.percentile(latencies, 50)) * 1000, 1) if latencies.size else None,
        "latency_p99_ms": round(float(np.percentile(latencies, 99)) * 1000, 1) if latencies.size else None,
        "scheduler_cpu_seconds": round(cpu1 - cpu0, 2), "scheduler_peak_rss_mb": round(peak / 2**20, 1),
        "process": name, "watch_reconnects": watch.reconnects,
    }
    if sources:
        result["sources"] = {k: {"last_duration_s": v["last_duration"], "queries": v["queries"],
                                 "coverage": v["coverage"]} for k, v in sources.items()}
    say(f"{contender.label}: {result['pods_per_second']} pods/s, p50 {result['latency_p50_ms']} ms, "
        f"p99 {result['latency_p99_ms']} ms, cpu {result['scheduler_cpu_seconds']} s, "
        f"rss {result['scheduler_peak_rss_mb']} MB")
    return result


def sources_cost(cluster: DevCluster) -> dict[str, Any]:
    """One refresh of every telemetry source against this cluster: queries, wall time, CPU (this process)."""
    from devcluster.kubeapi import Credentials as Creds
    from metrics_sched.cli.sources import build_sources
    from metrics_sched.config import parse_config
    from metrics_sched.framework.registry import Registry
    from metrics_sched.ports import NodeDirectory

    config = parse_config({"sources": cluster.telemetry_sources(interval=5.0)}, Registry.default().catalog())
    creds = Creds.from_kubeconfig(cluster.kubeconfig)

    def kube_http() -> httpx.Client:
        return httpx.Client(base_url=creds.server, verify=tls_context(creds.ca_file),
                            headers={"Authorization": f"Bearer {creds.token}"}, timeout=30)

    directory = NodeDirectory(
        names=frozenset(n.name for n in cluster.nodes),
        by_internal_ip={n.internal_ip: n.name for n in cluster.nodes},
        cpu_allocatable={n.name: float(n.cpu) for n in cluster.nodes},
        memory_allocatable={n.name: 256.0 * 2**30 for n in cluster.nodes},
    )
    out: dict[str, Any] = {}
    for source in build_sources(config, cluster.run_dir, kube_http):
        source.fetch(directory)  # warm connections
        wall, cpu = time.perf_counter(), time.process_time()
        result = source.fetch(directory)
        out[source.name] = {
            "queries": result.queries, "wall_seconds": round(time.perf_counter() - wall, 3),
            "cpu_seconds": round(time.process_time() - cpu, 3), "samples": len(result.samples),
            "metrics": len(source.metrics()), "errors": result.errors,
        }
        source.close()
    total_wall = sum(v["wall_seconds"] for v in out.values())
    say(f"sources at {len(cluster.nodes)} nodes: " + ", ".join(
        f"{k} {v['queries']} queries {v['wall_seconds']}s" for k, v in out.items()) + f" (total {total_wall:.2f}s)")
    return {"nodes": len(cluster.nodes), "sources": out, "total_wall_seconds": round(total_wall, 3)}


def run_size(nodes: int, pods: int, *, timeout: float = 600.0,
             contenders: tuple[Contender, ...] = CONTENDERS) -> dict[str, Any]:
    say(f"dev cluster with {nodes} nodes")
    # No controller manager: its node lifecycle and the KWOK node Leases would load the API server the contenders
    # share, and nothing here needs volumes or controllers (every run measured before had none).
    with DevCluster(nodes=nodes, gpus_per_node=8, scrape_interval=5.0, metrics_api_interval=15.0,
                    with_controller_manager=False) as cluster:
        results = [run_contender(cluster, c, pods, timeout) for c in contenders]
        versions = dict(cluster.endpoints.versions) if cluster.endpoints else {}
        sources = sources_cost(cluster)
    tuned = next((r for r in results if r["contender"] == "kube-tuned"), None)
    ceiling = next((r for r in results if r["contender"] == "ceiling"), None)
    for r in results:
        if tuned and tuned["pods_per_second"]:
            r["throughput_vs_kube_tuned"] = round(r["pods_per_second"] / tuned["pods_per_second"], 3)
        if ceiling and ceiling["pods_per_second"]:
            r["throughput_vs_ceiling"] = round(r["pods_per_second"] / ceiling["pods_per_second"], 3)
    return {"nodes": nodes, "pods": pods, "versions": versions, "results": results, "sources": sources}


if __name__ == "__main__":
    quick = "--quick" in sys.argv
    print(json.dumps(run_size(500, 2000) if quick else run_size(5000, 10000), indent=2))
