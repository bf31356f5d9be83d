"""Per-device telemetry against the real Prometheus scraping the emulator's DCGM exporter (one series per GPU, with
its `gpu` index and `UUID` labels): with `deviceLabels` each GPU's own temperature reaches the scheduler's cache,
keyed by the first label present, beside the node value (the hottest GPU, as without it), and follows the GPU when
it changes."""

from __future__ import annotations

from typing import Any

from devcluster import DevCluster
from tests.e2e import kube, prom
from tests.e2e.pools import node_pool
from tests.e2e.scheduler_proc import SchedulerProcess, schedulers
from tests.e2e.telemetry_setup import sources_health, telemetry_config, values


def uuids_of(cluster: DevCluster, node: str, gpus: int) -> list[str]:
    """The node's GPU UUIDs by index, as Prometheus scraped them from the exporter."""
    assert cluster.endpoints and cluster.endpoints.prometheus
    url = cluster.endpoints.prometheus
    promql = f'DCGM_FI_DEV_GPU_TEMP{{hostname="{node}"}} or DCGM_FI_DEV_GPU_TEMP{{Hostname="{node}"}}'

    def scraped() -> list[dict[str, Any]] | None:
        found = prom.query(url, promql)
        return found if len(found) == gpus else None

    series = kube.poll(scraped, 20, f"Prometheus to scrape {node}'s {gpus} GPUs")
    by_index = {int(s["metric"]["gpu"]): s["metric"]["UUID"] for s in series}
    return [by_index[i] for i in range(gpus)]


def devices(proc: SchedulerProcess, node: str, metric: str) -> dict[str, Any]:
    held: dict[str, Any] = values(proc, node).get(metric, {})
    return held


def wait_for_devices(proc: SchedulerProcess, expected: dict[str, dict[str, tuple[float, dict[str, float]]]]) -> None:
    """Until the cache holds, fresh, each (node, metric)'s node value and exactly these fresh device values."""

    def ready() -> bool:
        for node, metrics in expected.items():
            for metric, (node_value, by_device) in metrics.items():
                entry = devices(proc, node, metric)
                held = entry.get("devices", {})
                if not entry.get("fresh") or entry.get("value") != node_value or set(held) != set(by_device):
                    return False
                if any(not held[d]["fresh"] or held[d]["value"] != v for d, v in by_device.items()):
                    return False
        return True

    kube.poll(ready, 30, f"the scheduler to hold {expected}", interval=0.2)


def test_each_gpus_own_temperature_reaches_the_cache_beside_the_nodes_hottest(cluster: DevCluster) -> None:
    gpus = 4
    config = telemetry_config(cluster, cmdb=False, metrics_server=False)
    [prometheus] = config["sources"]
    # Only the temperature, twice: by UUID (the DRA driver's `uuid` attribute) and by index alone (its `index`).
    prometheus["metrics"] = [
        {"name": "gpu_temperature", "preset": "dcgm_gpu_temp", "deviceLabels": ["UUID", "gpu"]},
        {"name": "gpu_temperature_by_index", "preset": "dcgm_gpu_temp", "deviceLabels": ["gpu"]},
        {"name": "gpu_temperature_node", "preset": "dcgm_gpu_temp"},  # no deviceLabels: the node value only
    ]
    with node_pool(cluster, 2, cpu="32", memory="256Gi", gpus=gpus) as (_, specs), cluster.emulator() as emulator:
        temps = {specs[0].name: [41.0, 88.5, 57.0, 63.0], specs[1].name: [70.0, 35.5, 52.0, 49.0]}
        emulator.set_many({node: {"gpu_temp": t} for node, t in temps.items()})
        uuids = {node: uuids_of(cluster, node, gpus) for node in temps}
        with schedulers(cluster, extra=config, leader_elect=False) as (_, [proc]):

            def expected(temps: dict[str, list[float]]) -> dict[str, dict[str, tuple[float, dict[str, float]]]]:
                return {node: {
                    "gpu_temperature": (max(t), dict(zip(uuids[node], t, strict=True))),
                    "gpu_temperature_by_index": (max(t), {str(i): v for i, v in enumerate(t)}),
                    "gpu_temperature_node": (max(t), {}),
                } for node, t in temps.items()}

            wait_for_devices(proc, expected(temps))
            # The node value is what it was without deviceLabels; a device's age is its own sample's.
            for node in temps:
                held = values(proc, node)
                assert "devices" not in held["gpu_temperature_node"]
                assert held["gpu_temperature"]["value"] == held["gpu_temperature_node"]["value"]
                assert all(d["age"] >= 0 and d["source"] == "prometheus"
                           for d in held["gpu_temperature"]["devices"].values())
            # One GPU heats up: its own value follows, the others stay, the node's hottest moves to it.
            heated = specs[1].name
            temps[heated] = [70.0, 92.0, 52.0, 49.0]
            emulator.set_values(heated, gpu_temp=temps[heated])
            wait_for_devices(proc, expected(temps))
            # /sources counts the fresh devices per metric (the pool's, and the other nodes' GPUs of the cluster).
            assert sources_health(proc)["prometheus"]["devices"]["gpu_temperature"] >= 2 * gpus
