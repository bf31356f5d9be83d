"""The `custom-metrics` source through the apiserver's aggregation layer (the emulator behind APIServices):
a node's custom metric decides a placement and flipping it flips the winner; an external value reaches the
nodes its selector names; `sources` shows the source's coverage and series matching."""

from __future__ import annotations

from typing import Any

from devcluster import DevCluster
from devcluster.kubeapi import KubeAPI
from tests.e2e import kube
from tests.e2e.pools import POOL_LABEL, in_pool, node_pool
from tests.e2e.scheduler_proc import schedulers
from tests.e2e.telemetry_setup import REFRESH, sources_health, wait_for_values
from tests.e2e.test_scheduler_core import create_pods

METRIC = "gpu_power_watts"  # as the adapter serves it
CACHED = "node_gpu_power"  # what the scheduler's cache and the CustomMetric plugin call it


def node_of(api: KubeAPI, namespace: str, pod: str) -> str | None:
    node: str | None = api.get(f"/api/v1/namespaces/{namespace}/pods/{pod}")["spec"].get("nodeName")
    return node


def config(pool: str) -> dict[str, Any]:
    source = {"name": "custom-metrics", "type": "custom-metrics", "interval": REFRESH,
              "nodeMetrics": [{"name": CACHED, "metric": METRIC}],
              "externalMetrics": [{"name": "spot_price", "metric": "spot_price", "namespace": pool,
                                   "nodeSelector": f"{POOL_LABEL}={pool}"}]}
    plugin = {"metrics": [{"metric": CACHED, "direction": "lower",
                           "normalization": {"method": "range", "min": 0, "max": 1000}}]}
    return {"sources": [source], "metrics": {},
            "profile": {"plugins": {"score": {"disabled": [{"name": "*"}],
                                              "enabled": [{"name": "CustomMetric", "weight": 10},
                                                          {"name": "NodeResourcesFit", "weight": 1}]}},
                        "pluginConfig": [{"name": "CustomMetric", "args": plugin}]}}


def test_a_custom_metric_through_the_aggregation_layer_decides_the_placement(
        cluster: DevCluster, api: KubeAPI, namespace: str) -> None:
    with node_pool(cluster, 2, cpu="8", memory="32Gi") as (pool, specs), cluster.emulator() as emulator:
        a, b = (s.name for s in specs)
        emulator.set_custom_metric(METRIC, {a: 100, b: 700})
        emulator.set_external_metric(pool, "spot_price", [{"value": "1250m"}])
        try:
            # The apiserver answers for the emulator: the path every adapter is read at.
            listed = api.get(f"/apis/custom.metrics.k8s.io/v1beta2/nodes/{a}/{METRIC}")
            assert [(i["describedObject"]["name"], i["value"]) for i in listed["items"]] == [(a, "100")]
            with schedulers(cluster, extra=config(pool), leader_elect=False) as (name, [proc]):
                wait_for_values(proc, {a: {CACHED: 100.0, "spot_price": 1.25}, b: {CACHED: 700.0, "spot_price": 1.25}})
                create_pods(api, namespace, ["first"], name, **in_pool(pool))
                assert kube.poll(lambda: node_of(api, namespace, "first"), 15, "first bound") == a

                emulator.set_custom_metric(METRIC, {a: 700, b: 100})
                wait_for_values(proc, {a: {CACHED: 700.0}, b: {CACHED: 100.0}})
                create_pods(api, namespace, ["second"], name, **in_pool(pool))
                assert kube.poll(lambda: node_of(api, namespace, "second"), 15, "second bound") == b

                # Every node of the cluster counts; only the pool's two carry the metric. The coverage is the
                # scheduler's at its last refresh: wait until it covers the node count the API shows.
                def covered() -> dict[str, Any] | None:
                    health: dict[str, Any] = sources_health(proc)["custom-metrics"]
                    total = len(api.get("/api/v1/nodes")["items"])
                    coverage = health["coverage"]
                    return health if (abs(coverage.get(CACHED, 0) * total - 2) < 1e-9
                                      and abs(coverage.get("spot_price", 0) * total - 2) < 1e-9) else None
                health = kube.poll(covered, 15, "coverage of the pool's two nodes among all")
                assert health["up"] and health["extra"]["type"] == "custom-metrics"
                assert health["series_matching"][CACHED] == {"matched": {"describedObject": 2}, "unmatched": 0,
                                                             "unmatched_examples": []}
                assert health["series_matching"]["spot_price"]["matched"] == {"nodeSelector": 1}
        finally:
            emulator.set_custom_metric(METRIC, {a: None, b: None})
            emulator.set_external_metric(pool, "spot_price", [])
