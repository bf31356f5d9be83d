"""The cost of refreshing the telemetry sources against the dev cluster (issue 18 item 6).

Every source the dev cluster offers (Prometheus with the four telemetry metrics, the CMDB, the metrics
API) is built from the same config the scheduler would get, warmed up (connections open, every metric
covering the nodes), then refreshed N times: each source on its own, then all of them at once, one
thread per source as MetricCache runs them. Reported per source: queries per refresh, wall and CPU
seconds (this process, all threads) per refresh as median and spread (min-max), samples and errors;
and the concurrent refresh of all sources through a MetricCache, one thread per source as the scheduler
runs them (fetch, then ingest: coverage, expiry), which is what one round costs the scheduler: its wall,
its CPU, and the process' resident memory across those rounds (VmRSS before and after, VmHWM: the peak). And each
dev-cluster process' CPU seconds per round of those refreshes, all of it and beyond what it spends anyway (its rate
over IDLE_SECONDS with no refresh running: scrapes, rule evaluations, node heartbeats): on 2 shared cores the wall of
a round is set as much by Prometheus' and the emulator's CPU as by this process'.

Prometheus is measured both ways it can be configured (`--queries both`, the default): the presets over the
raw series (`raw`), and over the per-node recording rules the dev cluster then loads (`recorded`,
`recordingRules: true`; adapters/prometheus/recording_rules.py). For each metric query, Prometheus' own
account of it (`stats=all`: preparation, evaluation, samples touched) and the answer's size say where the
time goes; `uptime`'s load averages are recorded with every variant (the machine may be shared).

    python -m bench.sources_bench --nodes 5000 [--repetitions 5] [--prometheus-timeout 30] [--queries both]
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import httpx

from adapters.http_common import SourceError
from bench.e2e_bench import SCRAPE_INTERVAL, proc_stats, running
from devcluster import DevCluster
from devcluster.kubeapi import Credentials, tls_context
from metrics_sched.ports import FetchResult, NodeDirectory
from metrics_sched.telemetry import MetricCache, PolledSource
from metrics_sched.telemetry.batch import BatchedFetchResult

WARM_UP_TIMEOUT = 180.0
IDLE_SECONDS = 5.0  # the window the cluster's processes' background CPU is measured over


def say(message: str) -> None:
    print(f"[sources-bench] {message}", file=sys.stderr, flush=True)


def spread(values: Sequence[float]) -> dict[str, float]:
    return {"median": round(statistics.median(values), 4), "min": round(min(values), 4),
            "max": round(max(values), 4)}


def _directory(cluster: DevCluster) -> NodeDirectory:
    return NodeDirectory(
        names=frozenset(n.name for n in cluster.nodes),
        by_internal_ip={n.internal_ip: n.name for n in cluster.nodes},
        cpu_allocatable={n.name: float(n.cpu) for n in cluster.nodes},
        memory_allocatable={n.name: 256.0 * 2**30 for n in cluster.nodes},
    )


def _prometheus_specs(cluster: DevCluster, prometheus_timeout: float | None,
                      recording_rules: bool | None) -> list[dict[str, Any]]:
    """The dev cluster's `sources:` entries, Prometheus' with the timeout (and the recordingRules switch)
    given (None: as the dev cluster has them)."""
    specs = cluster.telemetry_sources(interval=5.0)
    if prometheus_timeout is not None:
        specs = [{**s, "timeout": f"{prometheus_timeout:g}s"} if s["type"] == "prometheus" else s for s in specs]
    if recording_rules is not None:
        specs = [{**s, "recordingRules": recording_rules} if s["type"] == "prometheus" else s for s in specs]
    return specs


def build(cluster: DevCluster, prometheus_timeout: float | None = None,
          recording_rules: bool | None = None) -> list[PolledSource]:
    """The sources the scheduler would build from the dev cluster's `sources:` entries (with Prometheus'
    query timeout raised to `prometheus_timeout` seconds when given: a slow query is then measured, not cut)."""
    from metrics_sched.app.sources import build_sources
    from metrics_sched.config import parse_config
    from metrics_sched.plugins import in_tree_registry

    specs = _prometheus_specs(cluster, prometheus_timeout, recording_rules)
    config = parse_config({"sources": specs}, in_tree_registry().catalog())
    creds = Credentials.from_kubeconfig(cluster.kubeconfig)

    def kube_http() -> httpx.Client:
        return httpx.Client(base_url=creds.server, verify=tls_context(creds.ca_file),
                            headers={"Authorization": f"Bearer {creds.token}"}, timeout=30)

    return list(build_sources(config, cluster.run_dir, kube_http))


def _covered(source: PolledSource, result: FetchResult, nodes: int) -> bool:
    """Every metric of the source has a sample for every node (Prometheus' rates need two scrapes first)."""
    per_metric: dict[str, int] = {}
    for sample in result.samples:
        per_metric[sample.metric] = per_metric.get(sample.metric, 0) + 1
    for batch in result.batches if isinstance(result, BatchedFetchResult) else ():
        per_metric[batch.metric] = per_metric.get(batch.metric, 0) + len(batch.nodes)
    return not result.errors and all(per_metric.get(m, 0) >= nodes for m in source.metrics())


def values(result: FetchResult) -> int:
    """The values a refresh delivered: its samples and its batches' (metrics_sched.telemetry.batch)."""
    batched = result.batches if isinstance(result, BatchedFetchResult) else []
    return len(result.samples) + sum(len(batch.nodes) for batch in batched)


def warm_up(sources: Sequence[PolledSource], directory: NodeDirectory) -> None:
    """Refreshes each source until it covers every node (or the timeout: then measured as it is, said so)."""
    for source in sources:
        deadline = time.monotonic() + WARM_UP_TIMEOUT
        while True:
            result = source.fetch(directory)
            if _covered(source, result, len(directory.names)):
                break
            if time.monotonic() > deadline:
                say(f"{source.name}: not covering every node after {WARM_UP_TIMEOUT:.0f}s "
                    f"({values(result)} values, errors {result.errors}); measuring anyway")
                break
            time.sleep(1.0)


def _timed(fetch: Callable[[], FetchResult]) -> tuple[FetchResult, float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    try:
        result = fetch()
    except SourceError as exc:  # the whole source down this round (a starved server): measured, not fatal
        result = FetchResult(samples=[], dropped={}, errors={"*": str(exc)})
    return result, time.perf_counter() - wall, time.process_time() - cpu


def memory_mb() -> dict[str, float]:
    """This process' resident memory now (VmRSS) and at its peak so far (VmHWM), in MiB."""
    out: dict[str, float] = {}
    with open("/proc/self/status") as status:
        for line in status:
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = round(int(rest.split()[0]) / 1024, 1)
    return out


def cache_of(sources: Sequence[PolledSource], directory: NodeDirectory) -> MetricCache:
    """A MetricCache over the sources, refreshed by hand (`refresh`) as its own threads would."""
    cache = MetricCache()
    for source in sources:
        cache.add_source(source)
    cache.set_directory(lambda: directory)
    return cache


def concurrent_refresh(cache: MetricCache, sources: Sequence[PolledSource]) -> tuple[float, float]:
    """(wall, CPU) of refreshing every source at once through the cache (fetch and ingest), one thread each
    (as MetricCache's refresh threads); a source down this round is what the cache survives too."""
    errors: list[BaseException] = []

    def run(source: PolledSource) -> None:
        try:
            cache.refresh(source.name)
        except BaseException as exc:  # noqa: BLE001 - reported after the join
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(s,), name=f"bench-{s.name}") for s in sources]
    wall, cpu = time.perf_counter(), time.process_time()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - wall, time.process_time() - cpu
    if errors:
        raise RuntimeError(f"a source failed during the concurrent refresh: {errors[0]!r}")
    return elapsed


