"""The telemetry + CMDB emulator, run in-process on 127.0.0.1 port 0 (no subprocesses)."""

from __future__ import annotations

import itertools
import json
import math
import re
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from devcluster.emulator import EmulatorControl, EmulatorServer, Scenario, serve
from devcluster.emulator.control import EmulatorError
from devcluster.emulator.exposition import RenderOptions

pytestmark = pytest.mark.unit

T0 = 1_764_500_000.0
TOKEN = "s3cret-token"
GPU_NODE = {"name": "gpu-1", "ip": "10.240.0.5", "gpus": 8, "cpu": 32, "memory_bytes": 256 * 2**30,
            "zone": "zone-a", "instance_type": "gpu-a100-8", "region": "local-1"}


class Clock:
    """A settable clock, so drift, counters and freezes are deterministic."""

    def __init__(self, t: float = T0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


StartServer = Callable[..., EmulatorServer]


@pytest.fixture
def start_server() -> Iterator[StartServer]:
    servers: list[EmulatorServer] = []

    def start(**kwargs: Any) -> EmulatorServer:
        kwargs.setdefault("seed", 7)
        kwargs.setdefault("cmdb_token", TOKEN)
        server = serve("127.0.0.1", 0, **kwargs).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.close()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def server(start_server: StartServer, clock: Clock) -> EmulatorServer:
    return start_server(clock=clock)


@pytest.fixture
def ctl(server: EmulatorServer) -> Iterator[EmulatorControl]:
    with EmulatorControl(server.url) as control:
        control.register_nodes([GPU_NODE, {"name": "cpu-1", "ip": "10.240.0.6", "gpus": 0, "cpu": 16}])
        yield control


@pytest.fixture(scope="module")
def http() -> Iterator[httpx.Client]:
    # One client for the module: building one (its TLS context) costs more than a request here.
    with httpx.Client(timeout=10) as client:
        yield client


_HTTP: list[httpx.Client] = []


@pytest.fixture(autouse=True)
def _shared_client(http: httpx.Client) -> Iterator[None]:
    _HTTP.append(http)
    yield
    _HTTP.pop()


def get(server: EmulatorServer, path: str, **kwargs: Any) -> httpx.Response:
    return _HTTP[-1].get(server.url + path, **kwargs)


def samples(text: str) -> dict[str, list[Sample]]:
    out: dict[str, list[Sample]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, []).append(sample)
    return out


def scrape(server: EmulatorServer, endpoint: str) -> dict[str, list[Sample]]:
    resp = get(server, f"/{endpoint}/metrics")
    assert resp.status_code == 200, resp.text
    assert resp.headers["content-type"].startswith("text/plain; version=0.0.4")
    return samples(resp.text)


def by_gpu(series: list[Sample], node: str, host_label: str = "hostname") -> list[float]:
    mine = sorted((s for s in series if s.labels[host_label] == node), key=lambda s: int(s.labels["gpu"]))
    return [s.value for s in mine]


def devices(server: EmulatorServer, query: str = "", token: str | None = TOKEN,
            scheme: str = "Token") -> httpx.Response:
    headers = {"Authorization": f"{scheme} {token}"} if token is not None else {}
    return get(server, f"/api/dcim/devices/{query}", headers=headers)


# -- registration and seeds ------------------------------------------------------------------------------
def test_registration_defaults_idempotence_and_removal(ctl: EmulatorControl) -> None:
    assert ctl.nodes() == ["cpu-1", "gpu-1"]
    result = ctl.register_nodes([{**GPU_NODE, "unknown_key": 1}, {"name": "bare", "zone": None}])
    assert result == {"registered": 2, "changed": 1, "nodes": 3}
    bare = ctl.values("bare")
    assert (bare["gpus"], bare["cpu"], bare["zone"], bare["region"]) == (0, 32, "zone-a", "local-1")
    assert bare["instance_type"] and re.match(r"^10\.\d+\.\d+\.\d+$", bare["ip"])
    assert bare["gpu_temp"] == [] and 0 <= bare["cpu_util"] <= 1
    ctl.remove_node("bare")
    assert ctl.nodes() == ["cpu-1", "gpu-1"]
    with pytest.raises(EmulatorError) as err:
        ctl.values("bare")
    assert err.value.status == 404 and "bare" in err.value.message
    with pytest.raises(EmulatorError, match="gpus"):
        ctl.register_nodes([{"name": "x", "gpus": "eight"}])


def test_values_are_a_function_of_seed_name_and_time(start_server: StartServer) -> None:
    clock = Clock()
    a, b, other = (start_server(seed=s, clock=clock) for s in (7, 7, 8))
    fleet: list[dict[str, Any]] = [{**GPU_NODE, "name": f"n{i}"} for i in range(20)]
    values = []
    for srv in (a, b, other):
        with EmulatorControl(srv.url) as control:
            control.register_nodes(list(reversed(fleet)) if srv is b else fleet)
            # Device ids follow registration order; everything else follows (seed, name, time).
            values.append({n["name"]: {k: v for k, v in control.values(n["name"]).items() if k != "id"}
                           for n in fleet})
    assert values[0] == values[1]
    assert values[0] != values[2]
    temps = [v["gpu_temp"] for v in values[0].values()]
    assert all(max(t) - min(t) <= 10 for t in temps)  # a node's GPUs stay near the node's baseline
    assert all(20 <= x <= 95 for t in temps for x in t)
    assert len({v["gpu_uuids"][0] for v in values[0].values()}) == 20
    costs = [v["hourly_cost"] for v in values[0].values()]
    assert all(0.5 <= c <= 40 for c in costs) and len(set(costs)) > 1
    # The pure Scenario computes the same values without a server.
    scenario = Scenario(7)
    scenario.register(scenario.parse_registration(fleet[3]), t=T0)
    assert scenario.values("n3", T0).gpu_temp == tuple(values[0]["n3"]["gpu_temp"])


def test_values_drift_slowly_and_reads_in_one_second_agree(ctl: EmulatorControl, clock: Clock) -> None:
    first = ctl.values("gpu-1")
    clock.t += 0.4
    assert ctl.values("gpu-1")["gpu_temp"] == first["gpu_temp"]
    series = []
    for step in range(0, 300, 10):
        clock.t = T0 + step
        series.append(ctl.values("gpu-1")["gpu_temp"][0])
    assert 1 <= max(series) - min(series) <= 5


# -- exposition ------------------------------------------------------------------------------------------
def test_dcgm_exposition_names_labels_and_values(server: EmulatorServer, ctl: EmulatorControl) -> None:
    metrics = scrape(server, "dcgm")
    names = {f"DCGM_FI_DEV_{field}" for field in ("GPU_TEMP", "MEMORY_TEMP", "GPU_UTIL", "POWER_USAGE",
                                                  "FB_USED", "FB_FREE", "XID_ERRORS")}
    assert set(metrics) == names
    node = ctl.values("gpu-1")
    temps = metrics["DCGM_FI_DEV_GPU_TEMP"]
    assert len(temps) == 8  # the CPU node emits nothing
    for i, sample in enumerate(sorted(temps, key=lambda s: int(s.labels["gpu"]))):
        assert sample.labels == {
            "gpu": str(i), "UUID": node["gpu_uuids"][i], "device": f"nvidia{i}",
            "modelName": "NVIDIA A100-SXM4-80GB", "pci_bus_id": sample.labels["pci_bus_id"],
            "hostname": "gpu-1",
        }
        assert re.fullmatch(r"00000000:[0-9A-F]{2}:00\.0", sample.labels["pci_bus_id"])
        assert sample.labels["UUID"].startswith("GPU-")
    assert by_gpu(temps, "gpu-1") == node["gpu_temp"]
    assert by_gpu(metrics["DCGM_FI_DEV_POWER_USAGE"], "gpu-1") == node["gpu_power"]
    assert by_gpu(metrics["DCGM_FI_DEV_FB_FREE"], "gpu-1") == node["fb_free_mib"]
    text = get(server, "/dcgm/metrics").text
    assert "# HELP DCGM_FI_DEV_GPU_TEMP " in text and "# TYPE DCGM_FI_DEV_GPU_TEMP gauge" in text


def test_exporter_label_options(start_server: StartServer) -> None:
    options = RenderOptions(dcgm_hostname_label="Hostname", node_exporter_instance="name")
    server = start_server(options=options)
    with EmulatorControl(server.url) as control:
        control.register_nodes([GPU_NODE])
    assert {s.labels["Hostname"] for s in scrape(server, "dcgm")["DCGM_FI_DEV_GPU_TEMP"]} == {"gpu-1"}
    assert {s.labels["instance"] for s in scrape(server, "node-exporter")["node_load1"]} == {"gpu-1:9100"}


def test_node_exporter_exposition(server: EmulatorServer, ctl: EmulatorControl) -> None:
    metrics = scrape(server, "node-exporter")
    for name in ("node_load1", "node_load5", "node_load15", "node_memory_MemAvailable_bytes",
                 "node_memory_MemTotal_bytes", "node_uname_info", "node_cpu_seconds_total"):
        assert {s.labels["instance"] for s in metrics[name]} == {"10.240.0.5:9100", "10.240.0.6:9100"}, name
    gpu = ctl.values("gpu-1")
    load1 = {s.labels["instance"]: s.value for s in metrics["node_load1"]}
    assert load1["10.240.0.5:9100"] == gpu["load1"]
    assert {s.labels["nodename"]: s.value for s in metrics["node_uname_info"]} == {"gpu-1": 1, "cpu-1": 1}
    cpus = [s for s in metrics["node_cpu_seconds_total"] if s.labels["instance"] == "10.240.0.5:9100"]
    assert {(s.labels["cpu"], s.labels["mode"]) for s in cpus} == {
        (str(c), m) for c in range(4) for m in ("idle", "user", "system")}


def test_opencost_exposition(server: EmulatorServer, ctl: EmulatorControl) -> None:
    metrics = scrape(server, "opencost")
    gpu = ctl.values("gpu-1")
    total = {s.labels["node"]: s for s in metrics["node_total_hourly_cost"]}
    assert total["gpu-1"].value == gpu["hourly_cost"]
    assert total["gpu-1"].labels == {"node": "gpu-1", "instance": "gpu-1", "instance_type": "gpu-a100-8",
                                     "region": "local-1", "provider_id": gpu["provider_id"]}
    gpu_count = {s.labels["node"]: s.value for s in metrics["node_gpu_count"]}
    assert gpu_count == {"gpu-1": 8, "cpu-1": 0}
    for name in ("node_cpu_hourly_cost", "node_ram_hourly_cost", "node_gpu_hourly_cost",
                 "kubecost_node_is_spot"):
        assert len(metrics[name]) == 2


# -- overrides -------------------------------------------------------------------------------------------
def test_overrides_are_exact_and_null_clears(server: EmulatorServer, ctl: EmulatorControl,
                                             clock: Clock) -> None:
    before = ctl.values("gpu-1")
    after = ctl.set_values("gpu-1", gpu_temp=91, load1=3.5, cpu_util=0.4, hourly_cost=2.5, maintenance=True)
    assert after["gpu_temp"] == [91] * 8 and after["load1"] == 3.5 and after["maintenance"] is True
    assert after["overrides"] == ["cpu_util", "gpu_temp", "hourly_cost", "load1", "maintenance"]
    for step in (0, 7, 133):  # no drift, no noise
        clock.t = T0 + step
        metrics = scrape(server, "dcgm")
        assert by_gpu(metrics["DCGM_FI_DEV_GPU_TEMP"], "gpu-1") == [91] * 8
        loads = {s.labels["instance"]: s.value for s in scrape(server, "node-exporter")["node_load1"]}
        assert loads["10.240.0.5:9100"] == 3.5
        cost = {s.labels["node"]: s.value for s in scrape(server, "opencost")["node_total_hourly_cost"]}
        assert cost["gpu-1"] == 2.5
    clock.t = T0
    per_gpu = [60.5, 61, 62, 63, 64, 65, 66, 95]
    assert ctl.set_values("gpu-1", gpu_temp=per_gpu)["gpu_temp"] == per_gpu
    assert by_gpu(scrape(server, "dcgm")["DCGM_FI_DEV_GPU_TEMP"], "gpu-1") == per_gpu
    cleared = ctl.set_values("gpu-1", gpu_temp=None)
    assert cleared["gpu_temp"] == before["gpu_temp"] and "gpu_temp" not in cleared["overrides"]
    assert ctl.clear_values("gpu-1", "load1")["load1"] == before["load1"]
    assert ctl.clear_values("gpu-1") == before


def test_a_temperature_ramp_climbs_from_when_it_is_set_and_stops_at_the_ceiling(
        server: EmulatorServer, ctl: EmulatorControl, clock: Clock) -> None:
    """gpu_temp_ramp (°C per minute) on top of an exact gpu_temp: what a node heating up looks like to DCGM."""
    clock.t = T0
    ctl.set_values("gpu-1", gpu_temp=70, gpu_temp_ramp=2)
    for seconds, expected in ((0, 70.0), (30, 71.0), (90, 73.0), (3600, 110.0)):
        clock.t = T0 + seconds
        assert by_gpu(scrape(server, "dcgm")["DCGM_FI_DEV_GPU_TEMP"], "gpu-1") == [expected] * 8
    clock.t = T0 + 60
    assert ctl.set_values("gpu-1", gpu_temp_ramp=None)["gpu_temp"] == [70] * 8  # cleared: steady again
    with pytest.raises(EmulatorError, match="gpu_temp_ramp"):
        ctl.set_values("gpu-1", gpu_temp_ramp="fast")


def test_set_many_and_override_validation(ctl: EmulatorControl) -> None:
    ctl.set_many({"gpu-1": {"gpu_util": 50, "spot": True}, "cpu-1": {"memory_used_bytes": 1e9}})
    assert ctl.values("gpu-1")["gpu_util"] == [50] * 8 and ctl.values("gpu-1")["spot"] is True
    assert ctl.values("cpu-1")["memory_used_bytes"] == 1e9
    for bad, message in (({"gpu_temp": [1, 2]}, "8 GPUs"), ({"temperature": 1}, "unknown value field"),
                         ({"spot": 1}, "true/false"), ({"load1": "high"}, "finite number")):
        with pytest.raises(EmulatorError, match=message) as err:
            ctl.set_values("gpu-1", **bad)
        assert err.value.status == 400
    with pytest.raises(EmulatorError) as err:  # all or nothing
        ctl.set_many({"gpu-1": {"load1": 9}, "nope": {"load1": 9}})
    assert err.value.status == 404 and ctl.values("gpu-1")["load1"] != 9


def test_cpu_counters_are_monotonic_and_follow_cpu_util(server: EmulatorServer, ctl: EmulatorControl,
                                                        clock: Clock) -> None:
    def counters() -> dict[tuple[str, str], float]:
        series = scrape(server, "node-exporter")["node_cpu_seconds_total"]
        return {(s.labels["cpu"], s.labels["mode"]): s.value for s in series
                if s.labels["instance"] == "10.240.0.5:9100"}

    ctl.set_values("gpu-1", cpu_util=0.25)
    history = [counters()]
    for step, util in ((10, 0.25), (20, 0.9), (30, 0.0), (40, None)):
        clock.t += step
        ctl.set_values("gpu-1", cpu_util=util)
        history.append(counters())
    for earlier, later in itertools.pairwise(history):
        assert all(later[key] >= earlier[key] for key in earlier)
    # 10 s at 25% on 32 cores shown as 4 cpu series: busy time grows by 0.25 * 32 * 10 s in total.
    busy = sum(history[1][(c, m)] - history[0][(c, m)] for c in "0123" for m in ("user", "system"))
    idle = sum(history[1][(c, "idle")] - history[0][(c, "idle")] for c in "0123")
    assert busy == pytest.approx(80, abs=0.2) and idle == pytest.approx(240, abs=0.2)


# -- faults ----------------------------------------------------------------------------------------------
def test_frozen_fault_stamps_and_holds_samples(server: EmulatorServer, ctl: EmulatorControl,
                                                clock: Clock) -> None:
    before = scrape(server, "dcgm")["DCGM_FI_DEV_GPU_TEMP"]
    assert all(s.timestamp is None for s in before)
    faults = ctl.set_fault("dcgm", frozen=True)
    assert faults["dcgm"]["frozen_at"] == T0
    clock.t += 95
    ctl.set_values("gpu-1", gpu_temp=99)
    ctl.set_fault("dcgm", frozen=True, missing_nodes=["nobody"])  # still frozen: keeps the first moment
    frozen = scrape(server, "dcgm")["DCGM_FI_DEV_GPU_TEMP"]
    assert {s.timestamp for s in frozen} == {T0}
    assert by_gpu(frozen, "gpu-1") == by_gpu(before, "gpu-1")
    assert "1764500000000\n" in get(server, "/dcgm/metrics").text
    ctl.clear_faults("dcgm")
    live = scrape(server, "dcgm")["DCGM_FI_DEV_GPU_TEMP"]
    assert by_gpu(live, "gpu-1") == [99] * 8 and all(s.timestamp is None for s in live)


def test_missing_nodes_fault(server: EmulatorServer, ctl: EmulatorControl) -> None:
    ctl.register_nodes([{**GPU_NODE, "name": "gpu-2", "ip": "10.240.0.7", "gpus": 2}])
    ctl.set_fault("dcgm", missing_nodes=["gpu-1"])
    temps = scrape(server, "dcgm")["DCGM_FI_DEV_GPU_TEMP"]
    assert by_gpu(temps, "gpu-2") == ctl.values("gpu-2")["gpu_temp"] and len(temps) == 2
    ctl.set_fault("node-exporter", missing_nodes=["gpu-1"])
    instances = {s.labels["instance"] for s in scrape(server, "node-exporter")["node_load1"]}
    assert instances == {"10.240.0.6:9100", "10.240.0.7:9100"}
    ctl.set_fault("opencost", missing_nodes=["*"])
    assert scrape(server, "opencost").get("node_total_hourly_cost", []) == []
    ctl.set_fault("cmdb", missing_nodes=["cpu-1"])
    assert [d["name"] for d in devices(server).json()["results"]] == ["gpu-1", "gpu-2"]


def test_nan_and_inf_faults(server: EmulatorServer, ctl: EmulatorControl) -> None:
    ctl.set_fault("dcgm", nan=True)
    assert all(math.isnan(s.value) for s in scrape(server, "dcgm")["DCGM_FI_DEV_GPU_TEMP"])
    assert " NaN\n" in get(server, "/dcgm/metrics").text
    ctl.set_fault("opencost", inf=True)
    assert all(s.value == math.inf for s in scrape(server, "opencost")["node_total_hourly_cost"])
    ctl.set_fault("cmdb", nan=True)
    raw = devices(server).text
    assert '"hourly_cost": NaN' in raw
    assert math.isnan(json.loads(raw)["results"][0]["custom_fields"]["hourly_cost"])
    ctl.set_fault("cmdb", inf=True)
    assert '"hourly_cost": Infinity' in devices(server).text


def test_malformed_and_status_faults(server: EmulatorServer, ctl: EmulatorControl) -> None:
    ctl.set_fault("node-exporter", malformed=True)
    with pytest.raises(ValueError):
        samples(get(server, "/node-exporter/metrics").text)
    ctl.set_fault("cmdb", malformed=True)
    with pytest.raises(ValueError):
        json.loads(devices(server).text)
    ctl.set_fault("dcgm", status=500)
    assert get(server, "/dcgm/metrics").status_code == 500
    ctl.set_fault("cmdb", status=503)
    assert devices(server).status_code == 503
    ctl.clear_faults()
    assert ctl.faults() == {}
    assert get(server, "/dcgm/metrics").status_code == 200 and devices(server).status_code == 200


def test_delay_fault_does_not_block_other_requests(server: EmulatorServer, ctl: EmulatorControl) -> None:
    ctl.set_fault("dcgm", delay=0.6)
    timings: dict[str, float] = {}

    def slow() -> None:
        started = time.monotonic()
        assert get(server, "/dcgm/metrics").status_code == 200
        timings["slow"] = time.monotonic() - started

    thread = threading.Thread(target=slow)
    thread.start()
    time.sleep(0.1)
    started = time.monotonic()
    assert get(server, "/opencost/metrics").status_code == 200 and get(server, "/healthz").text == "ok"
    timings["fast"] = time.monotonic() - started
    thread.join(timeout=10)
    assert timings["slow"] >= 0.6 and timings["fast"] < 0.4


def test_fault_validation(ctl: EmulatorControl) -> None:
    for endpoint, fault, message in (
        ("prometheus", {"status": 500}, "unknown fault endpoint"),
        ("dcgm", {"explode": True}, "unknown fault field"),
        ("dcgm", {"bad_auth": True}, "do not apply to dcgm"),
        ("metrics-api", {"nan": True}, "do not apply to metrics-api"),
        ("dcgm", {"status": 200}, "400..599"),
        ("dcgm", {"delay": -1}, "delay"),
        ("dcgm", {"missing_nodes": "gpu-1"}, "list"),
    ):
        with pytest.raises(EmulatorError, match=message) as err:
            ctl.set_fault(endpoint, **fault)
        assert err.value.status == 400
    ctl.set_fault("cmdb", bad_auth=True, delay=0.01)
    assert ctl.faults() == {"cmdb": {"bad_auth": True, "delay": 0.01}}


def test_state_counts_requests_per_endpoint(server: EmulatorServer, ctl: EmulatorControl) -> None:
    ctl.reset_counters()
    for _ in range(3):
        get(server, "/dcgm/metrics")
    get(server, "/opencost/metrics")
    devices(server, token="wrong")
    get(server, "/opencost/model/assets")
    get(server, "/nowhere")
    state = ctl.state()
    assert state["nodes"] == 2 and state["faults"] == {}
    assert state["requests"] == {"dcgm": 3, "opencost": 1, "cmdb": 1, "opencost-assets": 1, "unrouted": 1,
                                 "control": 1}  # the state request itself


# -- CMDB ------------------------------------------------------------------------------------------------
def test_cmdb_pagination_walks_every_node_once(server: EmulatorServer) -> None:
    with EmulatorControl(server.url) as control:
        control.register_nodes([{"name": f"node-{i}", "ip": f"10.241.0.{i}", "gpus": 1}
                                for i in range(1, 121)])
    seen: list[str] = []
    url: str | None = server.url + "/api/dcim/devices/?limit=50"
    pages = 0
    while url:
        assert url.startswith(server.url + "/api/dcim/devices/")  # absolute, from the Host header
        body = get(server, url.removeprefix(server.url), headers={"Authorization": f"Token {TOKEN}"}).json()
        assert body["count"] == 120
        assert (body["previous"] is None) == (pages == 0)
        seen += [d["name"] for d in body["results"]]
        url, pages = body["next"], pages + 1
    assert pages == 3 and seen == [f"node-{i}" for i in range(1, 121)]  # natural order, each once
    first = devices(server, "?limit=5").json()["results"][0]
    assert first["name"] == first["display"] == "node-1"
    assert first["role"] == {"name": "gpu-node", "slug": "gpu-node"}
    assert first["primary_ip"] == {"address": "10.241.0.1/32"}
    assert first["status"]["value"] in ("active", "offline") and first["site"]["name"] == "zone-a"
    assert set(first["custom_fields"]) == {"hourly_cost", "gpu_hourly_cost", "maintenance", "rack", "spot"}
    assert first["rack"]["name"] == first["custom_fields"]["rack"]
    default = devices(server).json()
    assert len(default["results"]) == 50


def test_cmdb_limit_is_capped_at_1000(server: EmulatorServer) -> None:
    with EmulatorControl(server.url) as control:
        control.register_nodes([{"name": f"n{i}"} for i in range(1005)])
    body = devices(server, "?limit=5000").json()
    assert len(body["results"]) == 1000 and body["count"] == 1005 and "offset=1000" in body["next"]
    assert len(devices(server, "?limit=5000&offset=1000").json()["results"]) == 5


def test_cmdb_name_filter_and_maintenance(server: EmulatorServer, ctl: EmulatorControl) -> None:
    ctl.set_values("gpu-1", maintenance=True, hourly_cost=12.5)
    body = devices(server, "?name=gpu-1&name=cpu-1&name=ghost&name=gpu-1").json()
    assert body["count"] == 2 and [d["name"] for d in body["results"]] == ["cpu-1", "gpu-1"]
    gpu = next(d for d in body["results"] if d["name"] == "gpu-1")
    assert gpu["status"]["value"] == "offline" and gpu["custom_fields"]["maintenance"] is True
    assert gpu["custom_fields"]["hourly_cost"] == 12.5


def test_cmdb_auth(server: EmulatorServer, ctl: EmulatorControl) -> None:
    assert devices(server, scheme="Bearer").status_code == 200
    rejected = (devices(server, token=None), devices(server, token="wrong"), devices(server, scheme="Basic"))
    for resp in rejected:
        assert resp.status_code == 401 and resp.json() == {"detail": "Invalid token"}
    status = get(server, "/api/status/", headers={"Authorization": f"Token {TOKEN}"})
    assert status.json() == {"netbox-version": "4.1.0"}
    assert get(server, "/api/status/").status_code == 401
    ctl.set_fault("cmdb", bad_auth=True)
    assert devices(server).status_code == 401


def test_opencost_assets_shape(server: EmulatorServer, ctl: EmulatorControl) -> None:
    body = get(server, "/opencost/model/assets?window=1h").json()
    assert body["code"] == 200 and len(body["data"]) == 1
    assets = body["data"][0]
    gpu = ctl.values("gpu-1")
    key = f"local/__undefined__/__undefined__/Compute/local/Node/Kubernetes/{gpu['provider_id']}/gpu-1"
    asset = assets[key]
    assert asset["type"] == "Node" and asset["properties"]["name"] == "gpu-1"
    assert asset["minutes"] == 60 and asset["gpuCount"] == 8 and asset["preemptible"] in (0, 1)
    assert asset["totalCost"] == pytest.approx(gpu["hourly_cost"])
    assert asset["gpuCost"] == pytest.approx(gpu["gpu_hourly_cost"] * 8)
    assert get(server, "/opencost/model/assets?window=30m").json()["data"][0][key]["minutes"] == 30
    assert get(server, "/opencost/model/assets?window=soon").status_code == 400


# -- metrics.k8s.io -------------------------------------------------------------------------------------
NODE_METRICS = "/apis/metrics.k8s.io/v1beta1/nodes"


def test_node_metrics_are_served_as_metrics_server_lists_them(server: EmulatorServer, ctl: EmulatorControl,
                                                                clock: Clock) -> None:
    ctl.set_values("gpu-1", cpu_util=0.5, memory_used_bytes=1e9)
    body = get(server, NODE_METRICS).json()
    assert body["kind"] == "NodeMetricsList" and body["apiVersion"] == "metrics.k8s.io/v1beta1"
    items = {item["metadata"]["name"]: item for item in body["items"]}
    assert sorted(items) == ["cpu-1", "gpu-1"]
    assert items["gpu-1"] == {
        "metadata": {"name": "gpu-1", "creationTimestamp": "2025-11-30T10:53:20Z"},
        "timestamp": "2025-11-30T10:53:20Z", "window": "30s",
        "usage": {"cpu": "16000000000n", "memory": "976562Ki"},
    }
    assert re.fullmatch(r"\d+n", items["cpu-1"]["usage"]["cpu"])
    clock.t += 5
    ctl.set_values("gpu-1", cpu_util=0.25)
    one = get(server, f"{NODE_METRICS}/gpu-1").json()
    assert one["kind"] == "NodeMetrics" and one["timestamp"] == "2025-11-30T10:53:25Z"
    assert one["usage"] == {"cpu": "8000000000n", "memory": "976562Ki"}
    missing = get(server, f"{NODE_METRICS}/nowhere")
    assert missing.status_code == 404 and missing.json()["reason"] == "NotFound"
    refused = get(server, f"{NODE_METRICS}?labelSelector=zone%3Da")
    assert refused.status_code == 400 and "labelSelector" in refused.text
    assert get(server, f"{NODE_METRICS}?labelSelector=").status_code == 200


def test_node_metrics_discovery(server: EmulatorServer) -> None:
    groups = {g["name"] for g in get(server, "/apis").json()["groups"]}
    assert "metrics.k8s.io" in groups
    assert get(server, "/apis/metrics.k8s.io").json()["preferredVersion"]["version"] == "v1beta1"
    resources = get(server, "/apis/metrics.k8s.io/v1beta1").json()["resources"]
    assert resources == [{"name": "nodes", "singularName": "", "namespaced": False, "kind": "NodeMetrics",
                          "verbs": ["get", "list"]}]


def test_node_metrics_faults(server: EmulatorServer, ctl: EmulatorControl, clock: Clock) -> None:
    def names() -> list[str]:
        return [item["metadata"]["name"] for item in get(server, NODE_METRICS).json()["items"]]

    ctl.set_fault("metrics-api", missing_nodes=["gpu-1"])
    assert names() == ["cpu-1"]
    assert get(server, f"{NODE_METRICS}/gpu-1").status_code == 404
    ctl.set_fault("metrics-api", frozen=True)
    before = get(server, f"{NODE_METRICS}/gpu-1").json()
    clock.t += 60
    ctl.set_values("gpu-1", cpu_util=1.0)
    after = get(server, f"{NODE_METRICS}/gpu-1").json()
    assert after["timestamp"] == before["timestamp"] == "2025-11-30T10:53:20Z" and after["usage"] == before["usage"]
    ctl.clear_faults("metrics-api")
    assert get(server, f"{NODE_METRICS}/gpu-1").json()["usage"]["cpu"] == "32000000000n"
    ctl.set_fault("metrics-api", status=503)
    assert get(server, NODE_METRICS).status_code == 503
    ctl.set_fault("metrics-api", malformed=True)
    with pytest.raises(ValueError):
        json.loads(get(server, NODE_METRICS).text)
    ctl.remove_node("cpu-1")
    ctl.clear_faults("metrics-api")
    assert names() == ["gpu-1"]


# -- scale -----------------------------------------------------------------------------------------------
def test_5000_nodes_render_from_templates_built_once(server: EmulatorServer, clock: Clock,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """What keeps a 5,000-node scrape cheap: the lines are templates built once per fleet, and each render only
    fills in the values (bench/sources_bench.py measures the time; a timed unit test would only be flaky)."""
    from devcluster.emulator.exposition import Renderer

    built: list[str] = []
    original = Renderer.render

    def counting(self: Renderer, view: Any, sample: Any) -> bytes:
        before = self._key
        body = original(self, view, sample)
        if self._key != before:
            built.append(type(self).__name__)
        return body

    monkeypatch.setattr(Renderer, "render", counting)
    emulator = server.emulator
    emulator.register({"nodes": [{"name": f"node-{i}", "ip": f"10.242.{i >> 8}.{i & 255}", "gpus": 8}
                                 for i in range(5000)]})
    for endpoint in ("dcgm", "node-exporter", "opencost"):
        emulator.exposition(endpoint)  # builds the templates once per fleet
    first = len(built)
    assert first == 3, built  # one build per endpoint's renderer
    clock.t += 1
    for endpoint in ("dcgm", "node-exporter", "opencost"):
        assert emulator.exposition(endpoint)
    assert len(built) == first, built  # the same fleet: the values change, the templates do not
    assert emulator.exposition("dcgm").count(b"\nDCGM_FI_DEV_GPU_TEMP{") == 40000
