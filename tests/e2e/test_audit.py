"""Decision audit end to end: Prometheus scrapes a running scheduler and every dashboard query
answers; `explain` names the bound node and the raw values the emulator served."""

from __future__ import annotations

import subprocess
import sys

import httpx

from devcluster import DevCluster
from devcluster.kubeapi import KubeAPI
from tests.e2e import kube, prom
from tests.e2e.pools import in_pool, node_pool
from tests.e2e.scheduler_proc import schedulers
from tests.e2e.telemetry_setup import telemetry_config, wait_for_values
from tests.e2e.test_scheduler_core import create_pods
from tests.grafana_queries import dashboard_queries, variable_queries

JOB = "metrics-sched"


def test_every_dashboard_query_returns_series_and_explain_matches_the_emulator(
        cluster: DevCluster, api: KubeAPI, namespace: str) -> None:
    assert cluster.endpoints and cluster.endpoints.prometheus
    prometheus = cluster.endpoints.prometheus
    temps = {0: 41.0, 1: 63.0, 2: 77.0}
    with node_pool(cluster, 3, cpu="32", memory="256Gi", gpus=2) as (pool, specs), cluster.emulator() as emulator:
        emulator.set_many({s.name: {"gpu_temp": temps[i], "hourly_cost": 2.0 + i, "cpu_util": 0.2 + 0.1 * i}
                           for i, s in enumerate(specs)})
        config = telemetry_config(cluster)
        with schedulers(cluster, extra=config, replicas=1) as (name, procs):
            proc = procs[0]
            instance = f"127.0.0.1:{proc.port}"
            cluster.add_scrape_target(name, instance)
            try:
                # Counters must be seen before they move, or increase() has nothing to compare with: two scrapes
                # of this scheduler (not just one) before the first pod.
                kube.poll(lambda: prom.query(prometheus,
                                             f'min(count_over_time(scheduler_pending_pods{{job="{JOB}",'
                                             f'instance="{instance}"}}[1m])) >= 2'), 30,
                          "Prometheus to scrape the scheduler twice", interval=0.5)
                # Every term asserted below (explain's winner line, the annotation), fresh and at the set value.
                wait_for_values(proc, {s.name: {"gpu_temperature": temps[i], "node_hourly_cost": 2.0 + i}
                                       for i, s in enumerate(specs)})
                create_pods(api, namespace, ["first"], name, gpus=1, **in_pool(pool))
                bound = kube.poll(lambda: api.get(f"/api/v1/namespaces/{namespace}/pods/first")["spec"].get(
                    "nodeName"), 15, "first pod bound")
                served = emulator.values(bound)

                out = subprocess.run([sys.executable, "-m", "metrics_sched.app.cli", "explain", f"{namespace}/first",
                                      "--url", proc.url], capture_output=True, text=True, timeout=30)
                assert out.returncode == 0, out.stderr
                winner = next(line for line in out.stdout.splitlines() if line.startswith("winner"))
                assert bound in winner
                served_temp = max(served["gpu_temp"]) if isinstance(served["gpu_temp"], list) else served["gpu_temp"]
                assert f"gpu_temperature={served_temp:.2f}" in winner, (served, out.stdout)
                assert f"node_hourly_cost={served['hourly_cost']:.2f}" in winner, (served, out.stdout)
                annotation = api.get(f"/api/v1/namespaces/{namespace}/pods/first")["metadata"]["annotations"]
                assert f"gpu_temperature={served_temp:g}" in annotation["metrics-sched.io/decision"]

                # Exercise the rest once Prometheus has seen the first binding (so the counter can be seen to move):
                # fill every GPU of the pool (one node gets its second pod), and add a pod that cannot fit.
                kube.poll(lambda: prom.query(prometheus,
                                             f'metrics_sched_bindings_total{{job="{JOB}",instance="{instance}"}}'), 30,
                          "the first binding scraped", interval=0.5)
                create_pods(api, namespace, [f"more-{i}" for i in range(5)], name, gpus=1, **in_pool(pool))
                create_pods(api, namespace, ["too-big"], name, gpus=8, **in_pool(pool))
                kube.poll(lambda: sum(1 for p in kube.list_pods(api, namespace) if p["spec"].get("nodeName")) == 6,
                          20, "six pods bound")
                sources = subprocess.run([sys.executable, "-m", "metrics_sched.app.cli", "sources", "--url", proc.url],
                                         capture_output=True, text=True, timeout=30)
                assert sources.returncode == 0 and "prometheus" in sources.stdout and "up" in sources.stdout

                def scraped() -> bool:
                    return bool(prom.query(prometheus, f'increase(metrics_sched_bindings_total{{job="{JOB}",'
                                                       f'instance="{instance}"}}[30s]) > 0'))

                kube.poll(scraped, 30, "Prometheus to scrape the scheduler's bindings", interval=0.5)
                queries = dashboard_queries(JOB)
                assert len(queries) >= 20
                empty: list[str] = []

                def every_query_answers() -> bool:
                    """What is asserted: every dashboard query returns a series (rate() windows need a few
                    scrapes after the counters moved)."""
                    empty.clear()
                    for uid, title, expr in queries:
                        resp = httpx.get(f"{prometheus}/api/v1/query", params={"query": expr},
                                         timeout=10)
                        assert resp.status_code == 200, (uid, title, expr, resp.text)
                        if not resp.json()["data"]["result"]:
                            empty.append(f"{uid} / {title}: {expr}")
                    return not empty

                try:
                    kube.poll(every_query_answers, 30, "every dashboard query to return a series", interval=0.5)
                except AssertionError as exc:
                    raise AssertionError(f"{exc}; dashboard queries without a series:\n" + "\n".join(empty)) from None
                # The variables offer values too; $job offers this scheduler's job (from a metrics-sched-only series).
                for uid, variable, expr in variable_queries(JOB):
                    offered = {r["metric"].get(variable) for r in prom.query(prometheus, expr)}
                    assert offered - {None}, f"{uid} / ${variable} offers nothing: {expr}"
                    if variable == "job":
                        assert JOB in offered, f"{uid} / $job: {offered}"
            finally:
                cluster.remove_scrape_target(name)
