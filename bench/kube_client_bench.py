"""Our hand-written Kubernetes client stack vs the official `kubernetes` package, on the dev API server.

Sync: LIST of every node and pod into a local store, as a scheduler does at start, by
  - `ours`: adapters.kubernetes Reflectors (paged raw-JSON LIST over httpx, then their watches);
  - `library-raw`: the package's CoreV1Api, paged, `_preload_content=False` (json.loads of the body, no models),
    then a `watch.Watch().stream(..., deserialize=False)` opened from the list's resourceVersion;
  - `library-informer`: the package's SharedInformer (kubernetes.informer), one per resource, until both caches hold
    every object.
Each approach runs in a process of its own (CPU seconds and peak RSS are per process; RSS delta = peak minus the
RSS once the client is built; building it, imports included, is reported apart as setup).

Binds: pods bound with 16 threads by `KubeClient.send(POST .../binding)` (raw httpx) vs
`CoreV1Api.create_namespaced_binding(..., _preload_content=False)`.

    python -m bench.kube_client_bench [--nodes 5000] [--pods 50000] [--runs 5] [--binds 500]
    python -m bench.kube_client_bench --binds-only --nodes 100 --pods 0 --runs 7 --binds 1000  # binds + CPU/bind

50,000 pods take about 13 minutes to create on 2 cores (62 pods/s with 32 requests in flight); the whole run
about 25 minutes.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results"
APPROACHES = ("ours", "library-raw", "library-informer")
BIND_APPROACHES = ("ours", "library")
BIND_WORKERS = 16


def say(message: str) -> None:
    print(f"[kube-client-bench] {message}", file=sys.stderr, flush=True)


# -- worker processes (one approach each) --------------------------------------------------------------------


def _status_bytes(key: str) -> int:
    # Not core_bench.proc_status: importing it (the scheduler core) would be counted in this worker's RSS.
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{key}:"):
            return int(line.split()[1]) * 1024
    return 0


def rss_now() -> int:
    return _status_bytes("VmRSS")


def peak_rss() -> int:
    return _status_bytes("VmHWM")  # the high-water mark


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


Sync = Callable[[dict[str, int]], dict[str, int]]


def setup_ours(kubeconfig: Path) -> Sync:
    from adapters.kubernetes import KubeClient, Reflector, load

    client = KubeClient(load(kubeconfig))

    def sync(expect: dict[str, int]) -> dict[str, int]:
        synced = {name: threading.Event() for name in expect}
        counts = dict.fromkeys(expect, 0)

        def sink(name: str) -> Callable[[Any, Any], None]:
            def on_event(kind: Any, obj: Any) -> None:
                counts[name] += 1
            return on_event

        reflectors = [Reflector(client, name, f"/api/v1/{name}", sink(name), synced[name].set) for name in expect]
        for reflector in reflectors:
            reflector.start()
        for event in synced.values():
            event.wait()
        for reflector in reflectors:
            reflector.request_stop()
        return counts

    return sync


def library_api(kubeconfig: Path, pool: int | None = None) -> Any:
    from kubernetes import client, config

    configuration = client.Configuration()
    config.load_kube_config(  # type: ignore[no-untyped-call]
        config_file=str(kubeconfig), client_configuration=configuration)
    if pool is not None:
        configuration.connection_pool_maxsize = pool
    return client.CoreV1Api(client.ApiClient(configuration))


def setup_library_raw(kubeconfig: Path) -> Sync:
    api = library_api(kubeconfig)
    funcs = {"nodes": api.list_node, "pods": api.list_pod_for_all_namespaces}

    def sync(expect: dict[str, int]) -> dict[str, int]:
        counts: dict[str, int] = {}
        for name in expect:
            store: dict[str, Any] = {}
            token = None
            while True:
                kwargs: dict[str, Any] = {"limit": 500, "_preload_content": False}
                if token:
                    kwargs["_continue"] = token
                page = json.loads(funcs[name](**kwargs).data)
                for item in page["items"]:
                    store[item["metadata"]["uid"]] = item
                token = page["metadata"].get("continue")
                if not token:
                    break
            counts[name] = len(store)
            versions[name] = (funcs[name], page["metadata"]["resourceVersion"])
        return counts

    return sync


versions: dict[str, tuple[Any, str]] = {}


def watch_library_raw() -> None:
    """The raw watch a library-raw sync continues with (deserialize=False), opened from each list's
    resourceVersion; not part of the timed sync (our Reflector reports synced before its watch, too)."""
    from kubernetes import watch

    for func, version in versions.values():
        for _ in watch.Watch().stream(  # type: ignore[no-untyped-call]
                func, resource_version=version, timeout_seconds=1, deserialize=False):
            pass


def setup_library_informer(kubeconfig: Path) -> Sync:
    from kubernetes.informer import ADDED, SharedInformer

    api = library_api(kubeconfig)
    funcs = {"nodes": api.list_node, "pods": api.list_pod_for_all_namespaces}

    def sync(expect: dict[str, int]) -> dict[str, int]:
        done = {name: threading.Event() for name in expect}
        counts = dict.fromkeys(expect, 0)
        for name in expect:
            informer = SharedInformer(funcs[name])  # type: ignore[no-untyped-call]

            def added(obj: Any, name: str = name) -> None:
                counts[name] += 1
                if counts[name] >= expect[name]:
                    done[name].set()

            informer.add_event_handler(ADDED, added)  # type: ignore[no-untyped-call]
            informer.start()  # type: ignore[no-untyped-call]
        for event in done.values():
            event.wait()
        return counts

    return sync


def worker(approach: str, kubeconfig: Path, expect: dict[str, int]) -> None:
    setups = {"ours": setup_ours, "library-raw": setup_library_raw, "library-informer": setup_library_informer}
    # Imports and client construction are timed apart (the library's ApiClient takes seconds to build); the sync
    # is measured from the process ready to start: its RSS delta is what the synced objects cost.
    rss0, setup_start = rss_now(), time.perf_counter()
    sync = setups[approach](kubeconfig)
    setup_seconds, setup_mb = time.perf_counter() - setup_start, (rss_now() - rss0) / 2**20
    baseline, cpu0, start = rss_now(), cpu_seconds(), time.perf_counter()
    counts = sync(expect)
    seconds = time.perf_counter() - start
    print(json.dumps({"approach": approach, "seconds": seconds, "cpu_seconds": cpu_seconds() - cpu0,
                      "peak_rss_delta_mb": (peak_rss() - baseline) / 2**20, "setup_seconds": setup_seconds,
                      "setup_rss_mb": setup_mb, "counts": counts}), flush=True)
    if approach == "library-raw":
        watch_library_raw()
    # Watch threads may still be blocked in a read: no interpreter teardown under them.
    os._exit(0)


# -- the driver --------------------------------------------------------------------------------------------


def create_all(api: Any, paths_bodies: list[tuple[str, dict[str, Any]]], what: str, concurrency: int = 32) -> float:
    """Creates the objects with `concurrency` requests in flight (paced by the API server's answers)."""
    start = time.monotonic()
    done = [0]
    step = max(1, len(paths_bodies) // 10)

    def create(item: tuple[str, dict[str, Any]]) -> None:
        api.post(item[0], item[1], ok=(409,))
        done[0] += 1
        if done[0] % step == 0:
            say(f"  {what}: {done[0]}/{len(paths_bodies)} ({done[0] / (time.monotonic() - start):.0f}/s)")

    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(create, paths_bodies))
    return len(paths_bodies) / (time.monotonic() - start)


def node(name: str) -> dict[str, Any]:
    capacity = {"cpu": "64", "memory": "256Gi", "pods": "110"}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"bench": "kube-client"}},
            "status": {"capacity": capacity, "allocatable": capacity}}


