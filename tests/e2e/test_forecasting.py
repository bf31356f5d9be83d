"""Issue 48 on the dev cluster: GPUThermalForecast reads a predict_linear forecast the real Prometheus evaluates over
the emulator's DCGM series, and a node at 70 °C rising fast loses to a node at 74 °C steady."""

from __future__ import annotations

from typing import Any

from devcluster import DevCluster
from devcluster.kubeapi import KubeAPI
from tests.e2e import kube
from tests.e2e.pools import in_pool, node_pool
from tests.e2e.scheduler_proc import schedulers
from tests.e2e.telemetry_setup import decisions, telemetry_config, values, wait_for_values
from tests.e2e.test_scheduler_core import create_pods
from tests.e2e.test_telemetry import wait_bound

# A short window: the ramp starts during the test, and the dev cluster scrapes every few seconds.
WINDOW = {"function": "predict_linear", "range": "30s", "horizon": "30m", "step": "2s"}


def forecast_config(cluster: DevCluster) -> dict[str, Any]:
    config = telemetry_config(cluster, weights={"GPUTemperature": 1, "GPUThermalForecast": 1}, cmdb=False,
                              metrics_server=False,
                              plugin_args={"GPUThermalForecast": {"window": WINDOW["range"],
                                                                  "horizon": WINDOW["horizon"]}})
    [prometheus] = [s for s in config["sources"] if s["type"] == "prometheus"]
    prometheus["metrics"].append({"name": "gpu_temperature_forecast", "preset": "dcgm_gpu_temp", "window": WINDOW})
    return config


def test_a_node_at_70_rising_fast_loses_to_a_node_at_74_steady(cluster: DevCluster, api: KubeAPI,
                                                                namespace: str) -> None:
    with node_pool(cluster, 2, cpu="32", memory="256Gi", gpus=8) as (pool, [rising, steady]), \
            cluster.emulator() as emulator:
        emulator.set_many({rising.name: {"gpu_temp": 70.0}, steady.name: {"gpu_temp": 74.0}})
        with schedulers(cluster, extra=forecast_config(cluster), leader_elect=False) as (name, [proc]):
            wait_for_values(proc, {rising.name: {"gpu_temperature": 70.0}, steady.name: {"gpu_temperature": 74.0}})
            # 2 °C a minute from now on: 74 °C in two minutes, 130 °C in thirty.
            emulator.set_values(rising.name, gpu_temp_ramp=2.0)

            def trend_seen() -> bool:
                ahead = {n: values(proc, n).get("gpu_temperature_forecast") or {} for n in (rising.name, steady.name)}
                return (all(e.get("fresh") for e in ahead.values()) and ahead[rising.name]["value"] > 85
                        and abs(ahead[steady.name]["value"] - 74) < 1)

            kube.poll(trend_seen, 60, "the forecast to see the rising node cross 85 °C", interval=0.2)
            create_pods(api, namespace, ["gpu-pod"], name, gpus=1, **in_pool(pool))
            assert wait_bound(api, namespace, "gpu-pod") == steady.name
            [decision] = decisions(proc, f"{namespace}/gpu-pod")
            assert any("forecast 30m ahead (trend over the last 30s)" in note for note in decision["notes"])
            by_node = {c["node"]: {m["metric"]: m["value"] for t in c["terms"] for m in t["metrics"]}
                       for c in decision["candidates"]}
            # The rising node was the cooler one when the pod was placed, and forecast past the threshold.
            assert by_node[rising.name]["gpu_temperature"] < by_node[steady.name]["gpu_temperature"] == 74
            assert by_node[rising.name]["gpu_temperature_forecast"] > 85