def process_cpu(cluster: DevCluster) -> dict[str, float]:
    """CPU seconds so far of each of the dev cluster's live processes (Prometheus, the emulator, the API server...)."""
    out: dict[str, float] = {}
    for name, pid in running(cluster).items():
        try:
            out[name] = proc_stats(pid)[0]
        except OSError:  # exited meanwhile
            continue
    return out


def cpu_per_round(before: dict[str, float], after: dict[str, float], rounds: int,
                  idle: dict[str, float] | None = None, idle_seconds: float = 0.0,
                  round_seconds: float = 0.0) -> dict[str, float]:
    """Each process' CPU seconds per round between two process_cpu() readings, less (with `idle`: its CPU seconds
    over `idle_seconds` with no refresh running) what it spends in the same time anyway (scrapes, rule evaluations,
    node heartbeats): what one round of refreshes costs each of them. Sorted, largest first."""
    out: dict[str, float] = {}
    for name, end in after.items():
        spent = (end - before.get(name, end)) / rounds
        if idle is not None and idle_seconds > 0:
            spent -= idle.get(name, 0.0) / idle_seconds * round_seconds
        out[name] = round(spent, 4)
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def load_average() -> list[float]:
    """1, 5 and 15 minute load averages (what `uptime` prints): how busy the machine was meanwhile."""
    return [round(x, 2) for x in os.getloadavg()]


