"""Where the end-to-end scheduler's CPU goes, outside the scheduling core: one every-metric metrics-sched on
the dev cluster, profiled by its own sampler (/debug/pprof/profile) while pods are created and bound.

It reports scheduler CPU-ms per bound pod (/proc of the process, as bench/e2e_bench.py measures it), peak
RSS, idle CPU (telemetry refreshes with no pods arriving), and the profile's busy samples split into
watch decoding, the scheduling cycle, binding, events/status, audit, telemetry, metrics, logging, gc and
other; the collapsed stacks are written next to the JSON for bench/flame.py.

    python -m bench.e2e_profile [--nodes 500] [--pods 2000] [--out /tmp/e2e-profile]
        [--py-spy PATH | --no-profile] [--prebound N] [--heap | --census] [--rate R] [--scheduler-env NAME=VALUE]
        [--contender ms-all | ms-resources]

--contender ms-resources profiles bench/e2e_bench.py's resource-only metrics-sched (its configuration, no
telemetry plugins) instead of the every-metric one.

--census diffs the scheduler's live objects per type between ready and the last bind (bench/census_run.py);
--heap traces every allocation instead (tracemalloc: exact tracebacks, but the run is several times slower).

The scheduler runs from the current directory's checkout: for a before/after comparison, run it at the same
time from a copy of the tree with the old files (both then share the machine's load, which on a shared
2-core machine moves CPU-ms per pod by tens of percent from one run to the next).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import yaml

from bench.e2e_bench import CONTENDERS, SCRAPE_INTERVAL, metrics_sched_config
from devcluster import DevCluster
from devcluster.cluster import wait_until
from devcluster.kubeapi import Credentials, tls_context
from devcluster.ports import free_port

# Leaf frames of a thread that is blocked (the sampler counts wall-clock time: these are not CPU).
IDLE_LEAVES = ("wait (", "select (", "_recv", "recv_into", "read (ssl", "sleep", "accept (", "poll (",
               "_wait_for_tstate_lock", "get (queue", "readinto (socket", "read (httpcore/_backends/sync",
               "_sleep", "acquire (", "run_forever", "serve_forever", "handle_request_noblock")

# First match wins: the innermost category wins over the outer ones because stacks are searched leaf first.
CATEGORIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("gc", ("<gc>",)),
    ("logging", ("logging/__init__", "observability/logging", "json_log")),
    ("metrics", ("observability/metrics",)),
    ("audit", ("metrics_sched/audit/",)),
    ("telemetry", ("metrics_sched/telemetry/", "adapters/prometheus", "adapters/metrics_server",
                   "adapters/cmdb", "adapters/custom_metrics", "metrics_sched/app/sources")),
    ("events/status", ("scheduler/reporting", "event_recorder", "events.py")),
    ("bind", ("scheduler/binding", "kubernetes/pod_writer", "kubernetes/rate_limit")),
    ("watch decoding", ("kubernetes/reflector", "kubernetes/known_objects", "model/podinfo",
                        "scheduler/event_handlers", "kubernetes/source")),
    ("scheduling cycle", ("metrics_sched/framework/", "metrics_sched/plugins/", "scheduler/scheduler",
                          "scheduler/queue", "metrics_sched/state/")),
    ("http client", ("httpx/", "httpcore/", "h11/", "ssl.py", "kubernetes/client")),
)


def say(message: str) -> None:
    print(f"[profile] {message}", file=sys.stderr, flush=True)


def proc_stats(pid: int) -> tuple[float, int, int]:
    """(CPU seconds, peak RSS bytes, current RSS bytes) of a live process."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    peak = rss = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            peak = int(line.split()[1]) * 1024
        elif line.startswith("VmRSS:"):
            rss = int(line.split()[1]) * 1024
    return cpu, peak, rss


class BoundWatch:
    """Counts the namespace's pods that have a node, from a watch (so the count costs the API server nothing)."""

    def __init__(self, creds: Credentials, namespace: str) -> None:
        self._client = httpx.Client(base_url=creds.server, verify=tls_context(creds.ca_file),
                                    headers={"Authorization": f"Bearer {creds.token}"},
                                    timeout=httpx.Timeout(10, read=None))
        self._path = f"/api/v1/namespaces/{namespace}/pods"
        self.bound: set[str] = set()
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()
        if not self._ready.wait(30):
            raise SystemExit("the pod watch did not start")

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        rv = self._client.get(self._path).json()["metadata"]["resourceVersion"]
        while not self._stop.is_set():
            params = {"watch": "1", "resourceVersion": rv, "allowWatchBookmarks": "true", "timeoutSeconds": "3600"}
            with self._client.stream("GET", self._path, params=params) as resp:
                self._ready.set()
                for line in resp.iter_lines():
                    if self._stop.is_set():
                        return
                    event = json.loads(line)
                    obj = event.get("object") or {}
                    rv = (obj.get("metadata") or {}).get("resourceVersion", rv)
                    if event.get("type") in ("ADDED", "MODIFIED") and (obj.get("spec") or {}).get("nodeName"):
                        self.bound.add(obj["metadata"]["name"])