def pod(name: str, node_name: str | None) -> dict[str, Any]:
    spec: dict[str, Any] = {"schedulerName": "nobody", "terminationGracePeriodSeconds": 0,
                            "containers": [{"name": "c", "image": "registry.local/pause:3.10",
                                            "resources": {"requests": {"cpu": "100m", "memory": "500Mi"}}}]}
    if node_name:
        spec["nodeName"] = node_name
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"bench": "kube-client"}},
            "spec": spec}


def run_worker(approach: str, kubeconfig: Path, expect: dict[str, int], timeout: float) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "bench.kube_client_bench", "--worker", approach, "--kubeconfig", str(kubeconfig),
           "--expect", json.dumps(expect)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False,
                         cwd=Path(__file__).parent.parent)
    if out.returncode != 0:
        raise RuntimeError(f"{approach} worker exited {out.returncode}: {out.stderr.strip()[-2000:]}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    if result["counts"] != expect:
        raise RuntimeError(f"{approach} synced {result['counts']}, expected {expect}")
    return result


def bind_run(approach: str, cluster: Any, kubeconfig: Path, namespace: str, nodes: list[str], count: int,
             run: int) -> tuple[float, float]:
    """(binds/s, client CPU ms per bind): CPU of this process while only the bind threads run."""
    from adapters.kubernetes import KubeClient, load

    with cluster.api() as api:
        names = [f"b{run}-{approach}-{i:05d}" for i in range(count)]
        create_all(api, [(f"/api/v1/namespaces/{namespace}/pods", pod(n, None)) for n in names], "unbound pods")
    bodies = [(n, {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": n},
                   "target": {"kind": "Node", "name": nodes[i % len(nodes)]}}) for i, n in enumerate(names)]
    if approach == "ours":
        client = KubeClient(load(kubeconfig), max_connections=BIND_WORKERS)

        def bind(item: tuple[str, dict[str, Any]]) -> None:
            client.send("POST", f"/api/v1/namespaces/{namespace}/pods/{item[0]}/binding", item[1])
    else:
        core = library_api(kubeconfig, pool=BIND_WORKERS)

        def bind(item: tuple[str, dict[str, Any]]) -> None:
            core.create_namespaced_binding(namespace, item[1], _preload_content=False).release_conn()
    cpu0, start = cpu_seconds(), time.monotonic()
    with ThreadPoolExecutor(BIND_WORKERS) as pool:
        list(pool.map(bind, bodies))
    rate, cpu_ms = count / (time.monotonic() - start), (cpu_seconds() - cpu0) * 1000 / count
    if approach == "ours":
        client.close()
    return rate, cpu_ms


def summary(values: list[float]) -> dict[str, Any]:
    return {"median": round(statistics.median(values), 3), "min": round(min(values), 3),
            "max": round(max(values), 3), "runs": [round(v, 3) for v in values]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=50000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--binds", type=int, default=500, help="pods bound per run and approach")
    parser.add_argument("--worker", choices=APPROACHES)
    parser.add_argument("--kubeconfig", type=Path)
    parser.add_argument("--expect", default="{}")
    parser.add_argument("--timeout", type=float, default=900.0, help="per sync run")
    parser.add_argument("--binds-only", action="store_true",
                        help="measure binds alone and replace them in the existing results (no sync runs)")
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.kubeconfig, json.loads(args.expect))
        return

    import kubernetes

    from devcluster import DevCluster

    say(f"dev cluster (no KWOK nodes, no controllers): {args.nodes} nodes, {args.pods} pods, {args.runs} runs")
    with DevCluster(nodes=0, with_prometheus=False, with_emulator=False, with_controller_manager=False,
                    quiet=True) as cluster, cluster.api() as api:
        kubeconfig = cluster.kubeconfig
        names = [f"n-{i:05d}" for i in range(args.nodes)]
        node_rate = create_all(api, [("/api/v1/nodes", node(n)) for n in names], "nodes")
        namespaces = [f"bench-{i}" for i in range(10)]
        for ns in [*namespaces, "bench-binds"]:
            api.post("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}},
                     ok=(409,))
        pod_rate = create_all(api, [(f"/api/v1/namespaces/{namespaces[i % 10]}/pods",
                                     pod(f"p-{i:06d}", names[i % len(names)])) for i in range(args.pods)], "pods")
        expect = {"nodes": args.nodes, "pods": args.pods}
        sync: dict[str, list[dict[str, Any]]] = {a: [] for a in APPROACHES}
        for run in range(0 if args.binds_only else args.runs):
            for approach in APPROACHES:  # interleaved: drift on the shared machine hits every approach alike
                result = run_worker(approach, kubeconfig, expect, args.timeout)
                sync[approach].append(result)
                say(f"sync run {run + 1}/{args.runs} {approach}: {result['seconds']:.2f}s, "
                    f"CPU {result['cpu_seconds']:.2f}s, peak RSS +{result['peak_rss_delta_mb']:.0f} MB")
        binds: dict[str, list[float]] = {a: [] for a in BIND_APPROACHES}
        bind_cpu: dict[str, list[float]] = {a: [] for a in BIND_APPROACHES}
        for run in range(args.runs):
            for approach in BIND_APPROACHES:
                rate, cpu_ms = bind_run(approach, cluster, kubeconfig, "bench-binds", names, args.binds, run)
                binds[approach].append(rate)
                bind_cpu[approach].append(cpu_ms)
                say(f"bind run {run + 1}/{args.runs} {approach}: {rate:.1f} binds/s, {cpu_ms:.2f} CPU ms/bind")
        versions = dict(cluster.endpoints.versions) if cluster.endpoints else {}

    bind_report = {"binds_per_run": args.binds, "bind_runs": args.runs, "bind_cluster_nodes": args.nodes,
                   "binds_per_second": {a: summary(v) for a, v in binds.items()},
                   "bind_client_cpu_ms": {a: summary(v) for a, v in bind_cpu.items()}}
    if args.binds_only:
        report = json.loads((RESULTS / "kube_client.json").read_text())
        if "bind_client_cpu_ms" not in report:  # the sync run's own binds, kept beside the new ones
            report["binds_during_sync_run"] = {"binds_per_run": report["binds_per_run"],
                                               "binds_per_second": report["binds_per_second"]}
        report.update(bind_report, binds_measured=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"))
        (RESULTS / "kube_client.json").write_text(json.dumps(report, indent=2) + "\n")
        (RESULTS / "kube_client.md").write_text(markdown(report))
        print(json.dumps(report, indent=2))
        return
    report = {
        "measured": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": f"{os.cpu_count()} cores, Python {platform.python_version()}, kubernetes package "
                   f"{kubernetes.__version__}, {versions.get('kubernetes', 'API server')}",
        "nodes": args.nodes, "pods": args.pods, "runs": args.runs, "binds_per_run": args.binds,
        "create_rate": {"nodes_per_second": round(node_rate, 1), "pods_per_second": round(pod_rate, 1)},
        "sync": {a: {"setup_seconds": summary([r["setup_seconds"] for r in rs]),
                     "setup_rss_mb": summary([r["setup_rss_mb"] for r in rs]),
                     "seconds": summary([r["seconds"] for r in rs]),
                     "cpu_seconds": summary([r["cpu_seconds"] for r in rs]),
                     "peak_rss_delta_mb": summary([r["peak_rss_delta_mb"] for r in rs])} for a, rs in sync.items()},
        **bind_report,
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "kube_client.json").write_text(json.dumps(report, indent=2) + "\n")
    (RESULTS / "kube_client.md").write_text(markdown(report))
    print(json.dumps(report, indent=2))


def markdown(report: dict[str, Any]) -> str:
    def cell(s: dict[str, Any]) -> str:
        return f"{s['median']:.2f} ({s['min']:.2f}-{s['max']:.2f})"

    lines = [f"Measured {report['measured']} on {report['machine']}.", "",
             f"**Sync of {report['nodes']} nodes + {report['pods']} pods** (LIST into a local store; median "
             f"(min-max) of {report['runs']} runs, each in its own process)", "",
             "| approach | sync seconds | CPU seconds | peak RSS delta MB | client setup s | setup RSS MB |",
             "|---|---|---|---|---|---|"]
    for approach, s in report["sync"].items():
        lines.append(f"| {approach} | {cell(s['seconds'])} | {cell(s['cpu_seconds'])} | "
                     f"{cell(s['peak_rss_delta_mb'])} | {cell(s['setup_seconds'])} | {cell(s['setup_rss_mb'])} |")
    lines += ["", f"**Binds**, {BIND_WORKERS} threads, {report['binds_per_run']} pods per run, "
              f"{report.get('bind_runs', report['runs'])} runs per client, interleaved, on a cluster of "
              f"{report.get('bind_cluster_nodes', report['nodes'])} nodes"
              + (f" (measured {report['binds_measured']})" if "binds_measured" in report else ""), "",
              "| client | binds/s | client CPU ms per bind |", "|---|---|---|"]
    for approach, s in report["binds_per_second"].items():
        label = "ours (KubeClient, raw httpx)" if approach == "ours" else \
            "library create_namespaced_binding(_preload_content=False)"
        cpu = report.get("bind_client_cpu_ms", {}).get(approach)
        lines.append(f"| {label} | {cell(s)} | {cell(cpu) if cpu else 'not measured'} |")
    earlier = report.get("binds_during_sync_run")
    if earlier:
        lines += ["", f"In the sync run itself ({earlier['binds_per_run']} pods per run, {report['runs']} runs, "
                  f"{report['nodes']} nodes + {report['pods']} pods in the API server, binds/s not CPU): ours "
                  f"{cell(earlier['binds_per_second']['ours'])}, library "
                  f"{cell(earlier['binds_per_second']['library'])}; the spread overlaps in both measurements."]
    lines += ["", f"Objects created at {report['create_rate']['nodes_per_second']} nodes/s and "
              f"{report['create_rate']['pods_per_second']} pods/s (32 requests in flight).", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
