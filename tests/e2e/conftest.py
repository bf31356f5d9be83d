"""One dev cluster per test session; a fresh namespace per test.

If the cluster cannot start, every e2e test fails with the reason (never a skip).
"""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from devcluster import DevCluster
from devcluster.kubeapi import KubeAPI
from tests.e2e import kube

E2E_NODES = int(os.environ.get("METRICS_SCHED_E2E_NODES", "50"))
E2E_GPUS = 8


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    run_dir = Path(tmp_path_factory.mktemp("devcluster"))
    dev = DevCluster(run_dir, nodes=E2E_NODES, gpus_per_node=E2E_GPUS, seed=7, scrape_interval=2.0)
    try:
        dev.start()
    except Exception as exc:  # noqa: BLE001 - any start failure fails every e2e test with its reason
        pytest.fail(f"the dev cluster could not start: {type(exc).__name__}: {exc}", pytrace=False)
    try:
        yield dev
    finally:
        dev.stop()
        left = dev.leftovers()
        assert not left, f"processes left behind by the test session: {left}"


@pytest.fixture(scope="session")
def api(cluster: DevCluster) -> Iterator[KubeAPI]:
    with cluster.api() as client:
        yield client


@pytest.fixture
def namespace(api: KubeAPI, request: pytest.FixtureRequest) -> Iterator[str]:
    slug = re.sub(r"[^a-z0-9-]+", "-", request.node.name.lower()).strip("-")[:40].strip("-")
    name = f"t-{slug}-{secrets.token_hex(3)}"
    api.post("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    yield name
    kube.delete_namespace(api, name)


@pytest.fixture(scope="module")
def crds(api: KubeAPI) -> Iterator[list[str]]:
    """The Prometheus Operator's CRDs (ServiceMonitor, PrometheusRule), for the modules that apply deploy/ or the
    Helm chart for real; removed when the module is done."""
    from tests.e2e.test_deploy import install_crds  # the operator's module comes through the Go module proxy

    names = install_crds(api)
    yield names
    for name in names:
        api.delete(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