def thread_cpu(pid: int) -> dict[int, float]:
    """CPU seconds per native thread id of a live process."""
    out: dict[int, float] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # ended meanwhile
        out[int(task.name)] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return out


def thread_names(url: str) -> dict[int, str]:
    """Native thread id -> Python thread name, from the scheduler's /debug/threads."""
    names: dict[int, str] = {}
    for match in re.finditer(r"^Thread '([^']*)' \(ident \d+, native id (\d+)", httpx.get(f"{url}/debug/threads",
                             timeout=10).text, re.MULTILINE):
        names[int(match.group(2))] = re.sub(r"[-_]?\d+(_\d+)?$", "", match.group(1))
    return names


def classify(stack: list[str]) -> str:
    leaf = stack[-1] if stack else ""
    if any(idle in leaf for idle in IDLE_LEAVES):
        return "idle"
    for frame in reversed(stack):
        for name, needles in CATEGORIES:
            if any(n in frame for n in needles):
                return name
    return "other"


def split(collapsed_text: str) -> tuple[Counter[str], Counter[str]]:
    """(samples per category, busy samples per leaf frame)."""
    per_category: Counter[str] = Counter()
    leaves: Counter[str] = Counter()
    for line in collapsed_text.splitlines():
        if not line.strip():
            continue
        frames, _, count = line.rpartition(" ")
        # The sampler's first frame is the thread name; py-spy's are "process ..." and "thread (...)".
        stack = [f for f in frames.split(";")[1:] if not f.startswith(("process ", "thread ("))]
        category = classify(stack)
        per_category[category] += int(count)
        if category != "idle":
            leaves[f"{category}: {stack[-1] if stack else '?'}"] += int(count)
    return per_category, leaves


def create_bound(cluster: DevCluster, count: int) -> None:
    """`count` pods of the bench's shape with spec.nodeName set, in a namespace of their own."""
    from concurrent.futures import ThreadPoolExecutor

    from devcluster.kubeapi import KubeAPI

    namespace = f"prebound-{secrets.token_hex(2)}"
    names = [n.name for n in cluster.nodes]
    started = time.monotonic()
    with KubeAPI(Credentials.from_kubeconfig(cluster.kubeconfig), max_connections=32) as api, \
            ThreadPoolExecutor(32) as pool:
        api.post("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
        path = f"/api/v1/namespaces/{namespace}/pods"

        def create(i: int) -> None:
            api.post(path, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"b-{i:06d}"},
                            "spec": {"nodeName": names[i % len(names)], "terminationGracePeriodSeconds": 0,
                                     "containers": [{"name": "c", "image": "registry.local/pause:3.10",
                                                     "resources": {"requests": {"cpu": "100m", "memory": "500Mi"}}}]}})

        for done, _ in enumerate(pool.map(create, range(count)), 1):
            if done % 5000 == 0:
                say(f"{done}/{count} bound pods created ({time.monotonic() - started:.0f}s)")


def take_census(pid: int, path: Path, lines: int) -> None:
    """Signals bench.census_run and waits for its `lines`-th census line."""
    os.kill(pid, signal.SIGUSR1)
    wait_until(lambda: path.exists() and len(path.read_text().splitlines()) >= lines, 300, "the object census")


