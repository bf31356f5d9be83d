"""The dev cluster's Prometheus behind a multi-tenant front end (tests/e2e/tenant_proxy.py on loopback): it
answers only with the tenant header, and in TLS mode only to a client certificate. The Prometheus source gets
its data through it with `headers` (a value from a file) and `tls` (mutual TLS), and fails the way it should
without them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from adapters.http_common import SourceError
from adapters.prometheus import PrometheusSource, from_config
from devcluster import DevCluster
from devcluster.kubeapi import KubeAPI
from metrics_sched.ports import FetchResult, NodeDirectory
from metrics_sched.telemetry import SourceContext
from metrics_sched.telemetry.batch import samples_of
from tests.e2e import kube
from tests.e2e.scheduler_proc import schedulers
from tests.e2e.telemetry_setup import sources, sources_health, wait_for_fresh
from tests.e2e.tenant_proxy import TENANT_HEADER, TenantProxy, client_pki

pytestmark = pytest.mark.e2e

TENANT = "team-gpu-7f3a"


def node_directory(api: KubeAPI) -> NodeDirectory:
    ips: dict[str, str] = {}
    names = set()
    for node in api.get("/api/v1/nodes")["items"]:
        name = node["metadata"]["name"]
        names.add(name)
        for address in node.get("status", {}).get("addresses", []):
            if address["type"] == "InternalIP":
                ips[address["address"]] = name
    return NodeDirectory(names=frozenset(names), by_internal_ip=ips, cpu_allocatable={}, memory_allocatable={})


def prometheus_spec(cluster: DevCluster, url: str, **extra: Any) -> dict[str, Any]:
    """The dev cluster's own Prometheus source (its presets), pointed at `url`."""
    [spec] = sources(cluster, cmdb=False, metrics_server=False)
    return {**spec, "url": url, "interval": 1.0, **extra}


def source(spec: dict[str, Any], base_dir: Path) -> PrometheusSource:
    return from_config("prometheus", spec, SourceContext(base_dir))


def complete_fetch(src: PrometheusSource, nodes: NodeDirectory) -> FetchResult:
    """Fetches until every metric has samples (Prometheus may not have scraped every target yet)."""

    def complete() -> FetchResult | None:
        result = src.fetch(nodes)
        got = {s.metric for s in samples_of(result)}
        return result if not result.errors and got == set(src.metrics()) else None

    return kube.poll(complete, 60, "samples of every metric through the tenant proxy", interval=0.5)


def test_the_tenant_header_is_required_and_sent_from_a_file(cluster: DevCluster, api: KubeAPI,
                                                             tmp_path: Path) -> None:
    assert cluster.endpoints is not None and cluster.endpoints.prometheus
    nodes = node_directory(api)
    (tmp_path / "tenant").write_text(TENANT + "\n")
    with TenantProxy(cluster.endpoints.prometheus, TENANT) as proxy:
        bare = source(prometheus_spec(cluster, proxy.url), tmp_path)
        refused = bare.fetch(nodes)
        assert samples_of(refused) == []
        assert refused.errors == {m: "HTTP 401: no org id" for m in bare.metrics()}
        assert set(proxy.statuses()) == {401}  # nothing reached Prometheus

        tenant = source(prometheus_spec(cluster, proxy.url, headers={TENANT_HEADER: {"valueFile": "tenant"}}),
                        tmp_path)
        result = complete_fetch(tenant, nodes)
        assert {s.node for s in samples_of(result)} <= nodes.names
        forwarded = [s for s in proxy.seen if s.status == 200]
        assert forwarded and all(s.tenant == TENANT for s in forwarded)
        for text in (repr(tenant), repr(tenant.config), str(tenant.health.as_dict())):
            assert TENANT not in text
        bare.close()
        tenant.close()


def test_mutual_tls_through_the_scheduler(cluster: DevCluster, api: KubeAPI, tmp_path: Path) -> None:
    assert cluster.endpoints is not None and cluster.endpoints.prometheus
    pki = client_pki(tmp_path / "pki")
    (tmp_path / "tenant").write_text(TENANT)
    tls = {"caFile": str(pki.server_ca), "certFile": str(pki.client_cert), "keyFile": str(pki.client_key)}
    nodes = node_directory(api)
    with TenantProxy(cluster.endpoints.prometheus, TENANT, pki) as proxy:
        # Without a client certificate the TLS handshake fails: the whole source is down.
        no_cert = source(prometheus_spec(cluster, proxy.url, tls={"caFile": str(pki.server_ca)},
                                         headers={TENANT_HEADER: TENANT}), tmp_path)
        with pytest.raises(SourceError, match="unreachable"):
            no_cert.fetch(nodes)
        no_cert.close()
        assert proxy.seen == []

        # With one, the scheduler process (config file, relative secret paths and all) gets fresh values.
        spec = prometheus_spec(cluster, proxy.url, tls=tls, timeout="30s",
                               headers={TENANT_HEADER: {"valueFile": str(tmp_path / "tenant")}})
        with schedulers(cluster, extra={"sources": [spec]}, leader_elect=False) as (_, procs):
            kube.poll(lambda: sources_health(procs[0])["prometheus"]["up"], 60, "prometheus source up through mTLS")
            some = sorted(n.name for n in cluster.nodes)[:3]  # the session's own nodes: the emulator serves them
            wait_for_fresh(procs[0], some, "gpu_temperature", timeout=60)
        served = [s for s in proxy.seen if s.status == 200]
        assert served and all(s.client_cn == "metrics-sched" and s.tenant == TENANT for s in served)