def prometheus_query_stats(sources: Sequence[PolledSource], repetitions: int = 3) -> dict[str, Any]:
    """Per Prometheus metric: the query sent, and Prometheus' own timings of it (`stats=all`, median over
    `repetitions`, each query alone), the samples it touched, the series and bytes it answered with."""
    from adapters.prometheus import PrometheusSource

    out: dict[str, Any] = {}
    for source in sources:
        if not isinstance(source, PrometheusSource):
            continue
        with httpx.Client(base_url=source.config.url, timeout=60) as client:
            for metric in source.metrics():
                query = source.query_for(metric)
                runs: list[dict[str, Any]] = []
                for _ in range(repetitions):
                    wall = time.perf_counter()
                    try:
                        response = client.get("/api/v1/query", params={"query": query, "stats": "all"})
                        body = response.json()
                    except (httpx.HTTPError, ValueError) as exc:  # a starved Prometheus: said, not fatal
                        runs.append({"wall": time.perf_counter() - wall, "error": f"{type(exc).__name__}: {exc}"})
                        continue
                    elapsed = time.perf_counter() - wall
                    stats = body.get("data", {}).get("stats", {})
                    runs.append({"wall": elapsed, "bytes": len(response.content),
                                 "series": len(body.get("data", {}).get("result", [])), **stats.get("timings", {}),
                                 "samples": stats.get("samples", {}).get("totalQueryableSamples")})
                answered = [r for r in runs if "error" not in r]
                last = answered[-1] if answered else {}
                out[f"{source.name}/{metric}"] = {
                    "query": query, "series": last.get("series"), "bytes": last.get("bytes"),
                    "samples": last.get("samples"), "errors": [r["error"] for r in runs if "error" in r],
                    "wall": spread([r["wall"] for r in runs]),
                    **{key: spread([r[key] for r in answered if key in r]) for key in
                       ("execTotalTime", "queryPreparationTime", "innerEvalTime") if key in last},
                }
    return out