def census_diff(path: Path, pods: int) -> str:
    """The live objects' growth per type between the first and the last census, largest first, per pod too."""
    first, last = (json.loads(line)["census"] for line in path.read_text().splitlines()[:2])
    rows = []
    for key, (count, size) in last.items():
        count0, size0 = first.get(key, (0, 0))
        if size - size0 > 0:
            rows.append((size - size0, count - count0, key))
    rows.sort(reverse=True)
    total = sum(r[0] for r in rows)
    lines = [f"tracked objects grew by {total / 2**20:.1f} MB (shallow sizes), {total / max(pods, 1):.0f} B per pod"]
    lines += [f"{size / 2**20:8.2f} MB {count:+9d} objects {size / max(pods, 1):7.0f} B/pod  {key}"
              for size, count, key in rows[:40]]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=500)
    parser.add_argument("--pods", type=int, default=2000)
    parser.add_argument("--idle-seconds", type=float, default=20.0)
    parser.add_argument("--profile-seconds", type=int, default=20)
    parser.add_argument("--hz", type=int, default=97)
    parser.add_argument("--timeout", type=float, default=1200.0)
    parser.add_argument("--prebound", type=int, default=0,
                        help="pods created already bound (round-robin over the nodes) before the scheduler starts: "
                             "the memory of a cluster holding that many more pods, without scheduling them all")
    parser.add_argument("--no-profile", action="store_true", help="CPU and memory figures only, no sampling")
    parser.add_argument("--heap", action="store_true",
                        help="trace allocations (tracemalloc, /debug/pprof/heap) from the first pod to the last bind "
                             "and write what is still held, by traceback; CPU figures are then not comparable")
    parser.add_argument("--census", action="store_true",
                        help="run the scheduler under bench.census_run and diff its live objects per type between "
                             "ready and the last bind (what the pods left behind; cheap, unlike --heap)")
    parser.add_argument("--rate", type=float, default=0.0,
                        help="pods created per second (0: as fast as the creator goes, which at 5,000 nodes outruns "
                             "the scheduler: the pending backlog then counts in the peak RSS)")
    parser.add_argument("--scheduler-env", action="append", default=[], metavar="NAME=VALUE",
                        help="an environment variable for the scheduler process (e.g. MALLOC_ARENA_MAX=2)")
    parser.add_argument("--contender", choices=("ms-all", "ms-resources"), default="ms-all",
                        help="which of bench/e2e_bench.py's metrics-sched contenders, with its configuration")
    parser.add_argument("--out", type=Path, default=Path("/tmp/e2e-profile"))
    parser.add_argument("--py-spy", type=Path, default=None,
                        help="sample with this py-spy binary instead (on-CPU samples only: the built-in sampler "
                             "counts wall-clock time, so a thread blocked in C shows where it blocks)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    tag = f"{args.nodes}x{args.pods}" + (f"+{args.prebound}" if args.prebound else "") + \
        ("-resources" if args.contender == "ms-resources" else "")
    contender = next(c for c in CONTENDERS if c.key == args.contender)
    name = contender.scheduler_name
    with DevCluster(nodes=args.nodes, gpus_per_node=8, scrape_interval=SCRAPE_INTERVAL,
                    with_controller_manager=False) as cluster:
        if args.prebound:
            create_bound(cluster, args.prebound)
        port = free_port()
        # The bench's own configuration of the contender, with the profiling endpoint on.
        config = {**metrics_sched_config(contender, cluster, port), "enableProfiling": True}
        path = cluster.run_dir / f"{name}.yaml"
        path.write_text(yaml.safe_dump(config))
        started_at = time.monotonic()
        census_file = args.out / f"census-{tag}.jsonl"
        census_file.unlink(missing_ok=True)
        entry = ["bench.census_run"] if args.census else ["metrics_sched.app.cli"]
        managed = cluster.group.start(name, [sys.executable, "-m", *entry, "run", "--config",
                                                 str(path), "--kubeconfig", str(cluster.kubeconfig),
                                                 "--log-format", "text", "--log-level", "warning"],
                                      env={**os.environ, **dict(e.split("=", 1) for e in args.scheduler_env),
                                           **({"CENSUS_FILE": str(census_file)} if args.census else {})})
        url = f"http://127.0.0.1:{port}"
        wait_until(lambda: httpx.get(f"{url}/readyz", timeout=1).status_code == 200, 300, name,
                   lambda: cluster.group.check(name))
        if config.get("sources"):
            wait_until(lambda: all(s["up"] for s in httpx.get(f"{url}/sources", timeout=5).json().values()), 300,
                       "every telemetry source up", lambda: cluster.group.check(name))
        ready_seconds = time.monotonic() - started_at
        pid = managed.pid
        if args.census:
            take_census(pid, census_file, 1)
        cpu_ready, _, rss_ready = proc_stats(pid)
        time.sleep(args.idle_seconds)  # the idle baseline: refreshes only (a measured interval, not a wait)
        cpu_idle_end, _, _ = proc_stats(pid)
        idle_cpu_per_s = (cpu_idle_end - cpu_ready) / args.idle_seconds

        creds = Credentials.from_kubeconfig(cluster.kubeconfig)
        api_client = httpx.Client(base_url=creds.server, verify=tls_context(creds.ca_file),
                                  headers={"Authorization": f"Bearer {creds.token}"}, timeout=60)
        namespace = f"prof-{secrets.token_hex(2)}"
        api_client.post("/api/v1/namespaces", json={"apiVersion": "v1", "kind": "Namespace",
                                                    "metadata": {"name": namespace}}).raise_for_status()
        watch = BoundWatch(creds, namespace)
        watch.start()
        profiles: list[str] = []
        done = threading.Event()

        def profile_loop() -> None:
            while not done.is_set():
                reply = httpx.get(f"{url}/debug/pprof/profile",
                                  params={"seconds": str(args.profile_seconds), "hz": str(args.hz)},
                                  timeout=args.profile_seconds + 30)
                if reply.status_code == 200:
                    profiles.append(reply.text)

        if args.heap:
            httpx.get(f"{url}/debug/pprof/heap", params={"start": "1", "frames": "6"}, timeout=30).raise_for_status()
        cpu0, _, _ = proc_stats(pid)
        threads0 = thread_cpu(pid)
        t0 = time.monotonic()
        creator = subprocess.Popen([sys.executable, "-m", "bench.pod_creator", "--kubeconfig",
                                    str(cluster.kubeconfig), "--namespace", namespace, "--count", str(args.pods),
                                    "--scheduler", name, "--rate", str(args.rate)])
        profiler = threading.Thread(target=profile_loop, daemon=True)
        spy_out = args.out / f"pyspy-{tag}.txt"
        spy = None
        if args.py_spy:
            spy = subprocess.Popen([str(args.py_spy), "record", "-p", str(pid), "-r", str(args.hz), "-f", "raw",
                                    "--gil", "--nonblocking", "-o", str(spy_out)], stdout=subprocess.DEVNULL)
        elif not args.no_profile:
            profiler.start()
        bound = 0
        last_report = 0.0
        while bound < args.pods and time.monotonic() - t0 < args.timeout:
            time.sleep(0.2)
            bound = len(watch.bound)
            if time.monotonic() - last_report > 5:
                last_report = time.monotonic()
                say(f"{bound}/{args.pods} bound ({time.monotonic() - t0:.0f}s)")
            if creator.poll() not in (None, 0):
                raise SystemExit("the pod creator failed")
        wall = time.monotonic() - t0
        cpu1, peak, rss_end = proc_stats(pid)
        threads1 = thread_cpu(pid)
        names = thread_names(url)
        if args.census:
            take_census(pid, census_file, 2)
            (args.out / f"census-diff-{tag}.txt").write_text(census_diff(census_file, bound))
        per_thread: dict[str, float] = {}
        for tid, seconds in threads1.items():
            name = names.get(tid, "(not a Python thread)")
            per_thread[name] = per_thread.get(name, 0.0) + seconds - threads0.get(tid, 0.0)
        if args.heap:
            time.sleep(5)  # the last binds' events and reports are written (a measured pause, not a wait for them)
            heap = httpx.get(f"{url}/debug/pprof/heap", params={"top": "40", "key": "traceback"}, timeout=120)
            (args.out / f"heap-{tag}.txt").write_text(heap.text)
        watch.stop()
        done.set()
        if spy is not None:
            spy.send_signal(signal.SIGINT)
            spy.wait(60)
        elif not args.no_profile:
            profiler.join(args.profile_seconds + 40)
        creator.wait(60)
        metrics_text = httpx.get(f"{url}/metrics", timeout=10).text
        collapsed_text = spy_out.read_text() if spy is not None else "".join(profiles)
        # Which code ran: an A/B against another checkout runs this file from that checkout.
        say(f"scheduler code from {Path.cwd()}")
        (args.out / f"profile-{tag}.txt").write_text(collapsed_text)
        (args.out / f"metrics-{tag}.txt").write_text(metrics_text)
        per_category, leaves = split(collapsed_text)
        busy = sum(v for k, v in per_category.items() if k != "idle") or 1
        cpu = cpu1 - cpu0
        result: dict[str, Any] = {
            "nodes": args.nodes, "pods": args.pods, "bound": bound, "wall_seconds": round(wall, 1),
            "pods_per_second": round(bound / wall, 1), "cpu_seconds": round(cpu, 2),
            "cpu_ms_per_pod": round(cpu * 1000 / max(bound, 1), 3),
            # The refreshes would have run anyway: what the pods themselves cost.
            "cpu_ms_per_pod_net_of_idle": round((cpu - idle_cpu_per_s * wall) * 1000 / max(bound, 1), 3),
            "idle_cpu_percent": round(idle_cpu_per_s * 100, 1), "ready_seconds": round(ready_seconds, 1),
            "rss_ready_mb": round(rss_ready / 2**20, 1), "rss_end_mb": round(rss_end / 2**20, 1),
            "peak_rss_mb": round(peak / 2**20, 1),
            "cpu_ms_per_pod_by_thread": {k: round(v * 1000 / max(bound, 1), 3)
                                         for k, v in sorted(per_thread.items(), key=lambda kv: -kv[1]) if v > 0},
            "busy_share": {k: round(v / busy, 3) for k, v in per_category.most_common() if k != "idle"},
            "top_busy_leaves": [(k, v) for k, v in leaves.most_common(40)],
        }
        (args.out / f"result-{tag}.json").write_text(json.dumps(result, indent=2))
        print(json.dumps({k: v for k, v in result.items() if k != "top_busy_leaves"}, indent=2))
        cluster.group.stop(name)
        api_client.close()


if __name__ == "__main__":
    main()
