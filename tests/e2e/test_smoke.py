"""Smoke test of the dev cluster: real kube-scheduler, Prometheus, the emulator, CMDB and metrics API."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from devcluster import DevCluster
from devcluster.kubeapi import KubeAPI, KubeAPIError
from tests.e2e import kube, prom
from tests.e2e.conftest import E2E_GPUS
from tests.e2e.kube_scheduler import kube_scheduler


def test_real_kube_scheduler_runs_100_pods_on_fake_nodes(cluster: DevCluster, api: KubeAPI, namespace: str) -> None:
    assert len(cluster.nodes) >= 50
    with kube_scheduler(cluster):
        started = time.monotonic()
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(lambda i: api.post(f"/api/v1/namespaces/{namespace}/pods",
                                             kube.pod_manifest(f"smoke-{i:03d}")), range(100)))

        def all_running() -> bool:
            pods = kube.list_pods(api, namespace)
            return len(pods) == 100 and all(p["status"].get("phase") == "Running" for p in pods)

        kube.poll(all_running, 60, "100 pods Running")
        elapsed = time.monotonic() - started
        pods = kube.list_pods(api, namespace)
        assert all(p["spec"]["nodeName"] in {n.name for n in cluster.nodes} for p in pods)
        print(f"100 pods Running in {elapsed:.1f}s")


def test_prometheus_has_one_gpu_temperature_series_per_gpu(cluster: DevCluster) -> None:
    assert cluster.endpoints and cluster.endpoints.prometheus
    url = cluster.endpoints.prometheus
    names = {n.name for n in cluster.nodes}

    def counts() -> dict[str, int] | None:
        # The session's nodes only: other tests' pools come and go, and a Prometheus restarted by one of them
        # keeps their last series for the 5-minute lookback (no staleness markers for targets it never re-saw).
        result = prom.query(url, "count by (hostname) (DCGM_FI_DEV_GPU_TEMP)")
        by_node = {r["metric"]["hostname"]: int(float(r["value"][1])) for r in result
                   if r["metric"].get("hostname") in names}
        return by_node if set(by_node) == names else None

    by_node = kube.poll(counts, 30, "a DCGM_FI_DEV_GPU_TEMP series for every node", interval=0.5)
    assert by_node == {name: E2E_GPUS for name in names}
    series = prom.query(url, f'DCGM_FI_DEV_GPU_TEMP{{hostname="{sorted(names)[0]}"}}')
    assert {s["metric"]["gpu"] for s in series} == {str(i) for i in range(E2E_GPUS)}
    assert all({"UUID", "modelName", "device", "pci_bus_id"} <= set(s["metric"]) for s in series)


def test_temperature_change_reaches_prometheus_within_two_scrapes(cluster: DevCluster) -> None:
    assert cluster.endpoints and cluster.endpoints.prometheus
    url = cluster.endpoints.prometheus
    node = cluster.nodes[3].name
    kube.poll(lambda: prom.query(url, f'DCGM_FI_DEV_GPU_TEMP{{hostname="{node}"}}'), 30, "first scrape")
    with cluster.emulator() as emulator:
        emulator.set_values(node, gpu_temp=93.5)
        changed = time.monotonic()
        try:
            def seen() -> bool:
                result = prom.query(url, f'max(DCGM_FI_DEV_GPU_TEMP{{hostname="{node}"}})')
                return bool(result) and float(result[0]["value"][1]) == 93.5

            kube.poll(seen, 20, "the new temperature in Prometheus", interval=0.05)
            delay = time.monotonic() - changed
        finally:
            emulator.clear_values(node, "gpu_temp")
    # Two scrape intervals, plus the query round trips of this loop.
    assert delay <= 2 * cluster.scrape_interval + 0.5, f"took {delay:.2f}s"


def test_cmdb_paginates_and_rejects_a_bad_token(cluster: DevCluster) -> None:
    assert cluster.endpoints and cluster.endpoints.cmdb and cluster.endpoints.cmdb_token_file
    token = Path(cluster.endpoints.cmdb_token_file).read_text().strip()
    url: str | None = f"{cluster.endpoints.cmdb}?limit=7"
    seen: list[str] = []
    pages = 0
    while url:
        resp = httpx.get(url, headers={"Authorization": f"Token {token}"}, timeout=5)
        assert resp.status_code == 200, resp.text
        body = resp.json()
        assert body["count"] == len(cluster.nodes)
        assert len(body["results"]) <= 7
        seen += [d["name"] for d in body["results"]]
        assert all("hourly_cost" in d["custom_fields"] for d in body["results"])
        url = body["next"]
        pages += 1
    assert sorted(seen) == sorted(n.name for n in cluster.nodes)
    assert pages == -(-len(cluster.nodes) // 7)
    bad = httpx.get(cluster.endpoints.cmdb, headers={"Authorization": "Token not-the-token"}, timeout=5)
    assert bad.status_code == 401
    assert "not-the-token" not in bad.text
    assert httpx.get(cluster.endpoints.cmdb, timeout=5).status_code == 401


def test_metrics_api_lists_every_node(cluster: DevCluster, api: KubeAPI) -> None:
    """metrics.k8s.io through the apiserver's aggregation layer (the emulator behind v1beta1.metrics.k8s.io)."""
    service = api.get("/apis/apiregistration.k8s.io/v1/apiservices/v1beta1.metrics.k8s.io")
    assert service["spec"]["service"]["name"] == "custom-metrics-emulator"
    body = api.get("/apis/metrics.k8s.io/v1beta1/nodes")
    assert body["kind"] == "NodeMetricsList"
    items = {item["metadata"]["name"]: item for item in body["items"]}
    assert set(items) == {n.name for n in cluster.nodes}
    one = api.get(f"/apis/metrics.k8s.io/v1beta1/nodes/{cluster.nodes[0].name}")
    assert one["kind"] == "NodeMetrics" and one["metadata"]["name"] == cluster.nodes[0].name
    for item in items.values():
        assert item["window"] == "30s"
        assert item["usage"]["cpu"].endswith("n") and item["usage"]["cpu"][:-1].isdigit()
        assert item["usage"]["memory"].endswith("Ki") and item["usage"]["memory"][:-2].isdigit()
        assert item["timestamp"].endswith("Z")
    with cluster.emulator() as emulator:  # the backend's own answer comes through the aggregator as it is
        emulator.set_fault("metrics-api", status=503)
        try:
            with pytest.raises(KubeAPIError) as refused:
                api.get("/apis/metrics.k8s.io/v1beta1/nodes")
            assert refused.value.status == 503
        finally:
            emulator.clear_faults("metrics-api")
    assert api.get("/apis/metrics.k8s.io/v1beta1/nodes")["items"]
