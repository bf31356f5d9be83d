"""Scheduler configs with live telemetry sources (the dev cluster's Prometheus, CMDB and metrics API)."""

from __future__ import annotations

from typing import Any

import httpx

from devcluster import DevCluster
from tests.e2e.kube import poll
from tests.e2e.scheduler_proc import SchedulerProcess

REFRESH = 1.0  # seconds between refreshes of every source in these tests


def sources(cluster: DevCluster, *, prometheus: bool = True, cmdb: bool = True,
            metrics_server: bool = True) -> list[dict[str, Any]]:
    return cluster.telemetry_sources(interval=REFRESH, prometheus=prometheus, cmdb=cmdb,
                                     metrics_server=metrics_server)


def telemetry_config(cluster: DevCluster, *, weights: dict[str, int] | None = None,
                     contracts: dict[str, dict[str, Any]] | None = None,
                     plugin_args: dict[str, dict[str, Any]] | None = None, **source_flags: bool) -> dict[str, Any]:
    profile: dict[str, Any] = {}
    if weights is not None:
        profile["plugins"] = {"score": {"disabled": [{"name": "*"}],
                                        "enabled": [{"name": n, "weight": w} for n, w in weights.items()]}}
    if plugin_args:
        profile["pluginConfig"] = [{"name": n, "args": a} for n, a in plugin_args.items()]
    return {"sources": sources(cluster, **source_flags), "metrics": contracts or {}, "profile": profile}


def values(proc: SchedulerProcess, node: str) -> dict[str, Any]:
    body: dict[str, Any] = httpx.get(f"{proc.url}/values", params={"node": node}, timeout=2).json()[node]
    return body


def wait_for_values(proc: SchedulerProcess, expected: dict[str, dict[str, float]], timeout: float = 20,
                    tolerance: float = 1e-6) -> None:
    """Until the scheduler's cache holds, fresh, the expected value (within a relative tolerance) of every
    (node, metric); an empty dict for a node waits for any fresh value of it."""

    def ready() -> bool:
        for node, metrics in expected.items():
            held = values(proc, node)
            for metric, value in metrics.items():
                entry = held.get(metric)
                if entry is None or not entry["fresh"] or abs(entry["value"] - value) > tolerance * max(1, abs(value)):
                    return False
            if not metrics and not any(e["fresh"] for e in held.values()):
                return False
        return True

    poll(ready, timeout, f"the scheduler to see {expected}", interval=0.2)


def wait_for_fresh(proc: SchedulerProcess, nodes: list[str], metric: str, timeout: float = 20) -> None:
    """Until the scheduler holds a fresh value of `metric` for every node (new nodes need a scrape first)."""
    poll(lambda: all(values(proc, n).get(metric, {}).get("fresh") for n in nodes), timeout,
         f"fresh {metric} for {nodes}", interval=0.2)


def decisions(proc: SchedulerProcess, pod: str) -> list[dict[str, Any]]:
    body = httpx.get(f"{proc.url}/decisions", params={"pod": pod}, timeout=2).json()
    result: list[dict[str, Any]] = body["decisions"]
    return result


def sources_health(proc: SchedulerProcess) -> dict[str, Any]:
    result: dict[str, Any] = httpx.get(f"{proc.url}/sources", timeout=2).json()
    return result