def sources_cost(cluster: DevCluster, repetitions: int = 5, *,
                 prometheus_timeout: float | None = None, recording_rules: bool | None = None) -> dict[str, Any]:
    """Per source: queries, wall/CPU per refresh (median and spread), samples; and the concurrent total.
    `recording_rules`: Prometheus' presets read the recording rules (True) or the raw series (False);
    None: as the dev cluster's sources have it."""
    directory = _directory(cluster)
    sources = build(cluster, prometheus_timeout, recording_rules)
    load_before = load_average()
    try:
        warm_up(sources, directory)
        out: dict[str, Any] = {}
        for source in sources:
            runs = [_timed(functools.partial(source.fetch, directory)) for _ in range(repetitions)]
            last = runs[-1][0]
            out[source.name] = {
                "queries": last.queries, "metrics": len(source.metrics()), "samples": values(last),
                "dropped": last.dropped, "errors": last.errors,
                "wall_seconds": spread([r[1] for r in runs]), "cpu_seconds": spread([r[2] for r in runs]),
            }
        cache = cache_of(sources, directory)
        concurrent_refresh(cache, sources)  # the cache's store filled once: later rounds update it in place
        # What the cluster's processes spend with no refresh running (IDLE_SECONDS), then during the rounds.
        idle_start = process_cpu(cluster)
        time.sleep(IDLE_SECONDS)
        idle_cpu = {name: end - idle_start.get(name, end) for name, end in process_cpu(cluster).items()}
        memory_before = memory_mb()
        cpu_before = process_cpu(cluster)
        together = [concurrent_refresh(cache, sources) for _ in range(repetitions)]
        cpu_after = process_cpu(cluster)
        memory_after = memory_mb()
        down = {s.name: s.health.last_error for s in sources if s.health.last_error}
        if down:
            say(f"sources failing during the concurrent refreshes: {down}")
        query_stats = prometheus_query_stats(sources)
    finally:
        for source in sources:
            source.close()
    sequential = sum(v["wall_seconds"]["median"] for v in out.values())
    concurrent = spread([w for w, _ in together])
    # Per round: each process' CPU during the rounds, and the same less its background (the idle window's rate)
    processes = cpu_per_round(cpu_before, cpu_after, repetitions)
    beyond_background = cpu_per_round(cpu_before, cpu_after, repetitions, idle_cpu, IDLE_SECONDS,
                                      sum(w for w, _ in together) / repetitions)
    prometheus_spec = next((s for s in _prometheus_specs(cluster, prometheus_timeout, recording_rules)
                            if s["type"] == "prometheus"), {})
    say(f"sources at {len(cluster.nodes)} nodes, {repetitions} refreshes each"
        f"{' (Prometheus through recording rules)' if prometheus_spec.get('recordingRules') else ''}: " + ", ".join(
        f"{k} {v['queries']} queries {v['wall_seconds']['median']:.3f}s "
        f"[{v['wall_seconds']['min']:.3f}-{v['wall_seconds']['max']:.3f}] cpu {v['cpu_seconds']['median']:.3f}s"
        for k, v in out.items())
        + f"; all at once {concurrent['median']:.3f}s [{concurrent['min']:.3f}-{concurrent['max']:.3f}]"
        + f"; load {load_before} -> {load_average()}")
    say("CPU seconds per round beyond each process' background: " + ", ".join(
        f"{name} {seconds:.3f}" for name, seconds in beyond_background.items()))
    return {
        "nodes": len(cluster.nodes), "repetitions": repetitions, "prometheus_timeout": prometheus_timeout,
        "recording_rules": bool(prometheus_spec.get("recordingRules")),
        "load_average": {"before": load_before, "after": load_average()},
        "sources": out,
        "prometheus_queries": query_stats,
        "queries": sum(v["queries"] for v in out.values()),
        # Each source alone, one after the other (the figure the issue started from).
        "total_wall_seconds": round(sequential, 3),
        # Every source at once through the cache (fetch and ingest): what one round of refreshes costs.
        "concurrent_wall_seconds": concurrent,
        "concurrent_cpu_seconds": spread([c for _, c in together]),
        # The cluster's processes during the concurrent rounds, CPU seconds per round: all of it, and beyond what
        # each spends in the same time with no refresh running (measured over IDLE_SECONDS just before).
        "process_cpu_seconds_per_round": processes,
        "process_cpu_seconds_per_round_beyond_background": beyond_background,
        "background_cpu_seconds_per_second": {name: round(seconds / IDLE_SECONDS, 4)
                                              for name, seconds in sorted(idle_cpu.items(), key=lambda kv: -kv[1])},
        "memory_mb": {"before": memory_before, "after": memory_after},
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.sources_bench", description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--repetitions", type=int, default=5)
    parser.add_argument("--prometheus-timeout", type=float, default=None,
                        help="seconds per Prometheus query (default: the source's own, 5 s)")
    parser.add_argument("--queries", choices=("raw", "recorded", "both"), default="both",
                        help="Prometheus presets over the raw series, over the recording rules, or both (default)")
    args = parser.parse_args(argv)
    say(f"dev cluster with {args.nodes} nodes")
    variants = {"raw": [False], "recorded": [True], "both": [False, True]}[args.queries]
    # The shape e2e_bench measures in: no controller manager, its scrape interval; the
    # recording rules loaded only when measured (each evaluation costs Prometheus CPU the raw variant would share).
    with DevCluster(nodes=args.nodes, gpus_per_node=args.gpus_per_node, scrape_interval=SCRAPE_INTERVAL,
                    with_controller_manager=False,
                    recording_rules=args.queries != "raw") as cluster:
        report = {"recorded" if recorded else "raw": sources_cost(
            cluster, args.repetitions, prometheus_timeout=args.prometheus_timeout, recording_rules=recorded)
            for recorded in variants}
        print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
