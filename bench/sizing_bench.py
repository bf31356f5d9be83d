"""The scheduler's memory by cluster size, for the Deployment's and the Helm chart's resources.

One metrics-sched process with every metric plugin and live telemetry (the e2e bench's `ms-all`, the heaviest
configuration) on a dev cluster of N nodes: it places P pods, then idles for a while with its sources
refreshing. Its RSS (/proc/<pid>/status VmRSS) is sampled twice a second throughout:
- steady: the median RSS of the idle window after every pod is bound (caches full, nothing queued);
- peak: VmHWM, the high-water mark over the whole run (the burst of P pending pods included).

    python -m bench.sizing_bench                     # 1000x5000 and 5000x10000
    python -m bench.sizing_bench --sizes 1000x5000   # one size

Writes bench/results/sizing.json (sizes measured before and not listed are kept).
"""

from __future__ import annotations

import argparse
import json
import secrets
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from bench.e2e_bench import (
    CONTENDERS,
    HEARTBEATS,
    SCRAPE_INTERVAL,
    PodWatch,
    proc_stats,
    say,
    start_contender,
)
from devcluster import DevCluster
from devcluster.kubeapi import Credentials

RESULTS = Path(__file__).resolve().parent / "results" / "sizing.json"
IDLE_SECONDS = 30.0
SAMPLE_SECONDS = 0.5


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


class RssSampler:
    """VmRSS of one process, sampled on a thread: (monotonic time, bytes)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.wait(SAMPLE_SECONDS):
            self.samples.append((time.monotonic(), rss_bytes(self.pid)))

    def median_since(self, since: float) -> int:
        return int(statistics.median(b for t, b in self.samples if t >= since))


def measure(nodes: int, pods: int, timeout: float) -> dict[str, Any]:
    contender = next(c for c in CONTENDERS if c.key == "ms-all")
    say(f"sizing: dev cluster with {nodes} nodes, {pods} pods")
    # As the e2e bench runs ms-all: the per-node recording rules (at 5,000 nodes the raw GPU presets have Prometheus
    # aggregate 40,000 series per refresh) and node heartbeats as kubelets send them (node updates on the watch).
    with DevCluster(nodes=nodes, gpus_per_node=8, scrape_interval=SCRAPE_INTERVAL,
                    with_controller_manager=False, node_heartbeats=HEARTBEATS, recording_rules=True) as cluster, \
            cluster.api() as api:
        namespace = f"sizing-{secrets.token_hex(2)}"
        api.post("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
        _, pid, stop, _ = start_contender(cluster, contender)
        ready_rss = rss_bytes(pid)
        sampler = RssSampler(pid)
        sampler.start()
        watch = PodWatch(Credentials.from_kubeconfig(cluster.kubeconfig), namespace)
        watch.start()
        started = time.monotonic()
        creator = subprocess.Popen([sys.executable, "-m", "bench.pod_creator", "--kubeconfig", str(cluster.kubeconfig),
                                    "--namespace", namespace, "--count", str(pods),
                                    "--scheduler", contender.scheduler_name])
        last_report = started
        while len(watch.bound) < pods and time.monotonic() - started < timeout:
            time.sleep(0.5)
            if time.monotonic() - last_report > 15:
                last_report = time.monotonic()
                say(f"sizing {nodes}: {len(watch.bound)}/{pods} bound, rss {rss_bytes(pid) / 2**20:.0f} MB")
        creator.wait(timeout=60)
        bound = len(watch.bound)
        if bound < pods:
            raise SystemExit(f"sizing {nodes}x{pods}: only {bound} pods bound in {timeout:.0f} s")
        placed_after = time.monotonic() - started
        idle_from = time.monotonic()
        time.sleep(IDLE_SECONDS)  # the measurement window itself: sources refresh, nothing is queued
        sampler.stop()
        _, peak = proc_stats(pid)
        steady = sampler.median_since(idle_from)
        watch.stop()
        stop()
    result = {
        "nodes": nodes, "pods": pods, "bound": bound, "seconds_to_place": round(placed_after, 1),
        "configuration": "ms-all: every metric plugin, sources prometheus, cmdb, metrics-server (bench/e2e_bench.py)",
        "ready_rss_mb": round(ready_rss / 2**20, 1),
        "steady_rss_mb": round(steady / 2**20, 1),
        "peak_rss_mb": round(peak / 2**20, 1),
        "idle_window_seconds": IDLE_SECONDS, "samples": len(sampler.samples),
    }
    say(f"sizing {nodes}x{pods}: ready {result['ready_rss_mb']} MB, steady {result['steady_rss_mb']} MB, "
        f"peak {result['peak_rss_mb']} MB")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", nargs="*", default=["1000x5000", "5000x10000"], metavar="NODESxPODS")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds to place the pods of one size")
    args = parser.parse_args()
    sizes = [(int(n), int(p)) for n, p in (s.split("x") for s in args.sizes)]
    previous = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    kept = [s for s in previous.get("sizes", []) if (s["nodes"], s["pods"]) not in sizes]
    measured = []
    for nodes, pods in sizes:
        measured.append(measure(nodes, pods, args.timeout))
        report = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                  "sizes": sorted(kept + measured, key=lambda s: (s["nodes"], s["pods"]))}
        RESULTS.write_text(json.dumps(report, indent=2) + "\n")  # after each size: a later failure keeps it
    print(json.dumps(json.loads(RESULTS.read_text()), indent=2))


if __name__ == "__main__":
    main()
