"""Node identity against the real Prometheus scraping the emulator: /sources and `metrics-sched sources` show,
per metric, which rule matched its series to nodes (DCGM by `hostname`, node-exporter by its InternalIP in
`instance`, OpenCost by `node`)."""

from __future__ import annotations

import subprocess
import sys

from devcluster import DevCluster
from devcluster.kubeapi import KubeAPI
from tests.e2e import kube
from tests.e2e.pools import node_pool
from tests.e2e.scheduler_proc import schedulers
from tests.e2e.telemetry_setup import sources_health, telemetry_config, wait_for_fresh


def test_sources_shows_how_each_metric_found_its_nodes(cluster: DevCluster, api: KubeAPI, namespace: str) -> None:
    config = telemetry_config(cluster, cmdb=False, metrics_server=False)
    with node_pool(cluster, 2, cpu="32", memory="256Gi", gpus=2) as (_, specs), \
            schedulers(cluster, extra=config, leader_elect=False) as (_, procs):
        proc = procs[0]
        names = [s.name for s in specs]
        for metric in ("gpu_temperature", "node_load_per_cpu", "node_hourly_cost"):
            wait_for_fresh(proc, names, metric)

        def rules() -> dict[str, set[str]]:
            matching = sources_health(proc)["prometheus"]["series_matching"]
            return {metric: set(m["matched"]) for metric, m in matching.items()}

        expected = {"gpu_temperature": {"hostname"}, "gpu_utilisation": {"hostname"},
                    "node_load_per_cpu": {"instance/internal_ip"}, "node_hourly_cost": {"node"}}
        kube.poll(lambda: rules() == expected, 10, f"series matched by {expected}", interval=0.2)

        out = subprocess.run([sys.executable, "-m", "metrics_sched.app.cli", "sources", "--url", proc.url],
                             capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out.stderr
        assert "prometheus/node_load_per_cpu: " in out.stdout and "instance/internal_ip=" in out.stdout
